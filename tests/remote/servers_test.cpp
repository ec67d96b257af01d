// Proves the test servers of servers.hpp work: nginx serves ranges, indexes, TLS, rate limits
// and logs what the remote tests count; the fault server injects each of its faults.
#include <signal.h>

#include <curl/curl.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "remote/servers.hpp"
#include "support/support.hpp"

namespace {

using remote_test::FaultServer;
using remote_test::HttpRequest;
using remote_test::NginxOptions;
using remote_test::NginxServer;
using nlohmann::json;

/// Deterministic non-repeating bytes (so a shifted range is always wrong).
std::string pattern(size_t n, uint32_t seed) {
    std::string s(n, '\0');
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        s[i] = static_cast<char>(x & 0xff);
    }
    return s;
}

#define SKIP_WITHOUT_NGINX()                                          \
    do {                                                              \
        std::string why_;                                             \
        if (!NginxServer::available(&why_)) GTEST_SKIP() << why_;     \
    } while (0)

#define SKIP_WITHOUT_PYTHON()                                         \
    do {                                                              \
        std::string why_;                                             \
        if (!FaultServer::available(&why_)) GTEST_SKIP() << why_;     \
    } while (0)

class NginxHarness : public ::testing::Test {
protected:
    void SetUp() override {
        content_ = pattern(300000, 7);
        gguf_test::write_file(root_ / "model.gguf", content_);
        std::filesystem::create_directory(root_ / "sub dir");
        gguf_test::write_file(root_ / "sub dir/a.txt", "hello");
    }
    gguf_test::TempDir root_;
    std::string content_;
};

TEST_F(NginxHarness, RangedGetReturns206WithTheRightBytesAndIsLogged) {
    SKIP_WITHOUT_NGINX();
    NginxServer server({root_.path()});
    std::string error;
    ASSERT_TRUE(server.start(&error)) << error;
    auto r = remote_test::http_get(server.base_url() + "/model.gguf", HttpRequest{"1000-1999"});
    ASSERT_EQ(r.curl_code, CURLE_OK);
    EXPECT_EQ(r.status, 206);
    EXPECT_EQ(r.header("content-range"), "bytes 1000-1999/300000");
    EXPECT_EQ(r.body, content_.substr(1000, 1000));
    HttpRequest auth;
    auth.headers = {"Authorization: Bearer hf_secret"};
    auto full = remote_test::http_get(server.base_url() + "/model.gguf", auth);
    EXPECT_EQ(full.status, 200);
    EXPECT_EQ(full.body, content_);

    auto log = server.wait_access_log(2);
    ASSERT_EQ(log.size(), 2u);
    EXPECT_EQ(log[0].port, server.port());
    EXPECT_EQ(log[0].method, "GET");
    EXPECT_EQ(log[0].uri, "/model.gguf");
    EXPECT_EQ(log[0].request_line, "GET /model.gguf HTTP/1.1");
    EXPECT_EQ(log[0].status, 206);
    EXPECT_EQ(log[0].range, "bytes=1000-1999");
    EXPECT_FALSE(log[0].has_authorization());
    EXPECT_EQ(log[0].body_bytes_sent, 1000u);
    EXPECT_GT(log[0].bytes_sent, 1000u);
    EXPECT_EQ(log[1].status, 200);
    EXPECT_EQ(log[1].range, "");
    EXPECT_EQ(log[1].authorization, "Bearer hf_secret");
    EXPECT_EQ(log[1].body_bytes_sent, 300000u);
    HttpRequest head;
    head.head = true;
    EXPECT_EQ(remote_test::http_get(server.base_url() + "/model.gguf", head).status, 200);
    EXPECT_EQ(remote_test::http_get(server.base_url() + "/missing.gguf").status, 404);
    log = server.wait_access_log(4);
    ASSERT_EQ(log.size(), 4u);
    EXPECT_EQ(remote_test::count_data_requests(log), 2u);
    server.clear_access_log();
    EXPECT_TRUE(server.access_log().empty());
}

