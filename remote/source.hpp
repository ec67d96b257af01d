// A remote object read through the block cache: the gguf::ByteSource of an HTTP(S) file.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gguf/bytes/byte_source.hpp"
#include "gguf/bytes/logical_file.hpp"
#include "remote/cache.hpp"
#include "remote/digest.hpp"
#include "remote/http.hpp"

namespace gguf_mount::remote {

class RemoteSource;
struct BufferPool;

/// Settings shared by every remote source of a mount (command line).
struct RemoteOptions {
    HttpOptions http;
    std::string cache_dir;        ///< "" -> BlockCache::default_dir()
    uint64_t cache_max_bytes = 0; ///< 0: unbounded
    bool offline = false;         ///< no network: serve what the cache holds, else EIO
    unsigned readahead_blocks = 8;  ///< blocks fetched ahead of a sequential reader
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
    /// each), while and after they are stored. A block is written to the cache without the
    /// page cache (O_DIRECT, BlockCache::stage), so this is what a reader behind the read-ahead
    /// finds instead of a disk read: at least readahead_blocks + 1 for a sequential reader.
    unsigned kept_blocks = 10;
    /// A sequential reader entering block B has the page-cache pages of cached block
    /// B - drop_lag_blocks dropped (BlockCache::drop_pages; 0: never). The lag covers the FUSE
    /// read-ahead requests still in flight and served out of order (12 of 1 MiB), as
    /// fs/ops.cpp's kDropLag does for local shards.
    unsigned drop_lag_blocks = 5;
    /// Block buffers (4 MiB each; RemoteContext::block_buffer) the context keeps mapped, in use
    /// and idle together: a buffer let go is kept for reuse while no more are mapped, else
    /// unmapped. A sequential reader holds up to about kept_blocks + readahead_blocks in use at
    /// once, and the number swings with the fetches in flight; a pool smaller than the swing
    /// unmaps buffers only to fault fresh ones in again (on the bench VM, 40 % of the buffers of
    /// a cold read were fresh with 2 idle ones kept, perf page-faults). 16 and 20 gave the same
    /// daemon CPU for a cold read; the daemon's RSS on the benchmark's 100 GiB sparse set was
    /// 107 MiB with 16 and 125 MiB with 20.
    unsigned pooled_buffers = 16;
    /// Idle buffers kept after a quiet period (RemoteContext::trim_buffers: no read-ahead job
    /// for buffer_trim_after); the others are unmapped, so an idle mount holds little memory.
    unsigned idle_buffers = 2;
    std::chrono::milliseconds buffer_trim_after{5000};
    /// false: fetched blocks are never written to the cache (blocks already cached are still
    /// read from it). Each fetched block (also read-ahead) stays in memory until a reader has
    /// read its last byte, so a sequential reader (`merge URL`) holds at most
    /// readahead_blocks + 1 blocks and the disk holds only what it writes itself.
    bool store_blocks = true;
    /// true: the context starts no thread until RemoteContext::allow_threads(). For a process
    /// that forks after using the context (a mount plans before it daemonizes): threads do not
    /// survive fork(), so queues served by them before it would never drain after it. Until
    /// then stages and commits run on the caller and read-ahead is skipped.
    bool defer_threads = false;
};

/// What the sources of one mount share: the HTTP client, the cache, the read-ahead workers and
/// the store and commit threads (started on first use, so no thread exists before the daemon
/// forks; with SIGINT, SIGTERM and SIGHUP blocked, common/threads.hpp, so a stop signal reaches
/// the FUSE loop threads).
class RemoteContext {
public:
    /// Opens the cache (throws std::runtime_error naming the directory). `client`: the
    /// transport to use; null for an HttpClient on options.http.
    explicit RemoteContext(RemoteOptions options, std::shared_ptr<Client> client = nullptr);
    ~RemoteContext();

