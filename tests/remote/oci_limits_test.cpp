// What a registry counts and refuses, end to end: Debian's docker-registry (registry 2.8) on
// 127.0.0.1 behind tests/remote/oci/registry_proxy.py, which logs every request and answers
// rate limits and refusals as Docker Hub does (429 TOOMANYREQUESTS with Retry-After and
// ratelimit-limit / ratelimit-remaining; 403 DENIED), and blob redirects to a "CDN" on another
// host (127.0.0.2) with expiring CloudFront-style signed URLs. Docker Hub counts manifest GETs
// (HEADs are free): a mount GETs each manifest once, a remount revalidates the tag with HEAD.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "mount/mount_fixture.hpp"
#include "remote/http.hpp"
#include "remote/oci/auth.hpp"
#include "remote/oci/reference.hpp"
#include "remote/oci/signer.hpp"
#include "remote/oci_registry.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;
namespace oci = gguf_mount::remote::oci;

const std::string kTiny = std::string(GGUF_TEST_FIXTURES) + "/tiny-llama/tiny-llama.gguf";
const std::string kKvzoo = std::string(GGUF_TEST_FIXTURES) + "/kvzoo/original.gguf";

class OciLimits : public remote_test::OciMountFixture {
protected:
    void TearDown() override {
        OciMountFixture::TearDown();
        proxy_.stop();
    }
    /// The registry (blob GETs redirected to `redirect_base` when given), then the proxy in
    /// front of it (`redirect_life`: its redirects expire after that many seconds).
    void start(const std::string& redirect_base = "", int redirect_life = 0) {
        std::string error;
        ASSERT_TRUE(registry_.start(root_ + "/registry", &error, "", "", redirect_base)) << error;
        ASSERT_TRUE(proxy_.start("http://" + registry_.host(), root_ + "/proxy", &error, redirect_life)) << error;
    }
    std::vector<std::string> args(std::vector<std::string> more = {}) const {
        std::vector<std::string> a = {"--plain-http", "--cache-dir", cache_};
        a.insert(a.end(), more.begin(), more.end());
        return a;
    }
    /// oci://PROXY/REPO: every request of the mount passes the proxy.
    std::string ref(const std::string& repo_tag) const { return "oci://" + proxy_.host() + "/" + repo_tag; }
    std::vector<std::string> check(const std::string& source) const {
        return {gguf_test::gguf_mount_binary(), "check", "--plain-http", "--cache-dir", cache_, source};
    }
    /// A dense model of 3 shards of 6 MiB (2 cache blocks each) pushed as `repo`; returns the
    /// path of its local merge.
    std::string push_dense(const std::string& repo) {
        fs::create_directories(root_ + "/dense");
        auto shards = mount_test::split_dense_model(12, [](int) { return int64_t{393216}; }, 4, 7, root_ + "/dense/dense");
        EXPECT_EQ(shards.size(), 3u);
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", shards[0], root_ + "/want.gguf"});
        EXPECT_EQ(r.exit_code, 0) << r.err;
        std::vector<std::string> push = {"--flavour", "docker", "--repo", repo};
        push.insert(push.end(), shards.begin(), shards.end());
        EXPECT_FALSE(registry_.push(push).empty());
        return root_ + "/want.gguf";
    }

    remote_test::RegistryProxy proxy_;
};

