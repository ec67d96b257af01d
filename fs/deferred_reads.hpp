// Reads that must wait for the network, served off the FUSE worker threads.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gguf_mount::fs {

/// A small pool of threads for FUSE reads that would wait for a remote server (op_read first
/// tries each read under gguf::NoNetworkWaitScope; a read that would wait comes here and is
/// replied to from a pool thread). libfuse's worker threads (at most 10, fs/session.cpp) then
/// only ever wait for the disk, so stat, readdir and reads of cached bytes stay answered while
/// any number of reads wait on a slow or dripping server (each such read ends within the HTTP
/// client's bound, remote/http.hpp). Threads are started on demand, up to `max_threads`, and
/// kept until stop(). Jobs past `max_threads` running wait in a queue (the kernel bounds how
/// many reads are outstanding).
class DeferredReads {
public:
    static constexpr size_t kDefaultMaxThreads = 32;
    explicit DeferredReads(size_t max_threads = kDefaultMaxThreads);
    /// stop().
    ~DeferredReads();
    DeferredReads(const DeferredReads&) = delete;
    DeferredReads& operator=(const DeferredReads&) = delete;

    /// Queues `job` (it replies to its FUSE request itself). False when the pool is stopping or
    /// the job cannot be queued (no memory, no thread): the caller serves the read itself.
    /// `on_stop` is what a queued job that never ran gets instead at stop() (reply EIO).
    /// Never throws.
    bool submit(std::function<void()> job, std::function<void()> on_stop) noexcept;

    /// Ends the pool: queued jobs get their `on_stop`, running jobs are waited for (each ends
    /// within the HTTP client's bound), threads are joined. Idempotent. Never throws.
    void stop() noexcept;

    /// Jobs queued or running now. Never throws.
    size_t pending() const noexcept;

private:
    void work() noexcept;
    struct Job {
        std::function<void()> run, on_stop;
    };
    const size_t max_threads_;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<Job> queue_;            // under mutex_
    std::vector<std::thread> threads_;  // under mutex_
    size_t idle_threads_ = 0;          // under mutex_: waiting for a job
    size_t running_ = 0;               // under mutex_
    bool stopping_ = false;            // under mutex_
};

}  // namespace gguf_mount::fs
