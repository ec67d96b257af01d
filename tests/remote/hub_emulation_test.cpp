// The Hub emulation of hub_emulation.hpp, driven with the test's own libcurl client and
// remote/hub's parsers: revision pinning, paginated tree through Link headers, resolve with a
// 302 to the CDN port, a 401 without the token, and the token only in the API port's log.
#include <gtest/gtest.h>

#include <filesystem>

#include "remote/hub.hpp"
#include "remote/hub_emulation.hpp"
#include "remote/url_parts.hpp"
#include "support/support.hpp"

namespace {

using namespace gguf_mount::remote;
using remote_test::HttpRequest;

class HubEmulationTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::string why;
        if (!remote_test::HubEmulation::available(&why)) GTEST_SKIP() << why;
        shard1_ = std::string(70000, 'a') + "tail-1";
        shard2_ = std::string(30000, 'b') + "tail-2";
        gguf_test::write_file(files_ / "s1", shard1_);
        gguf_test::write_file(files_ / "s2", shard2_);
        gguf_test::write_file(files_ / "readme", "# model card\n");
        spec_.revisions = {"main", "refs/pr/1"};
        spec_.files = {{"Q4 K/m-00001-of-00002.gguf", files_ / "s1", true},
                       {"Q4 K/m-00002-of-00002.gguf", files_ / "s2", true},
                       {"README.md", files_ / "readme", false}};
        spec_.page_size = 2;
        spec_.required_token = "hf_emulated_token";
        hub_ = std::make_unique<remote_test::HubEmulation>(spec_);
        std::string error;
        ASSERT_TRUE(hub_->start(&error)) << error;
    }

    HttpRequest with_token(const std::string& range = "") const {
        HttpRequest r{range};
        r.headers = {"Authorization: Bearer hf_emulated_token"};
        return r;
    }

    gguf_test::TempDir files_;
    std::string shard1_, shard2_;
    remote_test::HubRepoSpec spec_;
    std::unique_ptr<remote_test::HubEmulation> hub_;
};

