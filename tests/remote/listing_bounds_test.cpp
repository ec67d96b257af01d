// remote/listing and remote/hub_listing: the bounds of a directory URL's walk against nginx on
// 127.0.0.1 and of a Hub tree against the Hub emulation: names are counted before any listed file
// is fetched (a tree: before its next page), and names a file system cannot hold or claimed
// sizes above 1 PiB are problems, never entries.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "gguf/error.hpp"
#include "gguf/model/catalog.hpp"
#include "remote/hub_emulation.hpp"
#include "remote/hub_listing.hpp"
#include "remote/listing.hpp"
#include "remote/servers.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace gguf_mount::remote;
using remote_test::NginxOptions;
using remote_test::NginxServer;

class ListingBounds : public ::testing::Test {
protected:
    void SetUp() override {
        std::string why;
        if (!NginxServer::available(&why)) GTEST_SKIP() << why;
    }
    std::shared_ptr<RemoteContext> context() {
        RemoteOptions o;
        o.http.net_timeout = std::chrono::seconds(3);
        o.cache_dir = cache_.path();
        return std::make_shared<RemoteContext>(o);
    }
    /// Requests for files (not index pages) in `log`.
    static size_t file_requests(const std::vector<remote_test::AccessEntry>& log) {
        size_t n = 0;
        for (const auto& e : log) n += !e.uri.empty() && e.uri.back() != '/';
        return n;
    }
    gguf_test::TempDir tree_, cache_;
};

TEST_F(ListingBounds, NamesPastTheLimitAreNeitherFetchedNorListedAndTheCutIsOneProblem) {
    // 30 files in the root and 30 in each of 3 sub-directories: 123 names, the limit is 10.
    for (int d = 0; d <= 3; ++d) {
        const std::string dir = tree_.path() + (d == 0 ? std::string() : "/sub" + std::to_string(d));
        fs::create_directories(dir);
        for (int i = 0; i < 30; ++i) gguf_test::write_file(dir + "/f" + std::to_string(100 + i) + ".txt", "x");
    }
    NginxServer nginx(NginxOptions{tree_.path()});
    std::string error;
    ASSERT_TRUE(nginx.start(&error)) << error;
    for (const char* kind : {"/json/", "/html/"}) {
        nginx.clear_access_log();
        HttpDirectoryListing listing(context(), nginx.base_url() + kind, 10);
        gguf::CatalogOptions options;
        options.max_entries = 10;
        gguf::Catalog catalog = gguf::build_catalog(listing, options);
        EXPECT_EQ(catalog.entries.size() + catalog.directories.size() - 1, 10u) << kind;
        ASSERT_EQ(catalog.problems.size(), 1u) << kind;
        EXPECT_NE(catalog.problems[0].reason.find(": more than 10 entries under SOURCE (the model-directory limit)"),
                  std::string::npos)
            << catalog.problems[0].reason;
        // At most the 10 names kept were opened (without the budget: all 120 files).
        auto log = nginx.access_log();
        EXPECT_LE(file_requests(log), 10u) << kind;
        EXPECT_LE(log.size() - file_requests(log), 4u) << kind;  // index pages
    }
    nginx.stop();
}

// A Hub tree of 30 files at 3 a page, with a limit of 10 names: the listing stops after the page
// that holds the 11th entry (4 pages, not 10), keeps 10, and the cut is one Problem naming the
// limit.
TEST_F(ListingBounds, HubTreeEntriesPastTheLimitEndTheListingAndTheCutIsOneProblem) {
    std::string why;
    if (!remote_test::HubEmulation::available(&why)) GTEST_SKIP() << why;
    remote_test::HubRepoSpec spec;
    spec.page_size = 3;
    for (int i = 0; i < 30; ++i) {
        const std::string name = "f" + std::to_string(100 + i) + ".txt";
        gguf_test::write_file(tree_.path() + "/" + name, "x");
        spec.files.push_back(remote_test::HubRepoFile{name, tree_.path() + "/" + name, false});
    }
    remote_test::HubEmulation hub(spec);
    ASSERT_TRUE(hub.start(&why)) << why;
    const HubSource source = parse_hub_source("hf://" + spec.org + "/" + spec.repo);
    HubListing whole(context(), source, hub.endpoint(), "");
    EXPECT_EQ(gguf::build_catalog(whole).entries.size(), 30u);
    EXPECT_EQ(whole.pages(), 10u);

    HubListing listing(context(), source, hub.endpoint(), "", 10);
    gguf::CatalogOptions options;
    options.max_entries = 10;
    gguf::Catalog catalog = gguf::build_catalog(listing, options);
    EXPECT_EQ(catalog.entries.size(), 10u);
    EXPECT_EQ(listing.pages(), 4u) << "pages past the limit are not fetched";
    ASSERT_EQ(catalog.problems.size(), 1u);
    EXPECT_NE(catalog.problems[0].reason.find(": more than 10 entries under SOURCE (the model-directory limit)"),
              std::string::npos)
        << catalog.problems[0].reason;
    EXPECT_EQ(catalog.problems[0].reason.find('\n'), std::string::npos) << "one line";
    hub.stop();
}

