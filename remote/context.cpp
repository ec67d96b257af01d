#include "remote/context.hpp"

#include <algorithm>
#include <cassert>

#include <spdlog/spdlog.h>

#include "remote/url_parts.hpp"
#include "common/text.hpp"

namespace gguf_mount::remote {

namespace {

PrefetchOptions prefetch_options(const RemoteOptions& o) {
    return PrefetchOptions{o.fetch_threads, o.kept_blocks, o.pooled_buffers, o.idle_buffers, o.buffer_trim_after};
}

/// `o` with unsynced_blocks held to a quarter of a cache bound: staged blocks are on disk but
/// not yet counted by the bound, so a bounded cache overshoots its --cache-max-size by at most
/// that much.
RemoteOptions bounded(RemoteOptions o) {
    if (o.cache_max_bytes) {
        const uint64_t quarter = o.cache_max_bytes / BlockCache::kBlockSize / 4;
        o.unsynced_blocks =
            static_cast<unsigned>(std::max<uint64_t>(1, std::min<uint64_t>(o.unsynced_blocks, quarter)));
    }
    return o;
}

StoreOptions store_options(const RemoteOptions& o) {
    return StoreOptions{o.pending_stores, o.store_threads, o.unsynced_blocks, o.commit_threads};
}

}  // namespace

RemoteContext::RemoteContext(RemoteOptions options, std::shared_ptr<Client> client)
    : options_(bounded(std::move(options))),
      client_(client ? std::move(client) : std::make_shared<HttpClient>(options_.http)),
      store_(options_.cache_dir.empty() ? BlockCache::default_dir() : options_.cache_dir, options_.cache_max_bytes,
             store_options(options_), !options_.defer_threads),
      prefetcher_(prefetch_options(options_), !options_.defer_threads) {
    if (!options_.cache_source.empty()) cache().claim_source(options_.cache_source);
}

RemoteContext::~RemoteContext() {
    // No job holds the context (see the class note), so this never runs on its own threads.
    assert(!on_own_thread());
    prefetcher_.stop();  // read-ahead jobs may still put blocks into the store
    store_.stop();
}

void RemoteContext::allow_threads() noexcept {
    store_.allow_threads();
    prefetcher_.allow_threads();
}

bool RemoteContext::on_own_thread() const noexcept {
    return prefetcher_.on_own_thread() || store_.on_own_thread();
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
            spdlog::warn(
                "{}: HEAD and GET answer different ETags ({} and {} for {}); revalidation trusts this "
                "HEAD answer from now on (each revalidation would otherwise cost a ranged GET per file)",
                gguf::quote_name(origin), head, get, gguf::quote_name(url_for_message(url)));
        }
    } catch (...) {
    }
}

bool RemoteContext::head_names(const std::string& url, const std::string& head, const std::string& get) const noexcept {
    std::lock_guard<std::mutex> lock(head_mutex_);
    auto it = head_validators_.find(url);
    return it != head_validators_.end() && it->second.first == head && it->second.second == get;
}

}  // namespace gguf_mount::remote
