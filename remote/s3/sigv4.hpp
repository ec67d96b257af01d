// AWS Signature Version 4 for S3 requests, written from the AWS specification ("Signature
// Version 4 signing process", "Authenticating Requests: Using the Authorization Header (AWS
// Signature Version 4)") over OpenSSL's SHA-256 and HMAC-SHA256 (EVP).
//
// One function signs a request and builds the URL to send from the same canonical path and
// query, so the bytes that are signed are the bytes that are sent (libcurl's CURLOPT_AWS_SIGV4
// in Debian 12 signs the query as given, unsorted and not re-encoded).
#pragma once

#include <chrono>
#include <ctime>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gguf_mount::remote::s3 {

/// x-amz-content-sha256 of a request without a body: the hex SHA-256 of the empty string.
inline constexpr std::string_view kEmptyPayloadHash =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// x-amz-content-sha256 value that leaves the payload out of the signature (S3 only).
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

/// AWS credentials. The secret and the session token are never put into a message or log:
/// use redacted() to name them.
struct Credentials {
    std::string access_key_id;      // "AKIAIOSFODNN7EXAMPLE"
    std::string secret_access_key;  // never printed
    std::string session_token;      // temporary credentials only, "" otherwise; never printed
    /// When temporary credentials stop being valid (credential_process "Expiration"); none for
    /// long-term keys.
    std::optional<std::chrono::system_clock::time_point> expiration;

    /// The access key id with all but its first 4 and last 4 characters replaced by '*'
    /// ("AKIA************MPLE"; shorter ids are all '*'), and whether a session token is present:
    /// what a message may say about these credentials.
    std::string redacted() const;
};

/// One name/value pair (a query parameter or a header), raw: not percent-encoded.
using Pair = std::pair<std::string, std::string>;

/// A request to sign. Path and query are given raw (decoded), exactly as the object key and the
/// parameter values are: the signer encodes them once.
struct SigningRequest {
    std::string method = "GET";
    std::string scheme = "https";  // "http" or "https", used only for the URL
    /// The Host header value: the host, with ":PORT" when the port is not the scheme's default
    /// ("examplebucket.s3.amazonaws.com", "127.0.0.1:4568").
    std::string host;
    /// The raw path, starting with '/': "/test.txt", "/bucket/team a/α+β.gguf". Each segment
    /// between '/' is URI-encoded once; '/' themselves are kept (S3 does not normalize paths,
    /// so "a//b" stays).
    std::string path = "/";
    /// Raw query parameters in any order ("list-type"="2", "continuation-token"="1/a+b=").
    /// A parameter without a value ("?acl") is a pair with an empty value.
    std::vector<Pair> query;
    /// Further headers to sign and send (e.g. {"Range", "bytes=0-9"}), any case; host,
    /// x-amz-date, x-amz-content-sha256 and x-amz-security-token are added by sign().
    std::vector<Pair> headers;
    /// x-amz-content-sha256: kEmptyPayloadHash (a GET) or kUnsignedPayload.
    std::string payload_hash = std::string(kEmptyPayloadHash);
};

/// The result of sign(): what to send.
struct SignedRequest {
    /// scheme://host + canonical path [+ '?' + canonical query]: the URL to hand to the HTTP
    /// client unchanged (it must not re-encode it).
    std::string url;
    /// Every header to send, names as AWS spells them, Authorization last: Host, each header of
    /// the request, x-amz-content-sha256, x-amz-date, x-amz-security-token (with a session
    /// token), Authorization.
    std::vector<Pair> headers;
    std::string authorization;     // the Authorization header value
    std::string signature;         // lowercase hex, 64 digits
    std::string canonical_request; // for diagnostics and tests; holds no secret
    std::string string_to_sign;    // idem
    std::string amz_date;          // "20130524T000000Z"
};

/// AWS URI encoding of one path: every byte but the RFC 3986 unreserved ones (A-Z a-z 0-9
/// - _ . ~) as %XX with uppercase hex, '/' kept. "/team a/α+β=" -> "/team%20a/%CE%B1%2B%CE%B2%3D".
std::string canonical_path(std::string_view raw_path);

/// The canonical query string: each name and value URI-encoded ('/' too), pairs sorted by
/// encoded name, then by encoded value, joined "name=value" with '&'. "" for no pairs.
std::string canonical_query(const std::vector<Pair>& raw_query);

/// "YYYYMMDDTHHMMSSZ" of `t` in UTC (the x-amz-date format).
std::string amz_date(std::time_t t);

/// The SigV4 signing key, HMAC(HMAC(HMAC(HMAC("AWS4" + secret, YYYYMMDD), region), service),
/// "aws4_request"), kept for the last secret, date, region and service it was derived for: the
/// key depends on nothing else (AWS, "Signature V4: Calculate the signature"), so a client
/// signing many requests derives it once per UTC day (and again when the credentials change)
/// instead of four HMACs per request. Thread-safe; the key and the secret it keeps are wiped
/// (OPENSSL_cleanse) when replaced and on destruction. Never throws but gguf::Error(Io) when
/// OpenSSL's HMAC fails and std::bad_alloc.
class SigningKeyCache {
public:
    SigningKeyCache() = default;
    SigningKeyCache(const SigningKeyCache&) = delete;
    SigningKeyCache& operator=(const SigningKeyCache&) = delete;
    ~SigningKeyCache();

    /// The 32-byte signing key for `secret_access_key` on `date` ("YYYYMMDD") in `region` and
    /// `service`, derived when any of the four differs from the last call.
    std::string key(const std::string& secret_access_key, const std::string& date, const std::string& region,
                    const std::string& service);
    /// How many keys were derived so far (for tests: once per date).
    unsigned derivations() const;

private:
    void wipe() noexcept;
    mutable std::mutex mutex_;
    std::string secret_, date_, region_, service_, key_;
    unsigned derivations_ = 0;
};

/// Signs `request` with `credentials` for `region` and `service` ("s3") at time `now` (UTC
/// seconds), AWS4-HMAC-SHA256, with the signing key of `keys` (derived there once per date and
/// region) or, when `keys` is null, derived for this request. Throws gguf::Error(BadArgument)
/// for an empty access key id or secret, an empty host or region, a path not starting with '/',
/// or a header name or value holding CR, LF or NUL (a header cannot carry them).
SignedRequest sign(const SigningRequest& request, const Credentials& credentials, const std::string& region,
                   std::time_t now, const std::string& service = "s3", SigningKeyCache* keys = nullptr);

}  // namespace gguf_mount::remote::s3
