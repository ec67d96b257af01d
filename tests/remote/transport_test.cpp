// The HTTP transport against servers that drip, encode, redirect where they should not, rate
// limit or answer another version (issue 24: A3, A6, A7, A10, A11, B1, B4): the client alone,
// a RemoteSource, and real mounts. Every server runs on 127.0.0.1, started by the test.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <sstream>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "mount/mount_fixture.hpp"
#include "remote/store/cache.hpp"
#include "remote/hub_emulation.hpp"
#include "remote/http.hpp"
#include "remote/servers.hpp"
#include "remote/source.hpp"
#include "support/support.hpp"

namespace {

using gguf_mount::remote::BlockCache;
using gguf_mount::remote::HttpClient;
using gguf_mount::remote::HttpError;
using gguf_mount::remote::HttpOptions;
using gguf_mount::remote::parse_rate_limit;
using gguf_mount::remote::RemoteContext;
using gguf_mount::remote::RemoteOptions;
using gguf_mount::remote::RemoteSource;
using remote_test::AccessEntry;
using remote_test::FaultServer;
using remote_test::NginxOptions;
using remote_test::NginxServer;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// What spdlog's default logger writes while this object lives (info and up).
class LogCapture {
public:
    LogCapture() : previous_(spdlog::default_logger()) {
        auto l = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_));
        l->set_level(spdlog::level::info);
        spdlog::set_default_logger(l);
    }
    ~LogCapture() { spdlog::set_default_logger(previous_); }
    std::string text() const { return out_.str(); }

private:
    std::ostringstream out_;
    std::shared_ptr<spdlog::logger> previous_;
};

std::string random_bytes(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(gen() & 0xff);
    return s;
}

/// The message of the HttpError that `fn` throws ("" when it throws none).
template <typename Fn>
std::string http_error_of(Fn&& fn) {
    try {
        fn();
    } catch (const HttpError& e) {
        return e.what();
    }
    return "";
}

size_t count_method(const std::vector<AccessEntry>& log, const std::string& method) {
    size_t n = 0;
    for (const auto& e : log) n += e.method == method;
    return n;
}

class Transport : public ::testing::Test {
protected:
    void SetUp() override {
        std::string why;
        if (!FaultServer::available(&why)) GTEST_SKIP() << why;
        content_ = random_bytes(3 * BlockCache::kBlockSize + 1000, 7);
        gguf_test::write_file(root_ / "m.bin", content_);
        server_ = std::make_unique<FaultServer>(root_.path());
        ASSERT_TRUE(server_->start(&why)) << why;
        url_ = server_->base_url() + "/m.bin";
    }
    static HttpOptions quick(int net_timeout = 3) {
        HttpOptions o;
        o.net_timeout = std::chrono::seconds(net_timeout);
        o.backoff = std::chrono::milliseconds(50);
        return o;
    }
    std::shared_ptr<RemoteContext> context(int net_timeout = 3) {
        RemoteOptions o;
        o.http = quick(net_timeout);
        o.cache_dir = cache_.path();
        o.readahead_blocks = 0;  // only the reads a test makes reach the server
        return std::make_shared<RemoteContext>(o);
    }
    gguf_test::TempDir root_, cache_;
    std::string content_, url_;
    std::unique_ptr<FaultServer> server_;
};

// A3: a server that sends one byte a second is cut after one --net-timeout window.
TEST_F(Transport, ADripIsCutByTheRateFloorWithinOneWindow) {
    HttpClient http(quick(2));
    server_->set_rules(nlohmann::json::array({{{"fault", "drip"}, {"bytes_per_second", 1}}}));
    std::string buf(65536, '\0');
    size_t got = 0;
    const auto t0 = Clock::now();
    const std::string e = http_error_of([&] { http.get_range(url_, 0, buf.size(), buf.data(), &got); });
    const double s = seconds_since(t0);
    EXPECT_NE(e.find(url_ + ": too slow: less than 32 KiB/s over 2 s"), std::string::npos) << e;
    EXPECT_GE(s, 1.9);
    EXPECT_LT(s, 5.0);  // one window of 2 s (no retry starts after --net-timeout)
    EXPECT_EQ(gguf_mount::remote::request_deadline(quick(30), BlockCache::kBlockSize), std::chrono::seconds(188));
}

