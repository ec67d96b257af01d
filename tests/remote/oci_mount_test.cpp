// oci:// and ollama:// sources end to end against a real registry (Debian's docker-registry,
// started by the test on 127.0.0.1 without auth), models pushed through its HTTP API in the
// three flavours (Ollama, Docker model artifact, CNCF ModelPack), single-blob and sharded, and
// local OCI image layouts and Ollama stores: every served model byte-exact against the
// fixtures' golden merges.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <thread>

#include "mount/mount_fixture.hpp"
#include "remote/oci_registry.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;
using remote_test::OciRegistry;

using remote_test::concat;
using remote_test::kvzoo_t7;
const std::string kTiny = remote_test::tiny_llama();

class OciMount : public remote_test::OciMountFixture {
protected:
    void start_registry() {
        std::string error;
        ASSERT_TRUE(registry_.start(root_ + "/registry", &error)) << error;
    }
    /// The options of every remote command here.
    std::vector<std::string> args() const { return {"--plain-http", "--cache-dir", cache_}; }
    std::string ref(const std::string& repo_tag) const { return "oci://" + registry_.host() + "/" + repo_tag; }
    std::vector<std::string> kvzoo3() { return remote_test::kvzoo_t15(root_); }
    /// 96 MiB in 3 shards of 32 MiB (8 cache blocks each) under ROOT/big, and the SHA-256 of
    /// their `gguf-mount merge`.
    void big_model(std::vector<std::string>* shards, std::string* want) {
        fs::create_directories(root_ + "/big");
        *shards = mount_test::split_dense_model(48, [](int) { return int64_t{524288}; }, 16, 7, root_ + "/big/big");
        ASSERT_EQ(shards->size(), 3u);
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", (*shards)[0], root_ + "/want.gguf"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        *want = gguf_test::sha256_file(root_ + "/want.gguf");
    }
};

TEST_F(OciMount, EveryFlavourSingleAndShardedIsByteExactAndTheMergedFileIsNamedAsAFoldersSetIs) {
    ASSERT_NO_FATAL_FAILURE(start_registry());
    const std::string tmpl = root_ + "/template.txt";
    gguf_test::write_file(tmpl, "{{ .Prompt }}\n");
    // Ollama: no names, layers in shard order; a template and params beside the model.
    ASSERT_FALSE(registry_.push(concat({"--flavour", "ollama", "--repo", "library/kvzoo", "--tag", "t7",
                                        "--companion", "application/vnd.ollama.image.template=" + tmpl},
                                       kvzoo_t7()))
                     .empty());
    ASSERT_FALSE(registry_.push({"--flavour", "ollama", "--repo", "library/tiny", "--tag", "q8", kTiny}).empty());
    // Docker model artifact and ModelPack: named layers, pushed out of shard order.
    ASSERT_FALSE(registry_.push(concat({"--flavour", "docker", "--names", "--order", "3,1,2", "--repo", "ai/kv3",
                                        "--tag", "latest"},
                                       kvzoo3()))
                     .empty());
    ASSERT_FALSE(registry_.push(concat({"--flavour", "modelpack", "--names", "--order", "7,3,1,2,6,5,4", "--repo",
                                        "pack/kv7", "--tag", "v1"},
                                       kvzoo_t7()))
                     .empty());
    ASSERT_FALSE(registry_.push({"--flavour", "modelpack", "--names", "--repo", "pack/tiny", "--tag", "v1", kTiny}).empty());
    const std::string tiny_sha = gguf_test::sha256_file(kTiny);

    struct Case {
        std::string source, file, sha256;
    };
    const std::vector<Case> cases = {
        {"ollama://" + registry_.host() + "/library/kvzoo:t7", "kvzoo.gguf", mount_test::kKvzooMergedSha256},
        {"ollama://" + registry_.host() + "/library/tiny:q8", "tiny.gguf", tiny_sha},
        {ref("ai/kv3"), "kvzoo.gguf", mount_test::kKvzooMergedSha256},
        {ref("pack/kv7:v1"), "kvzoo.gguf", mount_test::kKvzooMergedSha256},
        {ref("pack/tiny:v1"), "tiny-llama.gguf", tiny_sha},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.source);
        ASSERT_TRUE(mount(args(), c.source)) << log();
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + c.file), c.sha256) << log();
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(mnt_)) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        if (c.file == "kvzoo.gguf" && c.source.rfind("ollama", 0) == 0) {
            EXPECT_EQ(names, (std::vector<std::string>{"kvzoo.gguf", "kvzoo.template"}));
            EXPECT_EQ(gguf_test::read_file(mnt_ + "/kvzoo.template"), "{{ .Prompt }}\n");
        } else {
            EXPECT_EQ(names, std::vector<std::string>{c.file});
        }
        EXPECT_EQ(unmount_and_wait(), 0) << log();
    }
}

