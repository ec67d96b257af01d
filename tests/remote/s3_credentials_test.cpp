// Where an s3:// source's credentials come from (environment, session token, profile,
// credential_process, --no-sign-request) and what a user is told when S3 refuses: one line
// naming s3://BUCKET/KEY and what to do, never a secret. Against s3rver behind the proxy that
// verifies every signature with AWS's own signer (a wrong secret fails there, as on S3).
#include <gtest/gtest.h>

#include <chrono>

#include "gguf/bytes/file_io.hpp"
#include "remote/s3_fixture.hpp"

namespace {

using namespace s3_test;

const std::string kFirst = "m/kvzoo-00001-of-00007.gguf";

class S3Access : public S3Fixture {
protected:
    void SetUp() override {
        S3Fixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        const auto cases = gguf_test::manifest_cases();
        ASSERT_FALSE(cases.empty());
        c_ = cases.front();
        ASSERT_EQ(gguf::base_name(c_.shards.front()), gguf::base_name(kFirst));
        put_case(c_, "m/");
        put("pub/x", "x", "public");
        ASSERT_NO_FATAL_FAILURE(start_server(0, {"public"}));
    }
    /// `gguf-mount merge s3://models/KEY OUT` with s3_args(more): the result; the output's sha256 is
    /// checked by the caller.
    gguf_test::RunResult merge(const std::vector<std::string>& more = {}, const std::string& key = kFirst) {
        out_ = root_ + "/out" + std::to_string(++outputs_) + ".gguf";
        std::vector<std::string> args = {"merge", "s3://models/" + key, out_};
        for (const auto& a : s3_args(more)) args.push_back(a);
        return gm(args);
    }
    /// `gguf-mount check s3://BUCKET/KEY`: must fail with one line naming s3://BUCKET/KEY (the
    /// error on stderr, or a listing's problem on stdout) that holds every one of `expected`, and
    /// no secret nor the endpoint's address anywhere; returns that line.
    std::string refused(const std::vector<std::string>& expected, const std::string& key = kFirst,
                        const std::vector<std::string>& more = {}, const std::string& bucket = "models") {
        std::vector<std::string> args = {"check", "s3://" + bucket + "/" + key};
        for (const auto& a : s3_args(more)) args.push_back(a);
        auto r = gm(args);
        EXPECT_NE(r.exit_code, 0) << r.out;
        auto lines = lines_holding(r.out + r.err, "s3://" + bucket + "/" + key + ": ");
        EXPECT_EQ(lines.size(), 1u) << r.out << r.err;
        if (lines.empty()) return "";
        for (const auto& e : expected) EXPECT_NE(lines[0].find(e), std::string::npos) << lines[0];
        for (const std::string& secret : {kSecret, kTempSecret, kToken, std::string("not-the-secret")})
            EXPECT_EQ((r.out + r.err).find(secret), std::string::npos) << r.out << r.err;
        EXPECT_EQ((r.out + r.err).find("127.0.0.1"), std::string::npos) << r.out << r.err;
        return lines[0];
    }
    gguf_test::ManifestCase c_;
    std::string out_;
    int outputs_ = 0;
};

TEST_F(S3Access, EnvironmentKeysAndASessionTokenAreSignedAndVerified) {
    use_keys();
    auto r = merge();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(out_), c_.merged_sha256);
    use_keys(kTempKeyId, kTempSecret, kToken);
    r = merge();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(out_), c_.merged_sha256);
    EXPECT_TRUE(every_request("verified"));
    // Range is not signed (a caching tier's slices change it): host and x-amz-* are.
    for (const auto& e : server_->access_log()) {
        EXPECT_NE(e.entry.authorization.find("SignedHeaders=host;x-amz-content-sha256;x-amz-date"), std::string::npos)
            << e.entry.authorization;
        EXPECT_EQ(e.entry.authorization.find("range"), std::string::npos) << e.entry.authorization;
    }
}