    /// The transport every source and listing of this context asks (an HttpClient unless one
    /// was given).
    Client& client() noexcept { return *client_; }
    /// A buffer of BlockCache::kBlockSize bytes, page-aligned (O_DIRECT-able), whose memory is
    /// reused: when let go it returns to the context's idle buffers while no more than
    /// options().pooled_buffers are mapped (in use and idle), else it is unmapped. May outlive
    /// the context. Throws std::bad_alloc.
    std::shared_ptr<char[]> block_buffer();
    /// Unmaps idle block buffers past options().idle_buffers. The read-ahead workers call it
    /// after options().buffer_trim_after without a job. Never throws.
    void trim_buffers() noexcept;
    /// Block buffers mapped now: {in use and idle, idle}. Never throws.
    std::pair<size_t, size_t> buffers_mapped() const noexcept;
    /// Records that `source` keeps fetched block `block` in memory for its readers, and makes
    /// the sources let go of the oldest such blocks past options().kept_blocks (context-wide,
    /// RemoteSource::release_kept). Never throws.
    void keep(std::weak_ptr<const RemoteSource> source, uint64_t block) noexcept;
    BlockCache& cache() noexcept { return cache_; }
    const RemoteOptions& options() const noexcept { return options_; }

    /// Records that a HEAD of `url` answers validator `head` while its ranged GETs answer `get`
    /// (servers that compute ETags per method or encoding), so head_names() lets later
    /// revalidations trust the HEAD instead of paying a ranged GET of the first block per file
    /// each time. Logs once per server. For this context's life only. Never throws.
    void note_head_validator(const std::string& url, const std::string& head, const std::string& get) noexcept;
    /// True when note_head_validator recorded that `url`'s HEAD validator `head` stands for GET
    /// validator `get`. Never throws.
    bool head_names(const std::string& url, const std::string& head, const std::string& get) const noexcept;

    /// Queues `job` for a background worker. Never throws (a job that cannot be queued is
    /// dropped: read-ahead is best effort).
    void submit(std::function<void()> job) noexcept;

    /// Queues `job` (the stage of a fetched block, BlockCache::stage) for a store thread, so
    /// neither a reader nor a fetch worker waits for the write. Returns false when
    /// options().pending_stores jobs are already queued (or no thread can be started): the
    /// caller runs the job itself. Queued jobs all run before the context is destroyed (an
    /// unmount leaves every fetched block cached). Never throws.
    bool store_later(std::function<void()> job) noexcept;
    /// Queues `job` (the commit of a staged block: fdatasync + rename, BlockCache::commit) for a
    /// commit thread; waits while options().unsynced_blocks commits are queued or running.
    /// Returns false when no thread can be started (the caller commits itself). Queued commits
    /// all run before the context is destroyed. Never throws.
    bool commit_later(std::function<void()> job) noexcept;
    /// Waits until every queued stage and commit has run (e.g. before `prefetch` judges the
    /// cache). Never throws.
    void flush() noexcept;
    /// True when called on one of the context's own threads (workers, store, commit). Never throws.
    bool on_own_thread() const noexcept;
    /// Lets a context made with options().defer_threads start its threads from now on (a mount:
    /// once it has daemonized). Never throws.
    void allow_threads() noexcept { threads_allowed_ = true; }

    /// Waits until no RemoteContext of this process is alive, i.e. every one was destroyed and
    /// its threads joined (its queued stages and commits run), for at most `patience`. Returns
    /// true when none is left. A context whose last holder was one of its own jobs is destroyed
    /// on a detached thread (RemoteSource::~RemoteSource), which main() does not wait for by
    /// itself: a commit that logged after main() returned used spdlog's registry, already
    /// destroyed (ASan, `check` of a Hub repo). So the CLI calls this before returning from
    /// main(). Never throws.
    static bool wait_until_none_alive(std::chrono::milliseconds patience) noexcept;

private:
    void work();
    void store_work();