TEST_F(OciMount, ATagIsPinnedToItsManifestDigestAndADigestReferenceIsCheckedAndAnIndexIsNarrowed) {
    ASSERT_NO_FATAL_FAILURE(start_registry());
    const std::string index = registry_.push(concat({"--flavour", "docker", "--names", "--index", "--order",
                                                     "2,1,3,4,5,6,7", "--repo", "ai/kv", "--tag", "latest"},
                                                    kvzoo_t7()));
    ASSERT_FALSE(index.empty());
    // By tag: the index is narrowed to the model manifest (the image for a platform is skipped).
    ASSERT_TRUE(mount(args(), ref("ai/kv"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256) << log();
    // The tag moves to another model: the mount keeps serving the version it pinned.
    ASSERT_FALSE(registry_.push({"--flavour", "docker", "--repo", "ai/kv", "--tag", "latest", kTiny}).empty());
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();

    // By digest: the index's bytes are checked against it.
    ASSERT_TRUE(mount(args(), ref("ai/kv@" + index))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    auto r = gguf_test::run(concat({gguf_test::gguf_mount_binary(), "check"},
                                   concat(args(), {ref("ai/kv@sha256:" + std::string(64, '0'))})));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("ai/kv@sha256:0000"), std::string::npos) << r.err;
}

// A registry model's files carry the manifest's created time, else the time this cache first
// saw the manifest, kept for later mounts; a folder shows its newest file's (both showed
// 1970-01-01 before).
TEST_F(OciMount, FilesShowTheManifestsCreatedTimeElseWhenTheCacheFirstSawTheManifest) {
    ASSERT_NO_FATAL_FAILURE(start_registry());
    ASSERT_FALSE(registry_.push({"--flavour", "docker", "--repo", "ai/dated", "--created",
                                 "2025-04-01T11:30:00.123+02:00", kTiny})
                     .empty());
    ASSERT_FALSE(registry_.push({"--flavour", "modelpack", "--repo", "ai/undated", kTiny}).empty());
    auto mtime_of = [](const std::string& path) {
        struct stat st {};
        EXPECT_EQ(::stat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
        return st.st_mtime;
    };
    ASSERT_TRUE(mount(args(), ref("ai/dated"))) << log();
    EXPECT_EQ(mtime_of(mnt_ + "/dated.gguf"), 1743499800) << log();
    EXPECT_EQ(mtime_of(mnt_), 1743499800) << "the mount's root: the newest file beneath it";
    EXPECT_EQ(unmount_and_wait(), 0) << log();

    const time_t before = ::time(nullptr);
    ASSERT_TRUE(mount(args(), ref("ai/undated"))) << log();
    const time_t first = mtime_of(mnt_ + "/undated.gguf");
    EXPECT_GE(first, before);
    EXPECT_LE(first, ::time(nullptr));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    ASSERT_TRUE(mount(args(), ref("ai/undated"))) << log();  // the tag revalidated with a HEAD
    EXPECT_EQ(mtime_of(mnt_ + "/undated.gguf"), first) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(OciMount, AReferenceThatCannotBeResolvedIsOneLineAndNothingIsMounted) {
    ASSERT_NO_FATAL_FAILURE(start_registry());
    ASSERT_FALSE(registry_.push({"--flavour", "ollama", "--repo", "library/tiny", "--tag", "q8", kTiny}).empty());
    const std::string readme = root_ + "/README.md";
    gguf_test::write_file(readme, "not a model\n");
    ASSERT_FALSE(registry_.push({"--flavour", "modelpack", "--names", "--repo", "pack/docs", "--tag", "v1", "--companion",
                                 "application/vnd.cncf.model.weight.v1.tar+gzip=" + readme, readme})
                     .empty());
    struct Case {
        std::string source, line;
    };
    const std::string h = registry_.host();
    const std::vector<Case> cases = {
        {ref("library/tiny:nope"), h + "/library/tiny:nope: MANIFEST_UNKNOWN"},
        {ref("other/repo:v1"), h + "/other/repo:v1: "},
        {ref("pack/docs:v1"), "no GGUF layer (media types: application/vnd.cncf.model.weight.v1.raw, "
                              "application/vnd.cncf.model.weight.v1.tar+gzip); archive weight layers cannot be "
                              "range-read"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.source);
        EXPECT_FALSE(mount(args(), c.source));
        const std::string l = log();
        EXPECT_NE(l.find(c.line), std::string::npos) << l;
        EXPECT_NE(l.find("nothing mounted"), std::string::npos) << l;
        EXPECT_FALSE(mount_test::find_mount(mnt_));
        auto r = gguf_test::run(concat({gguf_test::gguf_mount_binary(), "check"}, concat(args(), {c.source})));
        EXPECT_NE(r.exit_code, 0) << r.out;
        EXPECT_NE(r.err.find(c.line), std::string::npos) << r.err;
    }
}

/// Flips one byte `from_end` bytes before the end of the registry's stored blob of `file`;
/// returns the sha256 of the bytes now stored.
std::string corrupt_blob(const OciRegistry& registry, const std::string& file, size_t from_end) {
    const std::string data = registry.blob_path("sha256:" + gguf_test::sha256_file(file));
    std::string bytes = gguf_test::read_file(data);
    EXPECT_EQ(bytes.size(), fs::file_size(file));
    bytes[bytes.size() - from_end] ^= 0x5a;
    gguf_test::write_file(data, bytes);
    return gguf_test::sha256_hex(bytes);
}

TEST_F(OciMount, ABlobCorruptedInTheRegistrysStorageIsEioWithBothDigestsLoggedAndPrefetchAndMergeRefuseIt) {
    ASSERT_NO_FATAL_FAILURE(start_registry());
    // A dense model in 3 shards of 6 MiB (two cache blocks each), and its local merge.
    std::string want;
    const auto shards = remote_test::dense_shards(root_, &want);
    ASSERT_EQ(shards.size(), 3u);
    gguf_test::RunResult r;
    ASSERT_FALSE(registry_.push(concat({"--flavour", "ollama", "--repo", "library/dense", "--tag", "v1"}, shards)).empty());
    const std::string source = "ollama://" + registry_.host() + "/library/dense:v1";
    // First served as stored: byte-exact.
    ASSERT_TRUE(mount(args(), source)) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/dense.gguf"), want) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();

    // Shard 2's blob: one byte of its tensor data flipped in place (same size); a fresh cache.
    const std::string expected = gguf_test::sha256_file(shards[1]);
    const std::string wrong = corrupt_blob(registry_, shards[1], 100);
    cache_ = root_ + "/cache2";
    ASSERT_TRUE(mount(args(), source)) << log();
    uint64_t good = 0;
    EXPECT_EQ(remote_test::read_until_error(mnt_ + "/dense.gguf", &good), EIO);
    EXPECT_GT(good, fs::file_size(shards[0]));  // shard 1 was served
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    const std::string l = log();
    EXPECT_NE(l.find("sha256 mismatch: expected " + expected + " (the layer's digest)"), std::string::npos) << l;
    EXPECT_NE(l.find("hash to " + wrong), std::string::npos) << l;

    // prefetch and merge check every blob they read: both refuse, nothing written.
    cache_ = root_ + "/cache3";
    r = gguf_test::run(concat({gguf_test::gguf_mount_binary(), "prefetch", "-q"}, concat(args(), {source})));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(wrong), std::string::npos) << r.err;
    const std::string out = root_ + "/merged.gguf";
    r = gguf_test::run(concat({gguf_test::gguf_mount_binary(), "merge", "-q"}, concat(args(), {source, out})));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(wrong), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
}

TEST_F(OciMount, ACachedRemountServesVerifiedBlobsWithoutHashingThemAgainAndHashesWhatItMustFetch) {
    ASSERT_NO_FATAL_FAILURE(start_registry());
    ASSERT_FALSE(registry_.push(concat({"--flavour", "docker", "--repo", "ai/kvzoo"}, kvzoo_t7())).empty());
    const std::string source = ref("ai/kvzoo");
    const std::string not_again = "checked against its sha256 before: not hashed again";
    // The first mount fetches and checks every blob.
    ASSERT_TRUE(mount(concat(args(), {"-v"}), source)) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(log().find(not_again), std::string::npos) << log();
    // Remounted: the 7 blobs are served from the checked cache, none hashed again.
    ASSERT_TRUE(mount(concat(args(), {"-v"}), source)) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(mount_test::lines_with(log(), not_again).size(), 7u) << log();
    // A blob whose blocks left the cache is fetched and hashed again: the registry now holds wrong
    // bytes for shard 4, and they are refused.
    const std::string expected = gguf_test::sha256_file(kvzoo_t7()[3]);
    const std::string wrong = corrupt_blob(registry_, kvzoo_t7()[3], 100);
    for (const auto& object : fs::directory_iterator(cache_ + "/v1/objects")) {
        for (const auto& block : fs::directory_iterator(object.path())) fs::remove(block.path());
    }
    EXPECT_FALSE(mount(args(), source));
    EXPECT_NE(log().find("sha256 mismatch: expected " + expected + " (the layer's digest), the 589216 bytes received "
                         "hash to " + wrong),
              std::string::npos)
        << log();
}

TEST_F(OciMount, ASmallCorruptedBlobHidesItsModelAndTheMountIsRefusedNamingBothDigests) {
    ASSERT_NO_FATAL_FAILURE(start_registry());
    ASSERT_FALSE(registry_.push(concat({"--flavour", "ollama", "--repo", "library/kvzoo", "--tag", "t7"}, kvzoo_t7())).empty());
    const std::string expected = gguf_test::sha256_file(kvzoo_t7()[3]);
    const std::string wrong = corrupt_blob(registry_, kvzoo_t7()[3], 100);
    EXPECT_FALSE(mount(args(), "ollama://" + registry_.host() + "/library/kvzoo:t7"));
    const std::string l = log();
    EXPECT_NE(l.find("sha256 mismatch: expected " + expected + " (the layer's digest), the 589216 bytes received "
                     "hash to " + wrong),
              std::string::npos)
        << l;
    EXPECT_NE(l.find("nothing mounted"), std::string::npos) << l;
}

TEST_F(OciMount, CheckPrefetchAndMergeReadRegistryModelsAndOfflineServesWhatPrefetchFetched) {
    ASSERT_NO_FATAL_FAILURE(start_registry());
    ASSERT_FALSE(registry_.push(concat({"--flavour", "modelpack", "--names", "--order", "7,6,5,4,3,2,1", "--repo",
                                        "pack/kv7", "--tag", "v1"},
                                       kvzoo_t7()))
                     .empty());
    const std::string source = ref("pack/kv7:v1");
    auto r = gguf_test::run(concat({gguf_test::gguf_mount_binary(), "check"}, concat(args(), {source})));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("kvzoo.gguf: merged-set of 7 shards, 3525664 bytes, 43 tensors"), std::string::npos) << r.out;
    r = gguf_test::run(concat({gguf_test::gguf_mount_binary(), "merge", "-q"}, concat(args(), {source, root_ + "/m.gguf"})));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(root_ + "/m.gguf"), mount_test::kKvzooMergedSha256);
    r = gguf_test::run(concat({gguf_test::gguf_mount_binary(), "prefetch", "-q"}, concat(args(), {source})));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    registry_.stop();
    // The registry is gone: the manifest and every blob come from the cache.
    ASSERT_TRUE(mount(concat(args(), {"--offline"}), source)) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(OciMount, AnOciLayoutAndAnOllamaStoreShowEveryTaggedModelWithBlobsReadInPlace) {
    // An Ollama store as Ollama lays it out: manifests/REGISTRY/NS/MODEL/TAG, blobs/sha256-HEX.
    const std::string store = root_ + "/ollama";
    const std::string tmpl = root_ + "/template.txt";
    gguf_test::write_file(tmpl, "{{ .System }}\n");
    ASSERT_FALSE(remote_test::oci_push(concat({"--flavour", "ollama", "--store", store, "--name", "library/kvzoo",
                                               "--tag", "t7", "--companion",
                                               "application/vnd.ollama.image.template=" + tmpl},
                                              kvzoo_t7()))
                     .empty());
    ASSERT_FALSE(remote_test::oci_push({"--flavour", "ollama", "--store", store, "--name", "library/tiny", "--tag",
                                        "latest", kTiny})
                     .empty());
    ASSERT_FALSE(remote_test::oci_push({"--flavour", "ollama", "--store", store, "--name", "someone/tiny", "--tag",
                                        "q8", kTiny})
                     .empty());
    ASSERT_TRUE(mount({}, store)) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo-t7.gguf"), mount_test::kKvzooMergedSha256) << log();
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/kvzoo-t7.template"), "{{ .System }}\n");
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/tiny-latest.gguf"), gguf_test::sha256_file(kTiny));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/someone/tiny-q8.gguf"), gguf_test::sha256_file(kTiny));
    EXPECT_EQ(unmount_and_wait(), 0) << log();

    // An OCI image layout with two tags, one of them an index.
    const std::string layout = root_ + "/kv";
    ASSERT_FALSE(remote_test::oci_push(concat({"--flavour", "modelpack", "--names", "--order", "4,1,2,3,7,6,5",
                                               "--layout", layout, "--tag", "t7"},
                                              kvzoo_t7()))
                     .empty());
    ASSERT_FALSE(remote_test::oci_push({"--flavour", "docker", "--index", "--layout", layout, "--tag", "tiny", kTiny})
                     .empty());
    ASSERT_TRUE(mount({}, layout)) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kv-t7.gguf"), mount_test::kKvzooMergedSha256) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kv-tiny.gguf"), gguf_test::sha256_file(kTiny)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", layout});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("kv-t7.gguf: merged-set of 7 shards"), std::string::npos) << r.out;
    // Read in place: the served parts are the layout's own blob files.
    EXPECT_NE(r.out.find("shard 1: blobs/sha256/61c1697c"), std::string::npos) << r.out;
}

}  // namespace

