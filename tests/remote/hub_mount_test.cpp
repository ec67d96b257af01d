// hf://ORG/REPO sources mounted and checked for real against the Hub emulation (two nginx on
// 127.0.0.1: API + CDN). Every test points HF_ENDPOINT at the emulation and HF_HOME at a
// scratch directory, so no real token and no real Hub is ever used.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "gguf/model/merge_plan.hpp"
#include "gguf/model/catalog.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "mount/mount_fixture.hpp"
#include "remote/nginx_mount_fixture.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;
using remote_test::AccessEntry;
using remote_test::HubEmulation;
using remote_test::HubRepoFile;
using remote_test::HubRepoSpec;
using remote_test::NginxMountFixture;

constexpr const char* kToken = "hf_emulatedToken0123456789";

/// Relative path -> sha256 of every regular file under `dir`.
std::map<std::string, std::string> tree_sha256(const std::string& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = gguf_test::sha256_file(e.path().string());
    }
    return out;
}

size_t count_if_uri(const std::vector<AccessEntry>& log, const std::string& part) {
    size_t n = 0;
    for (const auto& e : log) n += e.uri.find(part) != std::string::npos;
    return n;
}

class HubMount : public NginxMountFixture {
protected:
    void SetUp() override {
        NginxMountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        isolate_hub();
        kvzoo_ = find_case("kvzoo/t7");
    }
    static gguf_test::ManifestCase find_case(const std::string& id) {
        for (auto& c : gguf_test::manifest_cases())
            if (c.id == id) return c;
        ADD_FAILURE() << "no manifest case " << id;
        return {};
    }
    /// The repo: Q4_K_M/ (kvzoo/t7, 7 shards), dense/ (3 shards of two 4 MiB blocks each),
    /// README.md (not LFS), mmproj-tiny.gguf (companion), kvzoo-full.gguf.part1of2/2of2 (a
    /// byte split of kvzoo's original). The same tree is laid out in local_ for comparison.
    void start_hub(size_t page_size, std::optional<std::string> token = std::nullopt, bool fault_cdn = false) {
        local_ = root_ + "/local";
        fs::create_directories(local_ + "/Q4_K_M");
        fs::create_directories(local_ + "/dense");
        HubRepoSpec spec;
        spec.page_size = page_size;
        spec.required_token = token;
        spec.cdn_fault_server = fault_cdn;
        auto add = [&](const std::string& path, const std::string& file, bool lfs) {
            fs::copy_file(file, local_ + "/" + path);
            spec.files.push_back(HubRepoFile{path, local_ + "/" + path, lfs});
        };
        for (const auto& s : kvzoo_.shards) add("Q4_K_M/" + gguf::base_name(s), gguf_test::fixture(s), true);
        fs::create_directories(root_ + "/dense-src");
        auto dense = mount_test::split_dense_model(
            12, [](int) { return int64_t{393216}; }, 4, 11, root_ + "/dense-src/dense");
        ASSERT_EQ(dense.size(), 3u);
        gguf::VirtualFile vf = gguf::open_merged(gguf::SplitSet::open(dense.front()));
        std::string merged(vf.size(), '\0');
        ASSERT_EQ(vf.read(0, merged.size(), merged.data()), static_cast<ssize_t>(merged.size()));
        dense_sha256_ = gguf_test::sha256_hex(merged);
        for (const auto& s : dense) add("dense/" + gguf::base_name(s), s, true);
        add("README.md", gguf_test::fixture("tiny-llama/README.md"), false);
        add("mmproj-tiny.gguf", gguf_test::fixture("tiny-llama/tiny-llama.gguf"), true);
        const std::string original = gguf_test::read_file(gguf_test::fixture(kvzoo_.original));
        const size_t half = original.size() / 2;
        gguf_test::write_file(root_ + "/p1", original.substr(0, half));
        gguf_test::write_file(root_ + "/p2", original.substr(half));
        add("kvzoo-full.gguf.part1of2", root_ + "/p1", true);
        add("kvzoo-full.gguf.part2of2", root_ + "/p2", true);
        hub_ = std::make_unique<HubEmulation>(spec);
        std::string error;
        ASSERT_TRUE(hub_->start(&error)) << error;
        ::setenv("HF_ENDPOINT", hub_->endpoint().c_str(), 1);
    }
    std::vector<std::string> args() const { return {"--cache-dir", cache_, "--net-timeout", "3"}; }
    std::string source() const { return "hf://" + hub_->spec().org + "/" + hub_->spec().repo; }