TEST_F(OciLimits, AMountGetsEachManifestOnceARemountRevalidatesTheTagWithHeadAndOfflineUsesTheCache) {
    ASSERT_NO_FATAL_FAILURE(start());
    ASSERT_FALSE(registry_.push({"--flavour", "ollama", "--repo", "lib/tiny", "--tag", "v1", kTiny}).empty());
    ASSERT_TRUE(mount(args(), ref("lib/tiny:v1"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/tiny.gguf"), gguf_test::sha256_file(kTiny)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(proxy_.count("GET", "/manifests/"), 1u);
    EXPECT_EQ(proxy_.count("HEAD", "/manifests/"), 0u);

    // A remount with the manifest cached: one HEAD (Docker Hub does not count it), no GET.
    proxy_.clear();
    ASSERT_TRUE(mount(args(), ref("lib/tiny:v1"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/tiny.gguf"), gguf_test::sha256_file(kTiny)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(proxy_.count("GET", "/manifests/"), 0u);
    EXPECT_EQ(proxy_.count("HEAD", "/manifests/v1"), 1u);

    // The tag moved: the HEAD says so, one GET of the new manifest, the new model served.
    ASSERT_FALSE(registry_.push({"--flavour", "ollama", "--repo", "lib/tiny", "--tag", "v1", kKvzoo}).empty());
    proxy_.clear();
    ASSERT_TRUE(mount(args(), ref("lib/tiny:v1"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/tiny.gguf"), gguf_test::sha256_file(kKvzoo)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(proxy_.count("HEAD", "/manifests/v1"), 1u);
    EXPECT_EQ(proxy_.count("GET", "/manifests/v1"), 1u);

    // An index (a platform image's entry before the model's): the index and the children
    // looked at to find the model, each GET once.
    ASSERT_FALSE(registry_.push({"--flavour", "modelpack", "--index", "--repo", "lib/idx", "--tag", "v1", kTiny}).empty());
    proxy_.clear();
    auto r = gguf_test::run(check(ref("lib/idx:v1")));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(proxy_.count("GET", "/manifests/v1"), 1u);
    std::set<std::string> children;
    for (const auto& e : proxy_.requests()) {
        if (e.method != "GET" || e.uri.find("/manifests/sha256:") == std::string::npos) continue;
        EXPECT_TRUE(children.insert(e.uri).second) << "asked twice: " << e.uri;
    }
    EXPECT_EQ(children.size(), 2u);
    // Digest manifests in the cache are used without a request; the tag is revalidated (HEAD).
    proxy_.clear();
    r = gguf_test::run(check(ref("lib/idx:v1")));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(proxy_.count("GET", "/manifests/"), 0u);
    EXPECT_EQ(proxy_.count("HEAD", "/manifests/v1"), 1u);

    // Nothing answers: --offline serves the last manifest and blocks from the cache.
    proxy_.stop();
    registry_.stop();
    ASSERT_TRUE(mount(args({"--offline"}), ref("lib/tiny:v1"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/tiny.gguf"), gguf_test::sha256_file(kKvzoo)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(OciLimits, TooManyRequestsWindowsDelayTheMountAndTheReadsNeverDropTheModelAndTheLogNamesTheLimit) {
    ASSERT_NO_FATAL_FAILURE(start());
    const std::string want = push_dense("lib/dense");
    // Docker Hub's answer for 3 s to manifest GETs.
    proxy_.set_rules(nlohmann::json::array({{{"match", "/manifests/"},
                                             {"method", "GET"},
                                             {"fault", "toomanyrequests"},
                                             {"seconds", 3},
                                             {"retry_after", 1},
                                             {"limit", "100;w=21600"}}}));
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(mount(args(), ref("lib/dense"))) << log();
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    size_t limited = 0;
    for (const auto& e : proxy_.requests()) limited += e.status == 429;
    EXPECT_GE(limited, 1u);
    EXPECT_EQ(proxy_.count("GET", "/manifests/"), limited + 1);
    std::string l = log();
    EXPECT_NE(l.find("rate limited (HTTP 429, policy limit 100;w=21600, remaining 0;w=21600): waiting 1 s"),
              std::string::npos)
        << l;
    // Then a window on the blobs while the model is read: delayed, byte-exact.
    proxy_.set_rules(nlohmann::json::array(
        {{{"match", "/blobs/"}, {"fault", "toomanyrequests"}, {"seconds", 3}, {"retry_after", 1}}}));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/dense.gguf"), gguf_test::sha256_file(want)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    limited = 0;
    for (const auto& e : proxy_.requests()) limited += e.status == 429 && e.uri.find("/blobs/") != std::string::npos;
    EXPECT_GE(limited, 1u);
}

TEST_F(OciLimits, RegistryRefusalsAreOneLineNamingRegistryRepositoryAndReference) {
    ASSERT_NO_FATAL_FAILURE(start());
    ASSERT_FALSE(registry_.push({"--flavour", "ollama", "--repo", "lib/tiny", "--tag", "v1", kTiny}).empty());
    const std::string p = proxy_.host();
    // NAME_UNKNOWN, as distribution 3 and GHCR answer a manifest GET of a repository they do not
    // have (registry 2.8 answers MANIFEST_UNKNOWN there, NAME_UNKNOWN only to a tag list).
    proxy_.set_rules(nlohmann::json::array({{{"match", "/nobody/"}, {"fault", "error"}, {"status", 404},
                                             {"code", "NAME_UNKNOWN"},
                                             {"message", "repository name not known to registry"}}}));
    auto r = gguf_test::run(check(ref("nobody/none:v1")));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(p + "/nobody/none:v1: NAME_UNKNOWN: repository name not known to registry (HTTP 404); the "
                             "registry has no repository nobody/none"),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(mount(args(), ref("nobody/none:v1")));
    EXPECT_NE(log().find(p + "/nobody/none:v1: NAME_UNKNOWN"), std::string::npos) << log();
    EXPECT_NE(log().find("nothing mounted"), std::string::npos) << log();
    // MANIFEST_UNKNOWN names the tag.
    r = gguf_test::run(check(ref("lib/tiny:v9")));
    EXPECT_NE(r.err.find(p + "/lib/tiny:v9: MANIFEST_UNKNOWN: manifest unknown (HTTP 404); no manifest v9 in lib/tiny "
                             "(no such tag, or no such repository)"),
              std::string::npos)
        << r.err;
    // DENIED (Docker Hub, Harbor: credentials without pull access).
    proxy_.set_rules(nlohmann::json::array({{{"match", "/manifests/"}, {"fault", "error"}, {"status", 403},
                                             {"code", "DENIED"}}}));
    r = gguf_test::run(check(ref("lib/tiny:v1")));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(p + "/lib/tiny:v1: DENIED: requested access to the resource is denied (HTTP 403); the "
                             "credentials are not allowed to pull this repository"),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(mount(args(), ref("lib/tiny:v1")));
    EXPECT_NE(log().find(p + "/lib/tiny:v1: DENIED"), std::string::npos) << log();

    // TOOMANYREQUESTS past the wait's bound (300 s for a mount; 2 s here): one line naming the
    // reference, the code and the limit.
    proxy_.set_rules(nlohmann::json::array({{{"match", "/manifests/"}, {"fault", "toomanyrequests"}, {"seconds", 60},
                                             {"retry_after", 1}, {"limit", "100;w=21600"}}}));
    oci::Reference ref = oci::parse_reference("oci://" + p + "/lib/tiny:v1", true);
    gguf_mount::remote::HttpOptions o;
    o.net_timeout = std::chrono::seconds(5);
    o.rate_limit_patience = std::chrono::seconds(2);
    auto auth = std::make_shared<oci::Auth>(ref, o);
    auth->discover();
    o.signer = std::make_shared<const oci::RegistrySigner>(ref, auth);
    gguf_mount::remote::HttpClient client(o);
    std::string what, type, final_url;
    try {
        client.get_page(ref.manifest_url(), &type, &final_url);
    } catch (const gguf_mount::remote::HttpError& e) {
        what = e.what();
        EXPECT_EQ(e.status(), 429);
    }
    EXPECT_EQ(what.rfind(p + "/lib/tiny:v1: TOOMANYREQUESTS: You have reached your pull rate limit. (HTTP 429); the "
                         "registry's pull rate limit was reached (credentials may have a higher one) (policy limit "
                         "100;w=21600, remaining 0;w=21600): still limited after waiting ",
                         0),
              0u)
        << what;
    EXPECT_NE(what.find(" s (the wait is bounded at 2 s per request)"), std::string::npos) << what;
}

TEST_F(OciLimits, ASignedCdnUrlIsNeverUsedPastItsExpiryTheRegistryIsAskedForAFreshOne) {
    // The "CDN": another loopback host over the registry's storage, refusing a signed URL past
    // its Expires (CloudFront answers 403 "Request has expired").
    fs::create_directories(root_ + "/registry/storage");
    remote_test::FaultServer cdn(root_ + "/registry/storage", "127.0.0.2");
    std::string error;
    ASSERT_TRUE(cdn.start(&error)) << error;
    cdn.set_rules(nlohmann::json::array({{{"fault", "expires"}, {"status", 403}}}));
    ASSERT_NO_FATAL_FAILURE(start(cdn.base_url(), 4));
    const std::string want = push_dense("lib/dense");
    // The mount reads each shard's first block through a redirect; then every URL expires.
    ASSERT_TRUE(mount(args(), ref("lib/dense"))) << log();
    std::this_thread::sleep_for(std::chrono::seconds(5));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/dense.gguf"), gguf_test::sha256_file(want)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    size_t served = 0, expired = 0;
    for (const auto& e : cdn.access_log()) {
        EXPECT_FALSE(e.has_authorization()) << e.uri;
        EXPECT_NE(e.uri.find("Expires="), std::string::npos) << e.uri;
        served += e.status == 206;
        expired += e.status == 403;
    }
    EXPECT_EQ(served, 6u);  // 3 shards x 2 blocks, each fetched once
    EXPECT_EQ(expired, 0u);  // no URL was asked past its Expires
    // The blocks read after the URLs expired were resolved again at the registry.
    EXPECT_GE(proxy_.count("GET", "/blobs/"), 6u);
}

TEST_F(OciLimits, ACdnUrlRefusedLaterIsResolvedAgainAtTheRegistryAndTheReadIsByteExact) {
    // A CDN URL that does not say when it expires, refused (410) once after the mount's reads.
    fs::create_directories(root_ + "/registry/storage");
    remote_test::FaultServer cdn(root_ + "/registry/storage", "127.0.0.2");
    std::string error;
    ASSERT_TRUE(cdn.start(&error)) << error;
    ASSERT_NO_FATAL_FAILURE(start(cdn.base_url()));
    const std::string want = push_dense("lib/dense");
    ASSERT_TRUE(mount(args(), ref("lib/dense"))) << log();
    const size_t before = cdn.access_log().size();
    cdn.set_rules(nlohmann::json::array({{{"fault", "status"}, {"status", 410}, {"times", 1}}}));
    const size_t asked = proxy_.count("GET", "/blobs/");
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/dense.gguf"), gguf_test::sha256_file(want)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    size_t refused = 0;
    for (const auto& e : cdn.access_log()) {
        EXPECT_FALSE(e.has_authorization()) << e.uri;
        refused += e.status == 410;
    }
    EXPECT_EQ(refused, 1u);
    EXPECT_GT(cdn.access_log().size(), before);
    EXPECT_GT(proxy_.count("GET", "/blobs/"), asked);
}

}  // namespace
