// Page dropping (gguf/bytes/byte_source.cpp, LocalFileSource): a model read once through the
// mount must not stay cached twice. Where cachestat(2) tells cached bytes from uncached ones
// (Linux 6.5+), the daemon reads a stream's uncached shard bytes with O_DIRECT
// (VirtualFile::kDirectStreamMin): the shards get almost no pages at all. Without it, it reads
// them buffered and drops the shard pages it served in whole 2 MiB blocks, 16 MiB behind the
// bytes served, so after one sequential read of the merged file at most the last 16 MiB + 2 MiB
// (+ one 1 MiB request) of each shard may remain in the page cache. Measured on a 120 MiB
// dense model in 3 shards of 40 MiB, with cachestat(2) (mincore(2) on kernels without it). A
// control first checks that reading the shards directly does cache them and that the eviction
// works, so the bound cannot hold by accident.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fs/session.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using mount_test::Fd;

constexpr uint64_t kMiB = uint64_t{1} << 20;
/// fs/ops.cpp: kDropLag + kDropBlock, plus one max_read request that may still be in flight.
constexpr uint64_t kKeptPerShard = 16 * kMiB + 2 * kMiB + 1 * kMiB;
/// Slack per shard for pages outside the served ranges (the header read at scan time, folio
/// rounding).
constexpr uint64_t kSlackPerShard = 1 * kMiB;
/// What a stream read with O_DIRECT may leave of a shard: the header read at scan time, the
/// buffered read of the request that spans the end of one shard and the start of the next (and
/// that read's readahead), the first byte read by DirectDescriptor's probe. Measured: 1.1 MiB,
/// 1.0 MiB and 32 KiB for the three shards.
constexpr uint64_t kDirectPerShard = 4 * kMiB;

#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

struct CachestatRange {
    uint64_t off, len;
};
struct Cachestat {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/// Which syscall cached_bytes() used last: "cachestat" or "mincore".
const char* g_cache_method = "?";

/// The page cache state of one file, in bytes.
struct CacheState {
    uint64_t cached = 0;     // in the page cache now
    /// Evicted by memory reclaim (cachestat's nr_evicted: pages whose shadow entry remains);
    /// pages dropped with POSIX_FADV_DONTNEED, as the daemon drops them, leave no shadow and do
    /// not count. Always 0 with the mincore fallback, which cannot see them.
    uint64_t reclaimed = 0;
};

/// Bytes of `path` resident in the page cache, from mincore(2) on a read-only shared mapping
/// (the other measure, beside cache_state's cachestat). Fails the test on errors.
uint64_t mincore_bytes(const std::string& path) {
    Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (fd.fd < 0) {
        ADD_FAILURE() << path << ": " << std::strerror(errno);
        return 0;
    }
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const off_t size = ::lseek(fd.fd, 0, SEEK_END);
    if (size <= 0) return 0;
    void* map = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd.fd, 0);
    if (map == MAP_FAILED) {
        ADD_FAILURE() << path << ": mmap: " << std::strerror(errno);
        return 0;
    }
    std::vector<unsigned char> vec((static_cast<uint64_t>(size) + page - 1) / page);
    uint64_t pages = 0;
    if (::mincore(map, static_cast<size_t>(size), vec.data()) == 0) {
        for (unsigned char v : vec) pages += v & 1;
    } else {
        ADD_FAILURE() << path << ": mincore: " << std::strerror(errno);
    }
    ::munmap(map, static_cast<size_t>(size));
    return pages * page;
}

/// The page cache state of the file `path`: cachestat(2) (Linux 6.5+), or mincore(2) on a
/// read-only shared mapping when cachestat is missing (ENOSYS). Fails the test (and returns
/// cached = UINT64_MAX) if the file cannot be opened, mapped or measured.
CacheState cache_state(const std::string& path) {
    Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (fd.fd < 0) {
        ADD_FAILURE() << path << ": " << std::strerror(errno);
        return {UINT64_MAX, 0};
    }
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    CachestatRange range{0, 0};  // len 0: to the end of the file
    Cachestat cs{};
    if (::syscall(__NR_cachestat, fd.fd, &range, &cs, 0) == 0) {
        g_cache_method = "cachestat";
        return {cs.nr_cache * page, cs.nr_evicted * page};
    }
    if (errno != ENOSYS) {
        ADD_FAILURE() << path << ": cachestat: " << std::strerror(errno);
        return {UINT64_MAX, 0};
    }
    g_cache_method = "mincore";
    return {mincore_bytes(path), 0};
}

