#include "fs/deferred_reads.hpp"

#include "common/threads.hpp"

namespace gguf_mount::fs {

DeferredReads::DeferredReads(size_t max_threads) : max_threads_(max_threads ? max_threads : 1) {}

DeferredReads::~DeferredReads() { stop(); }

bool DeferredReads::submit(std::function<void()> job, std::function<void()> on_stop) noexcept {
    try {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) return false;
        // More jobs than idle threads: one more thread, while the bound allows.
        if (queue_.size() + 1 > idle_threads_ && threads_.size() < max_threads_) {
            threads_.push_back(gguf::start_thread_without_termination_signals([this] { work(); }, "gm-remote-read"));
        }
        queue_.push_back(Job{std::move(job), std::move(on_stop)});
    } catch (...) {
        return false;
    }
    cv_.notify_one();
    return true;
}

void DeferredReads::work() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        ++idle_threads_;
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        --idle_threads_;
        if (stopping_) return;  // stop() answers the queue
        Job job = std::move(queue_.front());
        queue_.pop_front();
        ++running_;
        lock.unlock();
        try {
            job.run();
        } catch (...) {
        }
        lock.lock();
        --running_;
    }
}

void DeferredReads::stop() noexcept {
    std::deque<Job> left;
    std::vector<std::thread> threads;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        left.swap(queue_);
        threads.swap(threads_);
    }
    cv_.notify_all();
    for (Job& j : left) {
        try {
            if (j.on_stop) j.on_stop();
        } catch (...) {
        }
    }
    for (auto& t : threads) {
        if (t.joinable()) t.join();
    }
}

size_t DeferredReads::pending() const noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.size() + running_;
}

}  // namespace gguf_mount::fs
