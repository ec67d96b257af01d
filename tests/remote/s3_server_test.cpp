// The SigV4 signer, the request targets and the ListObjectsV2 parser against a real S3 server
// (s3rver) whose every signed request is verified by AWS's own signer (S3Server's proxy): a
// right secret passes, a wrong one is refused, as on S3.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <ctime>
#include <filesystem>
#include <set>

#include "remote/s3/config.hpp"
#include "remote/s3/list_objects.hpp"
#include "remote/s3/sigv4.hpp"
#include "remote/s3_servers.hpp"

namespace s3 = gguf_mount::remote::s3;
using remote_test::HttpResponse;
using remote_test::S3Server;
using remote_test::S3ServerOptions;

namespace {

const std::string kOddKey = "team a/\xCE\xB1+\xCE\xB2=1 x.gguf";
const std::string kOddContent = "hello world 0123456789";

/// s3rver's own access key, with `secret` (its real secret is "S3RVER").
s3::Credentials s3rver(const std::string& secret = "S3RVER") {
    s3::Credentials c;
    c.access_key_id = "S3RVER";
    c.secret_access_key = secret;
    return c;
}

class S3ServerTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::string why;
        if (!S3Server::available(&why)) GTEST_SKIP() << why;
        namespace fs = std::filesystem;
        fs::create_directories(seed_ / "models/team a");
        fs::create_directories(seed_ / "models/list/sub");
        gguf_test::write_file(seed_ / ("models/" + kOddKey), kOddContent);
        for (int i = 1; i <= 5; ++i) gguf_test::write_file(seed_ / ("models/list/k" + std::to_string(i)), std::string(i, 'x'));
        gguf_test::write_file(seed_ / "models/list/sub/deep", "d");
        S3ServerOptions options;
        options.seed = seed_.path();
        options.buckets = {"models"};
        options.credentials = {{"S3RVER", {{"secret", "S3RVER"}}},
                               {"AKIATEMPORARY0000001", {{"secret", "tempsecret"}, {"session_token", "tok/en+1="},
                                                        {"expired_tokens", {"old-token"}}}}};
        server_ = std::make_unique<S3Server>(options);
        std::string error;
        ASSERT_TRUE(server_->start(&error)) << error;
        config_.region = "us-east-1";
        config_.endpoint_url = server_->endpoint_url();
    }

    s3::SignedRequest sign(const std::string& key, std::vector<s3::Pair> query = {}, std::vector<s3::Pair> headers = {},
                           const s3::Credentials& c = s3rver(), std::time_t when = std::time(nullptr)) {
        s3::RequestTarget t = s3::target_for(config_, "models", key);
        s3::SigningRequest r;
        r.scheme = t.scheme;
        r.host = t.host;
        r.path = t.path;
        r.query = std::move(query);
        r.headers = std::move(headers);
        return s3::sign(r, c, config_.region, when);
    }

    s3::S3Failure failure(const HttpResponse& r, const std::string& key) {
        s3::ErrorContext c;
        c.bucket = "models";
        c.key = key;
        c.http_status = static_cast<int>(r.status);
        return s3::explain_failure(r.body, c);
    }

    HttpResponse send(const s3::SignedRequest& s) {
        ++sent_;
        return remote_test::send_signed(s);
    }

    /// The proxy's verdict on the last request sent (waits for it to be logged).
    std::string last_verdict() {
        auto log = server_->wait_access_log(sent_);
        EXPECT_EQ(log.size(), sent_);
        return log.empty() ? "<none>" : log.back().verdict;
    }

    gguf_test::TempDir seed_;
    std::unique_ptr<S3Server> server_;
    s3::S3Config config_;
    size_t sent_ = 0;
};

}  // namespace

TEST_F(S3ServerTest, SignedRangedGetOfARawKeyPasses) {
    HttpResponse r = send(sign(kOddKey, {}, {{"Range", "bytes=6-10"}}));
    EXPECT_EQ(r.status, 206) << r.body;
    EXPECT_EQ(r.body, "world");
    EXPECT_EQ(last_verdict(), "verified");
    EXPECT_EQ(server_->wait_access_log(sent_).back().entry.uri, "/models/team%20a/%CE%B1%2B%CE%B2%3D1%20x.gguf");
    EXPECT_FALSE(r.header("etag").empty());
}

TEST_F(S3ServerTest, WrongSecretIsRefused) {
    HttpResponse r = send(sign(kOddKey, {}, {{"Range", "bytes=0-4"}}, s3rver("not-the-secret")));
    EXPECT_EQ(r.status, 403);
    EXPECT_EQ(last_verdict(), "SignatureDoesNotMatch");
    s3::S3Failure f = failure(r, kOddKey);
    EXPECT_EQ(f.code, "SignatureDoesNotMatch");
    EXPECT_EQ(f.message.rfind("s3://models/" + kOddKey + ": SignatureDoesNotMatch (HTTP 403): ", 0), 0u) << f.message;
    EXPECT_NE(f.message.find("check the secret access key, the region (--region) and this machine's clock"),
              std::string::npos);
    EXPECT_EQ(f.message.find("not-the-secret"), std::string::npos);
    // s3rver alone takes the wrong secret: the refusal above is the proxy's check
    s3::S3Config direct = config_;
    direct.endpoint_url = "http://127.0.0.1:" + std::to_string(server_->s3rver_port());
    s3::RequestTarget t = s3::target_for(direct, "models", kOddKey);
    s3::SigningRequest unchecked;
    unchecked.scheme = t.scheme;
    unchecked.host = t.host;
    unchecked.path = t.path;
    unchecked.headers = {{"Range", "bytes=0-4"}};
    EXPECT_EQ(remote_test::send_signed(s3::sign(unchecked, s3rver("not-the-secret"), "us-east-1", std::time(nullptr))).status,
              206);
    // so is a right signature for another region (the server derives the key from the scope, so
    // change the scope's region but sign with us-east-1's key: a tampered Authorization header)
    s3::SignedRequest s = sign(kOddKey);
    for (auto& [name, value] : s.headers)
        if (name == "Authorization") value.replace(value.find("us-east-1"), 9, "eu-west-1");
    EXPECT_EQ(send(s).status, 403);
    EXPECT_EQ(last_verdict(), "SignatureDoesNotMatch");
}

