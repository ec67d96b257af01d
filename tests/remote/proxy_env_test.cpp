// gguf-mount's HTTP client honours the proxy environment through libcurl (nothing in
// remote/http.cpp sets CURLOPT_PROXY or CURLOPT_NOPROXY): a node behind a forward proxy or a
// caching tier configured as one reaches the origin through it, and NO_PROXY exempts hosts.
// libcurl reads http_proxy in lower case only (HTTP_PROXY is ignored on purpose: CGI puts a
// request's "Proxy:" header there), https_proxy / HTTPS_PROXY, all_proxy and no_proxy / NO_PROXY.
// The forward proxy for http:// is nginx on 127.0.0.1 that passes every request to the origin and
// logs it; for https:// a CONNECT tunnel (tests/remote/connect_proxy.py, 127.0.0.1 targets only).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

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
        const std::string& dir = origin_dir_;
        fs::create_directories(dir);
        shards_ = mount_test::split_dense_model(8, [](int) { return int64_t{262144}; }, 4, 5, dir + "/proxied");
        ASSERT_EQ(shards_.size(), 2u);
        want_ = remote_test::local_merge_sha256(shards_.front());
        NginxOptions o;
        o.root = dir;
        o.tls = true;  // also https_base_url(), for the CONNECT test
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

    /// Mounts `url` (a first shard) with the current environment and reads the merged model.
    void mount_and_read(const std::string& url, const std::vector<std::string>& extra = {}) {
        fs::create_directories(mnt_);
        std::vector<std::string> argv = {gguf_test::gguf_mount_binary(), url, mnt_, "-f", "--cache-dir", tmp_ / "cache",
                                         "--net-timeout", "10"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        ASSERT_TRUE(daemon_.start(argv, tmp_ / "daemon.log"));
        ASSERT_TRUE(daemon_.wait_mounted(mnt_, std::chrono::seconds(30))) << gguf_test::read_file(tmp_ / "daemon.log");
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/proxied.gguf"), want_) << gguf_test::read_file(tmp_ / "daemon.log");
        EXPECT_EQ(daemon_.stop(mnt_), std::optional<int>(0));
    }
    /// Reads the model from the plain origin; returns the requests the forward proxy saw.
    std::vector<remote_test::AccessEntry> read_from_origin() {
        mount_and_read(origin_->base_url() + "/" + fs::path(shards_.front()).filename().string());
        origin_->wait_access_log(1);
        std::vector<remote_test::AccessEntry> seen;
        for (const auto& e : proxy_->access_log())
            if (e.port == proxy_port_) seen.push_back(e);
        return seen;
    }
    std::string proxy_url() const { return "http://127.0.0.1:" + std::to_string(proxy_port_); }

    gguf_test::TempDir tmp_, proxy_root_;
    std::string origin_dir_ = tmp_ / "origin";
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
    auto seen = read_from_origin();
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
    auto seen = read_from_origin();
    EXPECT_TRUE(seen.empty()) << seen.size() << " requests went through the proxy, first: " << seen.front().request_line;
    EXPECT_GE(remote_test::count_data_requests(origin_->access_log()), 1u);
}

// An https:// origin through a CONNECT proxy named by HTTPS_PROXY (libcurl reads it in either
// case): the tunnel is asked for the origin's host and port, and TLS is still verified against the
// origin's certificate (--ca-cert), not the proxy's.
TEST_F(ProxyEnvironment, HttpsProxyTunnelsAnHttpsOrigin) {
    const std::string python = remote_test::find_program("python3");
    if (python.empty()) GTEST_SKIP() << "python3 not found";
    const std::string script =
        fs::weakly_canonical(fs::path(GGUF_TEST_FIXTURES) / ".." / "remote" / "connect_proxy.py").string();
    remote_test::ChildProcess tunnel;
    std::string error;
    ASSERT_TRUE(tunnel.start({python, script, tmp_ / "tunnel.port", tmp_ / "tunnel.log"}, tmp_ / "tunnel.out", &error))
        << error;
    std::string port;
    for (int k = 0; k < 500 && port.empty(); ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (fs::exists(tmp_ / "tunnel.port")) port = gguf_test::read_file(tmp_ / "tunnel.port");
    }
    ASSERT_FALSE(port.empty()) << gguf_test::read_file(tmp_ / "tunnel.out");
    {
        ScopedEnv https("HTTPS_PROXY", ("http://127.0.0.1:" + port).c_str());
        ScopedEnv lower("https_proxy", nullptr), none("no_proxy", nullptr), none_upper("NO_PROXY", nullptr);
        mount_and_read(origin_->https_base_url() + "/" + fs::path(shards_.front()).filename().string(),
                       {"--ca-cert", origin_->ca_file()});
    }
    const std::string log = gguf_test::read_file(tmp_ / "tunnel.log");
    const std::string want = "{\"target\": \"127.0.0.1:" + std::to_string(origin_->https_port()) + "\", \"status\": 200}";
    EXPECT_NE(log.find(want), std::string::npos) << "the tunnel log: " << log;
    tunnel.stop();
}
