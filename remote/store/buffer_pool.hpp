// The block buffers of a context: BlockCache::kBlockSize anonymous mappings, reused.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

namespace gguf_mount::remote {

/// Buffers of BlockCache::kBlockSize bytes (O_DIRECT-able), each an anonymous mapping of its
/// own at a huge-page boundary advised MADV_HUGEPAGE (gguf::map_huge_aligned), whose pages
/// were touched once. A fresh mapping costs a page fault and a zeroed page per page (4 KiB,
/// or 2 MiB where THP is on) on first touch (on a VM with free-page reporting the host takes freed
/// memory back, so every fresh block faults anew), hence reuse. Not malloc: blocks are taken on
/// one thread and let go on another (fetch, read-ahead and store threads), and glibc's
/// per-thread arenas then kept the freed blocks. Thread-safe.
class BufferPool {
public:
    /// Keeps at most `pooled` buffers mapped (in use and idle together) for reuse; trim() leaves
    /// `idle` idle ones.
    BufferPool(size_t pooled, size_t idle);
    BufferPool(const BufferPool&) = delete;
    BufferPool& operator=(const BufferPool&) = delete;

    /// A buffer: an idle one, else a new mapping. When let go it returns to the idle ones while
    /// no more than `pooled` are mapped, else it is unmapped. A buffer may outlive the pool.
    /// Throws std::bad_alloc when mmap fails.
    std::shared_ptr<char[]> take();
    /// Unmaps idle buffers past `idle` (after a quiet period: an idle mount holds little
    /// memory). Never throws.
    void trim() noexcept;
    /// {mapped (in use and idle), idle}. Never throws.
    std::pair<size_t, size_t> mapped() const noexcept;

private:
    struct State;
    std::shared_ptr<State> state_;  // shared with the buffers' deleters
    size_t idle_;
};

}  // namespace gguf_mount::remote
