#include "remote/index.hpp"
#include "remote/source.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <spdlog/spdlog.h>

#include "gguf/error.hpp"

namespace gguf_mount::remote {

RemoteContext::RemoteContext(RemoteOptions options)
    : options_(std::move(options)),
      http_(options_.http),
      cache_(options_.cache_dir.empty() ? BlockCache::default_dir() : options_.cache_dir, options_.cache_max_bytes) {}

RemoteContext::~RemoteContext() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        jobs_.clear();
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void RemoteContext::submit(std::function<void()> job) noexcept {
    try {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) return;
        if (workers_.empty()) {
            for (unsigned i = 0; i < std::max(1u, options_.fetch_threads); ++i) workers_.emplace_back([this] { work(); });
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
            cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
            if (stopping_) return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        job();
    }
}

RemoteSource::RemoteSource(std::shared_ptr<RemoteContext> context, std::string url, ObjectInfo info)
    : context_(std::move(context)), url_(std::move(url)), name_(url_for_message(url_)), info_(std::move(info)) {
    key_ = BlockCache::object_key(url_, info_.validator);
}

std::shared_ptr<RemoteSource> RemoteSource::open(std::shared_ptr<RemoteContext> context, const std::string& url) {
    const std::string name = url_for_message(url);
    BlockCache& cache = context->cache();
    std::optional<ObjectInfo> known = cache.load_meta(url);
    if (context->options().offline) {
        if (!known) throw gguf::Error(gguf::Code::Io, name + ": not in the cache (--offline)", ENOENT);
        return std::shared_ptr<RemoteSource>(new RemoteSource(context, url, *known));
    }
    try {
        if (known) {
            std::optional<ObjectInfo> now;
            try {
                now = context->http().head(url);
            } catch (const HttpError& e) {
                // A server that refuses HEAD (405, or a signed URL valid for GET only) still
                // answers the ranged GET below; a server that is down fails there too.
                spdlog::debug("{} (HEAD); asking with a ranged GET", e.what());
            }
            if (now && now->validator == known->validator && now->size == known->size) {
                return std::shared_ptr<RemoteSource>(new RemoteSource(context, url, *known));
            }
        }
        // The first ranged GET gives size and validator; its bytes are block 0.
        std::unique_ptr<char[]> buf(new char[BlockCache::kBlockSize]);
        size_t got = 0;
        ObjectInfo info = context->http().get_range(url, 0, BlockCache::kBlockSize, buf.get(), &got);
        auto src = std::shared_ptr<RemoteSource>(new RemoteSource(context, url, info));
        cache.store(src->key_, 0, buf.get(), got);
        cache.save_meta(url, info);
        return src;
    } catch (const HttpError& e) {
        throw gguf::Error(gguf::Code::Io, e.what(), e.sys_errno());
    }
}

gguf::FilePart RemoteSource::part() const {
    gguf::FilePart p;
    p.path = name_;
    p.size = info_.size;
    p.st.st_mode = S_IFREG | 0444;
    p.st.st_size = static_cast<off_t>(info_.size);
    p.st.st_uid = ::getuid();
    p.st.st_gid = ::getgid();
    p.st.st_nlink = 1;
    p.st.st_mtim.tv_sec = info_.mtime;
    p.st.st_ctim.tv_sec = info_.mtime;
    p.source = shared_from_this();
    p.validator = info_.validator;
    return p;
}

uint64_t RemoteSource::block_length(uint64_t block) const noexcept {
    const uint64_t start = block * BlockCache::kBlockSize;
    return start >= info_.size ? 0 : std::min(BlockCache::kBlockSize, info_.size - start);
}

int RemoteSource::fetch(uint64_t block, std::unique_ptr<char[]>* keep) const noexcept {
    const uint64_t len = block_length(block);
    {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return fetching_.count(block) == 0; });
        if (context_->cache().has(key_, block, len)) return 0;
        if (changed_.load()) return -EIO;
        try {
            fetching_.insert(block);
        } catch (...) {
            return -ENOMEM;
        }
    }
    int rc = 0;
    if (context_->options().offline) {
        if (!offline_logged_.exchange(true)) {
            spdlog::warn("{}: block {} (bytes {}-{}) is not cached and --offline is set: reads of it fail with EIO",
                         name_, block, block * BlockCache::kBlockSize, block * BlockCache::kBlockSize + len - 1);
        }
        rc = -EIO;
    } else {
        try {
            std::unique_ptr<char[]> buf(new char[len]);
            size_t got = 0;  // == len (get_range throws on a short answer)
            ObjectInfo info = context_->http().get_range(url_, block * BlockCache::kBlockSize, len, buf.get(), &got);
            if (info.validator != info_.validator || info.size != info_.size) {
                if (!changed_.exchange(true)) {
                    spdlog::warn("{}: changed on the server (validator {} -> {}); cached blocks are still served, "
                                 "the rest fails with EIO until it is mounted again",
                                 name_, info_.validator, info.validator);
                }
                rc = -EIO;
            } else {
                int s = context_->cache().store(key_, block, buf.get(), got);
                if (s != 0 && !store_failure_logged_.exchange(true)) {
                    spdlog::warn("{}: cannot store block {} in {}: {} (reads are served, not cached)", name_, block,
                                 context_->cache().dir(), std::strerror(-s));
                }
                if (keep) *keep = std::move(buf);
            }
        } catch (const HttpError& e) {
            spdlog::warn("{}", e.what());
            rc = -(e.sys_errno() ? e.sys_errno() : EIO);
            if (rc == -ENOENT || rc == -EACCES) rc = -EIO;
        } catch (...) {
            rc = -ENOMEM;
        }
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        fetching_.erase(block);
    }
    cv_.notify_all();
    return rc;
}