TEST_F(ListingBounds, ANameOverNameMaxAndAHugeSizeAreProblemsAndTheRestIsServed) {
    // A crafted index page: nginx serves crafted/index.html for the directory URL crafted/.
    fs::create_directories(tree_.path() + "/crafted");
    gguf_test::write_file(tree_.path() + "/crafted/ok.txt", "fine");
    const std::string long_name(10000, 'n');
    gguf_test::write_file(tree_.path() + "/crafted/index.html",
                          "<html><body><h1>Index of /crafted/</h1><hr><pre>"
                          "<a href=\"" + long_name + "\">n</a>   01-Jan-2026 00:00    1\r\n"
                          "<a href=\"huge.gguf\">huge.gguf</a>   01-Jan-2026 00:00    9223372036854775807\r\n"
                          "<a href=\"ok.txt\">ok.txt</a>   01-Jan-2026 00:00    4\r\n</pre><hr></body></html>");
    NginxServer nginx(NginxOptions{tree_.path()});
    std::string error;
    ASSERT_TRUE(nginx.start(&error)) << error;
    HttpDirectoryListing listing(context(), nginx.base_url() + "/crafted/");
    gguf::Catalog catalog = gguf::build_catalog(listing);
    ASSERT_EQ(catalog.entries.size(), 1u);
    EXPECT_EQ(catalog.entries[0].path, "ok.txt");
    ASSERT_EQ(catalog.problems.size(), 2u);
    std::string reasons = catalog.problems[0].reason + "\n" + catalog.problems[1].reason;
    EXPECT_NE(reasons.find("name of 10000 bytes is longer than 255 bytes (NAME_MAX); not shown"), std::string::npos)
        << reasons;
    EXPECT_NE(reasons.find("huge.gguf: claimed size of 9223372036854775807 bytes is above the limit of 1 PiB"),
              std::string::npos)
        << reasons;
    for (const auto& p : catalog.problems) EXPECT_LT(p.path.size(), 200u) << p.path;
    // Neither was requested.
    for (const auto& e : nginx.access_log()) {
        EXPECT_EQ(e.uri.find("huge.gguf"), std::string::npos) << e.uri;
        EXPECT_EQ(e.uri.find("nnnn"), std::string::npos) << e.uri;
    }
    nginx.stop();
}

// A directory whose index page (12 MiB, under the 16 MiB page limit) is more than the process
// may allocate: the listing fails with one line naming the page's URL, ENOMEM, and no crash. The
// listing runs in a child process whose address space may grow by 6 MiB only (RLIMIT_AS), forked
// from a fresh run of this test binary: after other tests the heap holds freed memory that the
// page would fit in without growing the address space.
TEST_F(ListingBounds, AnIndexPageTooBigForMemoryIsOneLineNamingTheUrlWithEnomem) {
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer's allocator and shadow memory do not fail an allocation at an RLIMIT_AS
    // bound of a few MiB: the bounded child hangs instead of seeing ENOMEM.
    GTEST_SKIP() << "an RLIMIT_AS bound of 6 MiB does not hold under AddressSanitizer";
#endif
    static const char* const kFresh = "GGUF_TEST_FRESH_PROCESS";
    if (std::getenv(kFresh) == nullptr) {
        ::setenv(kFresh, "1", 1);
        auto r = gguf_test::run({"/proc/self/exe", "--gtest_filter=" + std::string(::testing::UnitTest::GetInstance()
                                                                                     ->current_test_info()
                                                                                     ->test_suite_name()) +
                                                       "." + ::testing::UnitTest::GetInstance()->current_test_info()->name()});
        ::unsetenv(kFresh);
        EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
        EXPECT_NE(r.out.find("[  PASSED  ] 1 test"), std::string::npos) << r.out << r.err;
        return;
    }
    fs::create_directories(tree_.path() + "/big");
    gguf_test::write_file(tree_.path() + "/big/index.html",
                          "<html><body><!-- " + std::string(size_t{12} << 20, 'p') + " --><pre>"
                          "<a href=\"ok.txt\">ok.txt</a>   01-Jan-2026 00:00    4\r\n</pre></body></html>");
    NginxServer nginx(NginxOptions{tree_.path()});
    std::string error;
    ASSERT_TRUE(nginx.start(&error)) << error;
    const std::string url = nginx.base_url() + "/big/";
    auto ctx = context();
    HttpDirectoryListing listing(ctx, url);
    const std::string result = tree_.path() + "/child-result";
    const int code = gguf_test::in_bounded_child(
        [&] {
            try {
                listing.list("");
            } catch (const gguf::Error& e) {
                gguf_test::write_file(result, e.what());
                return e.sys_errno() == ENOMEM;
            }
            return false;  // listed: the bound was not reached
        },
        size_t{6} << 20);
    const std::string what = gguf_test::read_file(result);
    EXPECT_EQ(code, 0) << "0: ENOMEM, 1: listed or another errno, 3: std::bad_alloc, 4: another exception, "
                          "128+: a signal; "
                       << what;
    // Where the allocation fails varies (receiving the page, parsing it): the line names the URL.
    EXPECT_EQ(what.rfind(url + ": out of memory ", 0), 0u) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    nginx.stop();
}

TEST_F(ListingBounds, APlainServersRefusalIsNotDescribedInHubWords) {
    gguf_test::write_file(tree_.path() + "/open.txt", "x");
    gguf_test::write_file(tree_.path() + "/closed.txt", "x");
    NginxOptions options{tree_.path()};
    options.extra_server_config = "  location ~ closed\\.txt$ { return 403; }\n";
    NginxServer nginx(options);
    std::string error;
    ASSERT_TRUE(nginx.start(&error)) << error;
    HttpDirectoryListing listing(context(), nginx.base_url() + "/json/");
    gguf::Catalog catalog = gguf::build_catalog(listing);
    ASSERT_EQ(catalog.problems.size(), 1u);
    EXPECT_EQ(catalog.problems[0].reason, nginx.base_url() + "/json/closed.txt: access denied (HTTP 403): the server "
                                                             "refuses this file (missing or wrong credentials?); not shown");
    nginx.stop();
}

}  // namespace
