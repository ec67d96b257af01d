// RemoteContext: what the remote sources of one mount share (buffers, read-ahead workers, store
// and commit threads, what revalidation learnt about servers). RemoteSource is in source.cpp.
#include "remote/source.hpp"
#include "remote/url_parts.hpp"

#include <sys/mman.h>

#include <chrono>
#include <memory>
#include <new>

#include <spdlog/spdlog.h>

#include "common/threads.hpp"

namespace gguf_mount::remote {

/// The block buffers of one context, reused: each is a BlockCache::kBlockSize anonymous
/// mapping of its own, whose pages were touched once. A fresh mapping costs a page fault and a
/// zeroed page per 4 KiB on first touch, which on the bench VM (free-page reporting: the host
/// takes freed memory back) cost 9 % of all CPU of a cold remote read (perf, do_anonymous_page
/// under the copy into the buffer). Not malloc: blocks are allocated on one thread and freed on
/// another (fetch, read-ahead and store threads), and glibc's per-thread arenas then kept
/// freed blocks (the benchmark's daemon RSS on a 100 GiB sparse set rose from 99 to 181 MiB).
struct BufferPool {
    explicit BufferPool(size_t pooled) : cap(pooled) {}
    ~BufferPool() {
        for (char* p : idle) ::munmap(p, BlockCache::kBlockSize);
    }
    /// Keeps `p` for reuse, or unmaps it when more than `cap` are mapped. Never throws.
    void give_back(char* p) noexcept {
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (mapped <= cap) {
                try {
                    idle.push_back(p);
                    return;
                } catch (...) {
                }
            }
            --mapped;
        }
        ::munmap(p, BlockCache::kBlockSize);
    }
    mutable std::mutex mutex;
    std::vector<char*> idle;  // under mutex
    size_t mapped = 0;        // under mutex: in use and idle
    size_t cap;
};

std::shared_ptr<char[]> RemoteContext::block_buffer() {
    char* p = nullptr;
    {
        std::lock_guard<std::mutex> lock(pool_->mutex);
        if (!pool_->idle.empty()) {
            p = pool_->idle.back();
            pool_->idle.pop_back();
        }
    }
    if (!p) {
        void* m = ::mmap(nullptr, BlockCache::kBlockSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) throw std::bad_alloc();
        p = static_cast<char*>(m);
        std::lock_guard<std::mutex> lock(pool_->mutex);
        ++pool_->mapped;
    }
    std::shared_ptr<BufferPool> pool = pool_;
    try {
        return std::shared_ptr<char[]>(p, [pool](char* q) { pool->give_back(q); });
    } catch (...) {
        pool_->give_back(p);
        throw;
    }
}

void RemoteContext::trim_buffers() noexcept {
    std::vector<char*> unmap;
    {
        std::lock_guard<std::mutex> lock(pool_->mutex);
        while (pool_->idle.size() > options_.idle_buffers) {
            unmap.push_back(pool_->idle.back());
            pool_->idle.pop_back();
            --pool_->mapped;
        }
    }
    for (char* p : unmap) ::munmap(p, BlockCache::kBlockSize);
}

std::pair<size_t, size_t> RemoteContext::buffers_mapped() const noexcept {
    std::lock_guard<std::mutex> lock(pool_->mutex);
    return {pool_->mapped, pool_->idle.size()};
}

namespace {

/// The number of RemoteContexts alive in the process (RemoteContext::wait_until_none_alive).
struct AliveCount {
    std::mutex mutex;
    std::condition_variable gone;
    size_t alive = 0;
};

AliveCount& alive_count() {
    static AliveCount* count = new AliveCount;  // never destroyed: used by threads up to exit
    return *count;
}

}  // namespace

bool RemoteContext::wait_until_none_alive(std::chrono::milliseconds patience) noexcept {
    AliveCount& a = alive_count();
    std::unique_lock<std::mutex> lock(a.mutex);
    return a.gone.wait_for(lock, patience, [&] { return a.alive == 0; });
}

void RemoteContext::keep(std::weak_ptr<const RemoteSource> source, uint64_t block) noexcept {
    std::vector<std::pair<std::shared_ptr<const RemoteSource>, uint64_t>> drop;
    try {
        std::lock_guard<std::mutex> lock(kept_mutex_);
        kept_.emplace_back(std::move(source), block);
        while (kept_.size() > options_.kept_blocks) {
            drop.emplace_back(kept_.front().first.lock(), kept_.front().second);
            kept_.pop_front();
        }
    } catch (...) {
    }
    for (auto& [s, b] : drop) {
        if (s) s->release_kept(b);
    }
}

void RemoteContext::note_head_validator(const std::string& url, const std::string& head,
                                        const std::string& get) noexcept {
    try {
        auto parts = parse_url(url);
        const std::string origin = parts ? parts->scheme + "://" + parts->host + ":" + parts->port : "?";
        bool first = false;
        {
            std::lock_guard<std::mutex> lock(head_mutex_);
            head_validators_[url] = {head, get};
            first = head_logged_.insert(origin).second;
        }
        if (first) {
            spdlog::warn("{}: HEAD and GET answer different ETags ({} and {} for {}); revalidation trusts this "
                         "HEAD answer from now on (each revalidation would otherwise cost a ranged GET per file)",
                         origin, head, get, url_for_message(url));
        }
    } catch (...) {
    }
}

