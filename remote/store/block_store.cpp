#include "remote/store/block_store.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <spdlog/spdlog.h>

#include "common/threads.hpp"
#include "common/text.hpp"

namespace gguf_mount::remote {

BlockStore::BlockStore(std::string dir, uint64_t max_bytes, StoreOptions options, bool threads_allowed)
    : options_(options), threads_allowed_(threads_allowed), cache_(std::move(dir), max_bytes) {}

BlockStore::~BlockStore() { stop(); }

void BlockStore::stop() noexcept {
    std::vector<std::thread> stores, commits;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        stores.swap(store_threads_);
    }
    store_cv_.notify_all();
    for (auto& t : stores) t.join();  // they run the queued stages first
    {
        std::lock_guard<std::mutex> lock(mutex_);
        commits_stopping_ = true;
        commits.swap(commit_threads_);
    }
    commit_cv_.notify_all();
    for (auto& t : commits) t.join();  // they run the queued commits first
}

bool BlockStore::queue_store(const std::string& key, const std::string& name, uint64_t block,
                             const std::shared_ptr<const char[]>& bytes, size_t len) noexcept {
    try {
        std::lock_guard<std::mutex> lock(blocks_mutex_);
        pending_[Id(key, block)] = bytes;  // before the job runs: its stage() erases it
    } catch (...) {
    }
    try {
        return store_later([this, key, name, block, bytes, len] { stage(key, name, block, bytes, len); });
    } catch (...) {
        return false;
    }
}

void BlockStore::put(const std::string& key, const std::string& name, uint64_t block,
                     std::shared_ptr<const char[]> bytes, size_t len) noexcept {
    if (!queue_store(key, name, block, bytes, len)) stage(key, name, block, bytes, len);
}

bool BlockStore::try_put(const std::string& key, const std::string& name, uint64_t block,
                         const std::shared_ptr<const char[]>& bytes, size_t len) noexcept {
    if (queue_store(key, name, block, bytes, len)) return true;
    try {  // not queued: nothing done (the caller puts it later)
        std::lock_guard<std::mutex> lock(blocks_mutex_);
        auto it = pending_.find(Id(key, block));
        if (it != pending_.end() && it->second == bytes) pending_.erase(it);
    } catch (...) {
    }
    return false;
}

void BlockStore::stage(const std::string& key, const std::string& name, uint64_t block,
                       const std::shared_ptr<const char[]>& bytes, size_t len) noexcept {
    std::string tmp;
    const int s = cache_.stage(key, block, bytes.get(), len, &tmp);
    if (s != 0) log_failure(key, name, block, s);
    {
        std::lock_guard<std::mutex> lock(blocks_mutex_);
        try {
            if (s == 0) staged_[Id(key, block)] = tmp;
        } catch (...) {
        }
        // Written (O_DIRECT: not in the page cache), readers find its temporary; not written,
        // they fetch it again.
        auto it = pending_.find(Id(key, block));
        if (it != pending_.end() && it->second == bytes) pending_.erase(it);
    }
    if (s != 0) return;
    try {
        if (commit_later([this, key, name, block, tmp, len] { commit(key, name, block, tmp, len); })) return;
    } catch (...) {
    }
    commit(key, name, block, tmp, len);
}

