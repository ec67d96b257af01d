// `gguf-mount cache list|trim|clear`, the default cache bound and prefetch's --cache-max-size,
// against nginx on 127.0.0.1: what is cached per source, least-recently-used trims that keep
// the cache consistent (later mounts read the reference bytes), and never a block of a source a
// running mount reads. And the listing records counted and evicted by the bound (BlockCache).
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "gguf/model/merge_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "mount/mount_fixture.hpp"
#include "remote/nginx_mount_fixture.hpp"
#include "remote/store/cache.hpp"
#include "remote/store/cache_inventory.hpp"
#include "support/support.hpp"

namespace {

using remote_test::NginxMountFixture;

/// sha256 of the local merge of the set whose first shard is `first` (the reference).
std::string merged_sha256(const std::string& first) {
    gguf::VirtualFile vf = gguf::open_merged(gguf::SplitSet::open(first));
    std::string out(vf.size(), '\0');
    EXPECT_EQ(vf.read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    return gguf_test::sha256_hex(out);
}

/// Sets the mtime of every file under `dir` back by `seconds` (keeping their order).
void age_files(const std::string& dir, int seconds) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
        struct stat st {};
        ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
        if (!S_ISREG(st.st_mode)) continue;
        struct timespec t[2] = {st.st_atim, st.st_mtim};
        t[0].tv_sec -= seconds;
        t[1].tv_sec -= seconds;
        ASSERT_EQ(::utimensat(AT_FDCWD, e.path().c_str(), t, AT_SYMLINK_NOFOLLOW), 0) << e.path();
    }
}

/// Regular files below `dir` (recursively), 0 when it does not exist.
size_t count_files(const std::string& dir) {
    if (!std::filesystem::exists(dir)) return 0;
    size_t n = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) n += e.is_regular_file();
    return n;
}

/// Bytes of the regular files below `dir` (or of `dir` itself when it is a file).
uint64_t bytes_below(const std::string& dir) {
    uint64_t n = 0;
    if (!std::filesystem::exists(dir)) return 0;
    if (std::filesystem::is_regular_file(dir)) return std::filesystem::file_size(dir);
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') n += e.file_size();
    }
    return n;
}