    RemoteOptions options_;
    std::atomic<bool> threads_allowed_;
    std::shared_ptr<Client> client_;
    BlockCache cache_;
    std::shared_ptr<BufferPool> pool_;
    mutable std::mutex head_mutex_;
    std::map<std::string, std::pair<std::string, std::string>> head_validators_;  // url -> {HEAD, GET}
    std::set<std::string> head_logged_;  // origins whose HEAD/GET difference was logged
    std::mutex kept_mutex_;
    std::deque<std::pair<std::weak_ptr<const RemoteSource>, uint64_t>> kept_;  // under kept_mutex_, oldest first
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    std::vector<std::thread> workers_;
    bool stopping_ = false;
    std::deque<std::function<void()>> stores_;  // under mutex_
    std::condition_variable store_cv_;
    std::vector<std::thread> store_threads_;
    unsigned stores_running_ = 0;               // under mutex_
    std::deque<std::function<void()>> commits_;  // under mutex_
    std::condition_variable commit_cv_;          // a commit queued, or stop
    std::condition_variable idle_cv_;            // a stage or commit finished (space, flush)
    std::vector<std::thread> commit_threads_;
    unsigned commits_running_ = 0;  // under mutex_
    bool commits_stopping_ = false;  // under mutex_: set after the store threads are joined
    void commit_work();
};

/// One version of a remote object, read in BlockCache::kBlockSize blocks: cached blocks from
/// disk, missing ones fetched (one ranged GET per block; concurrent reads of one block wait for
/// a single fetch), and while a reader moves forward the next readahead_blocks blocks are
/// fetched in the background. A fetched block is served from memory at once; a store thread
/// of the context writes it to a temporary in the cache (staged, O_DIRECT: not in the page
/// cache) and a commit thread makes it durable and present (fdatasync + rename). The block
/// stays in memory while it is among the context's last kept_blocks fetched blocks (readers
/// behind the read-ahead find it there), then readers read it from the cache.
/// Every fetched answer is checked against the version the source was opened on (validator
/// and size; size only for open_known): an answer of another version is asked once more, then
/// that read fails with EIO. No byte of another version is ever served, so changed() is never
/// true: cached blocks stay served, and reads recover when the server answers the known version
/// again (one bogus 206 from a backend that disagrees does not fail the file for good).
/// Redirects: the URL that answered a ranged GET (after redirects, e.g. a signed CDN URL) is
/// used for the next blocks until a request to it fails; then the given URL is asked again
/// (resolving anew) once for that block.
class RemoteSource final : public gguf::ByteSource, public std::enable_shared_from_this<RemoteSource> {
public:
    /// Learns size and validator of `url`: online, with a HEAD when the cache has a record of
    /// the URL with that validator (a cached remount sends no data request), else with the
    /// first ranged GET (block 0, which is then cached); offline, from the cache's record.
    /// Throws gguf::Error(Code::Io, "URL: reason", errno) (ENOENT for 404/410).
    static std::shared_ptr<RemoteSource> open(std::shared_ptr<RemoteContext> context, const std::string& url);

    /// A source whose size and validator a listing vouches for (e.g. a Hub tree entry of a
    /// commit-pinned URL: size from the tree, validator the LFS sha256), opened without a
    /// request. The URL's content must be immutable: answers are checked for the size only
    /// (their ETag may be a CDN's, not `info.validator`). The cache key is (url, validator).
    /// `sha256`: the content's SHA-256 when the listing gives it (the Hub's lfs.oid, 64
    /// lowercase hex), else "" (see sha256()).
    static std::shared_ptr<RemoteSource> open_known(std::shared_ptr<RemoteContext> context, const std::string& url,
                                                    ObjectInfo info, std::string sha256 = {});

    /// Hands its context to a short-lived thread when destroyed on one of the context's threads.
    ~RemoteSource() override;
    ssize_t pread(void* dst, size_t len, uint64_t offset) const noexcept override;
    uint64_t size() const noexcept override { return info_.size; }
    bool changed() const noexcept override { return false; }
    std::string display_name() const override { return name_; }
    std::string validator() const override { return info_.validator; }