TEST_F(NginxHarness, NoRangeLocationAnswers200WithTheWholeFile) {
    SKIP_WITHOUT_NGINX();
    NginxServer server({root_.path()});
    std::string error;
    ASSERT_TRUE(server.start(&error)) << error;
    auto r = remote_test::http_get(server.base_url() + "/norange/model.gguf", HttpRequest{"1000-1999"});
    ASSERT_EQ(r.curl_code, CURLE_OK);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.header("content-range"), "");
    EXPECT_EQ(r.body.size(), content_.size());
    EXPECT_EQ(r.body, content_);
}

TEST_F(NginxHarness, AutoindexAnswersJsonAndHtml) {
    SKIP_WITHOUT_NGINX();
    NginxServer server({root_.path()});
    std::string error;
    ASSERT_TRUE(server.start(&error)) << error;
    auto j = remote_test::http_get(server.base_url() + "/json/");
    ASSERT_EQ(j.status, 200);
    EXPECT_EQ(j.header("content-type"), "application/json");
    auto listing = json::parse(j.body);
    ASSERT_TRUE(listing.is_array());
    ASSERT_EQ(listing.size(), 2u);
    EXPECT_EQ(listing[0]["name"], "sub dir");
    EXPECT_EQ(listing[0]["type"], "directory");
    EXPECT_FALSE(listing[0].contains("size"));
    EXPECT_EQ(listing[1]["name"], "model.gguf");
    EXPECT_EQ(listing[1]["type"], "file");
    EXPECT_EQ(listing[1]["size"], 300000);
    auto sub = json::parse(remote_test::http_get(server.base_url() + "/json/sub%20dir/").body);
    ASSERT_EQ(sub.size(), 1u);
    EXPECT_EQ(sub[0]["size"], 5);

    auto h = remote_test::http_get(server.base_url() + "/html/");
    ASSERT_EQ(h.status, 200);
    EXPECT_EQ(h.header("content-type"), "text/html");
    EXPECT_NE(h.body.find("<a href=\"model.gguf\">model.gguf</a>"), std::string::npos) << h.body;
    EXPECT_NE(h.body.find("<a href=\"sub%20dir/\">sub dir/</a>"), std::string::npos) << h.body;
    EXPECT_NE(h.body.find(" 300000\r\n"), std::string::npos) << h.body;
}

TEST_F(NginxHarness, TlsVerifiesOnlyWithTheGeneratedCa) {
    SKIP_WITHOUT_NGINX();
    NginxOptions options{root_.path()};
    options.tls = true;
    NginxServer server(options);
    std::string error;
    ASSERT_TRUE(server.start(&error)) << error;
    ASSERT_FALSE(server.https_base_url().empty());
    ASSERT_TRUE(std::filesystem::exists(server.ca_file()));
    HttpRequest with_ca{"0-9"};
    with_ca.ca_file = server.ca_file();
    auto ok = remote_test::http_get(server.https_base_url() + "/model.gguf", with_ca);
    ASSERT_EQ(ok.curl_code, CURLE_OK);
    EXPECT_EQ(ok.status, 206);
    EXPECT_EQ(ok.body, content_.substr(0, 10));
    auto refused = remote_test::http_get(server.https_base_url() + "/model.gguf", HttpRequest{"0-9"});
    EXPECT_EQ(refused.curl_code, CURLE_PEER_FAILED_VERIFICATION);
    EXPECT_EQ(refused.status, 0);
    // Plain HTTP keeps working next to TLS.
    EXPECT_EQ(remote_test::http_get(server.base_url() + "/model.gguf", HttpRequest{"0-9"}).status, 206);
}

TEST_F(NginxHarness, LimitRateSlowsEachConnection) {
    SKIP_WITHOUT_NGINX();
    NginxOptions options{root_.path()};
    options.limit_rate = 200000;  // bytes/s: the 300000-byte file takes about 1.5 s
    NginxServer server(options);
    std::string error;
    ASSERT_TRUE(server.start(&error)) << error;
    auto r = remote_test::http_get(server.base_url() + "/model.gguf");
    ASSERT_EQ(r.curl_code, CURLE_OK);
    EXPECT_EQ(r.body, content_);
    EXPECT_GE(r.seconds, 1.0);
    EXPECT_LT(r.seconds, 5.0);
}

