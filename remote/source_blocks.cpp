#include "remote/source_blocks.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include <spdlog/spdlog.h>

#include "gguf/bytes/byte_source.hpp"
#include "common/text.hpp"

namespace gguf_mount::remote {
namespace {

/// The value of query parameter `name` of `url` (exact case, not decoded), "" when absent.
std::string signed_url_param(const std::string& url, const std::string& name) {
    const size_t q = url.find('?');
    if (q == std::string::npos) return "";
    size_t i = q + 1;
    while (i < url.size()) {
        size_t end = url.find_first_of("&#", i);
        if (end == std::string::npos) end = url.size();
        const std::string pair = url.substr(i, end - i);
        if (pair.size() > name.size() && pair.compare(0, name.size(), name) == 0 && pair[name.size()] == '=')
            return pair.substr(name.size() + 1);
        if (end >= url.size() || url[end] == '#') break;
        i = end + 1;
    }
    return "";
}

/// When a signed URL stops being good, in seconds since the epoch; 0 when it does not say.
/// CloudFront signed URLs ("Expires=EPOCH", the Hub's and Docker Hub's CDNs), AWS SigV4
/// presigned URLs ("X-Amz-Date=YYYYMMDDTHHMMSSZ" + "X-Amz-Expires=SECONDS") and Google Cloud
/// Storage V4 ones ("X-Goog-Date" + "X-Goog-Expires").
time_t signed_url_expiry(const std::string& url) {
    auto number = [](const std::string& v) -> long long {
        if (v.empty() || v.size() > 12 || v.find_first_not_of("0123456789") != std::string::npos) return -1;
        return std::stoll(v);
    };
    if (const long long e = number(signed_url_param(url, "Expires")); e > 0) return static_cast<time_t>(e);
    for (const char* vendor : {"Amz", "Goog"}) {
        const std::string date = signed_url_param(url, std::string("X-") + vendor + "-Date");
        const long long life = number(signed_url_param(url, std::string("X-") + vendor + "-Expires"));
        std::tm tm{};
        if (life < 0 || date.size() != 16 || date[8] != 'T' || date[15] != 'Z' ||
            std::sscanf(date.c_str(), "%4d%2d%2dT%2d%2d%2dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                        &tm.tm_min, &tm.tm_sec) != 6)
            continue;
        tm.tm_year -= 1900;
        tm.tm_mon -= 1;
        return timegm(&tm) + static_cast<time_t>(life);
    }
    return 0;
}

/// A redirect target is not asked this close to its expiry: a block's request may take a
/// while, and clocks differ.
constexpr time_t kSignedUrlMargin = 2;

}  // namespace

SourceBlocks::SourceBlocks(Client& client, BlockStore& store, Prefetcher& prefetcher, BlockReading reading,
                           std::string url, std::string name, std::string key, ObjectInfo info, bool size_only)
    : client_(client),
      store_(store),
      prefetcher_(prefetcher),
      reading_(reading),
      url_(std::move(url)),
      name_(std::move(name)),
      key_(std::move(key)),
      info_(std::move(info)),
      size_only_(size_only) {}

uint64_t SourceBlocks::block_length(uint64_t block) const noexcept {
    const uint64_t start = block * BlockCache::kBlockSize;
    return start >= info_.size ? 0 : std::min(BlockCache::kBlockSize, info_.size - start);
}

bool SourceBlocks::cached(uint64_t block) const noexcept {
    return store_.cache().has(key_, block, block_length(block));
}

void SourceBlocks::hold(uint64_t block, std::shared_ptr<const char[]> bytes) noexcept {
    try {
        std::lock_guard<std::mutex> lock(mutex_);
        fresh_[block] = std::move(bytes);
    } catch (...) {
    }
}

void SourceBlocks::drop_cached() const noexcept {
    prefetcher_.forget(key_);
    for (uint64_t b = 0; b < block_count(); ++b) store_.cache().remove(key_, b);
}

ObjectInfo SourceBlocks::get_blocks(uint64_t offset, size_t len, size_t* got, const Client::PartHooks& hooks,
                                    const size_t& taken) const {
    std::string location;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        // A signed redirect target is never used past its life (nor asked to refuse it): the
        // given URL resolves a fresh one.
        if (location_expires_ != 0 && std::time(nullptr) + kSignedUrlMargin >= location_expires_) {
            spdlog::debug("{}: its last redirect target expires now; resolving it again", gguf::quote_name(name_));
            location_.clear();
            location_expires_ = 0;
        }
        location = location_;
    }
    // One bound for both tries (Client::request_deadline).
    const auto deadline = Client::Clock::now() + client_.request_deadline(len);
    std::string answered;
    // The blocks taken as they arrived are never asked for again: a try asks for the rest.
    auto rest = [&](const std::string& from) {
        const size_t skip = taken * BlockCache::kBlockSize;
        if (skip >= len) {  // every block came (a failure after the last byte)
            *got = len;
            return info_;
        }
        size_t rest_got = 0;
        const size_t first = taken;  // the hooks count from the fetch's first block
        Client::PartHooks shifted;
        shifted.buffer = [&hooks, first](size_t i) { return hooks.buffer(first + i); };
        shifted.take = [&hooks, first](size_t i, const ObjectInfo& a) { return hooks.take(first + i, a); };
        ObjectInfo info = client_.get_range_parts(from, offset + skip, len - skip, nullptr, BlockCache::kBlockSize,
                                                  &rest_got, &answered, deadline, &shifted);
        *got = skip + rest_got;
        return info;
    };
    if (!location.empty() && location != url_) {
        try {
            return rest(location);
        } catch (const HttpError& e) {
            // An expired signed URL, a CDN node gone: resolve again through the given URL.
            spdlog::debug("{} (through its last redirect target); resolving {} again", e.what(),
                          gguf::quote_name(name_));
        }
    }
    ObjectInfo info = rest(url_);
    std::lock_guard<std::mutex> lock(mutex_);
    location_ = answered;
    location_expires_ = answered == url_ ? 0 : signed_url_expiry(answered);
    return info;
}

std::shared_ptr<const char[]> SourceBlocks::memory(uint64_t block) const noexcept {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = fresh_.find(block);
        if (it != fresh_.end()) return it->second;
    }
    if (auto b = store_.pending(key_, block)) return b;
    return prefetcher_.kept(key_, block);
}

bool SourceBlocks::unclaimed_locked(uint64_t block) const noexcept {
    // The store's and the prefetcher's locks are taken under mutex_, never the other way.
    return !fetching_.count(block) && !fresh_.count(block) && !store_.pending(key_, block) &&
           !prefetcher_.kept(key_, block) && !store_.holds(key_, block, block_length(block));
}

int SourceBlocks::fetch(uint64_t block, std::shared_ptr<const char[]>* bytes, unsigned run) const noexcept {
    std::vector<uint64_t> serials;  // of the blocks block, block + 1, ... this call fetches
    {
        std::unique_lock<std::mutex> lock(mutex_);
        if (run > 1 && !bytes) {
            // Read-ahead: the run starts at its first block nobody has or fetches (a reader
            // that caught up may have taken the first ones), and nobody waits here.
            const uint64_t last = block + run - 1;
            while (block <= last && block_length(block) > 0 && !unclaimed_locked(block)) ++block;
            if (block > last || block_length(block) == 0) return 0;
            run = static_cast<unsigned>(last - block + 1);
        }
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
        std::shared_ptr<const char[]> b = it != fresh_.end() ? it->second : store_.pending(key_, block);
        if (!b) b = prefetcher_.kept(key_, block);
        if (b) {  // fetched by another thread: held here, being staged, or kept
            if (bytes) *bytes = std::move(b);
            return 0;
        }
        if (store_.holds(key_, block, block_length(block))) return 0;
        try {
            fetching_[block] = ++fetch_serial_;
            serials.push_back(fetch_serial_);
            // The rest of the run: the blocks that follow while nobody has or fetches them.
            for (uint64_t next = block + 1; serials.size() < std::max(1u, run) && !reading_.offline &&
                                            block_length(next) > 0 && unclaimed_locked(next);
                 ++next) {
                fetching_[next] = ++fetch_serial_;
                serials.push_back(fetch_serial_);
            }
        } catch (...) {
            for (size_t i = 0; i < serials.size(); ++i) fetching_.erase(block + i);
            cv_.notify_all();
            return -ENOMEM;
        }
    }
    const size_t count = serials.size();
    const uint64_t offset = block * BlockCache::kBlockSize;
    const uint64_t len = std::min<uint64_t>(count * BlockCache::kBlockSize, info_.size - offset);
    int rc = 0;
    std::vector<std::shared_ptr<char[]>> bufs;
    size_t got = 0;  // == len (get_range throws on a short answer)
    // Blocks [block, block + taken) are published: each as its last byte arrived, in an answer
    // of the version opened (a reader waiting for one goes on while the rest of the run comes).
    size_t taken = 0;
    auto other_version = [&](const ObjectInfo& info) {
        return (!size_only_ && info.validator != info_.validator) || info.size != info_.size;
    };
    auto publish_locked = [&](size_t i) {  // under mutex_; may throw std::bad_alloc
        fresh_[block + i] = bufs[i];
        failed_.erase(block + i);
        fetching_.erase(block + i);
    };
    // A block's buffer is taken from the pool when its first byte arrives: a run in flight
    // holds the buffers of the blocks it brought, not of all it asked for.
    Client::PartHooks hooks;
    hooks.buffer = [&](size_t i) {
        if (!bufs.at(i)) bufs[i] = prefetcher_.buffer();
        return bufs[i].get();
    };
    // A published block goes to the store (staged and committed off the read path) and among
    // the kept ones, where readers behind the read-ahead find it meanwhile; the run lets go of
    // its buffer then, so a long run holds only the blocks still on their way. Inside the
    // transfer (`may_block` false) only a store thread may take it (BlockStore::try_put): a
    // store staged on this thread would hold up the rest of the run, so that block is settled
    // after the transfer instead.
    std::shared_ptr<const char[]> first;  // the first block's bytes, for *bytes
    auto settle = [&](size_t i, bool may_block) noexcept {
        if (i == 0) first = bufs[0];
        if (reading_.store_blocks) {
            const auto n = static_cast<size_t>(block_length(block + i));
            if (may_block) {
                store_.put(key_, name_, block + i, bufs[i], n);
            } else if (!store_.try_put(key_, name_, block + i, bufs[i], n)) {
                return;  // bufs[i] kept: settled after the transfer
            }
            prefetcher_.keep(key_, block + i, bufs[i]);
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = fresh_.find(block + i);
            if (it != fresh_.end() && it->second == bufs[i]) fresh_.erase(it);
        }  // else it stays in fresh_ until a reader read it to its end
        bufs[i].reset();
    };
    hooks.take = [&](size_t i, const ObjectInfo& answer) {
        if (i != taken || !bufs.at(i) || other_version(answer)) return false;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            publish_locked(i);
        }
        ++taken;
        cv_.notify_all();
        settle(i, false);
        return true;
    };
    const auto t0 = std::chrono::steady_clock::now();
    if (reading_.offline) {
        if (!offline_logged_.exchange(true)) {
            spdlog::warn("{}: block {} (bytes {}-{}) is not cached and --offline is set: reads of it fail with EIO",
                         gguf::quote_name(name_), block, offset, offset + len - 1);
        }
        rc = -EIO;
    } else {
        try {
            bufs.resize(count);
            ObjectInfo info = get_blocks(offset, len, &got, hooks, taken);
            bytes_fetched_ += got;
            if (other_version(info)) {
                // One answer of another version: a real change, or one backend of several that
                // disagree (a load balancer). Never served; asked once more, resolving anew.
                {
                    std::lock_guard<std::mutex> lock(mutex_);
                    location_.clear();
                }
                info = get_blocks(offset, len, &got, hooks, taken);
                bytes_fetched_ += got;
            }
            if (other_version(info)) {
                if (!other_version_logged_.exchange(true)) {
                    spdlog::warn(
                        "{}: the server answered another version (validator {} -> {}, size {} -> {}): changed "
                        "on the server, or its backends disagree. Reads of uncached blocks fail with EIO "
                        "while it does, cached blocks are still served; a changed file is served as a new "
                        "version after the next revalidation or a remount",
                        gguf::quote_name(name_), info_.validator, info.validator, info_.size, info.size);
                }
                rc = -EIO;
            }
        } catch (const HttpError& e) {
            // A reader's own fetch says it; read-ahead failing for the same cause (the server
            // gone) would repeat it for every block of the window.
            if (bytes && taken == 0) {
                spdlog::warn("{}", e.what());
            } else {
                spdlog::debug("{} ({})", e.what(), bytes ? "the rest of a run" : "read-ahead");
            }
            rc = -EIO;
        } catch (...) {
            rc = -ENOMEM;
        }
    }
    // Readers take the bytes from memory at once: fresh_ holds them until the store has them.
    // The blocks not taken as they came: all of them on success, none on failure.
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (size_t i = taken; i < count; ++i) {
            try {
                if (rc != 0) {
                    failed_[block + i] = {serials[i], rc};
                } else {
                    publish_locked(i);
                    continue;
                }
            } catch (...) {
            }
            fetching_.erase(block + i);
        }
    }
    cv_.notify_all();
    const size_t published = rc == 0 ? count : taken;
    if (published == 0) return rc;
    for (size_t i = 0; i < published; ++i) {
        if (bufs[i]) settle(i, true);  // not taken during the transfer, or not stored then
    }
    if (bytes) *bytes = std::move(first);
    spdlog::debug("{}: blocks {}-{} ({} bytes) fetched in {} ms{}", gguf::quote_name(name_), block,
                  block + published - 1, rc == 0 ? got : published * BlockCache::kBlockSize,
                  std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count(),
                  bytes ? "" : " (read-ahead)");
    return 0;
}

