#include "remote/store/prefetcher.hpp"

#include <algorithm>

#include "common/threads.hpp"

namespace gguf_mount::remote {

Prefetcher::Prefetcher(PrefetchOptions options, bool threads_allowed)
    : options_(options), threads_allowed_(threads_allowed), pool_(options.pooled_buffers, options.idle_buffers) {}

Prefetcher::~Prefetcher() { stop(); }

void Prefetcher::stop() noexcept {
    std::vector<std::thread> workers;
    std::deque<std::function<void()>> dropped;  // destroyed outside the lock
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        dropped.swap(jobs_);
        workers.swap(workers_);
    }
    cv_.notify_all();
    for (auto& t : workers) t.join();
}

void Prefetcher::submit(std::function<void()> job) noexcept {
    try {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_ || !threads_allowed_) return;
        if (workers_.empty()) {
            for (unsigned i = 0; i < std::max(1u, options_.threads); ++i) {
                workers_.push_back(gguf::start_thread_without_termination_signals([this] { work(); }, "gm-fetch"));
            }
        }
        jobs_.push_back(std::move(job));
    } catch (...) {
        return;
    }
    cv_.notify_one();
}

void Prefetcher::work() {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            if (!cv_.wait_for(lock, options_.trim_after, [this] { return stopping_ || !jobs_.empty(); })) {
                lock.unlock();
                pool_.trim();  // quiet: the reader is done or paused
                continue;
            }
            if (stopping_) return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        job();
    }
}

bool Prefetcher::on_own_thread() const noexcept {
    const std::thread::id me = std::this_thread::get_id();
    std::lock_guard<std::mutex> lock(mutex_);
    return std::any_of(workers_.begin(), workers_.end(), [&](const std::thread& t) { return t.get_id() == me; });
}

void Prefetcher::keep(const std::string& key, uint64_t block, std::shared_ptr<const char[]> bytes) noexcept {
    std::vector<std::shared_ptr<const char[]>> drop;  // let go outside the lock
    try {
        std::lock_guard<std::mutex> lock(kept_mutex_);
        auto id = std::make_pair(key, block);
        const uint64_t serial = ++serial_;
        auto& slot = kept_[id];
        drop.push_back(std::move(slot.first));
        slot = {std::move(bytes), serial};
        order_.emplace_back(std::move(id), serial);
        while (kept_.size() > options_.kept_blocks && !order_.empty()) {
            auto it = kept_.find(order_.front().first);
            if (it != kept_.end() && it->second.second == order_.front().second) {
                drop.push_back(std::move(it->second.first));
                kept_.erase(it);
            }
            order_.pop_front();
        }
        // Entries replaced or forgotten leave stale order_ entries: sweep them once they
        // outnumber the live ones.
        if (order_.size() > 2 * kept_.size() + 16) {
            std::deque<std::pair<std::pair<std::string, uint64_t>, uint64_t>> live;
            for (auto& e : order_) {
                auto it = kept_.find(e.first);
                if (it != kept_.end() && it->second.second == e.second) live.push_back(std::move(e));
            }
            order_.swap(live);
        }
    } catch (...) {
    }
}

std::shared_ptr<const char[]> Prefetcher::kept(const std::string& key, uint64_t block) const noexcept {
    try {
        std::lock_guard<std::mutex> lock(kept_mutex_);
        if (kept_.empty()) return nullptr;  // a cached remount: no copy of the key per read
        auto it = kept_.find(std::make_pair(key, block));
        return it == kept_.end() ? nullptr : it->second.first;
    } catch (...) {
        return nullptr;
    }
}

void Prefetcher::forget(const std::string& key) noexcept {
    std::vector<std::shared_ptr<const char[]>> drop;
    try {
        std::lock_guard<std::mutex> lock(kept_mutex_);
        for (auto it = kept_.lower_bound(std::make_pair(key, uint64_t{0})); it != kept_.end() && it->first.first == key;) {
            drop.push_back(std::move(it->second.first));
            it = kept_.erase(it);
        }
    } catch (...) {
    }
}

}  // namespace gguf_mount::remote