namespace {

// kill -9 of the daemon while it fetches a sharded registry model: the block cache survives the
// crash (a remount serves the model byte-exact and asks the registry for less than the model),
// and after a prefetch --offline serves it with the registry stopped.
TEST_F(OciMount, AKilledMountLeavesACacheThatARemountAndThenOfflineServeByteExact) {
    // 96 MiB in 3 shards of 32 MiB (8 cache blocks each), pushed out of shard order.
    std::vector<std::string> shards;
    std::string want;
    ASSERT_NO_FATAL_FAILURE(big_model(&shards, &want));
    uint64_t model_bytes = 0;
    for (const auto& s : shards) model_bytes += fs::file_size(s);
    registry_.access_log = true;
    ASSERT_NO_FATAL_FAILURE(start_registry());
    ASSERT_FALSE(registry_.push(concat({"--flavour", "docker", "--names", "--order", "3,1,2", "--repo", "ai/big", "--tag",
                                        "v1"},
                                       shards))
                     .empty());
    const std::string source = ref("ai/big:v1");

    // A reader goes through the first 40 MiB, then the daemon is killed in the middle of the
    // model (its read-ahead in flight).
    ASSERT_TRUE(mount(args(), source)) << log();
    {
        mount_test::Fd fd{::open((mnt_ + "/big.gguf").c_str(), O_RDONLY)};
        ASSERT_GE(fd.fd, 0);
        std::string buf(1 << 20, '\0');
        for (off_t at = 0; at < (off_t{40} << 20); at += static_cast<off_t>(buf.size()))
            ASSERT_EQ(::pread(fd.fd, buf.data(), buf.size(), at), static_cast<ssize_t>(buf.size())) << log();
        ASSERT_EQ(::kill(daemon_.pid(), SIGKILL), 0);
    }
    EXPECT_EQ(daemon_.wait_exit(), std::optional<int>(128 + SIGKILL));
    EXPECT_TRUE(mount_test::unmount(mnt_));  // the dead mount point
    const uint64_t before = registry_.blob_bytes_sent();
    EXPECT_GE(before, uint64_t{40} << 20);
    EXPECT_LT(before, model_bytes) << "the whole model was fetched before the kill";

    // A remount on the same cache: byte-exact, and what the killed daemon stored is not asked again.
    ASSERT_TRUE(mount(args(), source)) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/big.gguf"), want) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    const uint64_t remount = registry_.blob_bytes_sent() - before;
    std::cout << "killed after " << before << " blob bytes of " << model_bytes << "; the remount fetched " << remount
              << "\n";
    EXPECT_LT(remount, model_bytes) << "the remount fetched the whole model again";

    // prefetch completes the cache; with the registry stopped, --offline serves the model.
    auto r = gguf_test::run(concat({gguf_test::gguf_mount_binary(), "prefetch", "-q"}, concat(args(), {source})));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    registry_.stop();
    ASSERT_TRUE(mount(concat(args(), {"--offline"}), source)) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/big.gguf"), want) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

}  // namespace

namespace {

// A mount started as users start it (no -f: it plans, then forks into the background) reads a
// checked registry model to its end, byte-exact. The sha256 check's hashing thread used to start
// while planning read the shards' headers; it did not survive the fork, the condition variable it
// waited on did, and the daemon's first notify of it hung for ever (gdb: a FUSE worker inside
// pthread_cond_broadcast, every other worker waiting for the check's mutex): 2 of 2 cold reads
// of a 1.15 GiB model stopped at about 20 MiB. Planning now hashes on its own thread.
TEST_F(OciMount, ADaemonizedMountReadsACheckedModelToItsEnd) {
    std::vector<std::string> shards;
    std::string want;
    ASSERT_NO_FATAL_FAILURE(big_model(&shards, &want));
    ASSERT_NO_FATAL_FAILURE(start_registry());
    ASSERT_FALSE(registry_.push(concat({"--flavour", "docker", "--names", "--repo", "ai/big", "--tag", "v1"}, shards))
                     .empty());
    const std::string daemon_log = root_ + "/daemonized.log";
    std::string why;
    EXPECT_EQ(remote_test::daemonized_sha256(concat({gguf_test::gguf_mount_binary(), ref("ai/big:v1"), mnt_, "--log-file",
                                                     daemon_log},
                                                    args()),
                                             mnt_, "big.gguf", daemon_log, &why),
              want)
        << why;
    EXPECT_EQ(gguf_test::read_file(daemon_log).find("error:"), std::string::npos) << gguf_test::read_file(daemon_log);
}

}  // namespace
