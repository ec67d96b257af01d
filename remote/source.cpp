#include "remote/source.hpp"
#include "remote/url_parts.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <new>

#include <spdlog/spdlog.h>

#include "gguf/error.hpp"
#include "common/threads.hpp"

namespace gguf_mount::remote {

RemoteSource::~RemoteSource() {
    // A job of the context that held this source may be the last holder of the context too:
    // destroying the context there would join that thread from itself. Let another thread drop
    // this reference (it destroys the context if it is the last one).
    if (context_ && context_->on_own_thread()) {
        try {
            gguf::start_thread_without_termination_signals([c = std::move(context_)]() mutable { c.reset(); }).detach();
        } catch (...) {
        }
    }
}

RemoteSource::RemoteSource(std::shared_ptr<RemoteContext> context, std::string url, ObjectInfo info)
    : context_(std::move(context)), url_(std::move(url)), name_(url_for_message(url_)), info_(std::move(info)) {
    // Without a validator (neither ETag nor Last-Modified) a same-size replacement would keep
    // the key: such a file's blocks serve this open only.
    key_ = BlockCache::validates(info_.validator) ? BlockCache::object_key(url_, info_.validator)
                                                  : context_->cache().open_once(url_);
}

std::shared_ptr<RemoteSource> RemoteSource::open(std::shared_ptr<RemoteContext> context, const std::string& url) {
    const std::string name = url_for_message(url);
    BlockCache& cache = context->cache();
    std::optional<ObjectInfo> known = cache.load_meta(url);
    if (context->options().offline) {
        if (!known) {
            throw gguf::Error(gguf::Code::Io,
                              name + ": not in the cache (--offline): " + cache.dir() +
                                  " has no version of it; mount it once online with this --cache-dir, or run "
                                  "'gguf-mount prefetch' first",
                              ENOENT);
        }
        return std::shared_ptr<RemoteSource>(new RemoteSource(context, url, *known));
    }
    std::optional<ObjectInfo> now;  // the HEAD's answer
    try {
        if (known) {
            try {
                now = context->client().head(url);
            } catch (const HttpError& e) {
                // A server that refuses HEAD (405, or a signed URL valid for GET only) still
                // answers the ranged GET below; a server that is down fails there too.
                spdlog::debug("{} (HEAD); asking with a ranged GET", e.what());
            }
            if (now && now->size == known->size &&
                (now->validator == known->validator || context->head_names(url, now->validator, known->validator))) {
                return std::shared_ptr<RemoteSource>(new RemoteSource(context, url, *known));
            }
        }
        // The first ranged GET gives size and validator; its bytes are block 0.
        std::shared_ptr<char[]> buf = context->block_buffer();
        size_t got = 0;
        ObjectInfo info = context->client().get_range(url, 0, BlockCache::kBlockSize, buf.get(), &got);
        if (known && now && now->validator != info.validator && info.validator == known->validator &&
            info.size == known->size) {
            context->note_head_validator(url, now->validator, info.validator);  // HEAD and GET differ
        }
        auto src = std::shared_ptr<RemoteSource>(new RemoteSource(context, url, info));
        src->bytes_fetched_ = got;
        if (!context->options().store_blocks) {
            // Kept in memory until read to its end (the header read, then the data copy).
            src->fresh_[0] = buf;
            return src;
        }
        cache.store(src->key_, 0, buf.get(), got);
        cache.save_meta(url, info);
        return src;
    } catch (const HttpError& e) {
        // The server is unreachable but the cache knows the file: say how to use what it holds.
        const bool unreachable = e.status() == 0 || e.status() >= 500;  // transport error or a server error
        throw gguf::Error(gguf::Code::Io,
                          std::string(e.what()) +
                              (known && unreachable ? "; the cache holds a version of it: --offline serves what is cached"
                                                    : ""),
                          e.sys_errno());
    }
}

std::shared_ptr<RemoteSource> RemoteSource::open_known(std::shared_ptr<RemoteContext> context,
                                                      const std::string& url, ObjectInfo info, std::string sha256) {
    auto src = std::shared_ptr<RemoteSource>(new RemoteSource(context, url, std::move(info)));
    src->size_only_ = true;
    src->sha256_ = std::move(sha256);
    return src;
}

ObjectInfo RemoteSource::get_block(uint64_t offset, size_t len, char* dst, size_t* got) const {
    std::string location;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        location = location_;
    }
    // One bound for both tries (Client::request_deadline).
    const auto deadline = Client::Clock::now() + context_->client().request_deadline(len);
    std::string answered;
    if (!location.empty() && location != url_) {
        try {
            return context_->client().get_range(location, offset, len, dst, got, &answered, deadline);
        } catch (const HttpError& e) {
            // An expired signed URL, a CDN node gone: resolve again through the given URL.
            spdlog::debug("{} (through its last redirect target); resolving {} again", e.what(), name_);
        }
    }
    ObjectInfo info = context_->client().get_range(url_, offset, len, dst, got, &answered, deadline);
    std::lock_guard<std::mutex> lock(mutex_);
    location_ = answered;
    return info;
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

uint64_t RemoteSource::first_uncached_block() const noexcept {
    const uint64_t n = block_count();
    for (uint64_t b = 0; b < n; ++b) {
        if (!cached(b)) return b;
    }
    return n;
}

std::shared_ptr<const char[]> RemoteSource::fresh(uint64_t block) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = fresh_.find(block);
    return it == fresh_.end() ? nullptr : it->second;
}

