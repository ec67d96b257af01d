// Real mounts against servers that drip, answer another version, rate limit or refuse ranges
// (issue 24: A3, A10, B1, B4). Servers run on 127.0.0.1, started by the test.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "gguf/model/merge_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "mount/mount_fixture.hpp"
#include "remote/hub_emulation.hpp"
#include "remote/servers.hpp"
#include "support/support.hpp"

namespace {

using mount_test::MountFixture;
using remote_test::FaultServer;
using remote_test::HubEmulation;
using remote_test::HubRepoFile;
using remote_test::HubRepoSpec;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kBlock = uint64_t{4} << 20;
// Merged offsets of the dense set (3 shards of about 6.29 MB, two 4 MiB blocks each; a mount
// caches block 0 of every shard): these lie in block 1 of shards 2 and 3.
constexpr uint64_t kShard2Block1 = uint64_t{11} << 20;
constexpr uint64_t kShard3Block1 = uint64_t{17} << 20;

/// An O_DIRECT pread of 4096 bytes at `offset` (so it reaches the daemon, never the page
/// cache): the bytes, or "errno N".
std::string direct_read(const std::string& path, uint64_t offset) {
    mount_test::Fd fd{::open(path.c_str(), O_RDONLY | O_DIRECT)};
    if (fd.fd < 0) return "open errno " + std::to_string(errno);
    mount_test::AlignedBuffer buf(4096);
    ssize_t n = ::pread(fd.fd, buf.get(), 4096, static_cast<off_t>(offset));
    if (n < 0) return "errno " + std::to_string(errno);
    return std::string(buf.get(), static_cast<size_t>(n));
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

class TransportMount : public MountFixture {
protected:
    void SetUp() override {
        MountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        std::string why;
        if (!FaultServer::available(&why)) GTEST_SKIP() << why;
        cache_ = root_ + "/cache";
    }
    void TearDown() override {
        MountFixture::TearDown();
        fault_.reset();
        if (hub_) hub_->stop();
        for (const char* v : {"HF_ENDPOINT", "HF_HOME"}) ::unsetenv(v);
    }
    /// The dense set: `dir`/dense-0000N-of-00003.gguf; want_ gets its merged bytes.
    std::vector<std::string> dense_set(const std::string& dir) {
        auto shards = mount_test::split_dense_model(
            12, [](int) { return int64_t{393216}; }, 4, 11, dir + "/dense");
        EXPECT_EQ(shards.size(), 3u);
        gguf::VirtualFile vf = gguf::open_merged(gguf::SplitSet::open(shards.front()));
        want_.assign(vf.size(), '\0');
        EXPECT_EQ(vf.read(0, want_.size(), want_.data()), static_cast<ssize_t>(want_.size()));
        return shards;
    }
    /// Serves the dense set with the fault server and mounts its first shard URL.
    void mount_dense(int net_timeout) {
        auto shards = dense_set(src_);
        fault_ = std::make_unique<FaultServer>(src_);
        std::string why;
        ASSERT_TRUE(fault_->start(&why)) << why;
        ASSERT_TRUE(mount({"--cache-dir", cache_, "--net-timeout", std::to_string(net_timeout)},
                          fault_->base_url() + "/" + gguf::base_name(shards.front())));
    }
    /// A Hub repo of the dense set whose CDN is the fault server; HF_ENDPOINT points at it.
    void start_hub() {
        std::string why;
        if (!HubEmulation::available(&why)) GTEST_SKIP() << why;
        ::setenv("HF_HOME", (root_ + "/hf-home").c_str(), 1);
        for (const char* v : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"}) ::unsetenv(v);
        HubRepoSpec spec;
        spec.page_size = 50;
        spec.cdn_fault_server = true;
        std::filesystem::create_directories(root_ + "/dense-src");
        for (const auto& s : dense_set(root_ + "/dense-src")) {
            spec.files.push_back(HubRepoFile{"dense/" + gguf::base_name(s), s, true});
        }
        hub_ = std::make_unique<HubEmulation>(spec);
        ASSERT_TRUE(hub_->start(&why)) << why;
        ::setenv("HF_ENDPOINT", hub_->endpoint().c_str(), 1);
    }
    std::string cache_, want_;
    std::unique_ptr<FaultServer> fault_;
    std::unique_ptr<HubEmulation> hub_;
};

// A3: twelve reads wait on a server that drips a byte a second (more than libfuse's 10 workers);
// meanwhile stat, readdir and a read of a cached block answer at once, and each dripping read
// fails with EIO after one --net-timeout window.
TEST_F(TransportMount, ReadsWaitingOnADrippingServerLeaveMetadataAndCachedReadsAnswered) {
    ASSERT_NO_FATAL_FAILURE(mount_dense(6));
    const std::string merged = mnt_ + "/dense.gguf";
    fault_->set_rules(nlohmann::json::array(
        {{{"path", "*"}, {"range_from", kBlock}, {"fault", "drip"}, {"bytes_per_second", 1}}}));
    const auto t0 = Clock::now();
    std::vector<std::future<std::pair<std::string, double>>> readers;
    for (int i = 0; i < 12; ++i) {
        const uint64_t at = (i % 2 ? kShard2Block1 : kShard3Block1) + static_cast<uint64_t>(i) * 8192;
        readers.push_back(std::async(std::launch::async, [merged, at, t0] {
            std::string r = direct_read(merged, at);
            return std::make_pair(r, seconds_since(t0));
        }));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the root's 1 s attribute timeout
    auto answered = std::async(std::launch::async, [&] {
        std::vector<double> took;
        auto t = Clock::now();
        struct stat st {};
        EXPECT_EQ(::stat(mnt_.c_str(), &st), 0);
        took.push_back(seconds_since(t));
        t = Clock::now();
        size_t names = 0;
        if (DIR* d = ::opendir(mnt_.c_str())) {
            while (::readdir(d)) ++names;
            ::closedir(d);
        }
        EXPECT_EQ(names, 3u);  // ".", "..", dense.gguf
        took.push_back(seconds_since(t));
        t = Clock::now();
        EXPECT_TRUE(direct_read(merged, 0) == want_.substr(0, 4096));  // block 0: cached at mount
        took.push_back(seconds_since(t));
        return took;
    });
    if (answered.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
        ADD_FAILURE() << "stat, readdir and a cached read did not answer within 5 s while reads drip";
        ::kill(daemon_.pid(), SIGKILL);  // ends the waiting system calls (ENOTCONN)
        answered.wait();
        for (auto& r : readers) r.wait();
        return;
    }
    for (double s : answered.get()) EXPECT_LT(s, 1.0);
    for (auto& r : readers) {
        auto [bytes, at] = r.get();
        EXPECT_EQ(bytes, "errno " + std::to_string(EIO));
        EXPECT_LT(at, 6 + 6 + 3);  // one window of --net-timeout after the first byte, with room
    }
    EXPECT_GE(mount_test::lines_with(log(), "too slow: less than 32 KiB/s over 6 s").size(), 1u) << log();
    EXPECT_TRUE(daemon_.running());
    fault_->set_rules(nlohmann::json::array());
    EXPECT_TRUE(direct_read(merged, kShard3Block1) == want_.substr(kShard3Block1, 4096));
}

// A10: answers of another version fail that read only; cached blocks stay served and reads
// recover when the server agrees again.
TEST_F(TransportMount, BogusAnswersFailOneReadAndTheFileRecovers) {
    ASSERT_NO_FATAL_FAILURE(mount_dense(3));
    const std::string merged = mnt_ + "/dense.gguf";
    fault_->set_rules(nlohmann::json::array({{{"path", "*"}, {"fault", "etag"}, {"etag", "\"v2\""}, {"times", 1}}}));
    EXPECT_TRUE(direct_read(merged, kShard2Block1) == want_.substr(kShard2Block1, 4096));  // asked again: right
    fault_->set_rules(nlohmann::json::array({{{"path", "*"}, {"fault", "etag"}, {"etag", "\"v2\""}, {"times", 2}}}));
    EXPECT_EQ(direct_read(merged, kShard3Block1), "errno " + std::to_string(EIO));
    EXPECT_TRUE(direct_read(merged, 0) == want_.substr(0, 4096));  // cached
    EXPECT_TRUE(direct_read(merged, kShard3Block1) == want_.substr(kShard3Block1, 4096));
    EXPECT_EQ(mount_test::lines_with(log(), "changed on the server, or its backends disagree").size(), 1u) << log();
}

// B1: a window of 429s carrying only RateLimit (as the Hub's CDN and resolver send them) is
// waited out at planning: the set is shown and reads give its bytes.
TEST_F(TransportMount, AHubRateLimitWindowAtPlanningIsWaitedOut) {
    ASSERT_NO_FATAL_FAILURE(start_hub());
    hub_->fault_cdn().set_rules(
        nlohmann::json::array({{{"path", "*"}, {"fault", "rate_limit"}, {"seconds", 4}, {"t", 3}}}));
    const auto t0 = Clock::now();
    ASSERT_TRUE(mount({"--cache-dir", cache_, "--net-timeout", "3"}, "hf://test-org/test-repo/dense"));
    EXPECT_GE(seconds_since(t0), 4.0);
    ASSERT_TRUE(mount_test::exists(mnt_ + "/dense.gguf")) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/dense.gguf"), gguf_test::sha256_hex(want_));
    EXPECT_EQ(mount_test::lines_with(log(), "rate limited (HTTP 429, bucket \"api\"").size(), 1u) << log();
}

// B4: the Hub's storage refusing a range of a very large file (HTTP 400) says what to do.
TEST_F(TransportMount, AHubStorage400SaysToDownloadWithTheXetClient) {
    ASSERT_NO_FATAL_FAILURE(start_hub());
    ASSERT_TRUE(mount({"--cache-dir", cache_, "--net-timeout", "3"}, "hf://test-org/test-repo/dense"));
    hub_->fault_cdn().set_rules(nlohmann::json::array({{{"path", "*"}, {"fault", "status"}, {"status", 400}}}));
    EXPECT_EQ(direct_read(mnt_ + "/dense.gguf", kShard3Block1), "errno " + std::to_string(EIO));
    EXPECT_GE(mount_test::lines_with(log(), "served only to the Xet protocol: download them with 'hf download'").size(),
              1u)
        << log();
}

}  // namespace