void SourceBlocks::read_ahead(uint64_t block) const noexcept {
    const unsigned ahead = reading_.readahead_blocks;
    if (ahead == 0) return;
    const unsigned run = std::max(1u, reading_.run_blocks);
    // A reader moving on by one block only needs the window's new end (the blocks before it,
    // and the rest of a run started there, were handled by the calls before); after a jump,
    // all of it.
    const uint64_t end = block + ahead;
    const uint64_t prev = advised_.load();
    const bool moved_on = prev > block && prev < end + run;  // else a jump: the whole window
    const uint64_t from = moved_on ? prev + 1 : block + 1;
    uint64_t handled = moved_on ? std::max(prev, end) : end;
    std::weak_ptr<const SourceBlocks> weak;
    try {
        weak = weak_from_this();
    } catch (...) {
        return;
    }
    for (uint64_t b = from; b <= end && block_length(b) > 0; ++b) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (fetching_.count(b) || fresh_.count(b)) continue;
        }
        if (store_.in_flight(key_, b) || prefetcher_.kept(key_, b)) continue;
        if (cached(b)) {  // read ahead from disk, off the reader's thread
            prefetcher_.submit([weak, b] {
                if (auto self = weak.lock()) self->store_.cache().load(self->key_, b, self->block_length(b));
            });
            continue;
        }
        if (reading_.offline) continue;
        // The run claims what follows b that nobody has (fetch): the blocks up to its possible
        // end are not submitted again, here or by the next calls.
        prefetcher_.submit([weak, b, run] {
            if (auto self = weak.lock()) self->fetch(b, nullptr, run);
        });
        handled = std::max(handled, b + run - 1);
        b += run - 1;
    }
    advised_.store(handled);
}