bool RemoteContext::head_names(const std::string& url, const std::string& head, const std::string& get) const noexcept {
    std::lock_guard<std::mutex> lock(head_mutex_);
    auto it = head_validators_.find(url);
    return it != head_validators_.end() && it->second.first == head && it->second.second == get;
}

RemoteContext::RemoteContext(RemoteOptions options, std::shared_ptr<Client> client)
    : options_(std::move(options)),
      threads_allowed_(!options_.defer_threads),
      client_(client ? std::move(client) : std::make_shared<HttpClient>(options_.http)),
      cache_(options_.cache_dir.empty() ? BlockCache::default_dir() : options_.cache_dir, options_.cache_max_bytes),
      pool_(std::make_shared<BufferPool>(std::max(options_.pooled_buffers, options_.idle_buffers))) {
    {
        std::lock_guard<std::mutex> lock(alive_count().mutex);
        ++alive_count().alive;
    }
    // Staged blocks are on disk but not yet counted by the cache's bound: keep them to a quarter
    // of it, so a bounded cache overshoots its --cache-max-size by at most that much.
    if (options_.cache_max_bytes) {
        const uint64_t quarter = options_.cache_max_bytes / BlockCache::kBlockSize / 4;
        options_.unsynced_blocks = static_cast<unsigned>(
            std::max<uint64_t>(1, std::min<uint64_t>(options_.unsynced_blocks, quarter)));
    }
}

RemoteContext::~RemoteContext() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        jobs_.clear();
    }
    cv_.notify_all();
    store_cv_.notify_all();
    for (auto& t : workers_) t.join();
    for (auto& t : store_threads_) t.join();  // they run the queued stages first
    {
        std::lock_guard<std::mutex> lock(mutex_);
        commits_stopping_ = true;
    }
    commit_cv_.notify_all();
    for (auto& t : commit_threads_) t.join();  // they run the queued commits first
    AliveCount& a = alive_count();
    {
        std::lock_guard<std::mutex> lock(a.mutex);
        --a.alive;
    }
    a.gone.notify_all();
}

bool RemoteContext::store_later(std::function<void()> job) noexcept {
    try {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_ || !threads_allowed_ || stores_.size() >= options_.pending_stores) return false;
        if (store_threads_.empty()) {
            for (unsigned i = 0; i < std::max(1u, options_.store_threads); ++i) {
                store_threads_.push_back(gguf::start_thread_without_termination_signals([this] { store_work(); }));
            }
        }
        stores_.push_back(std::move(job));
    } catch (...) {
        return false;
    }
    store_cv_.notify_one();
    return true;
}

void RemoteContext::store_work() {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            store_cv_.wait(lock, [this] { return stopping_ || !stores_.empty(); });
            if (stores_.empty()) return;  // stopping, and everything queued is staged
            job = std::move(stores_.front());
            stores_.pop_front();
            ++stores_running_;
        }
        job();
        {
            std::lock_guard<std::mutex> lock(mutex_);
            --stores_running_;
        }
        idle_cv_.notify_all();
    }
}

bool RemoteContext::commit_later(std::function<void()> job) noexcept {
    try {
        std::unique_lock<std::mutex> lock(mutex_);
        if (commits_stopping_ || !threads_allowed_) return false;
        if (commit_threads_.empty()) {
            for (unsigned i = 0; i < std::max(1u, options_.commit_threads); ++i) {
                commit_threads_.push_back(gguf::start_thread_without_termination_signals([this] { commit_work(); }));
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

void RemoteContext::commit_work() {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            commit_cv_.wait(lock, [this] { return commits_stopping_ || !commits_.empty(); });
            if (commits_.empty()) return;  // stopping, and everything queued is committed
            job = std::move(commits_.front());
            commits_.pop_front();
            ++commits_running_;
        }
        job();
        {
            std::lock_guard<std::mutex> lock(mutex_);
            --commits_running_;
        }
        idle_cv_.notify_all();
    }
}

void RemoteContext::flush() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_cv_.wait(lock, [this] {
        return stores_.empty() && stores_running_ == 0 && commits_.empty() && commits_running_ == 0;
    });
}

void RemoteContext::submit(std::function<void()> job) noexcept {
    try {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_ || !threads_allowed_) return;  // read-ahead is best effort
        if (workers_.empty()) {
            for (unsigned i = 0; i < std::max(1u, options_.fetch_threads); ++i) {
                workers_.push_back(gguf::start_thread_without_termination_signals([this] { work(); }));
            }
        }
        jobs_.push_back(std::move(job));
    } catch (...) {
        return;
    }
    cv_.notify_one();
}

void RemoteContext::work() {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            if (!cv_.wait_for(lock, options_.buffer_trim_after, [this] { return stopping_ || !jobs_.empty(); })) {
                lock.unlock();
                trim_buffers();  // quiet: the reader is done or paused
                continue;
            }
            if (stopping_) return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        job();
    }
}

bool RemoteContext::on_own_thread() const noexcept {
    const std::thread::id me = std::this_thread::get_id();
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto* threads : {&workers_, &store_threads_, &commit_threads_}) {
        for (const auto& t : *threads) {
            if (t.get_id() == me) return true;
        }
    }
    return false;
}

}  // namespace gguf_mount::remote