TEST_F(NginxHarness, StopEndsItsProcessAndFreesThePort) {
    SKIP_WITHOUT_NGINX();
    NginxServer server({root_.path()});
    std::string error;
    ASSERT_TRUE(server.start(&error)) << error;
    const uint16_t port = server.port();
    ASSERT_TRUE(remote_test::wait_port(port, std::chrono::milliseconds(100)));
    server.stop();
    EXPECT_FALSE(remote_test::wait_port(port, std::chrono::milliseconds(200)));
    server.stop();  // idempotent
    // The server comes back on the same port: the same URL works again.
    ASSERT_TRUE(server.start(&error)) << error;
    EXPECT_EQ(server.port(), port);
    auto r = remote_test::http_get(server.base_url() + "/model.gguf", HttpRequest{"0-3"});
    EXPECT_EQ(r.status, 206);
    EXPECT_EQ(r.body, content_.substr(0, 4));
}

class FaultHarness : public ::testing::Test {
protected:
    void SetUp() override {
        SKIP_WITHOUT_PYTHON();
        content_ = pattern(200000, 3);
        gguf_test::write_file(root_ / "m.gguf", content_);
        server_ = std::make_unique<FaultServer>(root_.path());
        std::string error;
        ASSERT_TRUE(server_->start(&error)) << error;
        url_ = server_->base_url() + "/m.gguf";
    }
    gguf_test::TempDir root_;
    std::string content_;
    std::unique_ptr<FaultServer> server_;
    std::string url_;
};

TEST_F(FaultHarness, ServesRangesHeadAndEtag) {
    auto r = remote_test::http_get(url_, HttpRequest{"5-14"});
    ASSERT_EQ(r.curl_code, CURLE_OK) << server_->output();
    EXPECT_EQ(r.status, 206);
    EXPECT_EQ(r.header("content-range"), "bytes 5-14/200000");
    EXPECT_EQ(r.body, content_.substr(5, 10));
    EXPECT_FALSE(r.header("etag").empty());
    auto tail = remote_test::http_get(url_, HttpRequest{"199990-"});
    EXPECT_EQ(tail.body, content_.substr(199990));
    auto past = remote_test::http_get(url_, HttpRequest{"200000-200010"});
    EXPECT_EQ(past.status, 416);
    EXPECT_EQ(past.header("content-range"), "bytes */200000");
    HttpRequest head;
    head.head = true;
    auto h = remote_test::http_get(url_, head);
    EXPECT_EQ(h.status, 200);
    EXPECT_EQ(h.header("content-length"), "200000");
    EXPECT_EQ(remote_test::http_get(server_->base_url() + "/missing").status, 404);
    auto log = server_->wait_access_log(5);
    ASSERT_EQ(log.size(), 5u);
    EXPECT_EQ(log[0].range, "bytes=5-14");
    EXPECT_EQ(log[0].status, 206);
    EXPECT_EQ(log[0].body_bytes_sent, 10u);
    EXPECT_EQ(log[0].port, server_->port());
    EXPECT_EQ(log[3].method, "HEAD");
}

TEST_F(FaultHarness, StallBeforeHeadersAndMidBody) {
    server_->set_rules(json::array({{{"path", "/m.gguf"}, {"fault", "stall"}, {"seconds", 1.0}, {"times", 1}}}));
    auto slow = remote_test::http_get(url_, HttpRequest{"0-99"});
    EXPECT_EQ(slow.curl_code, CURLE_OK);
    EXPECT_GE(slow.seconds, 0.9);
    EXPECT_EQ(slow.body, content_.substr(0, 100));
    auto fast = remote_test::http_get(url_, HttpRequest{"0-99"});  // times: 1 -> used up
    EXPECT_LT(fast.seconds, 0.5);

    server_->set_rules(json::array({{{"fault", "stall"}, {"seconds", 3}, {"after_bytes", 1000}}}));
    HttpRequest short_timeout;
    short_timeout.timeout_ms = 1000;
    auto cut = remote_test::http_get(url_, short_timeout);
    EXPECT_EQ(cut.curl_code, CURLE_OPERATION_TIMEDOUT);
    EXPECT_EQ(cut.status, 200);
    EXPECT_EQ(cut.body, content_.substr(0, 1000));
}