void SourceBlocks::drop_behind(uint64_t block) const noexcept {
    const unsigned lag = reading_.drop_lag_blocks;
    if (lag == 0 || block < lag) return;
    const uint64_t behind = block - lag;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (fresh_.count(behind)) return;  // in memory
    }
    if (store_.in_flight(key_, behind) || prefetcher_.kept(key_, behind)) return;  // not in its final file yet
    store_.cache().drop_pages(key_, behind);
}

void SourceBlocks::reader_in(uint64_t block) const noexcept {
    if (next_block_.exchange(block + 1) == block) {
        read_ahead(block);
        drop_behind(block);
    }
}

void SourceBlocks::reader_took(uint64_t block, uint64_t in_block, size_t n) const noexcept {
    if (reading_.store_blocks || in_block + n != block_length(block)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    fresh_.erase(block);
}

size_t SourceBlocks::view(size_t len, uint64_t offset, std::shared_ptr<const char[]>* bytes) const noexcept {
    if (offset >= info_.size || len == 0) return 0;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len, info_.size - offset));
    const uint64_t block = offset / BlockCache::kBlockSize;
    const uint64_t in_block = offset % BlockCache::kBlockSize;
    if (in_block + n > block_length(block)) return 0;  // crosses into the next block
    std::shared_ptr<const char[]> b = memory(block);
    if (!b) return 0;
    reader_in(block);
    *bytes = std::shared_ptr<const char[]>(b, b.get() + in_block);
    reader_took(block, in_block, n);
    return n;
}