void RemoteSource::read_ahead(uint64_t block) const noexcept {
    const unsigned ahead = context_->options().readahead_blocks;
    if (ahead == 0 || context_->options().offline) return;
    std::weak_ptr<const RemoteSource> weak = weak_from_this();
    for (uint64_t b = block + 1; b <= block + ahead && block_length(b) > 0; ++b) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (fetching_.count(b)) continue;
        }
        if (context_->cache().has(key_, b, block_length(b))) continue;
        context_->submit([weak, b] {
            if (auto self = weak.lock()) self->fetch(b, nullptr);
        });
    }
}

ssize_t RemoteSource::pread(void* dst, size_t len, uint64_t offset) const noexcept {
    if (offset >= info_.size) return 0;
    len = static_cast<size_t>(std::min<uint64_t>(len, info_.size - offset));
    char* out = static_cast<char*>(dst);
    size_t done = 0;
    while (done < len) {
        const uint64_t at = offset + done;
        const uint64_t block = at / BlockCache::kBlockSize;
        const uint64_t in_block = at % BlockCache::kBlockSize;
        const uint64_t blen = block_length(block);
        const size_t n = static_cast<size_t>(std::min<uint64_t>(len - done, blen - in_block));
        // A reader that moves on from the previous block into this one is sequential (re-reads
        // inside one block, like the header reads of planning, are not).
        const uint64_t prev = next_block_.exchange(block + 1);
        if (prev == block) read_ahead(block);
        ssize_t r = context_->cache().read(key_, block, blen, in_block, n, out + done);
        // Absent: fetch it. The bytes this thread fetched are used directly (the cache may not
        // keep them: disk full, or evicted at once by a small --cache-max-size); a block another
        // thread fetched is read from the cache, and fetched again if it is already gone.
        for (int attempt = 0; r == -ENOENT && attempt < 2; ++attempt) {
            std::unique_ptr<char[]> fetched;
            int rc = fetch(block, &fetched);
            if (rc != 0) return rc;
            if (fetched) {
                std::memcpy(out + done, fetched.get() + in_block, n);
                r = static_cast<ssize_t>(n);
            } else {
                r = context_->cache().read(key_, block, blen, in_block, n, out + done);
            }
        }
        if (r < 0) return r == -ENOENT ? -EIO : r;
        done += n;
    }
    return static_cast<ssize_t>(done);
}

}  // namespace gguf_mount::remote
