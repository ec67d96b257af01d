// The SigV4 signer against AWS's published S3 examples ("Authenticating Requests: Using the
// Authorization Header", examples with the keys below), and the canonical encoding of raw keys
// and query values. The same signer is checked against AWS's own signer from npm in
// s3_server_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "common/text.hpp"
#include "gguf/error.hpp"
#include "remote/expect_error.hpp"
#include "remote/s3/sigv4.hpp"

namespace s3 = gguf_mount::remote::s3;

namespace {

constexpr std::time_t k20130524 = 1369353600;  // 2013-05-24T00:00:00Z

s3::Credentials example_credentials() {
    s3::Credentials c;
    c.access_key_id = "AKIAIOSFODNN7EXAMPLE";
    c.secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    return c;
}

s3::SigningRequest example_request(const std::string& path) {
    s3::SigningRequest r;
    r.host = "examplebucket.s3.amazonaws.com";
    r.path = path;
    return r;
}

std::string header(const s3::SignedRequest& s, const std::string& name) {
    for (const auto& [n, v] : s.headers)
        if (n == name) return v;
    return "<absent>";
}

}  // namespace

TEST(S3SigV4, AmzDateIsUtc) {
    EXPECT_EQ(s3::amz_date(k20130524), "20130524T000000Z");
    EXPECT_EQ(s3::amz_date(k20130524 + 3661), "20130524T010101Z");
}

