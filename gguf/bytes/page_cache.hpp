// What the read path asks the kernel about page-cache state, and the small pieces of state it
// keeps to choose between a buffered read and an O_DIRECT read of a local file. No FUSE here:
// LocalFileSource (gguf/bytes/byte_source.hpp) uses these; nothing above the byte sources does.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace gguf {

/// How much of a byte range of a file is in the page cache.
enum class Residency {
    Unknown,  ///< the kernel cannot tell (cachestat(2) missing: Linux < 6.5, or refused)
    None,     ///< no page of the range is cached
    Partial,  ///< some pages are cached
    All,      ///< every page of the range is cached
};

/// Residency of bytes [offset, offset + len) of `fd`, from one cachestat(2) call (Linux 6.5+,
/// syscall 451 on every architecture; counts whole pages overlapping the range). len == 0
/// gives All. Returns Unknown when the syscall fails (ENOSYS on older kernels, EPERM under a
/// seccomp filter, EBADF for a descriptor it does not support). Never throws or allocates.
Residency page_cache_residency(int fd, uint64_t offset, uint64_t len) noexcept;

/// True when page_cache_residency() can see the page cache that reads of `fd` fill: reads
/// the first byte of the file (buffered, so its page is cached) and asks cachestat(2) about
/// it. False for an empty file, when the read or cachestat fails, and where the cache lives
/// in another inode than the one `fd` names: overlayfs (every container image) reads through
/// the upper or lower file, so cachestat on the overlay descriptor always reports nothing
/// cached, and "uncached" would send fully cached bytes to the disk with O_DIRECT. Costs one
/// 1-byte pread and one cachestat; never throws or allocates.
bool residency_probe_sees_cache(int fd) noexcept;

/// True when this kernel answers cachestat(2) (Linux 6.5+; false on older kernels, ENOSYS, or
/// under a seccomp filter that refuses it). One syscall on an invalid descriptor, no file.
bool cachestat_supported() noexcept;

/// Which 2 MiB blocks of one file were wholly in the page cache before the reads of one owner
/// (a LocalFileSource: one open of a served file) first came near them, so the owner's
/// drop-behind evicts only pages its own reads brought in, never those another program had
/// cached (a model loaded directly from its shards while the mount serves it).
///
/// A block's state is taken once, with cachestat(2), when a read first touches its region of
/// kRegion bytes or the region before it: the kernel's readahead of a buffered read reaches at
/// most read_ahead_kb (128 KiB by default, a few MiB on some devices) past it, never a whole
/// region, so pages the owner's own reads pulled in are not mistaken for someone else's.
/// Where cachestat is missing every block counts as not cached before (drop everything served,
/// the behaviour before this class). A block cached only in part counts as not cached: a
/// partial block is what the owner's own readahead leaves. Thread-safe: concurrent readers of
/// one region wait for the one that takes its state (a few dozen syscalls).
class CachedBefore {
public:
    static constexpr uint64_t kBlock = uint64_t{2} << 20;
    static constexpr uint64_t kRegion = uint64_t{64} << 20;

    /// State for a file of `file_size` bytes, nothing taken yet.
    explicit CachedBefore(uint64_t file_size);

    /// Called before a buffered read of [offset, offset + len) of `fd` (the file this was made
    /// for): takes the state of every region the range touches, and of the region after it,
    /// that has none yet. Never throws.
    void before_read(int fd, uint64_t offset, uint64_t len) const noexcept;
    /// True when block `block` (byte offset block * kBlock) was wholly cached when its state
    /// was taken; false when not, or not taken.
    bool cached_before(uint64_t block) const noexcept;

private:
    void take_region(int fd, uint64_t region) const noexcept;

    uint64_t size_;
    uint64_t regions_;
    std::unique_ptr<std::atomic<uint64_t>[]> cached_;       // one bit per block
    std::unique_ptr<std::atomic<uint8_t>[]> region_state_;  // 0 untaken, 1 being taken, 2 taken
};

/// Remembers where the last kSlots reads of one file ended, to tell a request that continues a
/// sequential stream (the kernel's readahead of a read() loop or of mmap page faults: requests
/// arrive in order, give or take the reordering of the worker threads) from a random one.
/// A request continues a stream when its offset lies within kWindow bytes (either side) of one
/// of those ends. Thread-safe and lock-free; races only blur the heuristic, never break it.
///
/// Sizes: the kernel keeps up to 12 readahead requests of 1 MiB in flight per FUSE connection
/// (max_background), served out of order by up to 10 threads, hence a window of 16 MiB; 16
/// slots follow 8 concurrent sequential readers with room to spare. A random 1 MiB read of a
/// 4 GiB file is mistaken for a stream with probability about 16 x 32 MiB / 4 GiB = 12 %.
class StreamTracker {
public:
    static constexpr size_t kSlots = 16;
    static constexpr uint64_t kWindow = uint64_t{16} << 20;

    StreamTracker() noexcept;
    /// Copies start empty, and assignment empties: the state belongs to the running reads of
    /// one object.
    StreamTracker(const StreamTracker&) noexcept : StreamTracker() {}
    StreamTracker& operator=(const StreamTracker&) noexcept;

    /// True when `offset` is within kWindow of the end of one of the remembered reads.
    bool continues_stream(uint64_t offset) const noexcept;
    /// Remembers a read that ended at byte `end` (exclusive), replacing the oldest one.
    void record(uint64_t end) noexcept;

private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    std::array<std::atomic<uint64_t>, kSlots> ends_;
    std::atomic<uint32_t> next_{0};
};

/// A second descriptor of an already open file, with O_DIRECT, opened on first use through
/// /proc/self/fd (so it is the same inode even if the path was replaced since). Lazily opened
/// because most sources are never read uncached: a 1,200-shard set does not need 2,400
/// descriptors. Thread-safe; a failed open (O_DIRECT unsupported by the file system, no /proc,
/// descriptors exhausted, an alignment above kMaxAlign) marks it unavailable for good, and so
/// do disable() after a read the file system refused and a residency probe that cannot see
/// the file's page cache (residency_probe_sees_cache: overlayfs), checked before the first
/// open: O_DIRECT is only ever chosen on a cachestat(2) answer that can be trusted.
class DirectDescriptor {
public:
    /// The largest offset and memory alignment (bytes) an O_DIRECT read may require for this
    /// class to use it (statx STATX_DIOALIGN, Linux 6.1+; assumed 4096 when not reported).
    static constexpr size_t kMaxAlign = 4096;

    DirectDescriptor() = default;
    /// Moves are for building the owner before any read: the source is left unopened.
    DirectDescriptor(DirectDescriptor&& o) noexcept : fd_(o.fd_.exchange(kUntried)) {}
    DirectDescriptor& operator=(DirectDescriptor&&) = delete;
    DirectDescriptor(const DirectDescriptor&) = delete;
    DirectDescriptor& operator=(const DirectDescriptor&) = delete;
    ~DirectDescriptor();

    /// The O_DIRECT descriptor for the file open as `buffered_fd`, opening it on first call;
    /// -1 when unavailable.
    int get(int buffered_fd) const noexcept;
    /// Marks O_DIRECT unavailable (closing the descriptor is left to the destructor: other
    /// threads may be reading through it).
    void disable() const noexcept;

private:
    static constexpr int kUntried = -2;
    static constexpr int kUnavailable = -1;
    mutable std::atomic<int> fd_{kUntried};
    mutable std::atomic<int> disabled_fd_{-1};  // kept open until destruction, see disable()
};

}  // namespace gguf