/// Bytes of `path` in the page cache now (cache_state().cached).
uint64_t cached_bytes(const std::string& path) { return cache_state(path).cached; }

/// Waits (up to 2 s) until the FUSE readahead window of the mount at `mnt`
/// (/sys/class/bdi/MAJ:MIN/read_ahead_kb) is the daemon's default, which it sets right after
/// the mount is up (fs/session.cpp raise_readahead; root only). A file opened before keeps the
/// kernel's 128 KiB window for good (its readahead state is taken at open), and its requests
/// are then too small to be read with O_DIRECT (VirtualFile::kDirectStreamMin). Returns the
/// window in KiB (0 when unreadable).
unsigned wait_for_readahead(const std::string& mnt) {
    const auto entry = mount_test::find_mount(mnt);
    if (!entry) return 0;
    const std::string path =
        "/sys/class/bdi/" + std::to_string(entry->major) + ":" + std::to_string(entry->minor) + "/read_ahead_kb";
    unsigned kb = 0;
    for (int i = 0; i < 200; ++i) {
        std::ifstream in(path);
        if (!(in >> kb)) kb = 0;
        if (kb == gguf_mount::fs::kDefaultReadaheadKb) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return kb;
}

/// Writes back and drops the page cache of `path` (fsync, then POSIX_FADV_DONTNEED).
void evict(const std::string& path) {
    Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    ASSERT_GE(fd.fd, 0) << path << ": " << std::strerror(errno);
    ASSERT_EQ(::fsync(fd.fd), 0) << path << ": " << std::strerror(errno);
    ASSERT_EQ(::posix_fadvise(fd.fd, 0, 0, POSIX_FADV_DONTNEED), 0) << path;
}

/// Makes the kernel reclaim the first `len` bytes of `path` from the page cache as memory
/// pressure would (the pages are mapped, touched and paged out with MADV_PAGEOUT), leaving the
/// shadow entries that cachestat counts as evicted. Fails the test on errors.
void reclaim(const std::string& path, uint64_t len) {
    Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    ASSERT_GE(fd.fd, 0) << path << ": " << std::strerror(errno);
    void* map = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd.fd, 0);
    ASSERT_NE(map, MAP_FAILED) << path << ": mmap: " << std::strerror(errno);
    const auto* bytes = static_cast<const volatile unsigned char*>(map);
    unsigned sum = 0;
    for (uint64_t off = 0; off < len; off += 4096) sum += bytes[off];
    (void)sum;
    int rc = ::madvise(map, len, MADV_PAGEOUT);
    int e = errno;
    ::munmap(map, len);
    ASSERT_EQ(rc, 0) << path << ": madvise(MADV_PAGEOUT): " << std::strerror(e);
}

/// Reads all of `path` once, front to back, with read(2) in 1 MiB blocks; returns the bytes.
std::string read_sequentially(const std::string& path) {
    std::string out;
    Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (fd.fd < 0) {
        ADD_FAILURE() << path << ": " << std::strerror(errno);
        return out;
    }
    std::vector<char> buf(kMiB);
    for (;;) {
        ssize_t n = ::read(fd.fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            ADD_FAILURE() << path << ": read at " << out.size() << ": " << std::strerror(errno);
            break;
        }
        if (n == 0) break;
        out.append(buf.data(), static_cast<size_t>(n));
    }
    return out;
}

class PageCache : public mount_test::MountFixture {};

