// RemoteOptions and RemoteContext: what the remote sources of one mount share, and the one
// owner of the remote threads (remote/store/: the block store and the prefetcher).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "remote/client.hpp"
#include "remote/http.hpp"
#include "remote/s3/config.hpp"
#include "remote/store/block_store.hpp"
#include "remote/store/prefetcher.hpp"

namespace gguf_mount::remote {

/// Settings shared by every remote source of a mount (command line).
struct RemoteOptions {
    HttpOptions http;
    /// The S3 options of the command line (--no-sign-request, --endpoint-url, --region,
    /// --profile): how an s3:// SOURCE is resolved (remote/s3/config.hpp).
    s3::S3CommandOptions s3;
    /// oci:// and ollama:// registries over http, not https (--plain-http, as oras names it).
    bool plain_http = false;
    std::string cache_dir;        ///< "" -> BlockCache::default_dir()
    uint64_t cache_max_bytes = 0; ///< 0: unbounded
    /// The SOURCE the context reads, as messages show it (no query, no credentials): claimed in
    /// the cache (BlockCache::claim_source) so `gguf-mount cache` lists what is cached per
    /// source and never removes what a running process reads. "": no claim.
    std::string cache_source;
    bool offline = false;         ///< no network: serve what the cache holds, else EIO
    unsigned readahead_blocks = 8;  ///< blocks fetched ahead of a sequential reader
    /// Missing blocks read-ahead (and a read of more than a block: prefetch's) fetches in one
    /// ranged GET (32 MiB; a registry and s3rver spend per request what this saves,
    /// bench/README.md "Read-ahead runs" and "Per-block handover"); 1: a request per block.
    /// Each block of a run is served, kept and stored as soon as its last byte arrives
    /// (Client::PartHooks), so a longer run does not delay its first block.
    unsigned run_blocks = 8;
    unsigned fetch_threads = 8;     ///< background fetches in flight (read-ahead)
    /// Fetched blocks waiting for a store thread (each held in memory: 4 MiB); past it a fetch
    /// stores its block itself (back-pressure bounds the memory to this many blocks).
    unsigned pending_stores = 4;
    unsigned store_threads = 2;  ///< stages (write to a temporary, no fdatasync) running at once
    /// Staged blocks (written to their temporaries, 4 MiB each) waiting for fdatasync + rename;
    /// past it staging waits. This bounds how far the commits may lag behind the network (2 GiB
    /// of temporaries, which a kill -9 leaves behind), as a download's unsynced pages do. With a
    /// cache_max_bytes bound, at most a quarter of it (at least 1 block).
    unsigned unsynced_blocks = 512;
    unsigned commit_threads = 2;  ///< commits (fdatasync + rename) running at once
    /// Fetched blocks kept in memory for readers, context-wide (the last ones fetched; 4 MiB
    /// each; Prefetcher::keep), while and after they are stored. A block is written to the
    /// cache without the page cache (O_DIRECT, BlockCache::stage), so this is what a reader
    /// behind the read-ahead finds instead of a disk read: at least readahead_blocks +
    /// run_blocks + 1 for a sequential reader (read-ahead fetches up to a run past its window;
    /// with 10 against 8 + 4, 40% of a cold read's blocks were read back from the cache files).
    unsigned kept_blocks = 18;
    /// A sequential reader entering block B has the page-cache pages of cached block
    /// B - drop_lag_blocks dropped (BlockCache::drop_pages; 0: never). The lag covers the FUSE
    /// read-ahead requests still in flight and served out of order (12 of 1 MiB), as
    /// gguf::LocalFileSource::kDropLag does for local shards.
    unsigned drop_lag_blocks = 5;
    /// Block buffers (4 MiB each; BufferPool, remote/store/buffer_pool.hpp) the context keeps
    /// mapped, in use and idle together: a buffer let go is kept for reuse while no more are
    /// mapped, else unmapped. A sequential reader holds up to about kept_blocks (18) +
    /// readahead_blocks (8) + the rest of a run (7) + pending_stores (4) + the blocks of
    /// readers' own fetches in use at once, and the number swings with the fetches in flight;
    /// a pool smaller than the swing unmaps buffers only to fault fresh ones in again (16 with
    /// runs: 1-2 s more system time per 3 GB), a larger one only adds to the daemon's RSS
    /// (bench/README.md "Read-ahead runs").
    unsigned pooled_buffers = 32;
    /// Idle buffers kept after a quiet period (BufferPool::trim: no read-ahead job for
    /// buffer_trim_after); the others are unmapped, so an idle mount holds little memory.
    unsigned idle_buffers = 2;
    std::chrono::milliseconds buffer_trim_after{5000};
    /// false: fetched blocks are never written to the cache (blocks already cached are still
    /// read from it). Each fetched block (also read-ahead) stays in memory until a reader has
    /// read its last byte, so a sequential reader (`merge URL`) holds at most
    /// readahead_blocks + run_blocks blocks and the disk holds only what it writes itself.
    bool store_blocks = true;
    /// true: the context starts no thread until RemoteContext::allow_threads(). For a process
    /// that forks after using the context (a mount plans before it daemonizes): threads do not
    /// survive fork(), so queues served by them before it would never drain after it. Until
    /// then stages and commits run on the caller and read-ahead is skipped.
    bool defer_threads = false;
};

/// What the sources and listings of one mount share, and the one owner of the remote threads
/// and their lifetimes: the transport (a Client), the block store (cache, stage and commit
/// threads) and the prefetcher (read-ahead workers, kept blocks, block buffers), whose threads
/// start on first use (so none exists before the daemon forks) with SIGINT, SIGTERM and SIGHUP
/// blocked (common/threads.hpp), so a stop signal reaches the FUSE loop threads.
///
/// Lifetimes: sources and listings hold a shared_ptr to the context; no job of its threads
/// holds one (a read-ahead job holds a weak_ptr to a source's SourceBlocks, which refers to the
/// parts without owning the context; a stage or commit holds its block by value). So the last
/// reference is always dropped on a thread that is not the context's, and the destructor joins
/// the threads there: the prefetcher's first (queued read-ahead is dropped), then the block
/// store's (every queued stage and commit runs first: an unmount leaves every fetched block
/// cached). When the destructor returns no thread of the context is left.
class RemoteContext {
public:
    /// Opens the cache (throws std::runtime_error naming the directory). `client`: the
    /// transport to use; null for an HttpClient on options.http.
    explicit RemoteContext(RemoteOptions options, std::shared_ptr<Client> client = nullptr);
    /// Joins the threads (see the class note). Never throws.
    ~RemoteContext();
    RemoteContext(const RemoteContext&) = delete;
    RemoteContext& operator=(const RemoteContext&) = delete;

