// The block store of a context: the persistent block cache and the stage and commit threads
// that write fetched blocks to it off the read path.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "remote/store/cache.hpp"

namespace gguf_mount::remote {

/// Block store settings (RemoteOptions; aggregate-initialized in field order, remote/context.cpp).
struct StoreOptions {
    /// Blocks put() and waiting for a store thread; past it put() stages on the caller
    /// (back-pressure bounds the memory to this many blocks).
    unsigned pending_stores = 4;
    unsigned store_threads = 2;  ///< stages (write to a temporary, no fdatasync) running at once
    /// Staged blocks waiting for fdatasync + rename; past it staging waits.
    unsigned unsynced_blocks = 512;
    unsigned commit_threads = 2;  ///< commits (fdatasync + rename) running at once
};

/// Writes fetched blocks to the BlockCache in two steps off the reader's path: a store thread
/// stages a block (BlockCache::stage: a temporary, O_DIRECT), a commit thread makes it durable
/// and present (BlockCache::commit: fdatasync + rename), so the commits lag behind the network
/// as a download's writeback does, by at most unsynced_blocks blocks. Until a block is staged
/// its bytes are pending() here; staged, read() finds its temporary; committed, its final
/// file. State is keyed by (object key, block): the store never calls a source. Its threads
/// start on first use with the stop signals blocked (common/threads.hpp) and are joined by
/// stop() (or the destructor), which runs every queued stage and commit first and must not run
/// on one of them. Thread-safe.
class BlockStore {
public:
    /// Opens the cache (BlockCache(dir, max_bytes): throws std::runtime_error naming the
    /// directory). `threads_allowed`: false until allow_threads() (stages and commits run on
    /// the caller until then).
    BlockStore(std::string dir, uint64_t max_bytes, StoreOptions options, bool threads_allowed);
    /// stop().
    ~BlockStore();
    BlockStore(const BlockStore&) = delete;
    BlockStore& operator=(const BlockStore&) = delete;

    BlockCache& cache() noexcept { return cache_; }
    const BlockCache& cache() const noexcept { return cache_; }

    /// Stores block `block` (`len` bytes of `bytes`) of object `key` (`name`: the URL for
    /// messages, without query): staged by a store thread, or on the caller when pending_stores
    /// are queued or no thread can be started, then committed by a commit thread (or on the
    /// caller). A failure to stage or commit is logged once per object and costs a refetch
    /// later. Never throws.
    void put(const std::string& key, const std::string& name, uint64_t block, std::shared_ptr<const char[]> bytes,
             size_t len) noexcept;
    /// put() that never stages on the caller (for a caller that must not block: a transfer's
    /// callback, Client::PartHooks): true when a store thread took the block; false, with
    /// nothing done, when pending_stores are queued or no thread can take it (put() it later).
    /// Never throws.
    bool try_put(const std::string& key, const std::string& name, uint64_t block,
                 const std::shared_ptr<const char[]>& bytes, size_t len) noexcept;
    /// The bytes of a block put() and not yet staged, else null. Never throws.
    std::shared_ptr<const char[]> pending(const std::string& key, uint64_t block) const noexcept;
    /// True while a block put() is not in its final file yet (pending or staged). Never throws.
    bool in_flight(const std::string& key, uint64_t block) const noexcept;
    /// True when the block is in flight or present with `block_len` bytes. Never throws.
    bool holds(const std::string& key, uint64_t block, uint64_t block_len) const noexcept;
    /// Reads [offset, offset + n) of block `block` (`block_len` bytes) from the cache: its final
    /// file, else its staged temporary, else the final file again (committed meanwhile).
    /// Returns n, -ENOENT when neither holds it, or -errno. Never throws.
    ssize_t read(const std::string& key, uint64_t block, uint64_t block_len, uint64_t offset, size_t n,
                 char* dst) const noexcept;

    /// Queues `job` for a store thread. False when pending_stores jobs are queued, threads are
    /// not allowed yet, after stop(), or when no thread can be started: the caller runs it.
    /// Never throws.
    bool store_later(std::function<void()> job) noexcept;
    /// Queues `job` for a commit thread; waits while unsynced_blocks commits are queued or
    /// running. False when threads are not allowed yet, after stop(), or when no thread can be
    /// started: the caller runs it. Never throws.
    bool commit_later(std::function<void()> job) noexcept;
    /// Waits until every queued stage and commit has run. Never throws.
    void flush() noexcept;
    /// Lets the threads start from now on. Never throws.
    void allow_threads() noexcept { threads_allowed_ = true; }
    /// Runs every queued stage, then every queued commit, and joins the threads. Idempotent.
    /// Never throws.
    void stop() noexcept;
    /// True on one of the store or commit threads. Never throws.
    bool on_own_thread() const noexcept;

private:
    /// Lists the block as pending() and queues its stage for a store thread (store_later);
    /// false when not queued (the block stays listed as pending). Never throws.
    bool queue_store(const std::string& key, const std::string& name, uint64_t block,
                     const std::shared_ptr<const char[]>& bytes, size_t len) noexcept;
    using Id = std::pair<std::string, uint64_t>;  // (object key, block)
    void stage(const std::string& key, const std::string& name, uint64_t block,
               const std::shared_ptr<const char[]>& bytes, size_t len) noexcept;
    void commit(const std::string& key, const std::string& name, uint64_t block, const std::string& tmp,
                size_t len) noexcept;
    void log_failure(const std::string& key, const std::string& name, uint64_t block, int err) noexcept;
    /// The loop of a store or commit thread: runs the jobs of `queue` (woken by `cv`) until
    /// `stop` is set and the queue is empty; counts the running ones in `running`. All under
    /// mutex_.
    void serve(std::deque<std::function<void()>>& queue, std::condition_variable& cv, const bool& stop,
               unsigned& running);

    StoreOptions options_;
    std::atomic<bool> threads_allowed_;
    BlockCache cache_;
    mutable std::mutex blocks_mutex_;
    std::map<Id, std::shared_ptr<const char[]>> pending_;  // under blocks_mutex_
    std::map<Id, std::string> staged_;                     // under blocks_mutex_: the temporary's name
    std::set<std::string> failure_logged_;                 // under blocks_mutex_: object keys
    mutable std::mutex mutex_;
    std::deque<std::function<void()>> stores_;   // under mutex_
    std::condition_variable store_cv_;           // a stage queued, or stop
    std::vector<std::thread> store_threads_;     // under mutex_
    unsigned stores_running_ = 0;                // under mutex_
    bool stopping_ = false;                      // under mutex_
    std::deque<std::function<void()>> commits_;  // under mutex_
    std::condition_variable commit_cv_;          // a commit queued, or stop
    std::condition_variable idle_cv_;            // a stage or commit finished (space, flush)
    std::vector<std::thread> commit_threads_;    // under mutex_
    unsigned commits_running_ = 0;               // under mutex_
    bool commits_stopping_ = false;              // under mutex_: set after the store threads are joined
};

}  // namespace gguf_mount::remote