class CacheCommand : public NginxMountFixture {
protected:
    void SetUp() override {
        NginxMountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        // Three models a, b, c: 3 shards of about 6.29 MB each (two 4 MiB blocks per shard).
        for (const char* name : {"a", "b", "c"}) {
            const std::string dir = src_ + "/" + name;
            ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
            auto shards = mount_test::split_dense_model(
                12, [](int) { return int64_t{393216}; }, 4, static_cast<uint64_t>(name[0]), dir + "/dense");
            ASSERT_EQ(shards.size(), 3u);
            uint64_t bytes = 0;
            for (const auto& s : shards) bytes += std::filesystem::file_size(s);
            model_bytes_[name] = bytes;
            sha256_[name] = merged_sha256(shards.front());
        }
        ASSERT_NO_FATAL_FAILURE(serve());
    }
    std::string url(const std::string& name) const {
        return nginx_->base_url() + "/" + name + "/dense-00001-of-00003.gguf";
    }
    gguf_test::RunResult gm(std::vector<std::string> args) {
        args.insert(args.begin(), gguf_test::gguf_mount_binary());
        return gguf_test::run(args);
    }
    void prefetch(const std::string& name) {
        auto r = gm({"prefetch", "-q", "--cache-dir", cache_, url(name)});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    /// `cache list --json`, parsed.
    nlohmann::json list() {
        auto r = gm({"cache", "list", "--json", "--cache-dir", cache_});
        EXPECT_EQ(r.exit_code, 0) << r.err;
        return nlohmann::json::parse(r.out);
    }
    /// The sources `cache list` shows, as URLs.
    std::set<std::string> listed_sources() {
        std::set<std::string> out;
        const nlohmann::json j = list();
        for (const auto& s : j["sources"]) out.insert(s["source"].is_null() ? "(none)" : s["source"].get<std::string>());
        return out;
    }
    /// Mounts `name`'s URL (with `more` options), checks the merged file's sha256, unmounts.
    void mount_and_check(const std::string& name, const std::vector<std::string>& more = {}) {
        std::vector<std::string> a = {"--cache-dir", cache_, "--net-timeout", "3"};
        a.insert(a.end(), more.begin(), more.end());
        ASSERT_TRUE(mount(a, url(name)));
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/dense.gguf"), sha256_[name]) << name << ": " << log();
        ASSERT_EQ(unmount_and_wait(), 0) << log();
    }

    std::map<std::string, uint64_t> model_bytes_;
    std::map<std::string, std::string> sha256_;
};

TEST_F(CacheCommand, ListAfterAPrefetchShowsTheSourceItsBytesAndLastUse) {
    const time_t before = ::time(nullptr);
    auto r = gm({"prefetch", "-q", "--cache-dir", cache_, url("a") + "?token=secret"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const time_t after = ::time(nullptr);
    const nlohmann::json j = list();
    ASSERT_EQ(j["sources"].size(), 1u) << j.dump();
    const auto& s = j["sources"][0];
    EXPECT_EQ(s["source"], url("a"));  // as shown: no query
    EXPECT_EQ(s["objects"], 3);
    // Every byte of the 3 shards, a 16-byte checksum record per block (6 blocks), and the meta
    // records of the 3 shard URLs.
    const uint64_t records = bytes_below(cache_ + "/v1/meta") + bytes_below(cache_ + "/v1/listings");
    EXPECT_GT(records, 0u);
    EXPECT_EQ(s["bytes"].get<uint64_t>(), model_bytes_["a"] + 6 * 16 + records);
    EXPECT_GE(s["last_use_unix"].get<int64_t>(), before);
    EXPECT_LE(s["last_use_unix"].get<int64_t>(), after);
    EXPECT_EQ(s["in_use"], false);
    EXPECT_EQ(j["total"]["objects"], 3);
    EXPECT_EQ(j["total"]["bytes"], s["bytes"]);
    EXPECT_EQ(j["total"]["sources"], 1);
    EXPECT_TRUE(j["default_max_bytes"].is_number());
    EXPECT_EQ(j["cache_dir"], cache_);
    // The text form names the source and the totals; nothing shows the query.
    r = gm({"cache", "list", "--cache-dir", cache_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find(url("a")), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("total: 1 source(s), 3 object(s)"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("rows add up"), std::string::npos) << r.out;  // one row: nothing to explain
    for (const auto& e : std::filesystem::recursive_directory_iterator(cache_)) {
        if (e.is_regular_file()) EXPECT_EQ(gguf_test::read_file(e.path()).find("secret"), std::string::npos) << e.path();
    }
}

TEST_F(CacheCommand, TrimRemovesTheLeastRecentlyUsedFirstAndLaterMountsReadTheRightBytes) {
    ASSERT_NO_FATAL_FAILURE(prefetch("a"));
    ASSERT_NO_FATAL_FAILURE(prefetch("b"));
    ASSERT_NO_FATAL_FAILURE(prefetch("c"));
    // An hour later a is read again: b is now the least recently used, then c.
    ASSERT_NO_FATAL_FAILURE(age_files(cache_, 7200));
    ASSERT_NO_FATAL_FAILURE(mount_and_check("a", {"--offline"}));
    std::map<std::string, uint64_t> bytes;
    const nlohmann::json listed = list();
    for (const auto& s : listed["sources"]) bytes[s["source"].get<std::string>()] = s["bytes"].get<uint64_t>();
    ASSERT_EQ(bytes.size(), 3u) << list().dump();
    EXPECT_EQ(listed["sources"][0]["source"], url("a"));  // newest first
    // A bound that holds a and c but not b as well.
    const uint64_t bound = bytes[url("a")] + bytes[url("c")] + 1000000;
    auto r = gm({"cache", "trim", "--max-size", std::to_string(bound / 1000000) + "M", "--json", "--cache-dir", cache_});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto t = nlohmann::json::parse(r.out);
    EXPECT_LE(t["bytes_left"].get<uint64_t>(), bound / 1000000 * 1000000);
    EXPECT_GE(t["removed_bytes"].get<uint64_t>(), model_bytes_["b"]);
    EXPECT_EQ(t["in_use"].size(), 0u);
    EXPECT_EQ(listed_sources(), (std::set<std::string>{url("a"), url("c")}));
    // Consistent: a and c are served offline with the right bytes, b is fetched again.
    ASSERT_NO_FATAL_FAILURE(mount_and_check("b"));
    nginx_->stop();
    ASSERT_NO_FATAL_FAILURE(mount_and_check("a", {"--offline"}));
    ASSERT_NO_FATAL_FAILURE(mount_and_check("c", {"--offline"}));
}

TEST_F(CacheCommand, TrimAndClearKeepTheBlocksOfARunningMountWhileItReads) {
    ASSERT_NO_FATAL_FAILURE(prefetch("a"));
    ASSERT_NO_FATAL_FAILURE(prefetch("b"));
    nginx_->stop();  // offline: a block removed under the mount would fail its read (EIO)
    ASSERT_TRUE(mount({"--cache-dir", cache_, "--offline"}, url("a")));
    std::atomic<bool> stop{false};
    std::atomic<int> reads{0}, wrong{0};
    std::thread reader([&] {
        while (!stop) {
            if (gguf_test::sha256_file(mnt_ + "/dense.gguf") != sha256_["a"]) ++wrong;
            ++reads;
        }
    });
    for (const std::vector<std::string>& action :
         {std::vector<std::string>{"trim", "--max-size", "1M"}, std::vector<std::string>{"clear"}}) {
        std::vector<std::string> args = {"cache"};
        args.insert(args.end(), action.begin(), action.end());
        args.insert(args.end(), {"--cache-dir", cache_});
        auto r = gm(args);
        SCOPED_TRACE(action[0]);
        EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_NE(r.err.find("in use by a running mount"), std::string::npos) << r.err;
        EXPECT_NE(r.err.find(url("a")), std::string::npos) << r.err;
        // clear trims to 0: "above 0 bytes (0 bytes)" said nothing (issue 30, item 11).
        if (action[0] == "clear") EXPECT_EQ(r.err.find("above"), std::string::npos) << r.err;
        if (action[0] == "trim") EXPECT_NE(r.err.find(" (1000000 bytes): "), std::string::npos) << r.err;
    }
    // Reads went on during both and stay right; b is gone, a is listed in use.
    while (reads < 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop = true;
    reader.join();
    EXPECT_EQ(wrong.load(), 0);
    // Drop the mount's page cache: the next read goes to the daemon and its cache.
    ASSERT_EQ(unmount_and_wait(), 0) << log();
    const auto j = list();
    ASSERT_EQ(j["sources"].size(), 1u) << j.dump();
    EXPECT_EQ(j["sources"][0]["source"], url("a"));
    ASSERT_NO_FATAL_FAILURE(mount_and_check("a", {"--offline"}));
}

TEST_F(CacheCommand, ClearEmptiesTheCache) {
    ASSERT_NO_FATAL_FAILURE(prefetch("a"));
    // A directory source: its listing record is counted under it, and cleared too.
    const std::string dir_url = nginx_->base_url() + "/json/b/";
    auto r = gm({"prefetch", "-q", "--cache-dir", cache_, dir_url});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_GT(count_files(cache_ + "/v1/objects"), 0u);
    ASSERT_EQ(count_files(cache_ + "/v1/listings"), 1u);
    {
        const nlohmann::json j = list();
        ASSERT_EQ(j["sources"].size(), 2u) << j.dump();
        const size_t d = j["sources"][0]["source"] == dir_url ? 0 : 1;
        ASSERT_EQ(j["sources"][d]["source"], dir_url);
        uint64_t meta = 0;  // the meta records of b's three shard URLs
        for (int k = 1; k <= 3; ++k) {
            meta += bytes_below(cache_ + "/v1/meta/" +
                                gguf_test::sha256_hex(dir_url + "dense-0000" + std::to_string(k) + "-of-00003.gguf"));
        }
        EXPECT_GT(meta, 0u);
        EXPECT_EQ(j["sources"][d]["bytes"].get<uint64_t>(),
                  model_bytes_["b"] + 6 * 16 + bytes_below(cache_ + "/v1/listings") + meta);
        EXPECT_EQ(j["total"]["records"], 7);  // 6 meta records (3 shards each) and 1 listing
    }
    r = gm({"cache", "clear", "--json", "--cache-dir", cache_});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto t = nlohmann::json::parse(r.out);
    EXPECT_EQ(t["bytes_left"], 0);
    EXPECT_GE(t["removed_bytes"].get<uint64_t>(), model_bytes_["a"] + model_bytes_["b"]);
    const auto j = list();
    EXPECT_EQ(j["sources"].size(), 0u) << j.dump();
    EXPECT_EQ(j["total"]["bytes"], 0);
    EXPECT_EQ(count_files(cache_ + "/v1/objects"), 0u);
    EXPECT_EQ(count_files(cache_ + "/v1/meta"), 0u);
    EXPECT_EQ(count_files(cache_ + "/v1/listings"), 0u);
    EXPECT_EQ(count_files(cache_ + "/v1/sources"), 0u);
    // The emptied cache works: the next mount fetches and serves the right bytes.
    ASSERT_NO_FATAL_FAILURE(mount_and_check("a"));
    // The trust rule of the cache applies: a directory others may write is refused, untouched.
    const size_t files = count_files(cache_);
    ASSERT_EQ(::chmod((cache_ + "/v1").c_str(), 0777), 0);
    for (const char* action : {"list", "clear"}) {
        r = gm({"cache", action, "--cache-dir", cache_});
        EXPECT_EQ(r.exit_code, 1) << action;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_NE(r.err.find("writable by its group or others"), std::string::npos) << r.err;
    }
    EXPECT_EQ(count_files(cache_), files);
    ASSERT_EQ(::chmod((cache_ + "/v1").c_str(), 0700), 0);
}

TEST_F(CacheCommand, PrefetchLargerThanItsCacheMaxSizeFailsBeforeFetchingWithOneLine) {
    nginx_->clear_access_log();
    auto r = gm({"prefetch", "-q", "--cache-dir", cache_, "--cache-max-size", "13M", url("a")});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("--cache-max-size"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(std::to_string(model_bytes_["a"] + 6 * 16)), std::string::npos) << r.err;
    // Only the headers were read (block 0 of each shard, while planning): no block 1.
    uint64_t got = 0;
    for (const auto& e : nginx_->wait_access_log(3, std::chrono::milliseconds(500))) got += e.method == "GET";
    EXPECT_EQ(got, 3u);
    auto j = list();
    ASSERT_EQ(j["sources"].size(), 1u);
    EXPECT_EQ(j["sources"][0]["objects"], 3);
    EXPECT_LT(j["total"]["bytes"].get<uint64_t>(), uint64_t{13} << 20);  // three blocks, not six
    // It fits under a bound of its size.
    r = gm({"prefetch", "-q", "--cache-dir", cache_, "--cache-max-size", "20M", url("a")});
    EXPECT_EQ(r.exit_code, 0) << r.err;
}

/// The default bound, on a file system of 32 MiB: 25% of it (8.4 MB) holds no model of 18.9 MB.
TEST_F(CacheCommand, TheDefaultBoundAppliesWhenNoneIsGiven) {
    const std::string small = root_ + "/small";
    ASSERT_EQ(::mkdir(small.c_str(), 0700), 0);
    if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=32m,mode=0700") != 0) {
        GTEST_SKIP() << "cannot mount a tmpfs (needs root): " << std::strerror(errno);
    }
    struct Unmount {
        std::string path;
        ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
    } unmount_small{small};
    const uint64_t want = std::min<uint64_t>(uint64_t{32} << 20 >> 2, uint64_t{100} * 1000000000);
    auto r = gm({"cache", "list", "--json", "--cache-dir", small + "/c"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["default_max_bytes"], want);
    r = gm({"prefetch", "-q", "--cache-dir", small + "/c", url("a")});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("the default: 25% of its file system"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(std::to_string(want)), std::string::npos) << r.err;
    // --cache-max-size 0: no bound.
    r = gm({"prefetch", "-q", "--cache-dir", small + "/c", "--cache-max-size", "0", url("a")});
    EXPECT_EQ(r.exit_code, 0) << r.err;
}

/// The files of the one source directory of `cache` (name -> content); fails when there is not
/// exactly one.
std::map<std::string, std::string> source_files(const std::string& cache) {
    std::map<std::string, std::string> out;
    std::vector<std::filesystem::path> dirs;
    for (const auto& e : std::filesystem::directory_iterator(cache + "/v1/sources")) dirs.push_back(e.path());
    EXPECT_EQ(dirs.size(), 1u);
    if (dirs.size() != 1) return out;
    for (const auto& e : std::filesystem::directory_iterator(dirs[0]))
        out[e.path().filename().string()] = gguf_test::read_file(e.path());
    return out;
}

TEST_F(CacheCommand, AColdMountWritesOneObjectDirectoryOneBlockFileAndOneMetaRecordPerFileAndNoTagFiles) {
    // Every inode a cold mount creates costs (ext4's allocator, a journal entry); the tags of a
    // source are lines of one file, not one empty file each (1,200 shards made 2,400 of them).
    ASSERT_NO_FATAL_FAILURE(mount_and_check("a"));
    size_t dirs = 0, blocks = 0, metas = 0, others = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(cache_ + "/v1")) {
        const std::string rel = e.path().string().substr(cache_.size() + 4);
        if (rel.rfind("objects/", 0) == 0) {
            (e.is_directory() ? dirs : blocks) += 1;
        } else if (rel.rfind("meta/", 0) == 0) {
            ++metas;
        } else if (rel.rfind("sources/", 0) != 0 && rel != "lock" && e.is_regular_file()) {
            ++others;
        }
    }
    EXPECT_EQ(dirs, 3u);
    EXPECT_EQ(blocks, 6u);  // two 4 MiB blocks per shard, no temporary left
    EXPECT_EQ(metas, 3u);
    EXPECT_EQ(others, 0u);
    const auto files = source_files(cache_);
    ASSERT_EQ(files.size(), 3u) << "name, lock and tags only";
    ASSERT_TRUE(files.count("tags"));
    const std::string& tags = files.at("tags");
    EXPECT_EQ(std::count(tags.begin(), tags.end(), '\n'), 6) << tags;  // 3 objects, 3 meta records
    // A remount appends nothing it already tagged.
    ASSERT_NO_FATAL_FAILURE(mount_and_check("a"));
    EXPECT_EQ(source_files(cache_).at("tags"), tags);
    // `cache list` reads them: the source's 3 objects and every byte.
    const nlohmann::json j = list();
    ASSERT_EQ(j["sources"].size(), 1u) << j.dump();
    EXPECT_EQ(j["sources"][0]["objects"], 3);
    EXPECT_EQ(j["sources"][0]["bytes"], j["total"]["bytes"]);
}

TEST_F(CacheCommand, ACacheWithOneFilePerTagFromAnEarlierVersionIsListedAndTrimmedTheSame) {
    ASSERT_NO_FATAL_FAILURE(prefetch("a"));
    ASSERT_NO_FATAL_FAILURE(prefetch("b"));
    const nlohmann::json before = list();
    // Rewrite every source's tags the way an earlier version kept them: an empty file per tag.
    for (const auto& d : std::filesystem::directory_iterator(cache_ + "/v1/sources")) {
        const std::string tags = gguf_test::read_file(d.path() / "tags");
        ASSERT_FALSE(tags.empty());
        size_t from = 0;
        for (size_t nl; (nl = tags.find('\n', from)) != std::string::npos; from = nl + 1)
            gguf_test::write_file(d.path() / tags.substr(from, nl - from), "");
        std::filesystem::remove(d.path() / "tags");
    }
    EXPECT_EQ(list()["sources"], before["sources"]);
    // An hour later b is read again: a is the least recently used, and a trim to b's size removes it.
    ASSERT_NO_FATAL_FAILURE(age_files(cache_, 7200));
    ASSERT_NO_FATAL_FAILURE(mount_and_check("b", {"--offline"}));
    uint64_t b_bytes = 0;
    const nlohmann::json listed = list();
    for (const auto& s : listed["sources"])
        if (s["source"] == url("b")) b_bytes = s["bytes"].get<uint64_t>();
    ASSERT_GT(b_bytes, model_bytes_["b"]);
    auto r = gm({"cache", "trim", "--max-size", std::to_string(b_bytes / 1000000 + 1) + "M", "--cache-dir", cache_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(listed_sources(), (std::set<std::string>{url("b")}));
    // What is left keeps its tags in the new form only (the remount wrote none: all known).
    const auto files = source_files(cache_);
    EXPECT_EQ(files.size(), 3u) << "name, lock and tags only";
    ASSERT_TRUE(files.count("tags"));
    EXPECT_EQ(std::count(files.at("tags").begin(), files.at("tags").end(), '\n'), 6) << files.at("tags");
    nginx_->stop();
    ASSERT_NO_FATAL_FAILURE(mount_and_check("b", {"--offline"}));
}

TEST(CacheTags, ALineCutShortOrNotATagIsNotOne) {
    gguf_test::TempDir tmp;
    gguf_mount::remote::BlockCache cache(tmp / "c", 0);  // creates v1/sources/
    cache.claim_source("http://h/m-00001-of-00002.gguf");
    std::vector<std::filesystem::path> dirs;
    for (const auto& e : std::filesystem::directory_iterator(tmp / "c/v1/sources")) dirs.push_back(e.path());
    ASSERT_EQ(dirs.size(), 1u);
    cache.use_object(std::string(64, 'a'));
    cache.use_object(std::string(64, 'a'));
    cache.use_object("once-" + std::string(32, 'b'));
    EXPECT_EQ(gguf_test::read_file(dirs[0] / "tags"),
              "o." + std::string(64, 'a') + "\no.once-" + std::string(32, 'b') + "\n");
    gguf_mount::remote::cache_files::Dir d(::open(dirs[0].c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(d);
    gguf_test::write_file(dirs[0] / "tags", "o.abc\nnot a tag\nx.abc\no../../etc\nl.0123\nm.cut-short");
    EXPECT_EQ(gguf_mount::remote::cache_inventory::read_tags(d), (std::set<std::string>{"o.abc", "l.0123"}));
}

TEST(BlockCacheRecords, MetaRecordsAreSealedAndOneCutShortOrZeroedIsNotLoaded) {
    // Meta records are written without fdatasync: after a power loss one may be empty, cut or
    // zeroed; such a record is absent (the file is asked for again), never a wrong size.
    gguf_test::TempDir tmp;
    gguf_mount::remote::BlockCache cache(tmp / "c", 0);
    gguf_mount::remote::ObjectInfo info;
    info.size = 123456789;
    info.validator = "\"etag-1\"";
    info.mtime = 1700000000;
    cache.save_meta("http://h/m.gguf", info);
    auto loaded = cache.load_meta("http://h/m.gguf");
    ASSERT_TRUE(loaded);
    EXPECT_EQ(loaded->size, info.size);
    EXPECT_EQ(loaded->validator, info.validator);
    EXPECT_EQ(loaded->mtime, info.mtime);
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(tmp / "c/v1/meta")) files.push_back(e.path());
    ASSERT_EQ(files.size(), 1u);
    const std::string whole = gguf_test::read_file(files[0]);
    const std::string lines = "123456789\n\"etag-1\"\n1700000000\n";
    ASSERT_EQ(whole.substr(0, lines.size()), lines);
    for (size_t cut = 0; cut < whole.size(); ++cut) {
        gguf_test::write_file(files[0], whole.substr(0, cut));
        // Cut right after the three lines, the record says all it says, whole.
        if (cut == lines.size()) {
            EXPECT_TRUE(cache.load_meta("http://h/m.gguf")) << cut;
        } else {
            EXPECT_FALSE(cache.load_meta("http://h/m.gguf")) << "cut at " << cut;
        }
    }
    gguf_test::write_file(files[0], std::string(whole.size(), '\0'));
    EXPECT_FALSE(cache.load_meta("http://h/m.gguf"));
    std::string changed = whole;
    changed[0] = '9';  // another size, seal unchanged
    gguf_test::write_file(files[0], changed);
    EXPECT_FALSE(cache.load_meta("http://h/m.gguf"));
    // A record of an earlier version (three lines, no seal) is read as before.
    gguf_test::write_file(files[0], "42\n\"old\"\n5\n");
    loaded = cache.load_meta("http://h/m.gguf");
    ASSERT_TRUE(loaded);
    EXPECT_EQ(loaded->size, 42u);
    EXPECT_EQ(loaded->validator, "\"old\"");
}

TEST(BlockCacheRecords, ListingRecordsAreCountedByTheBoundAndEvictedLeastRecentlyUsedFirst) {
    gguf_test::TempDir tmp;
    gguf_mount::remote::BlockCache cache(tmp / "c", 3000000);
    const std::string page(1000000, 'x');
    for (const char* dir : {"a", "b", "c"}) {
        cache.save_listing(std::string("http://h/") + dir + "/", page);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_GE(cache.used_bytes(), 3000000u);
    EXPECT_TRUE(cache.load_listing("http://h/a/"));
    cache.save_listing("http://h/d/", page);  // over the bound: down to 90 % of it, oldest first
    EXPECT_FALSE(cache.load_listing("http://h/a/"));
    EXPECT_FALSE(cache.load_listing("http://h/b/"));
    EXPECT_TRUE(cache.load_listing("http://h/c/"));
    EXPECT_TRUE(cache.load_listing("http://h/d/"));
    EXPECT_LE(cache.used_bytes(), 2700000u);
    // A cache opened again counts the records there.
    gguf_mount::remote::BlockCache again(tmp / "c", 0);
    EXPECT_EQ(again.used_bytes(), 2000000u);
}

}  // namespace