TEST_F(PageCache, ModelReadOnceThroughTheMountLeavesAlmostNothingOrOnlyTheLastBlocksOfEachShardCached) {
    struct statfs sfs {};
    ASSERT_EQ(::statfs(root_.c_str(), &sfs), 0);
    if (static_cast<unsigned long>(sfs.f_type) == static_cast<unsigned long>(TMPFS_MAGIC)) {
        GTEST_SKIP() << root_ << " is on tmpfs, whose pages cannot be dropped: set TMPDIR to a disk file system";
    }

    // 12 tensors of 10 MiB, 4 to a shard: 3 shards of 40 MiB.
    const std::vector<std::string> shards =
        mount_test::split_dense_model(12, [](int) { return int64_t{10} << 18; }, 4, 42, src_ + "/dense");
    ASSERT_FALSE(HasFailure());
    ASSERT_EQ(shards.size(), 3u);

    // The reference: the offline merge of the same shards.
    const std::string merged = root_ + "/merged.gguf";
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", shards[0], merged});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string merged_sha = gguf_test::sha256_file(merged);
    uint64_t model_bytes = 0;
    for (const auto& s : shards) {
        struct stat st {};
        ASSERT_EQ(::stat(s.c_str(), &st), 0);
        ASSERT_GT(static_cast<uint64_t>(st.st_size), kKeptPerShard + 16 * kMiB) << s << ": too small to show dropping";
        model_bytes += static_cast<uint64_t>(st.st_size);
    }
    ASSERT_GE(model_bytes, 96 * kMiB);

    // Control: evicted shards are not cached; read directly, they are, entirely; evicted again,
    // they are not. So the measurement sees the cache and the eviction works.
    for (const auto& s : shards) {
        evict(s);
        EXPECT_LE(cached_bytes(s), kSlackPerShard) << s << ": still cached after fsync + DONTNEED";
    }
    // Other activity on the machine may reclaim some of the pages just read: those count as
    // read into the cache (cachestat's nr_evicted), so only a cache the measurement cannot see
    // fails here, not memory pressure.
    uint64_t direct_cached = 0;
    for (const auto& s : shards) {
        const uint64_t size = read_sequentially(s).size();
        const CacheState c = cache_state(s);
        EXPECT_GE(c.cached + c.reclaimed, size - size / 20)
            << s << ": a direct read must leave the shard cached (" << c.cached << " bytes cached, " << c.reclaimed
            << " reclaimed since)";
        EXPECT_GE(c.cached, 4 * kMiB) << s << ": the measurement sees almost nothing of a shard just read";
        direct_cached += c.cached + c.reclaimed;
    }
    for (const auto& s : shards) {
        evict(s);
        ASSERT_LE(cached_bytes(s), kSlackPerShard) << s << ": still cached after fsync + DONTNEED";
    }
    ASSERT_FALSE(HasFailure());
    std::vector<uint64_t> reclaimed_before;
    for (const auto& s : shards) reclaimed_before.push_back(cache_state(s).reclaimed);

    // One sequential read of the merged file through the mount, opened once the readahead
    // window is raised (its requests are then 1 MiB, as max_read allows).
    ASSERT_TRUE(mount());
    const unsigned readahead_kb = wait_for_readahead(mnt_);
    const std::string through_mount = read_sequentially(mnt_ + "/dense.gguf");
    std::vector<uint64_t> cached, reclaimed;
    uint64_t mount_cached = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
        const CacheState c = cache_state(shards[i]);
        cached.push_back(c.cached);
        // Reclaimed during the read through the mount (a re-read page replaces its old shadow,
        // so this may undercount, never overcount).
        reclaimed.push_back(c.reclaimed > reclaimed_before[i] ? c.reclaimed - reclaimed_before[i] : 0);
        mount_cached += c.cached;
    }
    struct stat merged_st {};
    ASSERT_EQ(::stat(merged.c_str(), &merged_st), 0);
    EXPECT_EQ(through_mount.size(), static_cast<size_t>(merged_st.st_size));
    EXPECT_EQ(gguf_test::sha256_hex(through_mount), merged_sha);

    std::cout << "[ measured ] " << g_cache_method << ": " << shards.size() << " shards, " << model_bytes
              << " bytes; cached after a direct read " << direct_cached << " bytes, after one read through the mount "
              << mount_cached << " bytes (";
    for (size_t i = 0; i < cached.size(); ++i) std::cout << (i ? ", " : "") << cached[i];
    std::cout << " per shard)\n";
    EXPECT_GE(direct_cached, model_bytes - model_bytes / 20);
    // The daemon reads a stream O_DIRECT where cachestat(2) works and its requests are large.
    const bool direct_streams = std::string(g_cache_method) == "cachestat" &&
                                uint64_t{readahead_kb} * 1024 > gguf::VirtualFile::kDirectStreamMin;
    std::cout << "[ measured ] FUSE readahead " << readahead_kb << " KiB: streams "
              << (direct_streams ? "read O_DIRECT" : "read buffered") << "\n";
    for (size_t i = 0; i < shards.size(); ++i) {
        EXPECT_LE(cached[i], kKeptPerShard + kSlackPerShard) << shards[i] << ": shard pages were not dropped";
        if (direct_streams) {
            // The daemon's 1 MiB requests of uncached bytes went O_DIRECT: a buffered stream
            // with drop-behind would leave its last 16 MiB here.
            EXPECT_LE(cached[i] + reclaimed[i], kDirectPerShard)
                << shards[i] << ": a stream of uncached shard bytes was read through the page cache";
        } else {
            // Without cachestat(2), or with the kernel's 128 KiB readahead (a mount by a user
            // other than root), streams are read buffered: the pages behind the last 16 MiB
            // were read through the page cache and are kept until the lag passes them (a mount
            // that never touched the shard cache would pass the bound above trivially).
            EXPECT_GE(cached[i] + reclaimed[i], 4 * kMiB) << shards[i] << ": the daemon did not read through the page cache";
        }
    }
    EXPECT_LE(mount_cached, model_bytes / 2);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

