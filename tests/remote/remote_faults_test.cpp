// Failures of remote sources at mount time (issues 11 and 12): a bad mount point is refused
// before any request is sent, and host names that do not resolve (tested in a private mount
// namespace whose /etc/resolv.conf names 127.0.0.1, where nothing answers, and whose /etc/hosts
// the test writes: no DNS query ever leaves the machine).
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "gguf/split_set.hpp"
#include "mount/mount_fixture.hpp"
#include "remote/hub_emulation.hpp"
#include "remote/servers.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;
using mount_test::MountFixture;
using remote_test::HubEmulation;
using remote_test::HubRepoFile;
using remote_test::HubRepoSpec;
using remote_test::NginxOptions;
using remote_test::NginxServer;

/// Every mount point a remote SOURCE must be refused on before any request: (name, path).
class RemoteMountPoint : public MountFixture {
protected:
    void SetUp() override {
        MountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        std::string why;
        if (!NginxServer::available(&why)) GTEST_SKIP() << why;
        cache_ = root_ + "/cache";
        for (const char* v : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_ENDPOINT"}) ::unsetenv(v);
        ::setenv("HF_HOME", (root_ + "/hf-home").c_str(), 1);
    }
    void TearDown() override {
        MountFixture::TearDown();
        for (const char* v : {"HF_ENDPOINT", "HF_HOME"}) ::unsetenv(v);
    }
    /// Runs `gguf-mount SOURCE MOUNTPOINT` (foreground) and expects exit 1 with one error line
    /// holding `reason`.
    void expect_refused(const std::string& source, const std::string& mountpoint, const std::string& reason) {
        SCOPED_TRACE(source + " on " + mountpoint);
        const auto t0 = std::chrono::steady_clock::now();
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), source, mountpoint, "-f", "--cache-dir", cache_,
                                 "--net-timeout", "3"});
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
        const std::string all = r.out + r.err;
        EXPECT_NE(all.find(reason), std::string::npos) << all;
        EXPECT_EQ(mount_test::lines_with(all, "nothing mounted").size(), 1u) << all;
        std::printf("[ refused  ] %s on %s in %lld ms: %s", source.c_str(), mountpoint.c_str(),
                    static_cast<long long>(ms), all.c_str());
    }
    std::string cache_;
};

TEST_F(RemoteMountPoint, ABadMountPointIsRefusedBeforeAnyRequestIsSent) {
    mount_test::copy_kvzoo(src_);
    // The remote sources: a first-shard URL, a directory URL (nginx) and a Hub repo and file.
    NginxServer nginx(NginxOptions{src_});
    std::string error;
    ASSERT_TRUE(nginx.start(&error)) << error;
    HubRepoSpec spec;
    for (int i = 1; i <= 7; ++i) {
        const std::string name = mount_test::kvzoo_shard(i);
        spec.files.push_back(HubRepoFile{"Q4_K_M/" + name, src_ + "/" + name, true});
    }
    HubEmulation hub(spec);
    ASSERT_TRUE(hub.start(&error)) << error;
    ::setenv("HF_ENDPOINT", hub.endpoint().c_str(), 1);
    const std::vector<std::string> sources = {
        nginx.base_url() + "/" + mount_test::kvzoo_shard(1), nginx.base_url() + "/html/",
        "hf://test-org/test-repo", "hf://test-org/test-repo/Q4_K_M/" + mount_test::kvzoo_shard(1)};

    // Missing, non-empty, and a live mount (a local mount of the same shards on mnt_).
    const std::string full = root_ + "/full";
    ASSERT_EQ(::mkdir(full.c_str(), 0755), 0);
    gguf_test::write_file(full + "/keep.txt", "mine\n");
    ASSERT_TRUE(mount());
    for (const auto& source : sources) {
        expect_refused(source, root_ + "/missing", "No such file or directory");
        expect_refused(source, full, "not empty");
        expect_refused(source, mnt_, "already mounted");
    }
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(gguf_test::read_file(full + "/keep.txt"), "mine\n");
    // Not one request reached any server.
    EXPECT_TRUE(nginx.access_log().empty()) << nginx.access_log().front().request_line;
    EXPECT_TRUE(hub.api().access_log().empty()) << hub.api().access_log().front().request_line;
    EXPECT_TRUE(hub.cdn().access_log().empty()) << hub.cdn().access_log().front().request_line;
    nginx.stop();
    hub.stop();
}

}  // namespace