// A6: a 206 in gzip is refused before its first byte is taken; no Accept-Encoding is sent.
TEST_F(Transport, AnEncodedRangeIsRefusedAndNoEncodingIsAskedFor) {
    HttpClient http(quick());
    server_->set_rules(nlohmann::json::array({{{"fault", "gzip"}}}));
    std::string buf(1000, 'x');
    size_t got = 0;
    const std::string e = http_error_of([&] { http.get_range(url_, 10, buf.size(), buf.data(), &got); });
    EXPECT_EQ(e, url_ + ": answer with Content-Encoding 'gzip' (gguf-mount asks for none and takes the file's own "
                        "bytes only)");
    EXPECT_EQ(buf, std::string(1000, 'x'));
    server_->set_rules(nlohmann::json::array());
    http.get_range(url_, 10, buf.size(), buf.data(), &got);
    EXPECT_TRUE(buf == content_.substr(10, 1000));
    auto log = server_->wait_access_log(2);
    ASSERT_EQ(log.size(), 2u);  // the refusal is not retried
    for (const auto& l : log) EXPECT_EQ(l.accept_encoding, "") << l.uri;
}

// A11: failures that asking again cannot mend are not retried, nor said to be.
TEST_F(Transport, ARedirectToFileOrARedirectLoopIsOneRequestChainAndNoAttemptCount) {
    HttpClient http(quick());
    std::string buf(100, '\0');
    size_t got = 0;
    server_->set_rules(nlohmann::json::array({{{"fault", "redirect"}, {"location", "file:///etc"}}}));
    std::string e = http_error_of([&] { http.get_range(url_, 0, buf.size(), buf.data(), &got); });
    EXPECT_EQ(e, url_ + ": redirected to file:///etc/m.bin: only http and https redirects are followed");
    EXPECT_EQ(server_->wait_access_log(1).size(), 1u);

    server_->clear_access_log();
    server_->set_rules(nlohmann::json::array({{{"fault", "redirect"}, {"location", server_->base_url()}}}));
    e = http_error_of([&] { http.get_range(url_, 0, buf.size(), buf.data(), &got); });
    EXPECT_EQ(e, url_ + ": more than 10 redirects (a redirect loop?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(server_->access_log().size(), 11u);
}

TEST(RateLimitHeaders, TheHubsRateLimitAndRetryAfterGiveTheWait) {
    auto h = parse_rate_limit("\"api\";r=0;t=3", "", 0);
    EXPECT_EQ(h.wait_seconds, 3);
    EXPECT_EQ(h.bucket, "api");
    EXPECT_EQ(parse_rate_limit("limit=500, remaining=0, reset=55", "", 0).wait_seconds, 55);
    EXPECT_EQ(parse_rate_limit("", "7", 0).wait_seconds, 7);
    EXPECT_EQ(parse_rate_limit("\"api\";r=0;t=3", "20", 0).wait_seconds, 20);  // the later wins
    EXPECT_EQ(parse_rate_limit("", "Sun, 06 Nov 1994 08:49:37 GMT", 784111777 - 12).wait_seconds, 12);
    EXPECT_EQ(parse_rate_limit("\"api\";r=0;t=soon", "later", 0).wait_seconds, -1);
    EXPECT_EQ(parse_rate_limit(std::string(5000, ';') + "t=9", "", 0).wait_seconds, -1);  // past 1 KiB
}

// B1: a window of 429s that carry only RateLimit (as the Hub sends) is waited out.
TEST_F(Transport, AWindowOf429sWithOnlyRateLimitIsWaitedOutAndLoggedOnce) {
    LogCapture capture;
    HttpClient http(quick());
    server_->set_rules(nlohmann::json::array({{{"fault", "rate_limit"}, {"seconds", 4}, {"t", 3}}}));
    std::string buf(1000, '\0');
    size_t got = 0;
    const auto t0 = Clock::now();
    http.get_range(url_, 5, buf.size(), buf.data(), &got);
    EXPECT_GE(seconds_since(t0), 4.0);
    EXPECT_TRUE(buf == content_.substr(5, 1000));
    const std::string log = capture.text();
    EXPECT_EQ(mount_test::lines_with(log, "rate limited (HTTP 429, bucket \"api\", policy \"fiveminutes\";q=500;w=300): "
                                          "waiting 3 s before asking again (at most 300 s in all per request)")
                  .size(),
              1u)
        << log;

    // Past the bound: one line saying so.
    HttpOptions o = quick();
    o.rate_limit_patience = std::chrono::seconds(2);
    HttpClient impatient(o);
    server_->set_rules(nlohmann::json::array({{{"fault", "rate_limit"}, {"seconds", 60}, {"t", 3}}}));
    const std::string e = http_error_of([&] { impatient.get_range(url_, 5, buf.size(), buf.data(), &got); });
    EXPECT_EQ(e, url_ + ": rate limited by the server (HTTP 429) (bucket \"api\") (policy \"fiveminutes\";q=500;w=300): "
                        "still limited after waiting 0 s (the wait is bounded at 2 s per request)");
}

// A7: an https source does not follow a redirect to plain http; https to https works.
TEST_F(Transport, AnHttpsSourceRefusesARedirectToPlainHttp) {
    std::string why;
    if (!NginxServer::available(&why)) GTEST_SKIP() << why;
    NginxOptions o{root_.path()};
    o.tls = true;
    o.extra_server_config = "  location = /to-http.bin { return 302 " + url_ +
                            "; }\n  location = /to-https.bin { return 302 https://127.0.0.1:$server_port/m.bin; }\n";
    NginxServer nginx(o);
    ASSERT_TRUE(nginx.start(&why)) << why;
    HttpOptions ho = quick();
    ho.ca_cert = nginx.ca_file();
    HttpClient http(ho);
    std::string buf(100, '\0');
    size_t got = 0;
    const std::string e = http_error_of(
        [&] { http.get_range(nginx.https_base_url() + "/to-http.bin", 0, buf.size(), buf.data(), &got); });
    EXPECT_EQ(e, nginx.https_base_url() + "/to-http.bin: redirected to " + url_ +
                     ", which is plain http: an https source follows https redirects only");
    EXPECT_TRUE(server_->access_log().empty());
    http.get_range(nginx.https_base_url() + "/to-https.bin", 0, buf.size(), buf.data(), &got);
    EXPECT_TRUE(buf == content_.substr(0, 100));
}

// A10: one answer of another version fails that read at most; cached blocks stay served and
// the source recovers when the server agrees again.
TEST_F(Transport, OneBogusAnswerDoesNotFailTheSourceForGood) {
    auto ctx = context();
    auto src = RemoteSource::open(ctx, url_);  // block 0 cached
    const uint64_t b = BlockCache::kBlockSize;
    std::string buf(4096, '\0');
    // One bogus 206: asked again, served right.
    server_->set_rules(nlohmann::json::array({{{"fault", "etag"}, {"etag", "\"other\""}, {"times", 1}}}));
    ASSERT_EQ(src->pread(buf.data(), buf.size(), b), 4096);
    EXPECT_TRUE(buf == content_.substr(b, 4096));
    // Two in a row: that read fails; the cached block is served; later reads work.
    server_->set_rules(nlohmann::json::array({{{"fault", "etag"}, {"etag", "\"other\""}, {"times", 2}}}));
    EXPECT_EQ(src->pread(buf.data(), buf.size(), 2 * b), -EIO);
    EXPECT_FALSE(src->changed());
    ASSERT_EQ(src->pread(buf.data(), buf.size(), 0), 4096);
    EXPECT_TRUE(buf == content_.substr(0, 4096));
    ASSERT_EQ(src->pread(buf.data(), buf.size(), 2 * b), 4096);
    EXPECT_TRUE(buf == content_.substr(2 * b, 4096));
}

// A11: a server whose HEAD and GET ETags differ costs one ranged GET once, not per revalidation.
TEST_F(Transport, DifferentHeadAndGetEtagsAreLoggedOnceAndCostOneGet) {
    LogCapture capture;
    auto ctx = context();
    server_->set_rules(
        nlohmann::json::array({{{"method", "HEAD"}, {"fault", "etag"}, {"etag", "\"head-etag\""}}}));
    std::vector<std::pair<size_t, size_t>> requests;  // {HEAD, GET} per open
    for (int i = 0; i < 4; ++i) {
        server_->clear_access_log();
        auto src = RemoteSource::open(ctx, url_);
        ASSERT_EQ(src->size(), content_.size());
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        auto log = server_->access_log();
        requests.emplace_back(count_method(log, "HEAD"), count_method(log, "GET"));
    }
    using P = std::pair<size_t, size_t>;
    EXPECT_EQ(requests, (std::vector<P>{P{0, 1}, P{1, 1}, P{1, 0}, P{1, 0}}));
    EXPECT_EQ(mount_test::lines_with(capture.text(), "HEAD and GET answer different ETags").size(), 1u)
        << capture.text();
}

}  // namespace