    std::string local_, dense_sha256_;
    gguf_test::ManifestCase kvzoo_;
};

TEST_F(HubMount, ARepoIsServedAsALocalMountOfTheSameTreeByteExactWithEveryTreePage) {
    ASSERT_NO_FATAL_FAILURE(start_hub(2));
    ASSERT_GE(hub_->page_count(""), 3u);
    ASSERT_TRUE(mount(args(), source()));
    auto got = tree_sha256(mnt_);
    // What a local mount of the same tree serves (the catalog of local_), by path.
    gguf::Catalog local = gguf::build_catalog(local_);
    std::set<std::string> want_paths, got_paths;
    for (const auto& e : local.entries) want_paths.insert(e.path);
    for (const auto& [p, sha] : got) got_paths.insert(p);
    EXPECT_EQ(got_paths, want_paths) << log();
    EXPECT_EQ(got["Q4_K_M/kvzoo.gguf"], kvzoo_.merged_sha256);
    EXPECT_EQ(got["kvzoo-full.gguf"], gguf_test::sha256_file(gguf_test::fixture(kvzoo_.original)));
    EXPECT_EQ(got["mmproj-tiny.gguf"], gguf_test::sha256_file(gguf_test::fixture("tiny-llama/tiny-llama.gguf")));
    EXPECT_EQ(got["dense/dense.gguf"], dense_sha256_);
    EXPECT_EQ(got["README.md"], gguf_test::sha256_file(gguf_test::fixture("tiny-llama/README.md")));
    // Every tree page was asked for once; the revision once.
    auto api = hub_->api().access_log();
    EXPECT_EQ(count_if_uri(api, "/tree/"), hub_->page_count(""));
    EXPECT_EQ(count_if_uri(api, "/revision/"), 1u);
    EXPECT_NE(log().find("pinned to commit " + hub_->spec().commit), std::string::npos) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(HubMount, ResolveRedirectsToTheCdnAndItsLocationIsReusedForLaterBlocks) {
    ASSERT_NO_FATAL_FAILURE(start_hub(50));
    ASSERT_TRUE(mount(args(), source() + "/dense"));
    ASSERT_EQ(gguf_test::sha256_file(mnt_ + "/dense.gguf"), dense_sha256_) << log();
    auto api = hub_->api().access_log();
    auto cdn = hub_->cdn().access_log();
    size_t resolves = 0, redirects = 0;
    for (const auto& e : api) {
        if (e.uri.find("/resolve/" + hub_->spec().commit + "/dense/") == std::string::npos) continue;
        ++resolves;
        redirects += e.status == 302;
    }
    // 3 shards of 2 blocks each: one resolve per shard, every block from the CDN.
    EXPECT_EQ(resolves, 3u);
    EXPECT_EQ(redirects, 3u);
    EXPECT_EQ(count_if_uri(cdn, "/blobs/"), 6u);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(HubMount, TheTokenGoesToTheApiHostOnlyNeverToTheCdnNorTheLogOrCache) {
    ASSERT_NO_FATAL_FAILURE(start_hub(50, std::string(kToken)));
    ::setenv("HF_TOKEN", kToken, 1);
    ASSERT_TRUE(mount(args(), source()));
    EXPECT_EQ(tree_sha256(mnt_)["Q4_K_M/kvzoo.gguf"], kvzoo_.merged_sha256);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    auto api = hub_->api().access_log();
    auto cdn = hub_->cdn().access_log();
    ASSERT_FALSE(api.empty());
    ASSERT_FALSE(cdn.empty());
    for (const auto& e : api) EXPECT_EQ(e.authorization, std::string("Bearer ") + kToken) << e.uri;
    for (const auto& e : cdn) EXPECT_FALSE(e.has_authorization()) << e.uri;
    EXPECT_EQ(log().find(kToken), std::string::npos);
    for (const auto& e : fs::recursive_directory_iterator(cache_)) {
        EXPECT_EQ(e.path().string().find(kToken), std::string::npos);
        if (e.is_regular_file() && e.file_size() < 65536)
            EXPECT_EQ(gguf_test::read_file(e.path().string()).find(kToken), std::string::npos) << e.path();
    }
}

TEST_F(HubMount, AGatedRepoWithoutTokenIsOneLineAndExit1AndARefusedTokenIsSaid) {
    ASSERT_NO_FATAL_FAILURE(start_hub(50, std::string(kToken)));
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), source(), mnt_, "--cache-dir", cache_});
    EXPECT_EQ(r.exit_code, 1);
    const std::string all = r.out + r.err;
    // A bare 401 (no X-Error-Code) may be private, gated or missing: all three are said.
    EXPECT_NE(all.find("private or gated, or does not exist"), std::string::npos) << all;
    EXPECT_NE(all.find("HF_TOKEN"), std::string::npos) << all;
    EXPECT_NE(all.find("`hf auth login`"), std::string::npos) << all;
    EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 1) << all;

    ::setenv("HF_TOKEN", "hf_wrong", 1);
    r = gguf_test::run({gguf_test::gguf_mount_binary(), source(), mnt_, "--cache-dir", cache_});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE((r.out + r.err).find("token from HF_TOKEN was refused"), std::string::npos) << r.out + r.err;
    EXPECT_EQ((r.out + r.err).find("hf_wrong"), std::string::npos);
}