TEST_F(HubEmulationTest, RevisionTreePagesAndResolveWorkWithTheParsers) {
    const std::string endpoint = hub_endpoint([&](const std::string& n) -> std::optional<std::string> {
        if (n == "HF_ENDPOINT") return hub_->endpoint() + "/";
        return std::nullopt;
    });
    ASSERT_EQ(endpoint, hub_->endpoint());
    auto source = parse_hub_source("hf://test-org/test-repo@refs%2Fpr%2F1");

    // Pin the revision.
    const std::string rev_url = hub_revision_url(endpoint, source, source.revision);
    auto rev = remote_test::http_get(rev_url, with_token());
    ASSERT_EQ(rev.status, 200) << rev_url;
    EXPECT_EQ(rev.header("content-type"), "application/json");
    const std::string commit = parse_hub_revision(rev.body, rev_url);
    EXPECT_EQ(commit, spec_.commit);

    // Walk the paginated tree with the Link header: 3 entries at 2 per page + the folder = 2 pages.
    std::vector<HubTreeEntry> all;
    std::optional<std::string> url = hub_tree_url(endpoint, source, commit, "");
    size_t pages = 0;
    while (url) {
        auto page = remote_test::http_get(*url, with_token());
        ASSERT_EQ(page.status, 200) << *url;
        auto entries = parse_hub_tree(page.body, *url);
        EXPECT_LE(entries.size(), 2u);
        all.insert(all.end(), entries.begin(), entries.end());
        url = parse_link_next(page.header("link"), *url);
        ASSERT_LT(++pages, 10u);
    }
    EXPECT_EQ(pages, hub_->page_count(""));
    EXPECT_EQ(pages, 2u);
    ASSERT_EQ(all.size(), 4u);
    EXPECT_TRUE(all[0].directory);
    EXPECT_EQ(all[0].path, "Q4 K");
    EXPECT_EQ(all[1].path, "Q4 K/m-00001-of-00002.gguf");
    EXPECT_EQ(all[1].size, shard1_.size());
    ASSERT_TRUE(all[1].lfs);
    EXPECT_EQ(all[1].lfs->sha256, gguf_test::sha256_hex(shard1_));
    EXPECT_EQ(all[3].path, "README.md");
    EXPECT_FALSE(all[3].lfs);

    // A sub-folder listing (path encoded with %2F/%20) is one page here.
    const std::string sub_url = hub_tree_url(endpoint, source, commit, "Q4 K");
    auto sub = remote_test::http_get(sub_url, with_token());
    ASSERT_EQ(sub.status, 200) << sub_url;
    EXPECT_EQ(parse_hub_tree(sub.body, sub_url).size(), 2u);
    EXPECT_EQ(parse_link_next(sub.header("link"), sub_url), std::nullopt);

    // LFS file: 302 to the CDN with the Hub's headers; the CDN serves ranges without the token.
    const std::string resolve = hub_resolve_url(endpoint, source, commit, all[2].path);
    auto moved = remote_test::http_get(resolve, with_token("0-9"));
    ASSERT_EQ(moved.status, 302) << resolve;
    const std::string location = moved.header("location");
    EXPECT_EQ(location.rfind(hub_->cdn_base_url() + "/blobs/" + gguf_test::sha256_hex(shard2_) + "?", 0), 0u) << location;
    EXPECT_FALSE(same_origin(endpoint, location));
    EXPECT_EQ(moved.header("x-repo-commit"), spec_.commit);
    EXPECT_EQ(moved.header("x-linked-size"), std::to_string(shard2_.size()));
    EXPECT_EQ(moved.header("x-linked-etag"), "\"" + gguf_test::sha256_hex(shard2_) + "\"");
    auto bytes = remote_test::http_get(location, HttpRequest{"29999-30005"});
    EXPECT_EQ(bytes.status, 206);
    EXPECT_EQ(bytes.body, "b" + std::string("tail-2"));

    // Non-LFS file: served by the API port itself.
    const std::string readme = hub_resolve_url(endpoint, source, "main", "README.md");
    auto card = remote_test::http_get(readme, with_token());
    EXPECT_EQ(card.status, 200);
    EXPECT_EQ(card.body, "# model card\n");

    // The token went to every API request and never to the CDN.
    auto api_log = hub_->api().wait_access_log(6);
    ASSERT_EQ(api_log.size(), 6u);
    for (const auto& e : api_log) EXPECT_EQ(e.authorization, "Bearer hf_emulated_token") << e.request_line;
    auto cdn_log = hub_->cdn().wait_access_log(1);
    ASSERT_EQ(cdn_log.size(), 1u);
    EXPECT_FALSE(cdn_log[0].has_authorization());
    EXPECT_EQ(cdn_log[0].status, 206);
    EXPECT_EQ(cdn_log[0].range, "bytes=29999-30005");
}

TEST_F(HubEmulationTest, WithoutTheTokenTheRepoAnswers401) {
    const auto s = parse_hub_source("hf://test-org/test-repo");
    EXPECT_EQ(remote_test::http_get(hub_revision_url(hub_->endpoint(), s, "main")).status, 401);
    EXPECT_EQ(remote_test::http_get(hub_tree_url(hub_->endpoint(), s, spec_.commit, "")).status, 401);
    EXPECT_EQ(remote_test::http_get(hub_resolve_url(hub_->endpoint(), s, spec_.commit, "README.md")).status, 401);
    HttpRequest wrong;
    wrong.headers = {"Authorization: Bearer hf_wrong"};
    EXPECT_EQ(remote_test::http_get(hub_resolve_url(hub_->endpoint(), s, "main", "Q4 K/m-00001-of-00002.gguf"), wrong)
                  .status,
              401);
    EXPECT_EQ(remote_test::http_get(hub_revision_url(hub_->endpoint(), s, "no-such-branch"), with_token()).status, 404);
}

}  // namespace