    /// Number of BlockCache::kBlockSize blocks of the object (the last one may be shorter).
    uint64_t block_count() const noexcept { return (info_.size + BlockCache::kBlockSize - 1) / BlockCache::kBlockSize; }
    /// Length of block `block` in bytes (BlockCache::kBlockSize, less for the last; 0 past the
    /// end).
    uint64_t block_length(uint64_t block) const noexcept;
    /// Bytes of the object this source received from the server: its opening GET (block 0,
    /// when not validated by a HEAD) and every block it fetched since. Never throws.
    uint64_t bytes_fetched() const noexcept { return bytes_fetched_.load(); }
    /// True when the block cache holds block `block` with its full length. Never throws.
    bool cached(uint64_t block) const noexcept { return context_->cache().has(key_, block, block_length(block)); }
    /// Index of the first block the block cache does not hold with its full length, or
    /// block_count() when every block is cached (what `prefetch` checks). Never throws.
    uint64_t first_uncached_block() const noexcept;

    /// Lets go of the in-memory bytes of fetched block `block` (RemoteContext::keep), at once
    /// when it is stored, else once its store ends: readers then read it from the cache.
    /// Never throws.
    void release_kept(uint64_t block) const noexcept;

    /// The content's SHA-256 that the listing vouched for (open_known), "" when none is known
    /// (plain HTTP servers give none).
    const std::string& sha256() const noexcept { return sha256_; }
    /// From now on checks the whole object against `sha256` (64 lowercase hex): the bytes
    /// readers get are hashed in offset order as they pass (OpenSSL SHA-256), never read twice
    /// for it; a read that starts past the hashed part first has the bytes in between read (from
    /// memory, the cache or the server, like any read) and hashed. When the last byte is hashed
    /// and the digest differs, that read and every later one fail with EIO, the version's cached
    /// blocks are dropped (drop_cached) and sha256_error() says why. For a reader of every byte
    /// (prefetch, merge); call it before the reads start. Throws std::runtime_error when
    /// OpenSSL cannot hash.
    void verify_sha256(std::string sha256);
    /// Ends the check of verify_sha256: hashes the bytes not read yet (reading them) and
    /// returns sha256_error() ("" when it matched, or when verify_sha256 was not called). A
    /// read failure while hashing is returned as the error. Never throws.
    std::string finish_sha256() const noexcept;
    /// The one-line mismatch error ("URL: sha256 mismatch: ..."), "" while none was found.
    std::string sha256_error() const;
    /// Removes every block of this version from the block cache (its bytes are wrong). Never
    /// throws.
    void drop_cached() const noexcept;

    /// The FilePart of this source for the catalog: path = display name, st = S_IFREG | 0444,
    /// owner the daemon's user, mtime Last-Modified.
    gguf::FilePart part() const;

private:
    RemoteSource(std::shared_ptr<RemoteContext> context, std::string url, ObjectInfo info);
    /// get_range through the last resolved location, falling back to url_ (see the class note).
    ObjectInfo get_block(uint64_t offset, size_t len, char* dst, size_t* got) const;
    /// Makes block `block` available: fetched by this call, or by another thread (waited for),
    /// or already cached; 0 or -errno. `*bytes` (if given) receives the block's bytes when they
    /// are in memory (fetched, and possibly not yet or never stored); null when it was cached.
    int fetch(uint64_t block, std::shared_ptr<const char[]>* bytes) const noexcept;
    /// The bytes of `block` when it was just fetched and is being stored, else null.
    std::shared_ptr<const char[]> fresh(uint64_t block) const;
    /// For each block of the window after `block` (readahead_blocks): a cached one is read ahead
    /// from disk by a worker (BlockCache::load), a missing one is fetched by a worker (not --offline).
    void read_ahead(uint64_t block) const noexcept;
    /// For a sequential reader that entered `block`: drops the page-cache pages of the cached
    /// block options().drop_lag_blocks behind it (the mounted file's page cache holds its bytes).
    void drop_behind(uint64_t block) const noexcept;
    /// Reads [in_block, in_block + n) of block `block` (`blen` bytes) from the cache: its final
    /// file, else its staged temporary, else the final file again (committed meanwhile). Returns
    /// n, -ENOENT when neither holds it, or -errno.
    ssize_t read_stored(uint64_t block, uint64_t blen, uint64_t in_block, size_t n, char* dst) const noexcept;
    /// Stages fetched block `block` in the cache (a temporary, tracked in staged_), then queues
    /// its commit (if the source still exists, it is tracked until committed). The bytes stay
    /// in fresh_ while kept_ has them.
    static void store_block(const std::weak_ptr<const RemoteSource>& weak, RemoteContext& context,
                            const std::string& key, const std::string& name, uint64_t block,
                            const std::shared_ptr<const char[]>& buf, size_t len) noexcept;