void RemoteSource::release_kept(uint64_t block) const noexcept {
    std::shared_ptr<const char[]> bytes;  // let go outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    if (kept_.erase(block) == 0 || storing_.count(block)) return;  // being stored: store_block lets go
    auto it = fresh_.find(block);
    if (it == fresh_.end()) return;
    bytes = std::move(it->second);
    fresh_.erase(it);
}

int RemoteSource::fetch(uint64_t block, std::shared_ptr<const char[]>* bytes) const noexcept {
    const uint64_t len = block_length(block);
    {
        std::unique_lock<std::mutex> lock(mutex_);
        auto in_flight = fetching_.find(block);
        if (in_flight != fetching_.end()) {
            // Another thread fetches it: its outcome is this read's too. Asking again at once
            // would make N readers of a block that fails wait N times the request's bound.
            const uint64_t waited_for = in_flight->second;
            cv_.wait(lock, [&] { return fetching_.count(block) == 0; });
            auto f = failed_.find(block);
            if (f != failed_.end() && f->second.first == waited_for) return f->second.second;
        }
        auto it = fresh_.find(block);
        if (it != fresh_.end()) {  // fetched by another thread, still being staged
            if (bytes) *bytes = it->second;
            return 0;
        }
        if (staged_.count(block) || context_->cache().has(key_, block, len)) return 0;
        try {
            fetching_[block] = ++fetch_serial_;
        } catch (...) {
            return -ENOMEM;
        }
    }
    int rc = 0;
    std::shared_ptr<char[]> buf;
    size_t got = 0;  // == len (get_range throws on a short answer)
    const bool store = context_->options().store_blocks;
    const auto t0 = std::chrono::steady_clock::now();
    if (context_->options().offline) {
        if (!offline_logged_.exchange(true)) {
            spdlog::warn("{}: block {} (bytes {}-{}) is not cached and --offline is set: reads of it fail with EIO",
                         name_, block, block * BlockCache::kBlockSize, block * BlockCache::kBlockSize + len - 1);
        }
        rc = -EIO;
    } else {
        try {
            buf = context_->block_buffer();
            ObjectInfo info = get_block(block * BlockCache::kBlockSize, len, buf.get(), &got);
            bytes_fetched_ += got;
            auto other_version = [&] {
                return (!size_only_ && info.validator != info_.validator) || info.size != info_.size;
            };
            if (other_version()) {
                // One answer of another version: a real change, or one backend of several that
                // disagree (a load balancer). Never served; asked once more, resolving anew.
                {
                    std::lock_guard<std::mutex> lock(mutex_);
                    location_.clear();
                }
                info = get_block(block * BlockCache::kBlockSize, len, buf.get(), &got);
                bytes_fetched_ += got;
            }
            if (other_version()) {
                if (!other_version_logged_.exchange(true)) {
                    spdlog::warn("{}: the server answered another version (validator {} -> {}, size {} -> {}): changed "
                                 "on the server, or its backends disagree. Reads of uncached blocks fail with EIO "
                                 "while it does, cached blocks are still served; a changed file is served as a new "
                                 "version after the next revalidation or a remount",
                                 name_, info_.validator, info.validator, info_.size, info.size);
                }
                rc = -EIO;
            }
        } catch (const HttpError& e) {
            // A reader's own fetch says it; read-ahead failing for the same cause (the server
            // gone) would repeat it for every block of the window.
            if (bytes) {
                spdlog::warn("{}", e.what());
            } else {
                spdlog::debug("{} (read-ahead)", e.what());
            }
            rc = -EIO;
        } catch (...) {
            rc = -ENOMEM;
        }
    }
    // Readers take the bytes from memory at once: fresh_ holds them while they are being
    // stored and, stored, while the context keeps them (RemoteContext::keep).
    bool kept = false;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto mine = fetching_.find(block);
        try {
            if (rc != 0) {
                failed_[block] = {mine->second, rc};
            } else {
                failed_.erase(block);
            }
        } catch (...) {
        }
        fetching_.erase(mine);
        if (rc == 0) {
            try {
                fresh_[block] = buf;
                if (store) {
                    storing_.insert(block);
                    kept = kept_.insert(block).second;
                }
            } catch (...) {
            }
        }
    }
    cv_.notify_all();
    if (rc != 0) return rc;
    if (kept) context_->keep(weak_from_this(), block);
    if (bytes) *bytes = buf;
    spdlog::debug("{}: block {} ({} bytes) fetched in {} ms{}", name_, block, got,
                  std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count(),
                  bytes ? "" : " (read-ahead)");
    if (!store) return 0;  // stays in fresh_ until read to its end
    // The cache gets the bytes off the read path: write, fdatasync and rename took 10-80 ms per
    // block on the bench VM against 5-10 ms for its transfer on loopback; the fdatasync also
    // runs apart from the write (commit threads), so the commits lag behind the network as a
    // download's writeback does, by at most unsynced_blocks blocks. The write itself (O_DIRECT)
    // paces the fetches once pending_stores blocks wait for it.
    std::weak_ptr<const RemoteSource> weak = weak_from_this();
    RemoteContext& context = *context_;
    try {
        if (context.store_later([weak, &context, key = key_, name = name_, block, buf, got] {
                store_block(weak, context, key, name, block, buf, got);
            })) {
            return 0;
        }
    } catch (...) {
    }
    store_block(weak, context, key_, name_, block, buf, got);
    return 0;
}

