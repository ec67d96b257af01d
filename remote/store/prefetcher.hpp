// The prefetcher of a context: the read-ahead workers, the blocks kept in memory for readers
// behind the read-ahead, and the block buffers.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "remote/store/buffer_pool.hpp"

namespace gguf_mount::remote {

/// Prefetcher settings (RemoteOptions; aggregate-initialized in field order, remote/context.cpp).
struct PrefetchOptions {
    unsigned threads = 8;      ///< read-ahead workers (started on the first job)
    unsigned kept_blocks = 18; ///< fetched blocks kept in memory, context-wide (the last ones kept)
    unsigned pooled_buffers = 32;  ///< BufferPool: mapped buffers kept for reuse (RemoteOptions)
    unsigned idle_buffers = 2;     ///< BufferPool: idle buffers left by a trim
    /// A worker that found no job for this long trims the pool (the reader is done or paused).
    std::chrono::milliseconds trim_after{5000};
};

/// Runs read-ahead jobs on its own workers, keeps the last kept_blocks fetched blocks in memory
/// (a FIFO keyed by object key and block: a reader behind the read-ahead finds them there
/// instead of reading the cache), and hands out block buffers. It never calls a source: a job
/// holds what it needs by value or by weak_ptr, and the kept bytes are shared buffers it simply
/// lets go. Its workers are joined by stop() (or the destructor), which must not run on one of
/// them. Thread-safe.
class Prefetcher {
public:
    /// `threads_allowed`: false until allow_threads() (a process that forks after planning).
    Prefetcher(PrefetchOptions options, bool threads_allowed);
    /// stop().
    ~Prefetcher();
    Prefetcher(const Prefetcher&) = delete;
    Prefetcher& operator=(const Prefetcher&) = delete;

    /// Queues `job` for a worker, starting them on first use with SIGINT, SIGTERM and SIGHUP
    /// blocked (common/threads.hpp). Read-ahead is best effort: a job is dropped when threads
    /// are not allowed yet, after stop(), or when no thread can be started. Never throws.
    void submit(std::function<void()> job) noexcept;
    /// Keeps `bytes` (block `block` of object `key`) among the last kept_blocks blocks; the
    /// oldest one past them is let go. Never throws.
    void keep(const std::string& key, uint64_t block, std::shared_ptr<const char[]> bytes) noexcept;
    /// The kept bytes of block `block` of `key`, else null. Never throws.
    std::shared_ptr<const char[]> kept(const std::string& key, uint64_t block) const noexcept;
    /// Lets go of every kept block of `key` (its bytes are wrong). Never throws.
    void forget(const std::string& key) noexcept;
    /// A block buffer (BufferPool::take). Throws std::bad_alloc.
    std::shared_ptr<char[]> buffer() { return pool_.take(); }
    BufferPool& buffers() noexcept { return pool_; }
    /// Lets the workers start from now on. Never throws.
    void allow_threads() noexcept { threads_allowed_ = true; }
    /// Drops the queued jobs, lets the running ones end and joins the workers. Idempotent.
    /// Never throws.
    void stop() noexcept;
    /// True on one of the workers. Never throws.
    bool on_own_thread() const noexcept;

private:
    void work();

    PrefetchOptions options_;
    std::atomic<bool> threads_allowed_;
    BufferPool pool_;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;  // under mutex_
    std::vector<std::thread> workers_;        // under mutex_
    bool stopping_ = false;                   // under mutex_
    mutable std::mutex kept_mutex_;
    /// (key, block) -> {bytes, serial of its keep}; order_ lists keeps oldest first (an entry
    /// whose serial no longer matches was replaced or forgotten).
    std::map<std::pair<std::string, uint64_t>, std::pair<std::shared_ptr<const char[]>, uint64_t>> kept_;
    std::deque<std::pair<std::pair<std::string, uint64_t>, uint64_t>> order_;
    uint64_t serial_ = 0;
};

}  // namespace gguf_mount::remote
