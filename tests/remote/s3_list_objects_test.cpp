// ListObjectsV2 pages and S3 error documents (remote/s3/list_objects), on XML pages written here
// the way S3 writes them.
#include <gtest/gtest.h>

#include <string>

#include "gguf/error.hpp"
#include "remote/expect_error.hpp"
#include "remote/s3/list_objects.hpp"

namespace s3 = gguf_mount::remote::s3;
using remote_test::code_of;

namespace {

const char* kHead = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";

std::string contents(const std::string& key, const std::string& size, const std::string& etag = "&quot;e&quot;") {
    return "<Contents><Key>" + key + "</Key><LastModified>2024-01-02T03:04:05.000Z</LastModified><ETag>" + etag +
           "</ETag><Size>" + size + "</Size><StorageClass>STANDARD</StorageClass></Contents>";
}

std::string page(const std::string& inner) { return std::string(kHead) + inner + "</ListBucketResult>"; }

}  // namespace

TEST(S3ListObjects, FullPage) {
    std::string xml = page(
        "<Name>models</Name><Prefix>team a/</Prefix><KeyCount>4</KeyCount><MaxKeys>1000</MaxKeys>"
        "<Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>"
        "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=+</NextContinuationToken>" +
        contents("team a/m-00001-of-00002.gguf", "1048576", "&quot;9b2cf535f27731c974343645a3985328&quot;") +
        contents("team a/\xCE\xB1+\xCE\xB2 x=1.gguf", "0", "\"d41d8cd98f00b204e9800998ecf8427e-12\"") +
        "<CommonPrefixes><Prefix>team a/sub/</Prefix></CommonPrefixes>"
        "<CommonPrefixes><Prefix><![CDATA[team a/<odd>/]]></Prefix></CommonPrefixes>");
    s3::ListPage p = s3::parse_list_page(xml, "s3://models/team a/");
    EXPECT_EQ(p.bucket, "models");
    EXPECT_EQ(p.prefix, "team a/");
    EXPECT_TRUE(p.is_truncated);
    EXPECT_EQ(p.next_continuation_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=+");
    ASSERT_TRUE(p.key_count.has_value());
    EXPECT_EQ(*p.key_count, 4u);
    ASSERT_EQ(p.contents.size(), 2u);
    EXPECT_EQ(p.contents[0].key, "team a/m-00001-of-00002.gguf");
    EXPECT_EQ(p.contents[0].size, 1048576u);
    EXPECT_EQ(p.contents[0].etag, "\"9b2cf535f27731c974343645a3985328\"");
    EXPECT_EQ(p.contents[0].last_modified, "2024-01-02T03:04:05.000Z");
    EXPECT_EQ(p.contents[1].key, "team a/\xCE\xB1+\xCE\xB2 x=1.gguf");
    EXPECT_EQ(p.contents[1].size, 0u);
    EXPECT_EQ(p.contents[1].etag, "\"d41d8cd98f00b204e9800998ecf8427e-12\"");  // multipart, kept as sent
    ASSERT_EQ(p.common_prefixes.size(), 2u);
    EXPECT_EQ(p.common_prefixes[0], "team a/sub/");
    EXPECT_EQ(p.common_prefixes[1], "team a/<odd>/");
    EXPECT_TRUE(p.problems.empty());
}

TEST(S3ListObjects, LastPageAndEmptyPage) {
    s3::ListPage last = s3::parse_list_page(
        page("<Name>b</Name><Prefix></Prefix><KeyCount>1</KeyCount><IsTruncated>false</IsTruncated>" +
             contents("k", "5")),
        "s3://b/");
    EXPECT_FALSE(last.is_truncated);
    EXPECT_EQ(last.next_continuation_token, "");
    ASSERT_EQ(last.contents.size(), 1u);
    s3::ListPage empty = s3::parse_list_page(page("<Name>b</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated>"), "s3://b/");
    EXPECT_TRUE(empty.contents.empty());
    EXPECT_TRUE(empty.common_prefixes.empty());
}

TEST(S3ListObjects, BadEntriesAreProblemsNotCrashes) {
    std::string long_key(1025, 'k');
    std::string xml = page("<Name>b</Name><IsTruncated>false</IsTruncated>" + contents(long_key, "1") +
                           contents("ok", "7") + contents("neg", "-1") + contents("big", "99999999999999999999999") +
                           contents("ok", "8") + "<Contents><Size>3</Size></Contents>" +
                           contents(std::string(1024, 'x'), "2"));
    s3::ListPage p = s3::parse_list_page(xml, "s3://b/");
    ASSERT_EQ(p.contents.size(), 2u);
    EXPECT_EQ(p.contents[0].key, "ok");
    EXPECT_EQ(p.contents[0].size, 7u);
    EXPECT_EQ(p.contents[1].key.size(), 1024u);  // exactly S3's limit is fine
    ASSERT_EQ(p.problems.size(), 5u);
    EXPECT_EQ(p.problems[0].reason, "key is 1025 bytes, longer than S3's 1024");
    EXPECT_LE(p.problems[0].key.size(), 203u);
    EXPECT_EQ(p.problems[1].key, "neg");
    EXPECT_EQ(p.problems[1].reason, "<Size> \"-1\" is not a number of bytes");
    EXPECT_EQ(p.problems[2].key, "big");  // past 2^64
    EXPECT_EQ(p.problems[3].reason, "the key is listed twice");
    EXPECT_EQ(p.problems[4].reason, "a <Contents> entry without a <Key>");
}

TEST(S3ListObjects, BoundsAreErrors) {
    std::string message;
    s3::ListLimits small;
    small.max_body_bytes = 100;
    EXPECT_EQ(code_of([&] { s3::parse_list_page(page(contents("a", "1") + contents("b", "2")), "s3://b/p", small); },
                      &message),
              gguf::Code::TooLarge);
    EXPECT_NE(message.find("s3://b/p: "), std::string::npos) << message;

    std::string many;
    for (int i = 0; i < 1001; ++i) many += contents("k" + std::to_string(i), "1");
    s3::ListLimits thousand;
    thousand.max_entries = 1000;
    EXPECT_EQ(code_of([&] { s3::parse_list_page(page(many), "s3://b/", thousand); }, &message), gguf::Code::TooLarge);
    EXPECT_NE(message.find("more than 1000 entries"), std::string::npos) << message;
    // the default bounds take that page
    EXPECT_EQ(s3::parse_list_page(page(many), "s3://b/").contents.size(), 1001u);

    // the default body bound is 16 MiB
    std::string huge = page(std::string(17u << 20, ' '));
    EXPECT_EQ(code_of([&] { s3::parse_list_page(huge, "s3://b/"); }), gguf::Code::TooLarge);
}

TEST(S3ListObjects, MalformedAnswersAreErrors) {
    std::string message;
    EXPECT_EQ(code_of([&] { s3::parse_list_page("<ListBucketResult><Name>b", "s3://b/"); }, &message),
              gguf::Code::BadValue);
    EXPECT_NE(message.find("s3://b/: ListObjectsV2 answer: not well-formed XML"), std::string::npos) << message;
    EXPECT_EQ(code_of([&] { s3::parse_list_page("<html><body>hi</body></html>", "s3://b/"); }, &message),
              gguf::Code::BadValue);
    EXPECT_NE(message.find("root <html>"), std::string::npos) << message;
    EXPECT_EQ(code_of([&] { s3::parse_list_page(page("<IsTruncated>true</IsTruncated>"), "s3://b/"); }, &message),
              gguf::Code::BadValue);
    EXPECT_NE(message.find("no NextContinuationToken"), std::string::npos) << message;
    EXPECT_EQ(code_of([&] { s3::parse_list_page(page("<IsTruncated>yes</IsTruncated>"), "s3://b/"); }),
              gguf::Code::BadValue);
    EXPECT_EQ(code_of([&] { s3::parse_list_page(page("<KeyCount>x</KeyCount>"), "s3://b/"); }), gguf::Code::BadValue);
    EXPECT_EQ(code_of([&] { s3::parse_list_page(page("<EncodingType>base64</EncodingType>"), "s3://b/"); }),
              gguf::Code::BadValue);
    EXPECT_EQ(code_of([&] { s3::parse_list_page(page("<EncodingType>url</EncodingType><Prefix>a%zz</Prefix>"), "s3://b/"); }),
              gguf::Code::BadValue);
    EXPECT_EQ(code_of([&] {
                  s3::parse_list_page("<Error><Code>NoSuchBucket</Code><Message>gone</Message></Error>", "s3://b/");
              },
                      &message),
              gguf::Code::BadValue);
    EXPECT_NE(message.find("NoSuchBucket: gone"), std::string::npos) << message;
}

// encoding-type=url (what list_url asks for): Key, Prefix and CommonPrefixes decoded as S3 encodes
// them ('+' a space, %XX a byte), the continuation token taken as sent; a key with a byte XML 1.0
// cannot carry (0x01) is one entry, not an unparseable page; a bad escape is that entry's problem.
TEST(S3ListObjects, UrlEncodedKeysAreDecoded) {
    const std::string xml = page(
        "<Name>models</Name><Prefix>team+a%2F%CE%B1%2B%CE%B2%2F</Prefix><KeyCount>4</KeyCount>"
        "<Delimiter>%2F</Delimiter><IsTruncated>true</IsTruncated>"
        "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>" +
        contents("team+a%2F%CE%B1%2B%CE%B2%2Fm-00001-of-00002.gguf", "10") +
        contents("team+a%2F%CE%B1%2B%CE%B2%2Fctl%01.gguf", "11") + contents("team+a%2Fbad%zz", "12") +
        "<CommonPrefixes><Prefix>team+a%2F%CE%B1%2B%CE%B2%2Fsub+dir%2F</Prefix></CommonPrefixes>"
        "<EncodingType>url</EncodingType>");
    s3::ListPage p = s3::parse_list_page(xml, "s3://models/team a/");
    EXPECT_EQ(p.prefix, "team a/\xCE\xB1+\xCE\xB2/");
    ASSERT_EQ(p.contents.size(), 2u);
    EXPECT_EQ(p.contents[0].key, "team a/\xCE\xB1+\xCE\xB2/m-00001-of-00002.gguf");
    EXPECT_EQ(p.contents[1].key, std::string("team a/\xCE\xB1+\xCE\xB2/ctl\x01.gguf"));
    ASSERT_EQ(p.common_prefixes.size(), 1u);
    EXPECT_EQ(p.common_prefixes[0], "team a/\xCE\xB1+\xCE\xB2/sub dir/");
    EXPECT_EQ(p.next_continuation_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
    ASSERT_EQ(p.problems.size(), 1u);
    EXPECT_EQ(p.problems[0].key, "team+a%2Fbad%zz");
    EXPECT_NE(p.problems[0].reason.find("not URL-encoded"), std::string::npos) << p.problems[0].reason;

    // Without EncodingType (a server that ignores the parameter) the texts are raw.
    s3::ListPage raw = s3::parse_list_page(page("<Prefix>a+b%2F</Prefix>" + contents("a+b%2Fk", "1")), "s3://b/");
    EXPECT_EQ(raw.prefix, "a+b%2F");
    ASSERT_EQ(raw.contents.size(), 1u);
    EXPECT_EQ(raw.contents[0].key, "a+b%2Fk");
    EXPECT_EQ(s3::decode_url_encoded("a+b%2Bc%01%7e"), std::string("a b+c\x01~"));
    EXPECT_FALSE(s3::decode_url_encoded("50%"));
    EXPECT_FALSE(s3::decode_url_encoded("%4"));
}

TEST(S3ListObjects, NoEntityExpansionNoDtdNoNetwork) {
    // billion laughs: refused for its DTD before anything is expanded
    std::string laughs = "<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\">"
                         "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\"><!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\">]>"
                         "<ListBucketResult><Name>&c;</Name></ListBucketResult>";
    std::string message;
    EXPECT_EQ(code_of([&] { s3::parse_list_page(laughs, "s3://b/"); }, &message), gguf::Code::BadValue);
    EXPECT_EQ(message.rfind("s3://b/: ListObjectsV2 answer: ", 0), 0u) << message;
    // any DTD is refused, also one without entities
    std::string dtd = "<?xml version=\"1.0\"?><!DOCTYPE ListBucketResult [<!ELEMENT Name ANY>]>"
                      "<ListBucketResult><Name>b</Name></ListBucketResult>";
    EXPECT_EQ(code_of([&] { s3::parse_list_page(dtd, "s3://b/"); }, &message), gguf::Code::BadValue);
    EXPECT_EQ(message, "s3://b/: ListObjectsV2 answer: the XML has a DTD (an S3 answer has none)");
    // an external entity (a file, or a URL) is neither read nor fetched
    std::string external = "<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>"
                           "<ListBucketResult><Name>&x;</Name></ListBucketResult>";
    EXPECT_EQ(code_of([&] { s3::parse_list_page(external, "s3://b/"); }), gguf::Code::BadValue);
    // an undefined entity is a well-formedness error
    EXPECT_EQ(code_of([&] { s3::parse_list_page(page("<Name>&x;</Name>"), "s3://b/"); }), gguf::Code::BadValue);
}

TEST(S3Errors, DocumentFields) {
    auto e = s3::parse_error_document(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code><Message>The specified key does "
        "not\n  exist.</Message><Key>a b.gguf</Key><BucketName>models</BucketName><RequestId>4442587FB7D0A2F9"
        "</RequestId></Error>");
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->code, "NoSuchKey");
    EXPECT_EQ(e->message, "The specified key does not exist.");
    EXPECT_EQ(e->key, "a b.gguf");
    EXPECT_EQ(e->bucket_name, "models");
    EXPECT_EQ(e->request_id, "4442587FB7D0A2F9");
    EXPECT_FALSE(s3::parse_error_document("").has_value());
    EXPECT_FALSE(s3::parse_error_document("not xml").has_value());
    EXPECT_FALSE(s3::parse_error_document(page("")).has_value());
}

namespace {

std::string error_xml(const std::string& code, const std::string& message, const std::string& extra = "") {
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + code + "</Code><Message>" + message +
           "</Message>" + extra + "</Error>";
}

s3::S3Failure explain(const std::string& body, int status, const std::string& region_header = "",
                      const std::string& retry_after = "") {
    s3::ErrorContext c;
    c.bucket = "models";
    c.key = "team a/m.gguf";
    c.http_status = status;
    c.bucket_region = region_header;
    c.retry_after = retry_after;
    return s3::explain_failure(body, c);
}

}  // namespace

TEST(S3Errors, EachCodeHasItsAdvice) {
    struct Case {
        std::string code;
        int status;
        std::string expected_tail;
    };
    const Case cases[] = {
        {"AccessDenied", 403, "check the IAM or bucket policy (a public bucket takes --no-sign-request)"},
        {"NoSuchBucket", 404, "no such bucket: check the bucket name, --endpoint-url and --region"},
        {"NoSuchKey", 404, "no such key: check the key"},
        {"InvalidAccessKeyId", 403, "check AWS_ACCESS_KEY_ID or the profile, and --endpoint-url"},
        {"SignatureDoesNotMatch", 403, "check the secret access key, the region (--region) and this machine's clock"},
        {"ExpiredToken", 400, "the session token has expired: refresh the credentials"},
        {"RequestTimeTooSkewed", 403, "clock is more than 15 minutes off the server's: set the clock (NTP)"},
        {"SlowDown", 503, "the server asks to slow down: retrying later"},
    };
    for (const Case& c : cases) {
        s3::S3Failure f = explain(error_xml(c.code, "Server says so."), c.status);
        EXPECT_EQ(f.code, c.code);
        EXPECT_EQ(f.message.rfind("s3://models/team a/m.gguf: " + c.code + " (HTTP " + std::to_string(c.status) +
                                      "): Server says so.: ",
                                  0),
                  0u)
            << f.message;
        EXPECT_NE(f.message.find(c.expected_tail), std::string::npos) << f.message;
        EXPECT_EQ(f.message.find('\n'), std::string::npos);
        EXPECT_EQ(f.retryable, c.code == "SlowDown") << c.code;
        EXPECT_EQ(f.credentials_expired, c.code == "ExpiredToken") << c.code;
    }
}

TEST(S3Errors, RedirectNamesTheRegion) {
    s3::S3Failure f = explain(error_xml("PermanentRedirect", "The bucket you are attempting to access must be addressed "
                                                             "using the specified endpoint.",
                                        "<Endpoint>models.s3.eu-west-1.amazonaws.com</Endpoint>"),
                              301, "eu-west-1");
    EXPECT_EQ(f.code, "PermanentRedirect");
    EXPECT_EQ(f.region, "eu-west-1");
    EXPECT_NE(f.message.find("the bucket is in region eu-west-1: use --region eu-west-1"), std::string::npos)
        << f.message;
    // without the header: the endpoint is named
    s3::S3Failure g = explain(error_xml("PermanentRedirect", "Moved.", "<Endpoint>models.s3.eu-west-1.amazonaws.com</Endpoint>"), 301);
    EXPECT_NE(g.message.find("addressed at models.s3.eu-west-1.amazonaws.com"), std::string::npos) << g.message;
    // AuthorizationHeaderMalformed names the expected region in <Region>
    s3::S3Failure h = explain(error_xml("AuthorizationHeaderMalformed", "the region 'us-east-1' is wrong; expecting "
                                                                        "'ap-south-1'",
                                        "<Region>ap-south-1</Region>"),
                              400);
    EXPECT_EQ(h.region, "ap-south-1");
}

TEST(S3Errors, BodylessAnswersAreInferredFromStatus) {
    EXPECT_EQ(explain("", 403).code, "AccessDenied");
    EXPECT_EQ(explain("", 404).code, "NotFound");
    s3::S3Failure moved = explain("", 301, "us-west-2");
    EXPECT_EQ(moved.code, "PermanentRedirect");
    EXPECT_NE(moved.message.find("use --region us-west-2"), std::string::npos) << moved.message;
    s3::S3Failure slow = explain("", 503, "", "7");
    EXPECT_TRUE(slow.retryable);
    ASSERT_TRUE(slow.retry_after_seconds.has_value());
    EXPECT_EQ(*slow.retry_after_seconds, 7u);
    EXPECT_NE(slow.message.find("retrying later (after 7 s)"), std::string::npos) << slow.message;
    EXPECT_FALSE(explain("", 503, "", "Wed, 21 Oct 2015 07:28:00 GMT").retry_after_seconds.has_value());
    s3::S3Failure teapot = explain("<html>oops</html>", 418);
    EXPECT_EQ(teapot.code, "HTTP 418");
    EXPECT_EQ(teapot.message, "s3://models/team a/m.gguf: HTTP 418");
}

TEST(S3Errors, LocationFromTheDocumentWhenNotGiven) {
    s3::ErrorContext c;
    c.http_status = 404;
    s3::S3Failure f = s3::explain_failure(
        error_xml("NoSuchKey", "x", "<BucketName>bk</BucketName><Key>dir/k</Key>"), c);
    EXPECT_EQ(f.message.rfind("s3://bk/dir/k: NoSuchKey (HTTP 404): x: ", 0), 0u) << f.message;
    // a server message is one line and bounded
    s3::S3Failure g = explain(error_xml("AccessDenied", std::string(1000, 'm') + "\r\nX"), 403);
    EXPECT_EQ(g.message.find('\n'), std::string::npos);
    EXPECT_LT(g.message.size(), 600u);
}
