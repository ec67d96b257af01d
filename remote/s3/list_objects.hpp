// S3's XML answers, parsed with libxml2: ListObjectsV2 pages (ListBucketResult) and error
// documents (<Error><Code>…). Field names and meanings from the Amazon S3 API Reference
// ("ListObjectsV2", "Error responses"). Parsing is bounded: no network, no entity expansion, no
// DTD, a capped body size, entry count and key length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gguf_mount::remote::s3 {

/// One <Contents> entry of a ListObjectsV2 page.
struct ObjectEntry {
    std::string key;            // the raw object key (UTF-8), not URL-encoded
    uint64_t size = 0;          // <Size>, bytes
    /// <ETag> as S3 sends it, quotes included: "\"9b2cf535f27731c974343645a3985328\"", or for a
    /// multipart upload "\"…-N\"" (N parts; not an MD5 of the content). "" when absent.
    std::string etag;
    std::string last_modified;  // <LastModified>, ISO 8601 as sent ("2024-01-02T03:04:05.000Z")
};

/// An entry of a page that was left out, and why (a key too long, a size that is not a number).
struct ListProblem {
    std::string key;     // the key as far as it is known (cut to 200 bytes), "" when none
    std::string reason;  // "key is 1100 bytes, longer than S3's 1024"
};

/// One ListObjectsV2 page.
struct ListPage {
    std::string bucket;                       // <Name>
    std::string prefix;                       // <Prefix>
    std::vector<ObjectEntry> contents;        // in page order (S3: UTF-8 binary order)
    std::vector<std::string> common_prefixes; // <CommonPrefixes><Prefix>, each ends with the delimiter
    bool is_truncated = false;                // <IsTruncated>true: another page follows
    /// <NextContinuationToken>, opaque (may hold '+', '/', '='): pass it back unchanged as
    /// continuation-token. Never empty when is_truncated.
    std::string next_continuation_token;
    std::optional<uint64_t> key_count;        // <KeyCount> when sent
    std::vector<ListProblem> problems;        // entries left out of `contents`
};

/// Bounds of parse_list_page(); the defaults are what a real S3 page can hold with a wide margin.
struct ListLimits {
    size_t max_body_bytes = 16u << 20;  // a real page of 1,000 keys is well under 1 MiB
    size_t max_entries = 10000;         // Contents + CommonPrefixes per page (S3 sends <= 1,000)
    size_t max_key_bytes = 1024;        // S3's limit on a key's UTF-8 length
};

/// Parses one ListObjectsV2 response body. `where` names the listing in messages
/// ("s3://bucket/prefix/"). Throws gguf::Error:
///  - Code::TooLarge: body over limits.max_body_bytes, or more than limits.max_entries entries;
///  - Code::BadValue: not well-formed XML, a DTD, a root other than ListBucketResult (an <Error>
///    document is reported with its code and message), IsTruncated true without a
///    NextContinuationToken, KeyCount not a number, an EncodingType other than url, a Prefix that
///    is not URL-encoded text on a page with EncodingType url.
/// With <EncodingType>url</EncodingType> (the answer to encoding-type=url, which S3Signer::list_url
/// asks for: a key may hold bytes XML 1.0 cannot carry, such as 0x01) Key, Prefix and
/// CommonPrefixes/Prefix are decoded (decode_url_encoded); NextContinuationToken is not encoded
/// (AWS, ListObjectsV2 "EncodingType": Delimiter, Prefix, Key and StartAfter are). Without it the
/// texts are taken raw (a server that ignores the parameter sends raw keys).
/// An entry without a Key, a Key that is not URL-encoded text on such a page, with a Key over limits.max_key_bytes, a Size that is not a decimal
/// number, or a Key seen twice is left out and reported in ListPage::problems.
ListPage parse_list_page(std::string_view body, const std::string& where, const ListLimits& limits = {});

/// `text` URL-decoded as S3 encodes key names for encoding-type=url (form style: '+' is a space,
/// %XX a byte): "a+b%2Bc%01" -> "a b+c\x01". nullopt for a '%' not followed by two hex digits.
std::optional<std::string> decode_url_encoded(std::string_view text);

/// The fields of an S3 <Error> document. Every field "" when absent.
struct ErrorDocument {
    std::string code;         // "NoSuchKey", "SignatureDoesNotMatch", ...
    std::string message;      // the server's sentence, whitespace collapsed to single spaces
    std::string bucket_name;  // <BucketName>
    std::string key;          // <Key>
    std::string region;       // <Region> (AuthorizationHeaderMalformed) or <BucketRegion>
    std::string endpoint;     // <Endpoint> (PermanentRedirect)
    std::string request_id;   // <RequestId>
};

/// Parses an <Error> document (bounded like parse_list_page). nullopt when `body` is empty, not
/// XML, or its root is not <Error>.
std::optional<ErrorDocument> parse_error_document(std::string_view body);

/// What the request that failed was about, for the message.
struct ErrorContext {
    std::string bucket;         // "" when not known
    std::string key;            // object key or listing prefix, raw; "" for the bucket itself
    int http_status = 0;        // 403, 404, 301, 503, ...
    std::string bucket_region;  // the x-amz-bucket-region response header, "" when absent
    std::string retry_after;    // the Retry-After response header, "" when absent
};

/// A failed S3 request, explained.
struct S3Failure {
    /// The S3 error code: from the document, else inferred from the status (HEAD answers have no
    /// body): 301 PermanentRedirect, 403 AccessDenied, 404 NotFound, 503 SlowDown, else "HTTP N".
    std::string code;
    /// One line naming s3://BUCKET/KEY, the code, the HTTP status, the server's message (cut to
    /// 300 bytes) and what to do, e.g. "s3://b/k.gguf: SignatureDoesNotMatch (HTTP 403): The
    /// request signature we calculated does not match ...: check the secret access key, the
    /// region (--region) and this machine's clock". Raw text: escape it where it is printed.
    std::string message;
    bool retryable = false;            // SlowDown, 503, 500 InternalError: back off and retry
    bool credentials_expired = false;  // ExpiredToken, TokenRefreshRequired: refresh, retry once
    /// The bucket's region when the server told it (x-amz-bucket-region or <Region>): retry there.
    std::string region;
    /// Seconds from a Retry-After header given in seconds; nullopt when absent or a date.
    std::optional<unsigned> retry_after_seconds;
};

/// Explains a non-2xx S3 answer (status, body and headers in `context`). `body` may be empty.
S3Failure explain_failure(std::string_view body, const ErrorContext& context);

/// "s3://BUCKET/KEY" for messages ("s3://BUCKET/" for a bucket without key, "s3://" without
/// bucket); raw, escaped where it is printed.
std::string s3_location(const std::string& bucket, const std::string& key);

}  // namespace gguf_mount::remote::s3
