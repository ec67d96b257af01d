// The block cache of oci:// sources against a real registry (Debian's docker-registry on
// 127.0.0.1): blobs are content addresses, so the cache is keyed by digest and shared by every
// tag and repository that holds a layer; and a blob server that answers ranged GETs with the
// whole blob for a while (a mirror filling its copy) still yields the exact bytes.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <nlohmann/json.hpp>

#include "mount/mount_fixture.hpp"
#include "remote/oci_registry.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;

std::vector<std::string> kvzoo7() {
    std::vector<std::string> out;
    for (int i = 1; i <= 7; ++i) out.push_back(std::string(GGUF_TEST_FIXTURES) + "/kvzoo/t7/" + mount_test::kvzoo_shard(i));
    return out;
}

/// `len` bytes at `offset` of `path` (fewer at its end); "" when it cannot be opened.
std::string read_range(const std::string& path, uint64_t offset, size_t len) {
    std::string out(len, '\0');
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {};
    const ssize_t n = ::pread(fd, out.data(), len, static_cast<off_t>(offset));
    ::close(fd);
    out.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return out;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

class OciCache : public remote_test::OciMountFixture {
protected:
    std::vector<std::string> args() const { return {"--plain-http", "--cache-dir", cache_}; }
    std::string ref(const std::string& repo_tag) const { return "oci://" + registry_.host() + "/" + repo_tag; }
};

TEST_F(OciCache, TagsAndRepositoriesSharingALayerReadItsBlocksFromTheCacheOnce) {
    std::string error;
    ASSERT_TRUE(registry_.start(root_ + "/registry", &error)) << error;
    const std::vector<std::string> shards = kvzoo7();
    // The same seven layers under two repositories and tags (Docker's model artifact, names in
    // the layers, pushed out of shard order in the second).
    ASSERT_FALSE(registry_.push(concat({"--flavour", "docker", "--names", "--repo", "team-a/kv", "--tag", "v1"}, shards))
                     .empty());
    ASSERT_FALSE(registry_.push(concat({"--flavour", "docker", "--names", "--order", "7,6,5,4,3,2,1", "--repo",
                                        "team-b/zoo", "--tag", "q8"},
                                       shards))
                     .empty());
    ASSERT_TRUE(mount(args(), ref("team-a/kv:v1"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();

    // The registry loses every layer's bytes (manifests stay): the other repository's model can
    // only be served from the blocks the first mount cached under the layers' digests.
    for (const std::string& s : shards) {
        const std::string data = registry_.blob_path("sha256:" + gguf_test::sha256_file(s));
        ASSERT_TRUE(fs::remove(data)) << data;
    }
    ASSERT_TRUE(mount(args(), ref("team-b/zoo:q8"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(OciCache, WholeBlobAnswersToRangedGetsAreAskedAgainAndNeverServedAsTheRange) {
    // The registry redirects blob GETs to a "CDN" over its own storage whose first two ranged GETs
    // are answered with the whole blob (200), as a pull-through cache answers while it fills:
    // the answers are cut short and asked again, never taken for the range asked.
    remote_test::FaultServer cdn(root_ + "/registry/storage");
    fs::create_directories(root_ + "/registry/storage");
    std::string error;
    ASSERT_TRUE(cdn.start(&error)) << error;
    const nlohmann::json rules = nlohmann::json::array({{{"path", "*"}, {"fault", "ignore_range"}, {"times", 2}}});
    cdn.set_rules(rules);
    ASSERT_TRUE(registry_.start(root_ + "/registry", &error, "", "", cdn.base_url())) << error;
    ASSERT_FALSE(registry_.push(concat({"--flavour", "docker", "--names", "--repo", "ai/kv", "--tag", "latest"}, kvzoo7()))
                     .empty());
    ASSERT_TRUE(mount(args(), ref("ai/kv"))) << log();
    const std::string merged = mnt_ + "/kvzoo.gguf";
    EXPECT_EQ(gguf_test::sha256_file(merged), mount_test::kKvzooMergedSha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();

    // A fresh cache: reads that start inside the blobs, checked against the local merge.
    const std::string reference = root_ + "/kvzoo.gguf";
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", kvzoo7()[0], reference});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(gguf_test::sha256_file(reference), mount_test::kKvzooMergedSha256);
    fs::remove_all(cache_);
    cdn.set_rules(rules);
    ASSERT_TRUE(mount(args(), ref("ai/kv"))) << log();
    const std::string want = gguf_test::read_file(reference);
    for (uint64_t at : {want.size() / 2, want.size() / 3 + 4097, want.size() - 5000}) {
        SCOPED_TRACE(at);
        const std::string got = read_range(merged, at, 4096);
        EXPECT_EQ(got, want.substr(at, 4096)) << log();
    }
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    // The whole-blob answers were sent: each is logged, a cut-off one once the server's write
    // fails (which may come after the unmount).
    size_t whole = 0;
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
         whole < 4 && std::chrono::steady_clock::now() < until;
         std::this_thread::sleep_for(std::chrono::milliseconds(50))) {
        whole = 0;
        for (const auto& e : cdn.access_log()) whole += e.method == "GET" && !e.range.empty() && e.status == 200;
    }
    EXPECT_EQ(whole, 4u) << "two whole answers to ranged GETs per mount";
}

}  // namespace