// Issue 30, item 10: a shard another program had cached (a loader reading the set directly)
// stays cached when the mount serves it; the drop-behind takes only the pages the mount's own
// reads brought in, so in the same read the cold shards are still dropped behind.
TEST_F(PageCache, ShardPagesAnotherProgramCachedStayCachedWhileColdShardsAreDroppedBehind) {
    struct statfs sfs {};
    ASSERT_EQ(::statfs(root_.c_str(), &sfs), 0);
    if (static_cast<unsigned long>(sfs.f_type) == static_cast<unsigned long>(TMPFS_MAGIC)) {
        GTEST_SKIP() << root_ << " is on tmpfs, whose pages cannot be dropped: set TMPDIR to a disk file system";
    }
    CachestatRange probe{0, 1};
    Cachestat cs{};
    if (::syscall(__NR_cachestat, -1, &probe, &cs, 0) != 0 && errno == ENOSYS) {
        GTEST_SKIP() << "needs cachestat(2) (Linux 6.5+): without it the mount drops every page it passes";
    }

    // 12 tensors of 10 MiB, 4 to a shard: 3 shards of 40 MiB.
    const std::vector<std::string> shards =
        mount_test::split_dense_model(12, [](int) { return int64_t{10} << 18; }, 4, 43, src_ + "/dense");
    ASSERT_FALSE(HasFailure());
    ASSERT_EQ(shards.size(), 3u);
    const std::string merged = root_ + "/merged.gguf";
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", shards[0], merged});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string merged_sha = gguf_test::sha256_file(merged);

    std::vector<uint64_t> sizes;
    for (const auto& s : shards) {
        struct stat st {};
        ASSERT_EQ(::stat(s.c_str(), &st), 0);
        sizes.push_back(static_cast<uint64_t>(st.st_size));
    }
    // A control file nobody else reads: another program dropping the page cache meanwhile
    // (echo 3 > drop_caches by a benchmark on the machine) empties it too, and voids the attempt.
    const std::string control = root_ + "/control.bin";
    gguf_test::write_file(control, std::string(16 * kMiB, 'c'));
    for (int attempt = 1; attempt <= 5; ++attempt) {
        // Shard 2 read directly (as llama.cpp's own split load would), the others not cached.
        for (const auto& s : shards) evict(s);
        ASSERT_EQ(read_sequentially(shards[1]).size(), sizes[1]);
        ASSERT_EQ(read_sequentially(control).size(), 16 * kMiB);
        const uint64_t cached_before = mincore_bytes(shards[1]);
        ASSERT_GE(cached_before, sizes[1] - sizes[1] / 20) << shards[1] << ": a direct read must cache the shard";
        const uint64_t reclaimed_before = cache_state(shards[1]).reclaimed;
        ASSERT_FALSE(HasFailure());

        ASSERT_TRUE(mount());  // a new mount each time: the served file's page cache starts empty
        const std::string through_mount = read_sequentially(mnt_ + "/dense.gguf");
        EXPECT_EQ(gguf_test::sha256_hex(through_mount), merged_sha);

        const uint64_t kept = mincore_bytes(shards[1]);
        const uint64_t control_kept = mincore_bytes(control);
        const CacheState after = cache_state(shards[1]);
        // Memory pressure from other work on the machine may reclaim some pages meanwhile (shadow
        // entries, cachestat's nr_evicted); the mount's drops leave none, so they are not excused.
        const uint64_t reclaimed = after.reclaimed > reclaimed_before ? after.reclaimed - reclaimed_before : 0;
        std::cout << "[ measured ] attempt " << attempt << ": shard 2 of 3 (" << sizes[1]
                  << " bytes) cached before a read through the mount: " << cached_before << " bytes resident, after: "
                  << kept << " (mincore), " << reclaimed << " reclaimed meanwhile; cold shards after: "
                  << cached_bytes(shards[0]) << ", " << cached_bytes(shards[2]) << "; control file " << control_kept
                  << " of " << 16 * kMiB << "\n";
        ASSERT_EQ(unmount_and_wait(), 0) << log();
        if (control_kept < 15 * kMiB) continue;  // the page cache was dropped under the test
        EXPECT_GE(kept + reclaimed, sizes[1] - sizes[1] / 20)
            << shards[1] << ": the mount dropped pages another program had cached";
        for (size_t i : {size_t{0}, size_t{2}}) {
            EXPECT_LE(cached_bytes(shards[i]), kKeptPerShard + kSlackPerShard)
                << shards[i] << ": a cold shard read through the mount was not dropped behind";
        }
        return;
    }
    GTEST_SKIP() << "the page cache was dropped by someone else during each of 5 attempts";
}

