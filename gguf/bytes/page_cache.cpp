#include "gguf/bytes/page_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <thread>

namespace gguf {

namespace {

// cachestat(2) (Linux 6.5, include/uapi/linux/mman.h): the number is 451 on every architecture
// (the unified syscall table); Debian 12's kernel headers predate it, so it is spelled out.
constexpr long kSysCachestat = 451;

struct CachestatRange {
    uint64_t off;
    uint64_t len;
};

struct Cachestat {
    uint64_t nr_cache;
    uint64_t nr_dirty;
    uint64_t nr_writeback;
    uint64_t nr_evicted;
    uint64_t nr_recently_evicted;
};

constexpr uint64_t kPage = 4096;

}  // namespace

Residency page_cache_residency(int fd, uint64_t offset, uint64_t len) noexcept {
    if (len == 0) return Residency::All;
    CachestatRange range{offset, len};
    Cachestat cs{};
    if (::syscall(kSysCachestat, fd, &range, &cs, 0U) != 0) return Residency::Unknown;
    const uint64_t pages = (offset + len + kPage - 1) / kPage - offset / kPage;
    if (cs.nr_cache == 0) return Residency::None;
    return cs.nr_cache >= pages ? Residency::All : Residency::Partial;
}

bool residency_probe_sees_cache(int fd) noexcept {
    char byte;
    if (::pread(fd, &byte, 1, 0) != 1) return false;
    return page_cache_residency(fd, 0, 1) == Residency::All;
}

bool cachestat_supported() noexcept {
    CachestatRange range{0, 1};
    Cachestat cs{};
    // A kernel with the syscall checks the descriptor (EBADF); one without answers ENOSYS.
    return ::syscall(kSysCachestat, -1, &range, &cs, 0U) == 0 || errno == EBADF;
}

CachedBefore::CachedBefore(uint64_t file_size)
    : size_(file_size),
      regions_((file_size + kRegion - 1) / kRegion),
      cached_(new std::atomic<uint64_t>[((file_size + kBlock - 1) / kBlock + 63) / 64]),
      region_state_(new std::atomic<uint8_t>[regions_]) {
    const uint64_t words = ((file_size + kBlock - 1) / kBlock + 63) / 64;
    for (uint64_t i = 0; i < words; ++i) cached_[i].store(0, std::memory_order_relaxed);
    for (uint64_t i = 0; i < regions_; ++i) region_state_[i].store(0, std::memory_order_relaxed);
}

void CachedBefore::take_region(int fd, uint64_t region) const noexcept {
    std::atomic<uint8_t>& state = region_state_[region];
    uint8_t expected = 0;
    if (state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
        const uint64_t begin = region * kRegion;
        const uint64_t end = begin + kRegion < size_ ? begin + kRegion : size_;
        for (uint64_t at = begin; at < end; at += kBlock) {
            const uint64_t len = end - at < kBlock ? end - at : kBlock;
            if (page_cache_residency(fd, at, len) != Residency::All) continue;
            const uint64_t block = at / kBlock;
            cached_[block / 64].fetch_or(uint64_t{1} << (block % 64), std::memory_order_relaxed);
        }
        state.store(2, std::memory_order_release);
        return;
    }
    // Another reader is taking it: its reads must not run first (they would cache pages that
    // then look cached before), and neither may this one.
    while (state.load(std::memory_order_acquire) != 2) std::this_thread::yield();
}

void CachedBefore::before_read(int fd, uint64_t offset, uint64_t len) const noexcept {
    if (offset >= size_) return;
    const uint64_t first = offset / kRegion;
    uint64_t last = (offset + (len ? len - 1 : 0)) / kRegion + 1;  // and the region after it
    if (last >= regions_) last = regions_ - 1;
    for (uint64_t r = first; r <= last; ++r) {
        if (region_state_[r].load(std::memory_order_acquire) != 2) take_region(fd, r);
    }
}

bool CachedBefore::cached_before(uint64_t block) const noexcept {
    if (block >= (size_ + kBlock - 1) / kBlock) return false;
    return (cached_[block / 64].load(std::memory_order_relaxed) >> (block % 64)) & 1;
}

StreamTracker::StreamTracker() noexcept {
    for (auto& e : ends_) e.store(kEmpty, std::memory_order_relaxed);
}

StreamTracker& StreamTracker::operator=(const StreamTracker&) noexcept {
    for (auto& e : ends_) e.store(kEmpty, std::memory_order_relaxed);
    return *this;
}

bool StreamTracker::continues_stream(uint64_t offset) const noexcept {
    for (const auto& slot : ends_) {
        const uint64_t end = slot.load(std::memory_order_relaxed);
        if (end == kEmpty) continue;
        const uint64_t distance = offset >= end ? offset - end : end - offset;
        if (distance <= kWindow) return true;
    }
    return false;
}

void StreamTracker::record(uint64_t end) noexcept {
    const uint32_t i = next_.fetch_add(1, std::memory_order_relaxed) % kSlots;
    ends_[i].store(end, std::memory_order_relaxed);
}

DirectDescriptor::~DirectDescriptor() {
    const int fd = fd_.load();
    if (fd >= 0) ::close(fd);
    const int old = disabled_fd_.load();
    if (old >= 0) ::close(old);
}

int DirectDescriptor::get(int buffered_fd) const noexcept {
    int fd = fd_.load(std::memory_order_acquire);
    if (fd != kUntried) return fd;

    int opened = kUnavailable;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", buffered_fd);
    // Only where "uncached" can be believed: the caller decided from cachestat(2).
    const int candidate =
        residency_probe_sees_cache(buffered_fd) ? ::open(path, O_RDONLY | O_DIRECT | O_CLOEXEC) : -1;
    if (candidate >= 0) {
        struct statx sx {};
        bool aligned_enough = true;
        if (::statx(candidate, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
            // 0 means the file system does not support O_DIRECT for this file.
            aligned_enough = sx.stx_dio_mem_align != 0 && sx.stx_dio_offset_align != 0 &&
                             sx.stx_dio_mem_align <= kMaxAlign && sx.stx_dio_offset_align <= kMaxAlign;
        }
        if (aligned_enough) {
            opened = candidate;
        } else {
            ::close(candidate);
        }
    }
    int expected = kUntried;
    if (fd_.compare_exchange_strong(expected, opened, std::memory_order_acq_rel)) return opened;
    if (opened >= 0) ::close(opened);  // another thread won the race
    return expected;
}

void DirectDescriptor::disable() const noexcept {
    int fd = fd_.exchange(kUnavailable, std::memory_order_acq_rel);
    if (fd < 0) return;
    // Kept open until destruction: a concurrent read may still be using it. Only one caller
    // ever gets here (the exchange above hands the open descriptor out once).
    disabled_fd_.store(fd, std::memory_order_release);
}

}  // namespace gguf