void RemoteSource::store_block(const std::weak_ptr<const RemoteSource>& weak, RemoteContext& context,
                               const std::string& key, const std::string& name, uint64_t block,
                               const std::shared_ptr<const char[]>& buf, size_t len) noexcept {
    std::string tmp;
    int s = context.cache().stage(key, block, buf.get(), len, &tmp);
    {
        auto self = weak.lock();
        if (s != 0 && (!self || !self->store_failure_logged_.exchange(true))) {
            spdlog::warn("{}: cannot store block {} in {}: {} (reads are served, not cached)", name, block,
                         context.cache().dir(), std::strerror(-s));
        }
        if (self) {
            std::lock_guard<std::mutex> lock(self->mutex_);
            self->storing_.erase(block);
            bool staged = false;
            try {
                if (s == 0) {
                    self->staged_[block] = tmp;
                    staged = true;
                }
            } catch (...) {
            }
            // Not written: readers fetch it again. Written (O_DIRECT: not in the page cache),
            // the bytes stay in memory while the context keeps them (release_kept).
            if (!staged) self->kept_.erase(block);
            if (!self->kept_.count(block)) self->fresh_.erase(block);
        }
    }
    if (s != 0) return;
    auto commit = [weak, &context, key, name, block, tmp, len] {
        const auto t0 = std::chrono::steady_clock::now();
        int c = context.cache().commit(key, block, tmp, len);
        if (auto self = weak.lock()) {
            if (c != 0 && !self->store_failure_logged_.exchange(true)) {
                spdlog::warn("{}: cannot store block {} in {}: {} (reads are served, not cached)", name, block,
                             context.cache().dir(), std::strerror(-c));
            }
            std::lock_guard<std::mutex> lock(self->mutex_);
            auto it = self->staged_.find(block);
            if (it != self->staged_.end() && it->second == tmp) self->staged_.erase(it);
        }
        // Only now: a block evicted while still listed as staged would be neither readable nor
        // fetched again (fetch() takes a staged block as available).
        context.cache().evict_if_over();
        spdlog::debug("{}: block {} committed in {} ms", name, block,
                      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
                          .count());
    };
    try {
        if (context.commit_later(commit)) return;
    } catch (...) {
    }
    commit();
}

ssize_t RemoteSource::read_stored(uint64_t block, uint64_t blen, uint64_t in_block, size_t n,
                                  char* dst) const noexcept {
    ssize_t r = context_->cache().read(key_, block, blen, in_block, n, dst);
    if (r != -ENOENT) return r;
    std::string tmp;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = staged_.find(block);
        if (it != staged_.end()) {
            try {
                tmp = it->second;
            } catch (...) {
                return -ENOMEM;
            }
        }
    }
    if (!tmp.empty()) r = context_->cache().read_staged(tmp, in_block, n, dst);
    // Gone, or not staged (any more): committed under its final name meanwhile (rename is
    // atomic), or removed after a failed commit.
    return r == -ENOENT ? context_->cache().read(key_, block, blen, in_block, n, dst) : r;
}