TEST_F(HubMount, ARevisionOrPathThatDoesNotExistIsNamed) {
    ASSERT_NO_FATAL_FAILURE(start_hub(50));
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), source() + "@nope", mnt_, "--cache-dir", cache_});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE((r.out + r.err).find("revision \"nope\" not found"), std::string::npos) << r.out + r.err;
    r = gguf_test::run({gguf_test::gguf_mount_binary(), source() + "/Q5_K_M", mnt_, "--cache-dir", cache_});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE((r.out + r.err).find("path \"Q5_K_M\" not found"), std::string::npos) << r.out + r.err;
}

TEST_F(HubMount, APushDuringAMountDoesNotMixCommits) {
    ASSERT_NO_FATAL_FAILURE(start_hub(50));
    ASSERT_TRUE(mount(args(), source() + "@main/Q4_K_M"));
    // main moves to another commit: the mount keeps reading the pinned one, byte-exact.
    ASSERT_TRUE(hub_->move_revision("main", "fedcba9876543210fedcba9876543210fedcba98"));
    hub_->api().clear_access_log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    auto api = hub_->api().access_log();
    EXPECT_EQ(count_if_uri(api, "/revision/"), 0u);
    EXPECT_EQ(count_if_uri(api, "fedcba98"), 0u);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(HubMount, CheckReadsHeadersOnlyAsTextAndJson) {
    ASSERT_NO_FATAL_FAILURE(start_hub(2));
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", source(), "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    auto j = nlohmann::json::parse(r.out);
    std::set<std::string> paths;
    for (const auto& e : j.at("entries")) paths.insert(e.at("path").get<std::string>());
    EXPECT_EQ(paths.count("Q4_K_M/kvzoo.gguf"), 1u) << r.out;
    EXPECT_EQ(paths.count("dense/dense.gguf"), 1u) << r.out;
    EXPECT_EQ(paths.count("kvzoo-full.gguf"), 1u) << r.out;
    // Headers only: every CDN request is for a file's first cache block (the dense shards'
    // second blocks, at 4 MiB, are never asked for).
    auto cdn = hub_->cdn().access_log();
    EXPECT_FALSE(cdn.empty());
    for (const auto& e : cdn) EXPECT_EQ(e.range.rfind("bytes=0-", 0), 0u) << e.uri << " " << e.range;
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", source() + "/Q4_K_M"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("kvzoo.gguf"), std::string::npos) << r.out;
}

}  // namespace