    /// The transport every source and listing of this context asks (an HttpClient unless one
    /// was given).
    Client& client() noexcept { return *client_; }
    BlockStore& store() noexcept { return store_; }
    Prefetcher& prefetcher() noexcept { return prefetcher_; }
    BlockCache& cache() noexcept { return store_.cache(); }
    const RemoteOptions& options() const noexcept { return options_; }

    /// Records that a HEAD of `url` answers validator `head` while its ranged GETs answer `get`
    /// (servers that compute ETags per method or encoding), so head_names() lets later
    /// revalidations trust the HEAD instead of paying a ranged GET of the first block per file
    /// each time. Logs once per server. For this context's life only. Never throws.
    void note_head_validator(const std::string& url, const std::string& head, const std::string& get) noexcept;
    /// True when note_head_validator recorded that `url`'s HEAD validator `head` stands for GET
    /// validator `get`. Never throws.
    bool head_names(const std::string& url, const std::string& head, const std::string& get) const noexcept;

    /// Waits until every queued stage and commit has run (e.g. before `prefetch` judges the
    /// cache). Never throws.
    void flush() noexcept { store_.flush(); }
    /// True when called on one of the context's own threads (read-ahead, store, commit). Never
    /// throws.
    bool on_own_thread() const noexcept;
    /// Lets a context made with options().defer_threads start its threads from now on (a mount:
    /// once it has daemonized). Never throws.
    void allow_threads() noexcept;

private:
    RemoteOptions options_;
    std::shared_ptr<Client> client_;
    BlockStore store_;       // destroyed after the prefetcher: read-ahead jobs store blocks
    Prefetcher prefetcher_;
    mutable std::mutex head_mutex_;
    std::map<std::string, std::pair<std::string, std::string>> head_validators_;  // url -> {HEAD, GET}
    std::set<std::string> head_logged_;  // origins whose HEAD/GET difference was logged
};

}  // namespace gguf_mount::remote
