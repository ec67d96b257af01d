// What a new user meets first with a remote SOURCE (issue 25): gguf-mount's own options carried
// by fstab and `mount -t fuse.gguf-mount ... -o` (the mount helper), an unknown -o option
// refused before any request, and the User-Agent naming the version. nginx on 127.0.0.1 only.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "mount/mount_fixture.hpp"
#include "remote/nginx_mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using remote_test::NginxOptions;

class MountOptions : public remote_test::NginxMountFixture {
protected:
    MountOptions() : NginxMountFixture(Served::Kvzoo) {}
    void SetUp() override {
        NginxMountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        // What mount(8) runs: /sbin/mount.fuse.gguf-mount, a link to the binary.
        helper_ = root_ + "/mount.fuse.gguf-mount";
        ASSERT_EQ(::symlink(gguf_test::gguf_mount_binary().c_str(), helper_.c_str()), 0);
    }
    void TearDown() override {
        mount_test::clean_up_daemonized_mount(mnt_);
        NginxMountFixture::TearDown();
    }
    NginxOptions nginx_options() const override {
        NginxOptions o = NginxMountFixture::nginx_options();
        // A plain web server refusing a folder (no Hub headers).
        o.extra_server_config = "location /forbidden/ { return 403; }";
        return o;
    }
    std::string url() const { return nginx_->base_url() + "/" + mount_test::kvzoo_shard(1); }
    std::string helper_;
};

/// fstab lines can carry only -o options: `cache_dir=` was rejected by libfuse after the server
/// had been asked (a new user's trial). Every long option is an -o option now, with '_' or '-'.
TEST_F(MountOptions, TheMountHelperTakesTheCommandsOwnOptionsAsDashO) {
    const std::string log_file = root_ + "/mount.log";
    auto r = gguf_test::run({helper_, url(), mnt_, "-o",
                             "rw,nofail,_netdev,cache_dir=" + cache_ + ",net-timeout=5,log_level=debug,log_file=" +
                                 log_file + ",revalidate=0",
                             "-n"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(mount_test::find_mount(mnt_)) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256);
    // cache_dir: the blocks went there (not to $HOME, which mount(8) clears).
    size_t cached = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(cache_)) cached += e.is_regular_file();
    EXPECT_GT(cached, 0u);
    // log_level=debug and log_file: the debug lines are in the file.
    EXPECT_NE(gguf_test::read_file(log_file).find("debug:"), std::string::npos) << gguf_test::read_file(log_file);
}

/// An option neither gguf-mount nor libfuse knows: one line naming it, exit status 2, and not a
/// single request to the server (before: libfuse refused it after the catalog was fetched).
TEST_F(MountOptions, AnUnknownDashOOptionIsRefusedBeforeAnyRequest) {
    nginx_->clear_access_log();
    auto r = gguf_test::run({helper_, url(), mnt_, "-o", "rw,cache_dirx=" + cache_ + ",nofail", "-n"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("-o cache_dirx=" + cache_ + ": unknown mount option"), std::string::npos) << r.err;
    EXPECT_FALSE(mount_test::find_mount(mnt_));
    // nginx logs a request once answered: give a late line time to appear.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_EQ(nginx_->access_log().size(), 0u);
    // A value option given bare is refused the same way, naming it.
    r = gguf_test::run({helper_, url(), mnt_, "-o", "cache_dir", "-n"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("-o cache_dir: needs a value"), std::string::npos) << r.err;
    EXPECT_EQ(nginx_->access_log().size(), 0u);
}

/// The User-Agent says which gguf-mount asked ("gguf-mount/VERSION"), so a server's operator can
/// tell versions apart; it said "gguf-mount" alone.
TEST_F(MountOptions, EveryRequestCarriesTheVersionInItsUserAgent) {
    auto version = gguf_test::run({gguf_test::gguf_mount_binary(), "--version"});
    ASSERT_EQ(version.exit_code, 0);
    const std::string v = version.out.substr(std::string("gguf-mount ").size(), version.out.find('\n') - 11);
    ASSERT_FALSE(v.empty());
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", url(), "--cache-dir", cache_});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    auto log = nginx_->wait_access_log(1);
    ASSERT_FALSE(log.empty());
    for (const auto& e : log) EXPECT_EQ(e.user_agent, "gguf-mount/" + v) << e.request_line;
}

/// A plain web server's 403 is said in HTTP words, never with the Hub's ("private or gated",
/// HF_TOKEN): those are for answers that carry the Hub's X-Error-Code, or for hf:// sources.
TEST_F(MountOptions, APlainServersRefusalIsNotExplainedInHubWords) {
    for (const std::string& url : {nginx_->base_url() + "/forbidden/" + mount_test::kvzoo_shard(1),
                                   nginx_->base_url() + "/forbidden/"}) {
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", url, "--cache-dir", cache_});
        EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
        const std::string all = r.out + r.err;
        EXPECT_NE(all.find("HTTP 403"), std::string::npos) << all;
        for (const char* hub_word : {"gated", "private", "HF_TOKEN", "Hugging Face", "hf auth"}) {
            EXPECT_EQ(all.find(hub_word), std::string::npos) << hub_word << " in: " << all;
        }
    }
}

}  // namespace