namespace {

TEST_F(HubMount, CheckTakesADirectoryUrlAndAFirstShardUrl) {
    ASSERT_NO_FATAL_FAILURE(start_hub(50));  // lays out local_ (the emulation itself is not used)
    remote_test::NginxServer nginx(remote_test::NginxOptions{local_});
    std::string error;
    ASSERT_TRUE(nginx.start(&error)) << error;
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", nginx.base_url() + "/json/", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    auto j = nlohmann::json::parse(r.out);
    std::set<std::string> paths;
    for (const auto& e : j.at("entries")) paths.insert(e.at("path").get<std::string>());
    EXPECT_EQ(paths.count("Q4_K_M/kvzoo.gguf"), 1u) << r.out;
    EXPECT_EQ(paths.count("kvzoo-full.gguf"), 1u) << r.out;
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "check",
                        nginx.base_url() + "/Q4_K_M/kvzoo-00001-of-00007.gguf"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("kvzoo.gguf"), std::string::npos) << r.out;
    nginx.stop();
}

}  // namespace

namespace {

TEST_F(HubMount, AfterAFirstReadTheRepoMountsOfflineWithTheHubDown) {
    ASSERT_NO_FATAL_FAILURE(start_hub(2));
    ASSERT_TRUE(mount(args(), source() + "/Q4_K_M"));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    ASSERT_EQ(unmount_and_wait(), 0) << log();
    hub_->stop();
    auto offline = args();
    offline.push_back("--offline");
    ASSERT_TRUE(mount(offline, source() + "/Q4_K_M"));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    EXPECT_NE(log().find("pinned to commit " + hub_->spec().commit), std::string::npos) << log();
    ASSERT_EQ(unmount_and_wait(), 0) << log();
    // A folder never mounted online is not in the cache: one line, exit 1.
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), source() + "/dense", mnt_, "--cache-dir", cache_,
                             "--offline"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE((r.out + r.err).find("not in the cache (--offline)"), std::string::npos) << r.out + r.err;
}

}  // namespace

namespace {

// `merge hf://ORG/REPO/PATH/NAME-00001-of-N.gguf` reads the pinned commit's resolve URLs (token to
// the API host only); `prefetch hf://ORG/REPO` fills the cache for the whole pinned tree, after
// which an --offline mount serves every file with the Hub stopped.
TEST_F(HubMount, MergeAndPrefetchTakeHubSources) {
    ASSERT_NO_FATAL_FAILURE(start_hub(2, std::string(kToken)));
    ::setenv("HF_TOKEN", kToken, 1);
    const std::string out = root_ + "/out";
    fs::create_directories(out);
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", "--cache-dir", cache_, "--net-timeout",
                             "3", source() + "/Q4_K_M/kvzoo-00001-of-00007.gguf", out + "/kvzoo.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(gguf_test::sha256_file(out + "/kvzoo.gguf"), kvzoo_.merged_sha256);
    EXPECT_EQ(std::distance(fs::directory_iterator(out), fs::directory_iterator{}), 1) << "only the output is left";
    EXPECT_EQ(r.err.find(kToken), std::string::npos) << r.err;
    for (const auto& e : hub_->api().access_log()) EXPECT_TRUE(e.has_authorization()) << e.uri;
    const auto cdn = hub_->cdn().access_log();
    EXPECT_FALSE(cdn.empty());
    for (const auto& e : cdn) EXPECT_FALSE(e.has_authorization()) << e.uri;

    r = gguf_test::run({gguf_test::gguf_mount_binary(), "prefetch", "-q", "--cache-dir", cache_, "--net-timeout", "3",
                        source()});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    hub_->stop();
    auto offline = args();
    offline.push_back("--offline");
    ASSERT_TRUE(mount(offline, source()));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/Q4_K_M/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/dense/dense.gguf"), dense_sha256_) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/mmproj-tiny.gguf"),
              gguf_test::sha256_file(gguf_test::fixture("tiny-llama/tiny-llama.gguf")))
        << log();
    ASSERT_EQ(unmount_and_wait(), 0) << log();
}

}  // namespace