TEST_F(FaultHarness, SkipLetsTheFirstRequestsThrough) {
    server_->set_rules(json::array({{{"path", "/m.gguf"}, {"fault", "status"}, {"status", 502}, {"skip", 2}, {"times", 1}}}));
    EXPECT_EQ(remote_test::http_get(url_, HttpRequest{"0-0"}).status, 206);
    EXPECT_EQ(remote_test::http_get(url_, HttpRequest{"0-0"}).status, 206);
    EXPECT_EQ(remote_test::http_get(url_, HttpRequest{"0-0"}).status, 502);
    EXPECT_EQ(remote_test::http_get(url_, HttpRequest{"0-0"}).status, 206);
    EXPECT_EQ(remote_test::http_get(server_->base_url() + "/other", HttpRequest{"0-0"}).status, 404);
}

TEST_F(FaultHarness, DropClosesTheConnectionMidBody) {
    server_->set_rules(json::array({{{"path", "/m.gguf"}, {"fault", "drop"}, {"after_bytes", 4096}}}));
    auto r = remote_test::http_get(url_, HttpRequest{"0-99999"});
    EXPECT_EQ(r.curl_code, CURLE_PARTIAL_FILE);
    EXPECT_EQ(r.status, 206);
    EXPECT_EQ(r.body, content_.substr(0, 4096));
}

TEST_F(FaultHarness, StatusRetryAfterEtagIgnoreRangeAndRedirect) {
    server_->set_rules(json::array({{{"fault", "status"}, {"status", 503}, {"times", 1}},
                                    {{"fault", "retry_after"}, {"seconds", 7}, {"times", 1}},
                                    {{"fault", "etag"}, {"etag", "\"changed\""}, {"times", 1}},
                                    {{"fault", "ignore_range"}, {"times", 1}},
                                    {{"fault", "redirect"}, {"location", "http://127.0.0.1:9"}, {"times", 1}}}));
    const std::string etag = remote_test::http_get(url_, HttpRequest{"0-0"}).header("etag");  // uses the 503
    EXPECT_TRUE(etag.empty());
    auto r429 = remote_test::http_get(url_, HttpRequest{"0-0"});
    EXPECT_EQ(r429.status, 429);
    EXPECT_EQ(r429.header("retry-after"), "7");
    auto changed = remote_test::http_get(url_, HttpRequest{"0-0"});
    EXPECT_EQ(changed.status, 206);
    EXPECT_EQ(changed.header("etag"), "\"changed\"");
    auto whole = remote_test::http_get(url_, HttpRequest{"0-0"});
    EXPECT_EQ(whole.status, 200);
    EXPECT_EQ(whole.body, content_);
    auto moved = remote_test::http_get(url_ + "?sig=1", HttpRequest{"0-0"});
    EXPECT_EQ(moved.status, 302);
    EXPECT_EQ(moved.header("location"), "http://127.0.0.1:9/m.gguf?sig=1");
    auto normal = remote_test::http_get(url_, HttpRequest{"0-0"});
    EXPECT_EQ(normal.status, 206);
    EXPECT_NE(normal.header("etag"), "\"changed\"");
    EXPECT_FALSE(normal.header("etag").empty());
    auto log = server_->wait_access_log(6);
    ASSERT_EQ(log.size(), 6u);
    EXPECT_EQ(log[0].seq, 1u);
    EXPECT_EQ(log[5].seq, 6u);
    EXPECT_EQ(log[0].status, 503);
    EXPECT_EQ(log[1].status, 429);
    EXPECT_EQ(log[3].status, 200);
    EXPECT_EQ(log[4].status, 302);
}

TEST_F(FaultHarness, StopEndsThePythonProcessAndStartComesBackOnThePort) {
    server_->set_rules(json::array({{{"fault", "status"}, {"status", 500}}}));
    const uint16_t port = server_->port();
    server_->stop();
    EXPECT_FALSE(remote_test::wait_port(port, std::chrono::milliseconds(200)));
    EXPECT_NE(remote_test::http_get(url_).curl_code, CURLE_OK);
    std::string error;
    ASSERT_TRUE(server_->start(&error)) << error;
    EXPECT_EQ(server_->port(), port);
    EXPECT_EQ(remote_test::http_get(url_).status, 500);  // rules survive the restart
    server_->set_rules(json::array());
    EXPECT_EQ(remote_test::http_get(url_, HttpRequest{"0-0"}).status, 206);
}

}  // namespace