    /// The verify_sha256 step after a read of [offset, offset + n) into `data` succeeded:
    /// hashes what is new; returns n, or -EIO when the digest was found to differ.
    ssize_t hash_read(const void* data, uint64_t offset, size_t n) const noexcept;
    /// Reads and hashes bytes [digest_->hashed, end); under digest_->mutex. False (with the
    /// reason in digest_->error when `fail`) when a read fails.
    bool hash_gap(uint64_t end) const noexcept;
    /// Compares the digest once every byte is hashed; under digest_->mutex.
    void compare_digest() const;

    std::shared_ptr<RemoteContext> context_;
    std::string sha256_;  // open_known: the listing's content sha256, "" when unknown
    std::unique_ptr<SequentialDigest> digest_;  // verify_sha256; set before reads start
    std::string url_;   // as given (may hold a query string: never logged)
    std::string name_;  // without credentials or query
    ObjectInfo info_;
    std::string key_;
    bool size_only_ = false;  // open_known: the validator of answers is not compared
    mutable std::string location_;  // URL after redirects of the last good answer ("" = url_); under mutex_
    mutable std::atomic<bool> other_version_logged_{false};
    mutable std::atomic<uint64_t> bytes_fetched_{0};
    mutable std::atomic<bool> offline_logged_{false};
    mutable std::atomic<bool> store_failure_logged_{false};
    mutable std::atomic<uint64_t> next_block_{~uint64_t{0}};  // block after the last one read
    mutable std::atomic<uint64_t> advised_{0};  // read_ahead handled blocks up to this one
    mutable std::mutex mutex_;
    mutable std::condition_variable cv_;
    mutable std::map<uint64_t, uint64_t> fetching_;  // blocks being downloaded -> serial of that fetch
    mutable uint64_t fetch_serial_ = 0;              // under mutex_
    /// Blocks whose last fetch failed -> {its serial, -errno}: what the readers that waited for
    /// that fetch return (erased when a fetch of the block succeeds).
    mutable std::map<uint64_t, std::pair<uint64_t, int>> failed_;
    /// Fetched blocks in memory: being stored, or stored and kept (kept_) for readers.
    mutable std::map<uint64_t, std::shared_ptr<const char[]>> fresh_;
    mutable std::set<uint64_t> kept_;     // blocks of fresh_ registered with RemoteContext::keep
    mutable std::set<uint64_t> storing_;  // blocks of fresh_ whose store_block has not finished
    mutable std::map<uint64_t, std::string> staged_;  // staged temporary path, being committed
};

/// The outcome of opening one URL with open_sources: the source, or the one-line error.
struct Opened {
    std::shared_ptr<RemoteSource> source;
    std::string error;
    int sys_errno = 0;  // of the error (ENOENT for 404/410)
};

/// RemoteSource::open for every URL of `urls`, kParallelOpens at a time (each is one ranged
/// GET of the first block, or a HEAD when cached). Keyed by URL as given. Never throws for a
/// URL that fails (its Opened holds the error).
constexpr size_t kParallelOpens = 8;
std::map<std::string, Opened> open_sources(const std::shared_ptr<RemoteContext>& context,
                                           const std::vector<std::string>& urls);

}  // namespace gguf_mount::remote