namespace {

/// The X-Amz-Signature value of a CDN request URI ("" when none).
std::string signature_of(const std::string& uri) {
    const std::string key = "X-Amz-Signature=";
    const size_t at = uri.find(key);
    if (at == std::string::npos) return "";
    return uri.substr(at + key.size(), uri.find('&', at) - at - key.size());
}

// Issue 12: "reuse the resolved location for later ranges of the same file until it fails, then
// resolve again". Each resolve gets its own signed CDN URL; the CDN then refuses two of them: 403
// (an expired signature) for shard 1's and a dropped connection for shard 2's (every attempt).
TEST_F(HubMount, AFailingCdnLocationIsResolvedAgainOnceAndTheBytesStayExact) {
    ASSERT_NO_FATAL_FAILURE(start_hub(50, std::string(kToken), true));
    ::setenv("HF_TOKEN", kToken, 1);
    ASSERT_TRUE(mount(args(), source() + "/dense"));
    // Mounting read block 0 of each shard: one resolve each, one signed location each.
    const std::string resolve = "/resolve/" + hub_->spec().commit + "/dense/";
    auto cdn = hub_->cdn_access_log();
    std::map<std::string, std::string> location;  // shard file name -> signature
    std::map<std::string, std::string> blob_of;   // blob path -> shard file name
    for (const auto& e : hub_->entries()) {
        if (e.path.rfind("dense/", 0) == 0) blob_of["/blobs/" + e.sha256] = e.path.substr(6);
    }
    for (const auto& e : cdn) location[blob_of[e.uri.substr(0, e.uri.find('?'))]] = signature_of(e.uri);
    ASSERT_EQ(location.size(), 3u) << cdn.size();
    const std::string s1 = "dense-00001-of-00003.gguf", s2 = "dense-00002-of-00003.gguf",
                      s3 = "dense-00003-of-00003.gguf";
    ASSERT_EQ(location[s1].size(), 32u) << location[s1];
    ASSERT_NE(location[s1], location[s2]);
    hub_->fault_cdn().set_rules(nlohmann::json::array(
        {{{"path", "*"}, {"query", location[s1]}, {"fault", "status"}, {"status", 403}},
         {{"path", "*"}, {"query", location[s2]}, {"fault", "drop"}, {"after_bytes", 1000}}}));
    hub_->api().clear_access_log();
    hub_->fault_cdn().clear_access_log();

    // Every second block (4 MiB on) is read now: through the old locations first.
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/dense.gguf"), dense_sha256_) << log();
    std::map<std::string, size_t> resolves;
    for (const auto& e : hub_->api().access_log()) {
        const size_t at = e.uri.find(resolve);
        if (at != std::string::npos) ++resolves[e.uri.substr(at + resolve.size())];
        EXPECT_EQ(e.authorization, std::string("Bearer ") + kToken) << e.uri;
    }
    // One more resolve for each refused location; shard 3's location is still good: reused.
    EXPECT_EQ(resolves[s1], 1u);
    EXPECT_EQ(resolves[s2], 1u);
    EXPECT_EQ(resolves[s3], 0u);
    size_t refused = 0, dropped = 0, good = 0;
    for (const auto& e : hub_->cdn_access_log()) {
        EXPECT_FALSE(e.has_authorization()) << e.uri;
        const std::string sig = signature_of(e.uri);
        if (sig == location[s1]) refused += e.status == 403;
        else if (sig == location[s2]) ++dropped;
        else good += e.status == 206;
        std::printf("[ cdn      ] %s %d %s\n", e.uri.substr(0, e.uri.find('?')).c_str(), e.status, sig.c_str());
    }
    EXPECT_EQ(refused, 1u);     // a 403 is not retried at the same location
    EXPECT_GE(dropped, 1u);     // a dropped transfer is retried there, then resolved again
    EXPECT_EQ(good, 3u);        // shard 1 and 2 through their new locations, shard 3 through its old one
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

}  // namespace

namespace {

// hf://ORG/REPO[@REV]/PATH where PATH is a first shard: mount, check and prefetch serve that one
// merged set (like an http(s) first-shard URL), pinned to the commit of REV; a mount lists only
// the tree of the shard's folder at that commit (the shards' lfs.oid).
TEST_F(HubMount, AFirstShardPathIsServedAsItsMergedSetByMountCheckAndPrefetch) {
    ASSERT_NO_FATAL_FAILURE(start_hub(2));
    const std::string first = source() + "@main/Q4_K_M/" + gguf::base_name(kvzoo_.shards.front());
    ASSERT_TRUE(mount(args(), first));
    EXPECT_EQ(mount_test::list_dir(mnt_), std::vector<std::string>{"kvzoo.gguf"}) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    auto api = hub_->api().access_log();
    EXPECT_EQ(count_if_uri(api, "/revision/main"), 1u);
    EXPECT_GE(count_if_uri(api, "/tree/" + hub_->spec().commit + "/Q4_K_M"), 1u);
    EXPECT_EQ(count_if_uri(api, "/tree/"), count_if_uri(api, "/tree/" + hub_->spec().commit + "/Q4_K_M"));
    EXPECT_EQ(count_if_uri(api, "/resolve/" + hub_->spec().commit + "/Q4_K_M/kvzoo-"), kvzoo_.shards.size());

    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", first, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j.at("entries").size(), 1u) << r.out;
    EXPECT_EQ(j.at("entries")[0].at("path"), "kvzoo.gguf") << r.out;

    const std::string cache2 = root_ + "/cache2";
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "prefetch", "-q", "--cache-dir", cache2, first});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    hub_->stop();
    ASSERT_TRUE(mount({"--cache-dir", cache2, "--offline"}, first));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

// A PATH naming another shard, a single-file model, a companion or nothing: one line naming it
// and what to give instead, exit 1, for mount, check and prefetch.
TEST_F(HubMount, AFileThatIsNotAFirstShardIsOneLineNamingIt) {
    ASSERT_NO_FATAL_FAILURE(start_hub(50));
    struct Case {
        std::string path, says;
        bool no_request;  // refused by its name, before any request
    };
    const std::vector<Case> cases = {
        {"Q4_K_M/kvzoo-00002-of-00007.gguf", "shard 2 of 7, not the first: give " + source() +
                                                 "/Q4_K_M/kvzoo-00001-of-00007.gguf", true},
        {"mmproj-tiny.gguf", "a single-file model, not the first shard of a split set", true},
        {"README.md", "a file, not a folder", false},
        {"Q4_K_M/nothere-00001-of-00002.gguf", "not found (HTTP 404)", false},
    };
    for (const auto& c : cases) {
        for (const std::string cmd : {"mount", "check", "prefetch"}) {
            SCOPED_TRACE(cmd + " " + c.path);
            hub_->api().clear_access_log();
            std::vector<std::string> argv = {gguf_test::gguf_mount_binary(), cmd, source() + "/" + c.path};
            if (cmd == "mount") argv.push_back(mnt_);
            if (cmd != "check") argv.insert(argv.end(), {"--cache-dir", cache_});
            auto r = gguf_test::run(argv);
            const std::string all = r.out + r.err;
            EXPECT_EQ(r.exit_code, 1) << all;
            EXPECT_EQ(mount_test::lines_with(all, c.path).size(), 1u) << all;
            EXPECT_NE(all.find(c.says), std::string::npos) << all;
            EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << all;
            if (c.no_request) EXPECT_TRUE(hub_->api().access_log().empty());
            std::printf("[ hf file  ] %s %s: exit %d: %s", cmd.c_str(), c.path.c_str(), r.exit_code, r.err.c_str());
        }
    }
    EXPECT_FALSE(mount_test::find_mount(mnt_));
}

}  // namespace
