// gguf-mount's HTTP client honours the proxy environment through libcurl (nothing in
// remote/http.cpp sets CURLOPT_PROXY or CURLOPT_NOPROXY): a node behind a forward proxy or a
// caching tier configured as one reaches the origin through it, and NO_PROXY exempts hosts.
// libcurl reads http_proxy in lower case only (HTTP_PROXY is ignored on purpose: CGI puts a
// request's "Proxy:" header there), https_proxy / HTTPS_PROXY, all_proxy and no_proxy / NO_PROXY.
// The forward proxy is nginx on 127.0.0.1 that passes every request to the origin and logs it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "mount/mount_fixture.hpp"
#include "remote/fleet_tier.hpp"
#include "remote/servers.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;
using remote_test::NginxOptions;
using remote_test::NginxServer;

/// Sets (or unsets, with nullptr) one environment variable for the scope, then restores it.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old, had_ = true;
        if (value) ::setenv(name, value, 1); else ::unsetenv(name);
    }
    ~ScopedEnv() {
        if (had_) ::setenv(name_.c_str(), old_.c_str(), 1); else ::unsetenv(name_.c_str());
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::string name_, old_;
    bool had_ = false;
};

class ProxyEnvironment : public ::testing::Test {
protected:
    void SetUp() override {
        std::string why;
        if (!mount_test::fuse_available(&why)) GTEST_SKIP() << why;
        if (!NginxServer::available(&why)) GTEST_SKIP() << why;
        const std::string dir = tmp_ / "origin";
        fs::create_directories(dir);
        shards_ = mount_test::split_dense_model(8, [](int) { return int64_t{262144}; }, 4, 5, dir + "/proxied");
        ASSERT_EQ(shards_.size(), 2u);
        want_ = remote_test::local_merge_sha256(shards_.front());
        NginxOptions o;
        o.root = dir;
        origin_ = std::make_unique<NginxServer>(o);
        std::string error;
        ASSERT_TRUE(origin_->start(&error)) << error;
        proxy_port_ = remote_test::free_port();
        NginxOptions p;
        p.root = proxy_root_.path();
        p.extra_http_config = "server {\n  listen 127.0.0.1:" + std::to_string(proxy_port_) +
                              ";\n  location / { proxy_pass " + origin_->base_url() + "; }\n}\n";
        proxy_ = std::make_unique<NginxServer>(p);
        ASSERT_TRUE(proxy_->start(&error)) << error;
        ASSERT_TRUE(remote_test::wait_port(proxy_port_, std::chrono::seconds(5))) << proxy_->error_log();
    }
    void TearDown() override {
        if (daemon_.running()) daemon_.stop(mnt_);
    }

    /// Mounts the first shard's URL on the origin with the current environment and reads the
    /// merged model; returns the requests the forward proxy saw (as a proxy: absolute-form).
    std::vector<remote_test::AccessEntry> mount_and_read() {
        fs::create_directories(mnt_);
        const std::string url = origin_->base_url() + "/" + fs::path(shards_.front()).filename().string();
        EXPECT_TRUE(daemon_.start({gguf_test::gguf_mount_binary(), url, mnt_, "-f", "--cache-dir", tmp_ / "cache",
                                   "--net-timeout", "10"},
                                  tmp_ / "daemon.log"));
        EXPECT_TRUE(daemon_.wait_mounted(mnt_, std::chrono::seconds(30))) << gguf_test::read_file(tmp_ / "daemon.log");
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/proxied.gguf"), want_) << gguf_test::read_file(tmp_ / "daemon.log");
        EXPECT_EQ(daemon_.stop(mnt_), std::optional<int>(0));
        origin_->wait_access_log(1);
        std::vector<remote_test::AccessEntry> seen;
        for (const auto& e : proxy_->access_log())
            if (e.port == proxy_port_) seen.push_back(e);
        return seen;
    }
    std::string proxy_url() const { return "http://127.0.0.1:" + std::to_string(proxy_port_); }

    gguf_test::TempDir tmp_, proxy_root_;
    std::string mnt_ = tmp_ / "mnt";
    std::vector<std::string> shards_;
    std::string want_;
    std::unique_ptr<NginxServer> origin_, proxy_;
    uint16_t proxy_port_ = 0;
    mount_test::Daemon daemon_;
};

}  // namespace

TEST_F(ProxyEnvironment, HttpProxyCarriesEveryRequestOfANode) {
    ScopedEnv proxy("http_proxy", proxy_url().c_str());
    ScopedEnv none("no_proxy", nullptr), none_upper("NO_PROXY", nullptr);
    auto seen = mount_and_read();
    // Every shard was asked for through the proxy, in the absolute form a client uses with one.
    for (const auto& shard : shards_) {
        const std::string target = origin_->base_url() + "/" + fs::path(shard).filename().string();
        size_t through = 0;
        for (const auto& e : seen) through += e.request_line.find(" " + target + " ") != std::string::npos;
        EXPECT_GE(through, 1u) << target << " did not go through the proxy";
    }
    EXPECT_EQ(remote_test::count_data_requests(seen), remote_test::count_data_requests(origin_->access_log()))
        << "some data requests bypassed the proxy";
}

TEST_F(ProxyEnvironment, NoProxyExemptsTheOriginHost) {
    ScopedEnv proxy("http_proxy", proxy_url().c_str());
    ScopedEnv none("no_proxy", nullptr), exempt("NO_PROXY", "127.0.0.1");
    auto seen = mount_and_read();
    EXPECT_TRUE(seen.empty()) << seen.size() << " requests went through the proxy, first: " << seen.front().request_line;
    EXPECT_GE(remote_test::count_data_requests(origin_->access_log()), 1u);
}