TEST(S3SigV4, AwsExampleGetObjectWithRange) {
    s3::SigningRequest r = example_request("/test.txt");
    r.headers = {{"Range", "bytes=0-9"}};
    s3::SignedRequest s = s3::sign(r, example_credentials(), "us-east-1", k20130524);
    EXPECT_EQ(s.canonical_request,
              "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
              "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
              "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
              "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(s.string_to_sign,
              "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
              "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
    EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    EXPECT_EQ(s.authorization,
              "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
              "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
              "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    EXPECT_EQ(s.url, "https://examplebucket.s3.amazonaws.com/test.txt");
    ASSERT_EQ(s.headers.size(), 5u);
    EXPECT_EQ(s.headers[0].first, "Host");
    EXPECT_EQ(header(s, "Range"), "bytes=0-9");
    EXPECT_EQ(header(s, "x-amz-date"), "20130524T000000Z");
    EXPECT_EQ(header(s, "x-amz-content-sha256"), s3::kEmptyPayloadHash);
    EXPECT_EQ(s.headers.back().first, "Authorization");
    EXPECT_EQ(header(s, "x-amz-security-token"), "<absent>");
}

TEST(S3SigV4, AwsExamplesOfQueries) {
    struct Case {
        std::vector<s3::Pair> query;
        std::string signature, url;
    };
    const Case cases[] = {
        // GET /?max-keys=2&prefix=J, given unsorted on purpose: sorted when signed and sent
        {{{"prefix", "J"}, {"max-keys", "2"}},
         "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
         "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J"},
        // GET /?lifecycle: a parameter without a value
        {{{"lifecycle", ""}},
         "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
         "https://examplebucket.s3.amazonaws.com/?lifecycle="},
    };
    for (const Case& c : cases) {
        s3::SigningRequest r = example_request("/");
        r.query = c.query;
        s3::SignedRequest s = s3::sign(r, example_credentials(), "us-east-1", k20130524);
        EXPECT_EQ(s.signature, c.signature) << c.url;
        EXPECT_EQ(s.url, c.url);
    }
}

TEST(S3SigV4, WrongSecretGivesAnotherSignature) {
    s3::SigningRequest r = example_request("/test.txt");
    r.headers = {{"Range", "bytes=0-9"}};
    s3::Credentials wrong = example_credentials();
    wrong.secret_access_key.back() = 'Z';
    EXPECT_NE(s3::sign(r, wrong, "us-east-1", k20130524).signature,
              "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    // and so do another region and another day
    EXPECT_NE(s3::sign(r, example_credentials(), "eu-west-1", k20130524).signature,
              "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    EXPECT_NE(s3::sign(r, example_credentials(), "us-east-1", k20130524 + 86400).signature,
              "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(S3SigV4, RawKeysAreEncodedOncePerSegment) {
    EXPECT_EQ(s3::canonical_path("/models/team a/\xCE\xB1+\xCE\xB2/x=1.gguf"),
              "/models/team%20a/%CE%B1%2B%CE%B2/x%3D1.gguf");
    // unreserved kept, '%' itself encoded (a raw key "100%" is not taken as already encoded)
    EXPECT_EQ(s3::canonical_path("/b/A-z_0.9~/100%"), "/b/A-z_0.9~/100%25");
    // S3 paths are not normalized: empty segments and dots stay
    EXPECT_EQ(s3::canonical_path("/b/a//./../c/"), "/b/a//./../c/");

    s3::SigningRequest r;
    r.scheme = "http";
    r.host = "127.0.0.1:4568";
    r.path = "/models/team a/\xCE\xB1+\xCE\xB2=.gguf";
    s3::SignedRequest s = s3::sign(r, example_credentials(), "us-east-1", k20130524);
    EXPECT_EQ(s.url, "http://127.0.0.1:4568/models/team%20a/%CE%B1%2B%CE%B2%3D.gguf");
    // what is signed is what is sent: the canonical request holds the URL's path
    EXPECT_EQ(s.canonical_request.substr(0, s.canonical_request.find('\n', 4)),
              "GET\n/models/team%20a/%CE%B1%2B%CE%B2%3D.gguf");
    EXPECT_NE(s.canonical_request.find("host:127.0.0.1:4568\n"), std::string::npos);
}

TEST(S3SigV4, QueryValuesWithSlashPlusEqualsAreEncoded) {
    EXPECT_EQ(s3::canonical_query({{"list-type", "2"},
                                   {"prefix", "team a/\xCE\xB1"},
                                   {"continuation-token", "1/a+b=="},
                                   {"delimiter", "/"}}),
              "continuation-token=1%2Fa%2Bb%3D%3D&delimiter=%2F&list-type=2&prefix=team%20a%2F%CE%B1");
    EXPECT_EQ(s3::canonical_query({}), "");
    // the same name twice: sorted by value
    EXPECT_EQ(s3::canonical_query({{"a", "2"}, {"a", "1"}}), "a=1&a=2");
}

TEST(S3SigV4, SessionTokenIsSignedAndSent) {
    s3::SigningRequest r = example_request("/test.txt");
    s3::Credentials c = example_credentials();
    c.session_token = "FQoGZXIvYXdzE+token/with=";
    s3::SignedRequest s = s3::sign(r, c, "us-east-1", k20130524);
    EXPECT_EQ(header(s, "x-amz-security-token"), c.session_token);
    EXPECT_NE(s.authorization.find("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"),
              std::string::npos);
    EXPECT_NE(s.canonical_request.find("x-amz-security-token:FQoGZXIvYXdzE+token/with=\n"), std::string::npos);
    // the secret appears nowhere in what the signer returns
    for (const auto& [n, v] : s.headers) EXPECT_EQ(v.find(c.secret_access_key), std::string::npos) << n;
    EXPECT_EQ(s.canonical_request.find(c.secret_access_key), std::string::npos);
}

TEST(S3SigV4, UnsignedPayloadAndHeaderValuesAreCanonicalized) {
    s3::SigningRequest r = example_request("/test.txt");
    r.payload_hash = std::string(s3::kUnsignedPayload);
    r.headers = {{"X-Custom", "  a   b\tc  "}};
    s3::SignedRequest s = s3::sign(r, example_credentials(), "us-east-1", k20130524);
    EXPECT_NE(s.canonical_request.find("x-custom:a b c\n"), std::string::npos);
    EXPECT_EQ(s.canonical_request.substr(s.canonical_request.rfind('\n') + 1), "UNSIGNED-PAYLOAD");
    EXPECT_EQ(header(s, "x-amz-content-sha256"), "UNSIGNED-PAYLOAD");
}

TEST(S3SigV4, BadInputIsRefused) {
    s3::SigningRequest r = example_request("/test.txt");
    s3::Credentials none;
    EXPECT_EQ(remote_test::code_of([&] { s3::sign(r, none, "us-east-1", k20130524); }), gguf::Code::BadArgument);
    EXPECT_EQ(remote_test::code_of([&] { s3::sign(r, example_credentials(), "", k20130524); }),
              gguf::Code::BadArgument);
    s3::SigningRequest relative = example_request("test.txt");
    EXPECT_EQ(remote_test::code_of([&] { s3::sign(relative, example_credentials(), "us-east-1", k20130524); }),
              gguf::Code::BadArgument);
    s3::SigningRequest injected = example_request("/test.txt");
    injected.headers = {{"Range", "bytes=0-9\r\nX-Evil: 1"}};
    EXPECT_EQ(remote_test::code_of([&] { s3::sign(injected, example_credentials(), "us-east-1", k20130524); }),
              gguf::Code::BadArgument);
    s3::SigningRequest own = example_request("/test.txt");
    own.headers = {{"X-Amz-Date", "20000101T000000Z"}};
    EXPECT_EQ(remote_test::code_of([&] { s3::sign(own, example_credentials(), "us-east-1", k20130524); }),
              gguf::Code::BadArgument);
}

TEST(S3SigV4, RedactedCredentialsHideTheKeys) {
    s3::Credentials c = example_credentials();
    EXPECT_EQ(c.redacted(), "access key AKIA************MPLE");
    c.session_token = "tok";
    EXPECT_EQ(c.redacted(), "access key AKIA************MPLE (with a session token)");
    c.session_token.clear();
    c.access_key_id = "S3RVER";
    EXPECT_EQ(c.redacted(), "access key ******");
}

TEST(S3SigV4, SigningKeyCacheGivesAwsPublishedKey) {
    // AWS, "Examples of how to derive a signing key for Signature Version 4" (IAM, 2012-02-15).
    s3::SigningKeyCache keys;
    const std::string k = keys.key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam");
    EXPECT_EQ(gguf::hex_bytes(k), "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
    EXPECT_EQ(keys.derivations(), 1u);
}

TEST(S3SigV4, SigningKeyIsDerivedOncePerDate) {
    s3::SigningKeyCache keys;
    s3::SigningRequest r = example_request("/test.txt");
    r.headers = {{"Range", "bytes=0-9"}};
    const std::string published = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(s3::sign(r, example_credentials(), "us-east-1", k20130524, "s3", &keys).signature, published);
    s3::SigningRequest list = example_request("/");
    list.query = {{"prefix", "J"}, {"max-keys", "2"}};
    EXPECT_EQ(s3::sign(list, example_credentials(), "us-east-1", k20130524 + 3600, "s3", &keys).signature,
              s3::sign(list, example_credentials(), "us-east-1", k20130524 + 3600).signature);
    EXPECT_EQ(s3::sign(list, example_credentials(), "us-east-1", k20130524, "s3", &keys).signature,
              "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
    EXPECT_EQ(keys.derivations(), 1u);  // one date, one region, one secret: one key

    // A new UTC day, another secret, another region: each a new key, as without the cache.
    EXPECT_EQ(s3::sign(r, example_credentials(), "us-east-1", k20130524 + 86400, "s3", &keys).signature,
              s3::sign(r, example_credentials(), "us-east-1", k20130524 + 86400).signature);
    EXPECT_EQ(keys.derivations(), 2u);
    s3::Credentials rotated = example_credentials();
    rotated.secret_access_key.back() = 'Z';
    EXPECT_EQ(s3::sign(r, rotated, "us-east-1", k20130524 + 86400, "s3", &keys).signature,
              s3::sign(r, rotated, "us-east-1", k20130524 + 86400).signature);
    EXPECT_EQ(keys.derivations(), 3u);
    EXPECT_EQ(s3::sign(r, rotated, "eu-west-1", k20130524 + 86400, "s3", &keys).signature,
              s3::sign(r, rotated, "eu-west-1", k20130524 + 86400).signature);
    EXPECT_EQ(keys.derivations(), 4u);
    // Back to the first secret and day: derived again (one key is kept), same published signature.
    EXPECT_EQ(s3::sign(r, example_credentials(), "us-east-1", k20130524, "s3", &keys).signature, published);
    EXPECT_EQ(keys.derivations(), 5u);
}
