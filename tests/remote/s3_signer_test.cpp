// The S3 RequestSigner on the libcurl client against s3rver behind the SigV4-verifying proxy:
// which URLs it covers, the names it gives them, the canonical path sent as signed (keys with
// ".." and "//"), and S3 error documents turned into one-line HttpErrors.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <optional>

#include "remote/http.hpp"
#include "remote/s3/signer.hpp"
#include "remote/s3_servers.hpp"

namespace s3 = gguf_mount::remote::s3;
using gguf_mount::remote::HttpClient;
using gguf_mount::remote::HttpError;
using gguf_mount::remote::HttpOptions;

namespace {

/// An environment of exactly `vars` (no file of the machine is read).
s3::EnvLookup env_of(std::map<std::string, std::string> vars) {
    vars.emplace("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials");
    vars.emplace("AWS_CONFIG_FILE", "/nonexistent/config");
    return [vars](const std::string& name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

std::shared_ptr<s3::S3Signer> signer_for(const std::string& endpoint, const std::string& secret = "S3RVER",
                                         s3::AddressingStyle style = s3::AddressingStyle::Path) {
    s3::S3Config config;
    config.region = "us-east-1";
    config.endpoint_url = endpoint;
    config.addressing = style;
    auto credentials = std::make_shared<s3::CredentialSource>(
        s3::S3CommandOptions{}, env_of({{"AWS_ACCESS_KEY_ID", "S3RVER"}, {"AWS_SECRET_ACCESS_KEY", secret}}));
    return std::make_shared<s3::S3Signer>(config, credentials);
}

TEST(S3Signer, CoversTheEndpointAndItsVirtualHostedBucketsAndNamesObjectsByTheirS3Uri) {
    auto path = signer_for("http://127.0.0.1:4568");
    EXPECT_TRUE(path->covers("http://127.0.0.1:4568/models/k"));
    EXPECT_FALSE(path->covers("https://127.0.0.1:4568/models/k"));
    EXPECT_FALSE(path->covers("http://127.0.0.1:4569/models/k"));
    EXPECT_FALSE(path->covers("http://example.invalid/models/k"));
    const std::string url = path->object_url("models", "team a/\xCE\xB1+\xCE\xB2=1/m-00001-of-00002.gguf");
    EXPECT_EQ(url, "http://127.0.0.1:4568/models/team%20a/%CE%B1%2B%CE%B2%3D1/m-00001-of-00002.gguf");
    EXPECT_EQ(path->name_for_message(url), "s3://models/team a/\xCE\xB1+\xCE\xB2=1/m-00001-of-00002.gguf");
    EXPECT_EQ(path->name_for_message(path->list_url("models", "a b/", "1/x+y=")), "s3://models/a b/");
    EXPECT_EQ(path->list_url("models", "a b/", "1/x+y="),
              "http://127.0.0.1:4568/models?continuation-token=1%2Fx%2By%3D&delimiter=%2F&encoding-type=url&list-type=2&prefix=a%20b%2F");

    auto virt = signer_for("http://s3.example.invalid:9000", "S3RVER", s3::AddressingStyle::Virtual);
    const std::string v = virt->object_url("models", "k.gguf");
    EXPECT_EQ(v, "http://models.s3.example.invalid:9000/k.gguf");
    EXPECT_TRUE(virt->covers(v));
    EXPECT_FALSE(virt->covers("http://models.s3.example.invalid.evil:9000/k.gguf"));
    EXPECT_EQ(virt->name_for_message(v), "s3://models/k.gguf");
}

class S3SignerServer : public ::testing::Test {
protected:
    void SetUp() override {
        std::string why;
        if (!remote_test::S3Server::available(&why)) GTEST_SKIP() << why;
        std::filesystem::create_directories(seed_.path() + "/models");
        gguf_test::write_file(seed_.path() + "/models/k.txt", "0123456789");
        remote_test::S3ServerOptions o;
        o.seed = seed_.path();
        o.buckets = {"models"};
        server_ = std::make_unique<remote_test::S3Server>(o);
        std::string error;
        ASSERT_TRUE(server_->start(&error)) << error;
    }
    HttpClient client(const std::string& secret = "S3RVER") {
        HttpOptions o;
        o.net_timeout = std::chrono::seconds(3);
        o.signer = signer_for(server_->endpoint_url(), secret);
        return HttpClient(o);
    }
    /// The HttpError of a ranged GET of `key` (a failure of the test when there is none).
    std::optional<HttpError> get_error(const std::string& key, const std::string& secret = "S3RVER") {
        HttpClient c = client(secret);
        char buf[4];
        size_t got = 0;
        try {
            c.get_range(signer_for(server_->endpoint_url())->object_url("models", key), 0, 4, buf, &got);
        } catch (const HttpError& e) {
            return e;
        }
        ADD_FAILURE() << key << ": no error";
        return std::nullopt;
    }
    gguf_test::TempDir seed_;
    std::unique_ptr<remote_test::S3Server> server_;
};

TEST_F(S3SignerServer, ARangedGetIsSignedAndVerified) {
    HttpClient c = client();
    auto signer = signer_for(server_->endpoint_url());
    char buf[4];
    size_t got = 0;
    auto info = c.get_range(signer->object_url("models", "k.txt"), 3, 4, buf, &got);
    EXPECT_EQ(std::string(buf, got), "3456");
    EXPECT_EQ(info.size, 10u);
    auto log = server_->wait_access_log(1);
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(log[0].verdict, "verified");
}

TEST_F(S3SignerServer, DotSegmentsOfAKeyAreSentAsSigned) {
    // libcurl would send /models/b for /models/a/../b: the signature (over the key's path) then
    // does not match. Sent as is, S3 looks the key up and answers 404, verified.
    std::optional<HttpError> e = get_error("a/../b//c");
    ASSERT_TRUE(e);
    // (s3rver answers this path with a bare 404: NotFound)
    EXPECT_EQ(std::string(e->what()).rfind("s3://models/a/../b//c: ", 0), 0u) << e->what();
    EXPECT_NE(std::string(e->what()).find("(HTTP 404): no such key"), std::string::npos) << e->what();
    EXPECT_EQ(e->sys_errno(), ENOENT);
    auto log = server_->wait_access_log(1);
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(log[0].verdict, "verified");
    EXPECT_EQ(log[0].entry.uri, "/models/a/../b//c");
}

TEST_F(S3SignerServer, AWrongSecretFailsWithOneLineThatHoldsNoSecret) {
    std::optional<HttpError> e = get_error("k.txt", "not-the-secret");
    ASSERT_TRUE(e);
    const std::string m = e->what();
    EXPECT_EQ(m.rfind("s3://models/k.txt: SignatureDoesNotMatch (HTTP 403): ", 0), 0u) << m;
    EXPECT_NE(m.find("check the secret access key"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(m.find("not-the-secret"), std::string::npos) << m;
    EXPECT_EQ(e->sys_errno(), EACCES);
}

}  // namespace
