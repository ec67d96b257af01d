// O_DIRECT clients of the mount (llama.cpp --direct-io, node-llama-cpp useDirectIo): their reads
// bypass the merged file's page cache, and the daemon reads the shard bytes they ask for with
// O_DIRECT too when those are not cached (fs/ops.cpp serve_read, gguf/bytes/client_direct.hpp),
// so a direct-I/O load through the mount caches (almost) nothing, as the same load of a local
// file. The bytes must still be exact.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/bytes/page_cache.hpp"
#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using mount_test::Fd;

constexpr uint64_t kMiB = uint64_t{1} << 20;
/// What a shard may hold in the page cache after an O_DIRECT load: the daemon's
/// residency probe reads byte 0 buffered when it first opens a shard for O_DIRECT (ext4 caches
/// it in a folio of up to 2 MiB), and requests that span two pieces (header and first tensor
/// bytes, two shards) are read in pieces, buffered. Measured: 1-3 MiB of each 24 MiB shard
/// (before O_DIRECT clients were read direct: all of it).
constexpr uint64_t kProbeSlack = 4 * kMiB;

/// Writes back and drops the page cache of `path` (fsync, then POSIX_FADV_DONTNEED).
void evict(const std::string& path) {
    Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    ASSERT_GE(fd.fd, 0) << path << ": " << std::strerror(errno);
    ASSERT_EQ(::fsync(fd.fd), 0) << path << ": " << std::strerror(errno);
    ASSERT_EQ(::posix_fadvise(fd.fd, 0, 0, POSIX_FADV_DONTNEED), 0) << path;
}

/// Bytes of `path` in the page cache (util-linux fincore -b), or UINT64_MAX (test failed)
/// when it cannot be measured.
uint64_t cached_bytes(const std::string& path) {
    const auto r = gguf_test::run({"/usr/bin/fincore", "-b", "-n", "-o", "RES", path});
    if (r.exit_code != 0 || r.out.empty()) {
        ADD_FAILURE() << "fincore " << path << ": " << r.err;
        return UINT64_MAX;
    }
    return std::strtoull(r.out.c_str(), nullptr, 10);
}

/// All of `path` read with O_DIRECT in `chunk`-byte reads into one aligned buffer (llama.cpp's
/// direct-I/O loader reads whole tensors, several MiB each, this way). Fails the test on errors.
std::string read_direct(const std::string& path, size_t chunk) {
    std::string out;
    Fd fd{::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC)};
    if (fd.fd < 0) {
        ADD_FAILURE() << path << ": O_DIRECT open: " << std::strerror(errno);
        return out;
    }
    void* p = nullptr;
    if (::posix_memalign(&p, 4096, chunk) != 0) std::abort();
    std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(p), &std::free);
    for (;;) {
        const ssize_t n = ::pread(fd.fd, buf.get(), chunk, static_cast<off_t>(out.size()));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            ADD_FAILURE() << path << ": O_DIRECT read at " << out.size() << ": " << std::strerror(errno);
            break;
        }
        if (n == 0) break;
        out.append(buf.get(), static_cast<size_t>(n));
    }
    return out;
}

class DirectIo : public mount_test::MountFixture {};

/// The sha256 of the offline merge (`gguf-mount merge`) of the set whose first shard is
/// `first`, written to `out`; "" (test failed) if the merge fails.
std::string merged_sha256(const std::string& first, const std::string& out) {
    const auto merge = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", first, out});
    if (merge.exit_code != 0) {
        ADD_FAILURE() << "merge " << first << ": " << merge.err;
        return "";
    }
    return gguf_test::sha256_file(out);
}

TEST_F(DirectIo, ODirectLoadThroughTheMountIsByteExactAndLeavesTheShardsUncached) {
    struct statfs fs_of_root {};
    if (::statfs(root_.c_str(), &fs_of_root) == 0 && fs_of_root.f_type == TMPFS_MAGIC) {
        GTEST_SKIP() << root_ << " is on tmpfs (no O_DIRECT, no droppable pages): set TMPDIR to a disk";
    }
    // 3 shards of 24 MiB (12 tensors of 6 MiB, 4 to a shard) and their merge as the reference.
    const auto shards = mount_test::split_dense_model(12, [](int) { return int64_t{6} << 18; }, 4, 7, src_ + "/dense");
    ASSERT_EQ(shards.size(), 3u);
    const std::string merged = root_ + "/merged.gguf";
    const std::string merged_sha = merged_sha256(shards[0], merged);
    ASSERT_FALSE(merged_sha.empty());
    {
        Fd probe{::open(shards[0].c_str(), O_RDONLY | O_CLOEXEC)};
        ASSERT_GE(probe.fd, 0);
        evict(shards[0]);
        ASSERT_FALSE(HasFailure());
        if (gguf::page_cache_residency(probe.fd, 0, 4096) != gguf::Residency::None) {
            GTEST_SKIP() << "no cachestat(2) on this kernel, or pages of " << root_ << " cannot be dropped";
        }
    }

    ASSERT_TRUE(mount());
    const std::string path = mnt_ + "/dense.gguf";
    // The shards as a cold load finds them (after the mount's start-up reads).
    for (const auto& s : shards) evict(s);
    ASSERT_FALSE(HasFailure());

    // 4 MiB reads: the kernel splits each into 1 MiB requests sent at once.
    const std::string bytes = read_direct(path, 4 * kMiB);
    struct stat merged_st {};
    ASSERT_EQ(::stat(merged.c_str(), &merged_st), 0);
    ASSERT_EQ(bytes.size(), static_cast<size_t>(merged_st.st_size));
    EXPECT_EQ(gguf_test::sha256_hex(bytes), merged_sha);
    for (const auto& s : shards) {
        // Before the daemon read an O_DIRECT client's bytes with O_DIRECT, the whole shard
        // (24 MiB) was cached here. Readahead of the RWF_DONTCACHE reads of requests that span
        // two shards can leave a few MiB that no read consumed (9 MiB seen once under ctest -j2
        // on 2 shared cores; at most 4 MiB when run alone): half the shard is the bound.
        EXPECT_LE(cached_bytes(s), uint64_t{12} << 20) << s << ": an O_DIRECT load through the mount left shard pages cached";
    }
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

}  // namespace