void RemoteSource::read_ahead(uint64_t block) const noexcept {
    const unsigned ahead = context_->options().readahead_blocks;
    if (ahead == 0) return;
    // A reader moving on by one block only needs the new end of the window (the earlier blocks
    // were handled by the call before); after a jump, all of it.
    const uint64_t prev = advised_.exchange(block + ahead);
    const uint64_t from = prev > block && prev <= block + ahead ? prev + 1 : block + 1;
    std::weak_ptr<const RemoteSource> weak = weak_from_this();
    for (uint64_t b = from; b <= block + ahead && block_length(b) > 0; ++b) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (fetching_.count(b) || fresh_.count(b) || staged_.count(b)) continue;
        }
        if (cached(b)) {  // read ahead from disk, off the reader's thread
            context_->submit([weak, b] {
                if (auto self = weak.lock()) self->context_->cache().load(self->key_, b, self->block_length(b));
            });
            continue;
        }
        if (context_->options().offline) continue;
        context_->submit([weak, b] {
            if (auto self = weak.lock()) self->fetch(b, nullptr);
        });
    }
}

void RemoteSource::drop_behind(uint64_t block) const noexcept {
    const unsigned lag = context_->options().drop_lag_blocks;
    if (lag == 0 || block < lag) return;
    const uint64_t behind = block - lag;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (fresh_.count(behind) || staged_.count(behind)) return;  // in memory, or not in its final file yet
    }
    context_->cache().drop_pages(key_, behind);
}

ssize_t RemoteSource::pread(void* dst, size_t len, uint64_t offset) const noexcept {
    if (digest_ && digest_->failed.load()) return -EIO;  // wrong bytes (verify_sha256)
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
        if (prev == block) {
            read_ahead(block);
            drop_behind(block);
        }
        ssize_t r = -ENOENT;
        std::shared_ptr<const char[]> bytes = fresh(block);
        if (!bytes) r = read_stored(block, blen, in_block, n, out + done);
        // Absent: fetch it (or wait for the thread fetching it). The fetched bytes are used from
        // memory (the cache may not keep them: disk full, or evicted at once under a small
        // --cache-max-size); a block found cached meanwhile is read from the cache, and fetched
        // again if it is already gone.
        // Each attempt either fetches the block (bytes in memory) or finds it staged or present at
        // that moment; a cache bound below the working set may evict it again before it is read.
        // A FUSE worker never waits for the network (gguf::NoNetworkWaitScope): it hands the
        // read to a thread of its own.
        if (!bytes && r == -ENOENT && gguf::NoNetworkWaitScope::on()) return -EWOULDBLOCK;
        for (int attempt = 0; !bytes && r == -ENOENT && attempt < 8; ++attempt) {
            int rc = fetch(block, &bytes);
            if (rc != 0) return rc;
            if (!bytes) r = read_stored(block, blen, in_block, n, out + done);
        }
        if (bytes) {
            std::memcpy(out + done, bytes.get() + in_block, n);
            r = static_cast<ssize_t>(n);
            if (!context_->options().store_blocks && in_block + n == blen) {
                std::lock_guard<std::mutex> lock(mutex_);
                fresh_.erase(block);  // read to its end: a sequential reader is done with it
            }
        }
        if (r < 0) return r == -ENOENT ? -EIO : r;
        done += n;
    }
    return digest_ ? hash_read(dst, offset, done) : static_cast<ssize_t>(done);
}

std::map<std::string, Opened> open_sources(const std::shared_ptr<RemoteContext>& context,
                                           const std::vector<std::string>& urls) {
    std::map<std::string, Opened> out;
    for (size_t i = 0; i < urls.size(); i += kParallelOpens) {
        std::vector<std::pair<std::string, std::future<std::shared_ptr<RemoteSource>>>> batch;
        for (size_t k = i; k < i + kParallelOpens && k < urls.size(); ++k) {
            batch.emplace_back(urls[k], std::async(std::launch::async, [&context, u = urls[k]] {
                                   return RemoteSource::open(context, u);
                               }));
        }
        for (auto& [u, f] : batch) {
            Opened o;
            try {
                o.source = f.get();
            } catch (const gguf::Error& e) {
                o.error = e.what();
                o.sys_errno = e.sys_errno();
            }
            out[u] = std::move(o);
        }
    }
    return out;
}

}  // namespace gguf_mount::remote
