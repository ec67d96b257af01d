// The Client seam (remote/client.hpp): the request-signing hook of the libcurl client. Every
// request it sends to a covered URL passes the signer (ranged GET, HEAD, page), a redirect
// follow-up on the same origin is signed for its own URL, one to another origin is not signed,
// a signer may replace the URL, and a header a signer builds wrong never reaches the wire.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "remote/http.hpp"
#include "remote/servers.hpp"
#include "remote/url_parts.hpp"
#include "support/support.hpp"

namespace {

using gguf_mount::remote::HttpClient;
using gguf_mount::remote::HttpError;
using gguf_mount::remote::HttpOptions;
using gguf_mount::remote::Request;
using gguf_mount::remote::RequestSigner;
using remote_test::AccessEntry;
using remote_test::FaultServer;

/// Signs the requests to one origin with "Authorization: Test METHOD URL" (the URL it signed),
/// records what it signed, and optionally adds a query parameter or a bad header.
class RecordingSigner final : public RequestSigner {
public:
    explicit RecordingSigner(std::string origin) : origin_(std::move(origin)) {}
    bool covers(const std::string& url) const noexcept override {
        return gguf_mount::remote::same_origin(url, origin_);
    }
    void sign(Request& r) const override {
        if (add_query) r.url += "?signed=1";
        r.headers.emplace_back("Authorization", "Test " + r.method + " " + r.url);
        if (bad_header) r.headers.emplace_back("X-Bad", "a\r\nInjected: yes");
        std::lock_guard<std::mutex> lock(mutex_);
        signed_.push_back(r.method + " " + r.url);
    }
    std::vector<std::string> signed_requests() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return signed_;
    }
    bool add_query = false;
    bool bad_header = false;

private:
    std::string origin_;
    mutable std::mutex mutex_;
    mutable std::vector<std::string> signed_;
};

class ClientSigning : public ::testing::Test {
protected:
    void SetUp() override {
        std::string why;
        if (!FaultServer::available(&why)) GTEST_SKIP() << why;
        std::mt19937 gen(11);
        content_.resize(5000);
        for (char& c : content_) c = static_cast<char>(gen() & 0xff);
        gguf_test::write_file(root_ / "m.bin", content_);
        std::filesystem::create_directory(root_ / "moved");
        gguf_test::write_file(root_ / "moved/m.bin", content_);
        server_ = std::make_unique<FaultServer>(root_.path());
        ASSERT_TRUE(server_->start(&why)) << why;
        url_ = server_->base_url() + "/m.bin";
        signer_ = std::make_shared<RecordingSigner>(server_->base_url());
    }
    HttpOptions options() const {
        HttpOptions o;
        o.net_timeout = std::chrono::seconds(3);
        o.backoff = std::chrono::milliseconds(50);
        o.signer = signer_;
        return o;
    }
    gguf_test::TempDir root_;
    std::string content_, url_;
    std::unique_ptr<FaultServer> server_;
    std::shared_ptr<RecordingSigner> signer_;
};

TEST_F(ClientSigning, EveryKindOfRequestIsSignedForItsOwnUrl) {
    HttpClient http(options());
    std::string buf(100, '\0');
    size_t got = 0;
    http.get_range(url_, 10, buf.size(), buf.data(), &got);
    EXPECT_EQ(buf, content_.substr(10, 100));
    EXPECT_EQ(http.head(url_).size, content_.size());
    std::string type, final_url;
    EXPECT_EQ(http.get_page(url_, &type, &final_url), content_);
    const auto log = server_->wait_access_log(3);
    ASSERT_EQ(log.size(), 3u);
    EXPECT_EQ(log[0].method, "GET");
    EXPECT_EQ(log[0].range, "bytes=10-109");
    EXPECT_EQ(log[0].authorization, "Test GET " + url_);
    EXPECT_EQ(log[1].method, "HEAD");
    EXPECT_EQ(log[1].authorization, "Test HEAD " + url_);
    EXPECT_EQ(log[2].range, "");
    EXPECT_EQ(log[2].authorization, "Test GET " + url_);
    EXPECT_EQ(signer_->signed_requests(),
              (std::vector<std::string>{"GET " + url_, "HEAD " + url_, "GET " + url_}));
}

TEST_F(ClientSigning, ASameOriginRedirectIsSignedForTheNewUrlAndAnotherOriginIsNot) {
    HttpClient http(options());
    std::string buf(100, '\0');
    size_t got = 0;
    std::string final_url;
    // Same origin: /m.bin -> /moved/m.bin, signed again for the URL it goes to.
    server_->set_rules(nlohmann::json::array(
        {{{"fault", "redirect"}, {"path", "/m.bin"}, {"location", server_->base_url() + "/moved"}}}));
    http.get_range(url_, 0, buf.size(), buf.data(), &got, &final_url);
    EXPECT_EQ(buf, content_.substr(0, 100));
    const std::string moved = server_->base_url() + "/moved/m.bin";
    EXPECT_EQ(final_url, moved);
    auto log = server_->wait_access_log(2);
    ASSERT_EQ(log.size(), 2u);
    EXPECT_EQ(log[0].status, 302);
    EXPECT_EQ(log[0].authorization, "Test GET " + url_);
    EXPECT_EQ(log[1].uri, "/moved/m.bin");
    EXPECT_EQ(log[1].range, "bytes=0-99");
    EXPECT_EQ(log[1].authorization, "Test GET " + moved);

    // Another origin (a CDN): the follow-up carries nothing of the signer's.
    FaultServer cdn(root_.path());
    std::string why;
    ASSERT_TRUE(cdn.start(&why)) << why;
    server_->clear_access_log();
    server_->set_rules(nlohmann::json::array({{{"fault", "redirect"}, {"path", "/m.bin"}, {"location", cdn.base_url()}}}));
    buf.assign(100, '\0');
    http.get_range(url_, 100, buf.size(), buf.data(), &got, &final_url);
    EXPECT_EQ(buf, content_.substr(100, 100));
    EXPECT_EQ(final_url, cdn.base_url() + "/m.bin");
    log = cdn.wait_access_log(1);
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(log[0].range, "bytes=100-199");
    EXPECT_FALSE(log[0].has_authorization()) << log[0].authorization;
    for (const std::string& s : signer_->signed_requests()) EXPECT_EQ(s.find(cdn.base_url()), std::string::npos) << s;
}

TEST_F(ClientSigning, ASignerMayReplaceTheUrlAndABadHeaderNeverReachesTheServer) {
    signer_->add_query = true;
    HttpClient http(options());
    std::string buf(10, '\0');
    size_t got = 0;
    std::string final_url;
    http.get_range(url_, 0, buf.size(), buf.data(), &got, &final_url);
    EXPECT_EQ(buf, content_.substr(0, 10));
    EXPECT_EQ(final_url, url_) << "the URL that answered is named before signing";
    auto log = server_->wait_access_log(1);
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(log[0].uri, "/m.bin?signed=1");

    signer_->bad_header = true;
    server_->clear_access_log();
    try {
        http.get_range(url_, 0, buf.size(), buf.data(), &got);
        ADD_FAILURE() << "a header with CR LF was sent";
    } catch (const HttpError& e) {
        EXPECT_EQ(std::string(e.what()), url_ + ": refused to send header 'X-Bad': an empty name, or CR, LF or NUL in it");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_TRUE(server_->access_log().empty());
}

}  // namespace
