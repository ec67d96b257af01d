// The fleet recipe for plain HTTP(S) sources: one origin, one caching tier in front of it (nginx
// proxy_cache with the slice module, caching big objects in 1 MiB ranges keyed on the path and
// the slice), and 4 gguf-mount daemons with separate caches reading the same model through the
// tier at the same time. The origin must send each byte about once (<= 1.1x the model size),
// every daemon must read the right bytes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <filesystem>
#include <future>
#include <memory>

#include "gguf/bytes/virtual_file.hpp"
#include "gguf/model/merge_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "mount/mount_fixture.hpp"
#include "remote/servers.hpp"
#include "support/support.hpp"

namespace {

using mount_test::Daemon;
using remote_test::NginxOptions;
using remote_test::NginxServer;

constexpr int kNodes = 4;

/// The caching tier's nginx directives: `/fleet/` proxies to `origin_port` and caches 1 MiB
/// slices keyed on path + slice range. proxy_cache_lock makes concurrent misses of one slice wait
/// for the first fetch instead of all going to the origin.
std::string tier_location(uint16_t origin_port) {
    return "location /fleet/ {\n"
           "  slice 1m;\n"
           "  proxy_cache fleet;\n"
           "  proxy_cache_key $uri$slice_range;\n"
           "  proxy_set_header Range $slice_range;\n"
           "  proxy_cache_valid 200 206 1h;\n"
           "  proxy_cache_lock on;\n"
           "  proxy_cache_lock_timeout 60s;\n"
           "  proxy_cache_lock_age 60s;\n"
           "  proxy_http_version 1.1;\n"
           "  proxy_set_header Connection \"\";\n"
           "  proxy_pass http://127.0.0.1:" +
           std::to_string(origin_port) + "/;\n}\n";
}

/// sha256 of the merged bytes of the local set whose first shard is `first`.
std::string local_merge_sha256(const std::string& first) {
    gguf::VirtualFile vf = gguf::open_merged(gguf::SplitSet::open(first));
    std::string out(vf.size(), '\0');
    EXPECT_EQ(vf.read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    return gguf_test::sha256_hex(out);
}

class Fleet : public ::testing::Test {
protected:
    void SetUp() override {
        std::string why;
        if (!mount_test::fuse_available(&why)) GTEST_SKIP() << why;
        if (!NginxServer::available(&why)) GTEST_SKIP() << why;
    }
    void TearDown() override {
        for (int i = 0; i < kNodes; ++i)
            if (daemons_[i].running()) daemons_[i].stop(mount_point(i));
        if (tier_) tier_->stop();
        if (origin_) origin_->stop();
    }
    std::string mount_point(int i) const { return tmp_ / ("mnt" + std::to_string(i)); }
    std::string cache_dir(int i) const { return tmp_ / ("cache" + std::to_string(i)); }

    gguf_test::TempDir tmp_;
    gguf_test::TempDir tier_cache_;
    std::unique_ptr<NginxServer> origin_, tier_;
    std::array<Daemon, kNodes> daemons_;
};

}  // namespace

TEST_F(Fleet, FourNodesBehindOneCachingTierFetchEachByteFromTheOriginOnce) {
    namespace fs = std::filesystem;
    const std::string model_dir = tmp_ / "origin";
    fs::create_directories(model_dir);
    // 24 tensors of 1 MiB in 4 shards of about 6 MiB: every shard spans several 1 MiB slices
    // and several cache blocks.
    auto shards = mount_test::split_dense_model(24, [](int) { return int64_t{262144}; }, 6, 21, model_dir + "/fleet");
    ASSERT_EQ(shards.size(), 4u);
    uint64_t model_bytes = 0;
    for (const auto& s : shards) model_bytes += fs::file_size(s);
    const std::string want = local_merge_sha256(shards.front());

    NginxOptions o;
    o.root = model_dir;
    origin_ = std::make_unique<NginxServer>(o);
    std::string error;
    ASSERT_TRUE(origin_->start(&error)) << error;

    ::chmod(tier_cache_.path().c_str(), 0777);  // nginx workers write the cache
    NginxOptions t;
    t.root = tmp_.path();
    t.extra_http_config = "proxy_cache_path " + tier_cache_.path() +
                          " levels=1:2 keys_zone=fleet:10m max_size=1g inactive=1h use_temp_path=off;\n";
    t.extra_server_config = tier_location(origin_->port());
    tier_ = std::make_unique<NginxServer>(t);
    ASSERT_TRUE(tier_->start(&error)) << error;

    const std::string url = tier_->base_url() + "/fleet/" + fs::path(shards.front()).filename().string();
    for (int i = 0; i < kNodes; ++i) {
        fs::create_directories(mount_point(i));
        ASSERT_TRUE(daemons_[i].start({gguf_test::gguf_mount_binary(), url, mount_point(i), "-f", "--cache-dir",
                                       cache_dir(i), "--net-timeout", "20"},
                                      tmp_ / ("daemon" + std::to_string(i) + ".log")));
    }
    for (int i = 0; i < kNodes; ++i)
        ASSERT_TRUE(daemons_[i].wait_mounted(mount_point(i), std::chrono::seconds(30)))
            << gguf_test::read_file(tmp_ / ("daemon" + std::to_string(i) + ".log"));

    // All nodes read the whole model at the same time.
    std::vector<std::future<std::string>> reads;
    for (int i = 0; i < kNodes; ++i)
        reads.push_back(std::async(std::launch::async, [this, i] { return gguf_test::sha256_file(mount_point(i) + "/fleet.gguf"); }));
    for (int i = 0; i < kNodes; ++i) EXPECT_EQ(reads[i].get(), want) << "node " << i;

    for (int i = 0; i < kNodes; ++i) EXPECT_EQ(daemons_[i].stop(mount_point(i)), std::optional<int>(0)) << "node " << i;

    uint64_t origin_bytes = 0, tier_bytes = 0;
    for (const auto& e : origin_->wait_access_log(1)) origin_bytes += e.body_bytes_sent;
    for (const auto& e : tier_->wait_access_log(1)) tier_bytes += e.body_bytes_sent;
    RecordProperty("model_bytes", std::to_string(model_bytes));
    RecordProperty("origin_bytes", std::to_string(origin_bytes));
    RecordProperty("tier_bytes", std::to_string(tier_bytes));
    std::cout << "fleet: model " << model_bytes << " bytes, origin sent " << origin_bytes << " ("
              << static_cast<double>(origin_bytes) / static_cast<double>(model_bytes) << "x), tier sent " << tier_bytes
              << " (" << static_cast<double>(tier_bytes) / static_cast<double>(model_bytes) << "x)\n";
    EXPECT_LE(origin_bytes * 10, model_bytes * 11) << "the origin sent more than 1.1x the model";
    // the nodes really read through the tier: about 4 copies left it
    EXPECT_GE(tier_bytes * 10, model_bytes * kNodes * 9) << "the nodes did not read the model through the tier";
}
