// The real Hub's answers beyond the well-behaved ones, against the Hub emulation on 127.0.0.1:
// X-Error-Code messages (GatedRepo, RepoNotFound, EntryNotFound), relative redirects
// (resolve-cache, a renamed repo), a mirror that ignores Range, and hostile tree pages (Link
// headers of several MB, next links to another host). HF_ENDPOINT points at the emulation and
// HF_HOME at a scratch directory: no real token, no real Hub.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "mount/mount_fixture.hpp"
#include "remote/hub.hpp"
#include "remote/nginx_mount_fixture.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;
using remote_test::HubEmulation;
using remote_test::HubRepoFile;
using remote_test::HubRepoSpec;

class HubAnswers : public remote_test::NginxMountFixture {
protected:
    void SetUp() override {
        NginxMountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        isolate_hub();
    }
    /// A repo of README.md (not LFS) and tiny.gguf (LFS), with `spec`'s behaviour.
    void start_hub(HubRepoSpec spec) {
        spec.files.push_back(HubRepoFile{"README.md", gguf_test::fixture("tiny-llama/README.md"), false});
        spec.files.push_back(HubRepoFile{"tiny.gguf", gguf_test::fixture("tiny-llama/tiny-llama.gguf"), true});
        hub_ = std::make_unique<HubEmulation>(spec);
        std::string error;
        ASSERT_TRUE(hub_->start(&error)) << error;
        ::setenv("HF_ENDPOINT", hub_->endpoint().c_str(), 1);
    }
    gguf_test::RunResult check(const std::string& repo = "test-repo") {
        return gguf_test::run({gguf_test::gguf_mount_binary(), "check", "hf://test-org/" + repo, "--json", "--cache-dir",
                               cache_, "--net-timeout", "3"});
    }
    /// Starts the hub with `spec`, runs check, expects exit 1 (a problem); returns stdout and
    /// stderr together, with the JSON document in *out.
    std::string failing_check(const HubRepoSpec& spec, std::string* out) {
        start_hub(spec);
        if (HasFatalFailure()) return "";
        auto r = check();
        EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
        *out = r.out;
        return r.out + r.err;
    }
    static std::set<std::string> entry_paths(const std::string& json_text) {
        std::set<std::string> out;
        auto j = nlohmann::json::parse(json_text);
        for (const auto& e : j.at("entries")) out.insert(e.at("path").get<std::string>());
        return out;
    }
};

TEST_F(HubAnswers, AGatedRepoIsListedButItsFilesAreProblemsNamingTheRepoPageAndHowToGiveAToken) {
    HubRepoSpec spec;
    spec.resolve_error_code = "GatedRepo";
    std::string out;
    const std::string all = failing_check(spec, &out);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_TRUE(entry_paths(out).empty()) << out;  // neither file is served
    EXPECT_NE(all.find("repository test-org/test-repo is gated (HTTP 403, GatedRepo): request access on " +
                       hub_->endpoint() + "/test-org/test-repo, then give a token of the account that was granted "
                                          "it (HF_TOKEN=..., HF_TOKEN_PATH=FILE or `hf auth login`)"),
              std::string::npos)
        << all;
}

TEST_F(HubAnswers, AMissingRepoWithoutATokenIsNotFoundOrPrivateNeverGated) {
    HubRepoSpec spec;
    spec.api_error_code = "RepoNotFound";
    std::string out;
    const std::string all = failing_check(spec, &out);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_NE(all.find("repository test-org/test-repo not found (or private: give a token, HF_TOKEN=..., "
                       "HF_TOKEN_PATH=FILE or `hf auth login`) (HTTP 401, RepoNotFound)"),
              std::string::npos)
        << all;
    EXPECT_EQ(all.find("gated"), std::string::npos) << all;
}

TEST_F(HubAnswers, AListedFileWhoseResolveAnswers404IsAProblemNamingItsPathNotServed) {
    HubRepoSpec spec;
    spec.missing_files = {"README.md"};
    ASSERT_NO_FATAL_FAILURE(start_hub(spec));
    auto r = check();
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_EQ(entry_paths(r.out), (std::set<std::string>{"tiny.gguf"})) << r.out;
    auto problems = nlohmann::json::parse(r.out).at("problems");
    ASSERT_EQ(problems.size(), 1u) << r.out;
    EXPECT_EQ(problems[0].at("path"), "README.md") << r.out;
    // The read's warning says what the Hub answered.
    EXPECT_NE(r.err.find("\"README.md\" not found in repository test-org/test-repo at revision " +
                         hub_->spec().commit + " (HTTP 404, EntryNotFound)"),
              std::string::npos)
        << r.out << r.err;
}