TEST_F(S3Access, AProfileFromTheSharedFilesIsUsed) {
    write_credentials("[dev]\naws_access_key_id = " + kKeyId + "\naws_secret_access_key = " + kSecret + "\n");
    write_config("[profile dev]\nregion = us-east-1\n");
    auto r = merge({"--profile", "dev"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(out_), c_.merged_sha256);
    set_env("AWS_PROFILE", std::string("dev"));
    r = merge();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(out_), c_.merged_sha256);
    EXPECT_TRUE(every_request("verified"));
    refused({"AWS profile \"nobody\""}, kFirst, {"--profile", "nobody"});
}

TEST_F(S3Access, CredentialProcessGivesTemporaryKeys) {
    write_config("[profile proc]\ncredential_process = " + credential_process({kToken}) + "\n");
    auto r = merge({"--profile", "proc"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(out_), c_.merged_sha256);
    EXPECT_TRUE(every_request("verified"));
}

TEST_F(S3Access, NoSignRequestReadsAPublicBucketUnsigned) {
    std::vector<std::string> args = {"check", "s3://public/pub/"};
    for (const auto& a : s3_args({"--no-sign-request"})) args.push_back(a);
    auto r = gm(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    r = merge({"--no-sign-request"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(out_), c_.merged_sha256);
    EXPECT_TRUE(every_request("anonymous"));
    // Without credentials and without --no-sign-request: said before any request.
    server_->clear_access_log();
    refused({"no AWS credentials", "--no-sign-request"});
    EXPECT_TRUE(server_->access_log().empty());
}

TEST_F(S3Access, EachRefusalIsOneLineNamingTheKey) {
    use_keys(kKeyId, "not-the-secret");
    refused({"SignatureDoesNotMatch", "check the secret access key, the region (--region) and this machine's clock"});
    use_keys("AKIANOBODY0000000000", kSecret);
    refused({"InvalidAccessKeyId"});
    use_keys();
    refused({"NoSuchKey"}, "m/absent-00001-of-00002.gguf");
    refused({"NoSuchBucket"}, kFirst, {}, "nobucket");
    server_->set_faults({{"kvzoo", 403, "AccessDenied", "Access Denied"}});
    refused({"AccessDenied", "bucket policy"});
    server_->set_faults({{"kvzoo", 403, "RequestTimeTooSkewed", "The difference is too large."}});
    refused({"RequestTimeTooSkewed", "set the clock"});
    server_->set_faults({{"kvzoo", 301, "PermanentRedirect", "Use the bucket's endpoint.", {{"x-amz-bucket-region", "eu-west-1"}}}});
    refused({"PermanentRedirect", "--region eu-west-1"});
    server_->set_faults({{"kvzoo", 503, "SlowDown", "Please reduce your request rate.", {{"Retry-After", "1"}}}});
    refused({"SlowDown", "attempts"});
    // The prefix's listing is named too.
    server_->set_faults({{"list-type", 403, "AccessDenied", "Access Denied"}});
    refused({"AccessDenied", "ListObjectsV2"}, "m/");
}

TEST_F(S3Access, SlowDownIsRetriedAfterRetryAfter) {
    use_keys();
    server_->set_faults({{"kvzoo-00001", 503, "SlowDown", "Please reduce your request rate.", {{"Retry-After", "1"}}, 2}});
    const auto start = std::chrono::steady_clock::now();
    auto r = merge({"--net-timeout", "10"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
    EXPECT_EQ(gguf_test::sha256_file(out_), c_.merged_sha256);
    const auto v = verdicts();
    ASSERT_GE(v.size(), 3u);
    EXPECT_EQ(v[0], "verified");  // the fault answers after the signature was checked
}

TEST_F(S3Access, AnExpiredTokenIsRefreshedAndTheRequestSentAgain) {
    // The helper gives the expired token first, then the good one.
    write_config("[profile proc]\ncredential_process = " + credential_process({kExpiredToken, kToken}) + "\n");
    auto r = merge({"--profile", "proc"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(out_), c_.merged_sha256);
    const auto v = verdicts();
    ASSERT_GE(v.size(), 2u);
    EXPECT_EQ(v[0], "ExpiredToken");
    for (size_t i = 1; i < v.size(); ++i) EXPECT_EQ(v[i], "verified") << i;
    // A token that stays expired: refreshed, sent again once, then said.
    use_keys(kTempKeyId, kTempSecret, kExpiredToken);
    refused({"ExpiredToken", "refreshed"});
}

}  // namespace