// What the precondition above relies on: pages reclaimed by memory pressure after a read (as
// other activity on a busy machine causes) still count as read into the cache.
TEST_F(PageCache, PagesReclaimedAfterAReadStillCountAsCached) {
    struct statfs sfs {};
    ASSERT_EQ(::statfs(root_.c_str(), &sfs), 0);
    if (static_cast<unsigned long>(sfs.f_type) == static_cast<unsigned long>(TMPFS_MAGIC)) {
        GTEST_SKIP() << root_ << " is on tmpfs, whose pages are not reclaimed like a disk file's";
    }
    const std::string file = src_ + "/data.bin";
    gguf_test::write_file(file, std::string(32 * kMiB, 'x'));
    evict(file);
    ASSERT_FALSE(HasFailure());
    read_sequentially(file);
    cache_state(file);
    if (std::string(g_cache_method) != "cachestat") GTEST_SKIP() << "needs cachestat(2) (Linux 6.5+)";
    reclaim(file, 20 * kMiB);
    ASSERT_FALSE(HasFailure());
    const CacheState c = cache_state(file);
    EXPECT_LE(c.cached, 12 * kMiB + kSlackPerShard) << "MADV_PAGEOUT did not reclaim";
    EXPECT_GE(c.cached + c.reclaimed, 32 * kMiB - kSlackPerShard) << c.cached << " cached, " << c.reclaimed << " reclaimed";
}

}  // namespace