TEST_F(S3ServerTest, UnknownKeySkewedClockAndMissingKeyAreExplained) {
    s3::Credentials stranger = s3rver();
    stranger.access_key_id = "AKIANOBODY0000000000";
    HttpResponse unknown = send(sign(kOddKey, {}, {}, stranger));
    EXPECT_EQ(unknown.status, 403);
    EXPECT_EQ(failure(unknown, kOddKey).code, "InvalidAccessKeyId");

    HttpResponse skewed = send(sign(kOddKey, {}, {}, s3rver(), std::time(nullptr) - 3600));
    EXPECT_EQ(skewed.status, 403);
    s3::S3Failure f = failure(skewed, kOddKey);
    EXPECT_EQ(f.code, "RequestTimeTooSkewed");
    EXPECT_NE(f.message.find("set the clock (NTP)"), std::string::npos) << f.message;

    HttpResponse missing = send(sign("team a/absent.gguf"));
    EXPECT_EQ(missing.status, 404);
    EXPECT_EQ(last_verdict(), "verified");  // signed right: the 404 is s3rver's own answer
    s3::S3Failure m = failure(missing, "team a/absent.gguf");
    EXPECT_EQ(m.code, "NoSuchKey");
    EXPECT_EQ(m.message.rfind("s3://models/team a/absent.gguf: NoSuchKey (HTTP 404): ", 0), 0u) << m.message;
}

TEST_F(S3ServerTest, SessionTokenIsRequiredSignedAndExpires) {
    s3::Credentials temp;
    temp.access_key_id = "AKIATEMPORARY0000001";
    temp.secret_access_key = "tempsecret";
    temp.session_token = "tok/en+1=";
    HttpResponse ok = send(sign(kOddKey, {}, {{"Range", "bytes=0-4"}}, temp));
    EXPECT_EQ(ok.status, 206) << ok.body;
    EXPECT_EQ(ok.body, "hello");
    EXPECT_EQ(last_verdict(), "verified");

    s3::Credentials no_token = temp;
    no_token.session_token.clear();
    EXPECT_EQ(send(sign(kOddKey, {}, {}, no_token)).status, 400);
    EXPECT_EQ(last_verdict(), "InvalidToken");

    s3::Credentials old = temp;
    old.session_token = "old-token";
    HttpResponse expired = send(sign(kOddKey, {}, {}, old));
    EXPECT_EQ(expired.status, 400);
    s3::S3Failure f = failure(expired, kOddKey);
    EXPECT_EQ(f.code, "ExpiredToken");
    EXPECT_TRUE(f.credentials_expired);
}

TEST_F(S3ServerTest, ListPagesOfTwoKeysFollowTheContinuationToken) {
    std::vector<std::string> keys;
    std::set<std::string> prefixes;
    std::string token;
    int pages = 0;
    do {
        std::vector<s3::Pair> query = {{"list-type", "2"}, {"prefix", "list/"}, {"delimiter", "/"}, {"max-keys", "2"}};
        if (!token.empty()) query.emplace_back("continuation-token", token);
        HttpResponse r = send(sign("", query));
        ASSERT_EQ(r.status, 200) << r.body;
        ASSERT_EQ(last_verdict(), "verified");
        s3::ListPage page = s3::parse_list_page(r.body, "s3://models/list/");
        EXPECT_TRUE(page.problems.empty());
        EXPECT_LE(page.contents.size() + page.common_prefixes.size(), 2u);
        for (const auto& e : page.contents) {
            keys.push_back(e.key);
            EXPECT_EQ(e.size, static_cast<uint64_t>(e.key.back() - '0')) << e.key;
            EXPECT_EQ(e.etag.front(), '"') << e.etag;
        }
        prefixes.insert(page.common_prefixes.begin(), page.common_prefixes.end());
        token = page.is_truncated ? page.next_continuation_token : "";
        if (page.is_truncated) EXPECT_FALSE(token.empty());
        ASSERT_LT(++pages, 10);
    } while (!token.empty());
    EXPECT_GE(pages, 3);
    EXPECT_EQ(keys, (std::vector<std::string>{"list/k1", "list/k2", "list/k3", "list/k4", "list/k5"}));
    EXPECT_EQ(prefixes, (std::set<std::string>{"list/sub/"}));
}

TEST_F(S3ServerTest, ListingARawPrefixWithSpaceAndNonAscii) {
    HttpResponse r = send(sign("", {{"list-type", "2"}, {"prefix", "team a/\xCE\xB1"}}));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(last_verdict(), "verified");
    s3::ListPage page = s3::parse_list_page(r.body, "s3://models/team a/");
    ASSERT_EQ(page.contents.size(), 1u);
    EXPECT_EQ(page.contents[0].key, kOddKey);
    EXPECT_EQ(page.contents[0].size, kOddContent.size());
}

TEST_F(S3ServerTest, UnsignedRequestsPassForPublicBuckets) {
    HttpResponse r = remote_test::http_get(server_->endpoint_url() + "/models/list/k3");
    ++sent_;
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "xxx");
    EXPECT_EQ(last_verdict(), "anonymous");
}