TEST_F(HubAnswers, RelativeRedirectsOfSmallFilesAndOfARenamedRepoKeepWorking) {
    HubRepoSpec spec;
    spec.relative_redirects = true;
    spec.renamed_from = "old-name";
    ASSERT_NO_FATAL_FAILURE(start_hub(spec));
    ASSERT_TRUE(mount({"--cache-dir", cache_, "--net-timeout", "3"}, "hf://test-org/old-name"));
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/README.md"), gguf_test::read_file(gguf_test::fixture("tiny-llama/README.md")))
        << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/tiny.gguf"), gguf_test::sha256_file(gguf_test::fixture("tiny-llama/tiny-llama.gguf")))
        << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    // Both kinds of 307 were answered and followed (relative Locations).
    size_t renamed = 0, cached = 0, cache_reads = 0;
    for (const auto& e : hub_->api().access_log()) {
        renamed += e.status == 307 && e.uri.find("/old-name/") != std::string::npos;
        cached += e.status == 307 && e.uri.find("/test-repo/resolve/") != std::string::npos;
        cache_reads += e.uri.rfind("/api/resolve-cache/", 0) == 0 && (e.status == 206 || e.status == 200);
    }
    EXPECT_GE(renamed, 2u);  // the revision, the tree, the resolves
    EXPECT_GE(cached, 1u);
    EXPECT_GE(cache_reads, 1u);
}

TEST_F(HubAnswers, AMirrorThatIgnoresRangeIsRefusedNamingTheMirror) {
    HubRepoSpec spec;
    spec.ignore_range = true;
    std::string out;
    const std::string all = failing_check(spec, &out);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_TRUE(entry_paths(out).empty()) << out;
    // README.md is served by the endpoint itself, tiny.gguf by its CDN.
    EXPECT_NE(all.find(hub_->endpoint() + "/test-org/test-repo/resolve/" + hub_->spec().commit +
                       "/README.md: the server ignored the Range request"),
              std::string::npos)
        << all;
}

TEST_F(HubAnswers, LinkHeadersOverTheLimitAreOneLineNotACrash) {
    // libcurl itself refuses answers with more than 300 KiB of headers ("Too large response
    // headers"): 4 Link headers of 64,000 bytes (256 KB) reach the Link scanner, over its 64 KiB.
    HubRepoSpec spec;
    spec.page_size = 1;
    spec.link_padding_headers = 4;
    std::string out;
    const std::string all = failing_check(spec, &out);  // the unbounded scanner took it: exit 0
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_NE(all.find("Link header of "), std::string::npos) << all;
    EXPECT_NE(all.find("bytes is longer than the limit of 65536 bytes"), std::string::npos) << all;
    EXPECT_TRUE(entry_paths(out).empty()) << out;
}

TEST_F(HubAnswers, ANextPageOnAnotherHostIsRefusedNamingItWithoutARequestThere) {
    gguf_test::TempDir other_root;
    remote_test::NginxServer other(remote_test::NginxOptions{other_root.path()});
    std::string error;
    ASSERT_TRUE(other.start(&error)) << error;
    HubRepoSpec spec;
    spec.page_size = 1;
    spec.next_link_base = other.base_url();
    std::string out;
    const std::string all = failing_check(spec, &out);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_NE(all.find("the tree's next page is on another host (http://127.0.0.1:" + std::to_string(other.port()) +
                       ", not the endpoint " + hub_->endpoint() + "); refused, nothing requested there"),
              std::string::npos)
        << all;
    EXPECT_EQ(all.find("not found"), std::string::npos) << all;  // never blamed on the repo path
    EXPECT_TRUE(other.access_log().empty());
    other.stop();
}

TEST(HubErrorText, RevisionAndEntryNotFoundNameWhatIsMissingAndOtherCodesQuoteTheHub) {
    using gguf_mount::remote::describe_hub_error;
    EXPECT_EQ(describe_hub_error(404, "RevisionNotFound", "Invalid rev id: v9",
                                 "https://hub.example/api/models/o/r/revision/release%2Fv9?x=1", false),
              "https://hub.example/api/models/o/r/revision/release%2Fv9: revision \"release/v9\" not found in "
              "repository o/r (HTTP 404, RevisionNotFound)");
    EXPECT_EQ(describe_hub_error(404, "EntryNotFound", "", "https://hub.example/o/r/resolve/abc/Q4%20K/m.gguf", true),
              "https://hub.example/o/r/resolve/abc/Q4%20K/m.gguf: \"Q4 K/m.gguf\" not found in repository o/r at "
              "revision abc (HTTP 404, EntryNotFound)");
    EXPECT_EQ(describe_hub_error(404, "RepoNotFound", "", "https://hub.example/api/models/o/r/tree/abc", true),
              "https://hub.example/api/models/o/r/tree/abc: repository o/r not found, or the token has no access to "
              "it (HTTP 404, RepoNotFound)");
    EXPECT_EQ(describe_hub_error(403, "Disabled", "This repo is disabled\r\nX-Injected: 1", "http://m:8080/o/r/resolve/c/x", false),
              "http://m:8080/o/r/resolve/c/x: HTTP 403 Disabled: This repo is disabledX-Injected: 1");
}

}  // namespace