void BlockStore::commit(const std::string& key, const std::string& name, uint64_t block, const std::string& tmp,
                        size_t len) noexcept {
    const auto t0 = std::chrono::steady_clock::now();
    const int c = cache_.commit(key, block, tmp, len);
    if (c != 0) log_failure(key, name, block, c);
    {
        std::lock_guard<std::mutex> lock(blocks_mutex_);
        auto it = staged_.find(Id(key, block));
        if (it != staged_.end() && it->second == tmp) staged_.erase(it);
    }
    // Only now: a block evicted while still listed as staged would be neither readable nor
    // fetched again (holds() takes a staged block as available).
    cache_.evict_if_over();
    spdlog::debug("{}: block {} committed in {} ms", gguf::quote_name(name), block,
                  std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
}

void BlockStore::log_failure(const std::string& key, const std::string& name, uint64_t block, int err) noexcept {
    try {
        {
            std::lock_guard<std::mutex> lock(blocks_mutex_);
            if (!failure_logged_.insert(key).second) return;
        }
        spdlog::warn("{}: cannot store block {} in {}: {} (reads are served, not cached)", gguf::quote_name(name),
                     block, gguf::quote_name(cache_.dir()), std::strerror(-err));
    } catch (...) {
    }
}

std::shared_ptr<const char[]> BlockStore::pending(const std::string& key, uint64_t block) const noexcept {
    try {
        std::lock_guard<std::mutex> lock(blocks_mutex_);
        if (pending_.empty()) return nullptr;  // a cached remount: no copy of the key per read
        auto it = pending_.find(Id(key, block));
        return it == pending_.end() ? nullptr : it->second;
    } catch (...) {
        return nullptr;
    }
}

bool BlockStore::in_flight(const std::string& key, uint64_t block) const noexcept {
    try {
        std::lock_guard<std::mutex> lock(blocks_mutex_);
        if (pending_.empty() && staged_.empty()) return false;
        const Id id(key, block);
        return pending_.count(id) || staged_.count(id);
    } catch (...) {
        return false;
    }
}

bool BlockStore::holds(const std::string& key, uint64_t block, uint64_t block_len) const noexcept {
    return in_flight(key, block) || cache_.has(key, block, block_len);
}

ssize_t BlockStore::read(const std::string& key, uint64_t block, uint64_t block_len, uint64_t offset, size_t n,
                         char* dst) const noexcept {
    ssize_t r = cache_.read(key, block, block_len, offset, n, dst);
    if (r != -ENOENT) return r;
    std::string tmp;
    try {
        std::lock_guard<std::mutex> lock(blocks_mutex_);
        if (!staged_.empty()) {  // a cached remount: no copy of the key per read
            auto it = staged_.find(Id(key, block));
            if (it != staged_.end()) tmp = it->second;
        }
    } catch (...) {
        return -ENOMEM;
    }
    if (!tmp.empty()) r = cache_.read_staged(tmp, offset, n, dst);
    // Gone, or not staged (any more): committed under its final name meanwhile (rename is
    // atomic), or removed after a failed commit.
    return r == -ENOENT ? cache_.read(key, block, block_len, offset, n, dst) : r;
}

bool BlockStore::store_later(std::function<void()> job) noexcept {
    try {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_ || !threads_allowed_ || stores_.size() >= options_.pending_stores) return false;
        if (store_threads_.empty()) {
            for (unsigned i = 0; i < std::max(1u, options_.store_threads); ++i) {
                store_threads_.push_back(gguf::start_thread_without_termination_signals(
                    [this] { serve(stores_, store_cv_, stopping_, stores_running_); }, "gm-store"));
            }
        }
        stores_.push_back(std::move(job));
    } catch (...) {
        return false;
    }
    store_cv_.notify_one();
    return true;
}

void BlockStore::serve(std::deque<std::function<void()>>& queue, std::condition_variable& cv, const bool& stop,
                       unsigned& running) {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            cv.wait(lock, [&] { return stop || !queue.empty(); });
            if (queue.empty()) return;  // stopping, and everything queued has run
            job = std::move(queue.front());
            queue.pop_front();
            ++running;
        }
        job();
        {
            std::lock_guard<std::mutex> lock(mutex_);
            --running;
        }
        idle_cv_.notify_all();
    }
}

bool BlockStore::commit_later(std::function<void()> job) noexcept {
    try {
        std::unique_lock<std::mutex> lock(mutex_);
        if (commits_stopping_ || !threads_allowed_) return false;
        if (commit_threads_.empty()) {
            for (unsigned i = 0; i < std::max(1u, options_.commit_threads); ++i) {
                commit_threads_.push_back(gguf::start_thread_without_termination_signals(
                    [this] { serve(commits_, commit_cv_, commits_stopping_, commits_running_); }, "gm-commit"));
            }
        }
        const size_t limit = std::max(1u, options_.unsynced_blocks);
        idle_cv_.wait(lock, [&] { return commits_.size() + commits_running_ < limit; });
        commits_.push_back(std::move(job));
    } catch (...) {
        return false;
    }
    commit_cv_.notify_one();
    return true;
}

void BlockStore::flush() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_cv_.wait(lock, [this] {
        return stores_.empty() && stores_running_ == 0 && commits_.empty() && commits_running_ == 0;
    });
}

bool BlockStore::on_own_thread() const noexcept {
    const std::thread::id me = std::this_thread::get_id();
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto* threads : {&store_threads_, &commit_threads_}) {
        for (const auto& t : *threads) {
            if (t.get_id() == me) return true;
        }
    }
    return false;
}

}  // namespace gguf_mount::remote
