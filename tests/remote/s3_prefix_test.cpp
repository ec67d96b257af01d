// An s3://BUCKET/PREFIX/ mount as S3 answers it (issue 30.7): a definite answer to the prefix's
// listing fails the mount with one line and exit 1 (only an endpoint that cannot be reached
// mounts empty); listings asked with encoding-type=url (a key with byte 0x01 is one file, not an
// unparseable prefix); a prefetched prefix rebuilt offline with its sub-folders; a
// credential_process whose credentials expire within the refresh margin run about once a
// minute, not once per request; AWS files another user owns refused. s3rver behind the
// SigV4-verifying proxy (S3Server), real FUSE mounts.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "gguf/bytes/file_io.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "gguf/model/merge_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "mount/mount_harness.hpp"
#include "remote/s3_fixture.hpp"

namespace {

using s3_test::S3Fixture;

class S3Prefix : public S3Fixture {
protected:
    /// The kvzoo set (manifest case kvzoo/t7) under PREFIX + "kvzoo/"; kvzoo_ is its case.
    void put_kvzoo(const std::string& prefix) {
        auto c = mount_test::manifest_case("kvzoo/t7");
        ASSERT_TRUE(c);
        kvzoo_ = *c;
        put_case(kvzoo_, prefix + "kvzoo/");
    }
    /// Starts the daemon on `source` with s3_args(more) and expects it to fail: exit 1, no mount,
    /// one "nothing mounted" line that holds every one of `words`, no empty mount announced.
    void expect_refused_mount(const std::string& source, const std::vector<std::string>& words,
                              const std::vector<std::string>& more = {}) {
        SCOPED_TRACE(source + " " + (words.empty() ? "" : words.front()));
        gguf_test::write_file(log_, "");
        ASSERT_TRUE(start(s3_args(more), source));
        EXPECT_EQ(daemon_.wait_exit(std::chrono::seconds(30)), std::optional<int>(1)) << log();
        EXPECT_FALSE(mount_test::find_mount(mnt_));
        const auto lines = mount_test::lines_with(log(), "nothing mounted");
        ASSERT_EQ(lines.size(), 1u) << log();
        for (const auto& w : words) EXPECT_NE(lines[0].find(w), std::string::npos) << w << " not in: " << lines[0];
        EXPECT_EQ(log().find("mounting an empty directory"), std::string::npos) << log();
    }
    gguf_test::ManifestCase kvzoo_;
};

TEST_F(S3Prefix, ADefiniteAnswerToThePrefixFailsTheMountWithOneLine) {
    ASSERT_NO_FATAL_FAILURE(put_kvzoo("zoo/"));
    ASSERT_NO_FATAL_FAILURE(start_server());
    use_keys(s3_test::kKeyId, "not-the-secret");
    expect_refused_mount("s3://models/zoo/", {"s3://models/zoo/", "SignatureDoesNotMatch", "check the secret access key"});
    use_keys("AKIANOBODY0000000000", s3_test::kSecret);
    expect_refused_mount("s3://models/zoo/", {"InvalidAccessKeyId"});
    use_keys();
    expect_refused_mount("s3://nobucket/zoo/", {"s3://nobucket/", "NoSuchBucket"});
    // A wrong region: S3 answers the listing 400 AuthorizationHeaderMalformed naming the region.
    server_->set_faults({{"list-type", 400, "AuthorizationHeaderMalformed",
                          "The authorization header is malformed; the region 'us-east-1' is wrong; expecting 'eu-west-1'",
                          {{"x-amz-bucket-region", "eu-west-1"}}}});
    expect_refused_mount("s3://models/zoo/", {"AuthorizationHeaderMalformed", "eu-west-1"});
    server_->set_faults({});

    // The right keys mount it; an endpoint that cannot be reached mounts empty (it may come up).
    ASSERT_TRUE(mount(s3_args(), "s3://models/zoo/")) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    const std::string down = "http://127.0.0.1:" + std::to_string(remote_test::free_port());
    ASSERT_TRUE(mount({"--cache-dir", cache_, "--endpoint-url", down, "--region", "us-east-1", "--net-timeout", "2"},
                      "s3://models/zoo/"))
        << log();
    EXPECT_TRUE(mount_test::list_dir(mnt_).empty());
    EXPECT_NE(log().find("mounting an empty directory"), std::string::npos) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

// encoding-type=url: s3rver's raw listing of a key with byte 0x01 is not XML 1.0 (the whole prefix
// failed to parse); asked URL-encoded (the proxy answers as S3 does) it is one more file.
TEST_F(S3Prefix, AKeyWithAControlByteIsListedThroughUrlEncoding) {
    ASSERT_NO_FATAL_FAILURE(put_kvzoo("ctl/"));
    const std::string odd = std::string("odd\x01") + "name+a b%41.txt";
    put("ctl/" + odd, "control byte");
    ASSERT_NO_FATAL_FAILURE(start_server(/*list_max_keys=*/2));
    use_keys();
    ASSERT_TRUE(mount(s3_args(), "s3://models/ctl/")) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/" + odd), "control byte") << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    size_t listings = 0;
    for (const auto& e : server_->access_log()) {
        if (e.entry.uri.find("list-type=2") == std::string::npos) continue;
        ++listings;
        EXPECT_NE(e.entry.uri.find("encoding-type=url"), std::string::npos) << e.entry.request_line;
    }
    EXPECT_GE(listings, 3u);
    EXPECT_TRUE(every_request("verified"));
}

// Prefetch of a prefix holding a sub-folder, then --offline with the server stopped: the same
// tree (every folder's listing was one cache record before, so the last folder listed stood in
// for all: the offline mount looked for zoo/kvzoo-00001-of-00007.gguf).
TEST_F(S3Prefix, PrefetchThenOfflineRebuildsTheSubFolders) {
    ASSERT_NO_FATAL_FAILURE(put_kvzoo("zoo/"));
    put("zoo/notes.txt", "notes at the top");
    ASSERT_NO_FATAL_FAILURE(start_server());
    use_keys();
    std::vector<std::string> args = {"prefetch", "-q", "s3://models/zoo/"};
    for (const auto& a : s3_args()) args.push_back(a);
    auto r = gm(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    server_->stop();
    ASSERT_TRUE(mount(s3_args({"--offline"}), "s3://models/zoo/")) << log();
    EXPECT_EQ(mount_test::list_dir(mnt_), (std::vector<std::string>{"kvzoo", "notes.txt"})) << log();
    EXPECT_EQ(mount_test::list_dir(mnt_ + "/kvzoo"), (std::vector<std::string>{"kvzoo.gguf"})) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/notes.txt"), "notes at the top");
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

// Credentials that expire 3 minutes ahead (inside the 5-minute refresh margin): the helper ran
// once per request (issue 30.7: 9 runs for 9 requests); now once for the whole mount and read.
TEST_F(S3Prefix, CredentialsInsideTheRefreshMarginAreNotFetchedPerRequest) {
    ASSERT_NO_FATAL_FAILURE(put_kvzoo("zoo/"));
    ASSERT_NO_FATAL_FAILURE(start_server());
    const std::string helper = aws_ + "/short-lived.sh";
    gguf_test::write_file(helper, "#!/bin/sh\necho run >> '" + aws_ + "/short-lived.runs'\n"
                                  "exp=$(date -u -d '+3 minutes' +%Y-%m-%dT%H:%M:%SZ)\n"
                                  "printf '{\"Version\": 1, \"AccessKeyId\": \"" + s3_test::kTempKeyId +
                                  "\", \"SecretAccessKey\": \"" + s3_test::kTempSecret + "\", \"SessionToken\": \"" +
                                  s3_test::kToken + "\", \"Expiration\": \"%s\"}\\n' \"$exp\"\n");
    ::chmod(helper.c_str(), 0700);
    write_config("[profile short]\ncredential_process = " + helper + "\n");
    ASSERT_TRUE(mount(s3_args({"--profile", "short"}), "s3://models/zoo/")) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    const auto requests = server_->access_log().size();
    const std::string runs = gguf_test::read_file(aws_ + "/short-lived.runs");
    const auto run_count = static_cast<size_t>(std::count(runs.begin(), runs.end(), '\n'));
    RecordProperty("requests", std::to_string(requests));
    RecordProperty("helper_runs", std::to_string(run_count));
    EXPECT_GE(requests, 9u);
    EXPECT_EQ(run_count, 1u) << requests << " requests";
    EXPECT_TRUE(every_request("verified"));
}

// A root process reading AWS files another user owns (sudo -E keeps that user's $HOME): refused
// with one line, as ssh refuses its files; nothing is sent.
TEST_F(S3Prefix, AwsFilesAnotherUserOwnsAreRefusedWithOneLine) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown to uid 65534)";
    ASSERT_NO_FATAL_FAILURE(put_kvzoo("zoo/"));
    ASSERT_NO_FATAL_FAILURE(start_server());
    write_credentials("[default]\naws_access_key_id = " + s3_test::kKeyId + "\naws_secret_access_key = " +
                      s3_test::kSecret + "\n");
    ASSERT_EQ(::chown((aws_ + "/credentials").c_str(), 65534, 65534), 0);
    server_->clear_access_log();
    expect_refused_mount("s3://models/zoo/", {aws_ + "/credentials", "owned by uid 65534", "is not used"});
    EXPECT_TRUE(server_->access_log().empty());
    ASSERT_EQ(::chown((aws_ + "/credentials").c_str(), 0, 0), 0);
    ASSERT_TRUE(mount(s3_args(), "s3://models/zoo/")) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

}  // namespace