ssize_t SourceBlocks::read(void* dst, size_t len, uint64_t offset, Access access, SharedSpans* shared) const noexcept {
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
        if (access == Access::reader) reader_in(block);
        ssize_t r = -ENOENT;
        std::shared_ptr<const char[]> bytes = memory(block);
        if (!bytes) r = store_.read(key_, block, blen, in_block, n, out + done);
        // Absent: fetch it (or wait for the thread fetching it). The fetched bytes are used from
        // memory (the cache may not keep them: disk full, or evicted at once under a small
        // --cache-max-size); a block found in the store meanwhile is read from it, and fetched
        // again if it is already gone (a cache bound below the working set may evict it again
        // before it is read).
        // A FUSE worker never waits for the network (gguf::NoNetworkWaitScope): it hands the
        // read to a thread of its own.
        if (!bytes && r == -ENOENT && gguf::NoNetworkWaitScope::on()) return -EWOULDBLOCK;
        // A read of more than a block (prefetch's runs) fetches the missing ones after this one
        // that it covers in the same request, up to run_blocks. A FUSE read (at most 1 MiB)
        // crossing into the next block does not: read-ahead has that one.
        const uint64_t spans = (offset + len - 1) / BlockCache::kBlockSize - block + 1;
        const auto run = len > BlockCache::kBlockSize
                             ? static_cast<unsigned>(std::min<uint64_t>(spans, std::max(1u, reading_.run_blocks)))
                             : 1u;
        for (int attempt = 0; !bytes && r == -ENOENT && attempt < 8; ++attempt) {
            int rc = fetch(block, &bytes, run);
            if (rc != 0) return rc;
            if (!bytes) r = store_.read(key_, block, blen, in_block, n, out + done);
        }
        if (bytes) {
            std::memcpy(out + done, bytes.get() + in_block, n);
            if (shared) shared->add(at, n, bytes, static_cast<size_t>(in_block));
            r = static_cast<ssize_t>(n);
            if (access == Access::reader) reader_took(block, in_block, n);
        }
        if (r < 0) return r == -ENOENT ? -EIO : r;
        done += n;
    }
    return static_cast<ssize_t>(done);
}

}  // namespace gguf_mount::remote
