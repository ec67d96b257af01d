// The blocks of one remote object version: the fetching, the read path and the read-ahead of a
// RemoteSource, apart from the source so that the context's jobs can hold them without holding
// the context.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "remote/client.hpp"
#include "remote/digest.hpp"
#include "remote/store/block_store.hpp"
#include "remote/store/prefetcher.hpp"

namespace gguf_mount::remote {

/// How a SourceBlocks reads (from RemoteOptions; aggregate-initialized in field order, remote/source.cpp).
struct BlockReading {
    bool offline = false;           ///< no network: blocks not cached fail with EIO
    bool store_blocks = true;       ///< fetched blocks go to the block store
    unsigned readahead_blocks = 8;  ///< blocks fetched or loaded ahead of a sequential reader
    unsigned drop_lag_blocks = 5;   ///< cached blocks this far behind a reader leave the page cache
    /// Missing blocks read-ahead, or a read of more than a block, asks for in one ranged GET (a
    /// run; 1: one request per block).
    unsigned run_blocks = 8;
};

/// One version of a remote object in BlockCache::kBlockSize blocks: cached blocks are read from
/// the block store, missing ones fetched through the Client (a read of a block or less: one
/// ranged GET for its block; read-ahead and longer reads: one for a run of up to run_blocks
/// consecutive missing blocks, since each request costs a server more than its bytes;
/// concurrent reads of one block wait for a single fetch), and a sequential reader has the next readahead_blocks blocks (and the
/// rest of the run the last of them starts) fetched, or, cached, loaded into the page cache,
/// by the prefetcher.
/// A fetched block (each block of a run as soon as its last byte arrives; a run cut short is
/// asked again for the blocks that did not come) is served from memory at once, kept by the
/// prefetcher among the context's last kept_blocks blocks, and put() into the block store
/// (staged and committed off the read path); readers find it in memory while it is kept or
/// being staged, then in the cache.
/// Every fetched answer is checked against the version opened (validator and size; size only
/// with `size_only`): an answer of another version is asked once more, then that read fails
/// with EIO; no byte of another version is ever served.
/// Redirects: the URL that answered a ranged GET (after redirects, e.g. a signed CDN URL) is
/// used for the next blocks until a request to it fails (a CDN's 403/410/400 for an expired
/// signed URL) or, for a signed URL that says when it expires (CloudFront "Expires", AWS and GCS
/// "X-*-Date" + "X-*-Expires"), until 2 s before then; then the given URL is asked again
/// (resolving anew) for that block.
/// Holds references to the context's parts, not the context: it is shared by its RemoteSource
/// (which holds the context, so the parts outlive it there) and, weakly, by read-ahead jobs,
/// which run on the prefetcher's workers (joined before the parts are destroyed). Thread-safe.
class SourceBlocks : public std::enable_shared_from_this<SourceBlocks> {
public:
    SourceBlocks(Client& client, BlockStore& store, Prefetcher& prefetcher, BlockReading reading, std::string url,
                 std::string name, std::string key, ObjectInfo info, bool size_only);

    const ObjectInfo& info() const noexcept { return info_; }
    const std::string& key() const noexcept { return key_; }
    /// Length of block `block` in bytes (BlockCache::kBlockSize, less for the last; 0 past the
    /// end). Never throws.
    uint64_t block_length(uint64_t block) const noexcept;
    uint64_t block_count() const noexcept { return (info_.size + BlockCache::kBlockSize - 1) / BlockCache::kBlockSize; }
    /// Bytes received from the server for this version. Never throws.
    uint64_t bytes_fetched() const noexcept { return bytes_fetched_.load(); }
    void add_fetched(uint64_t n) noexcept { bytes_fetched_ += n; }
    /// True when the block cache holds block `block` with its full length. Never throws.
    bool cached(uint64_t block) const noexcept;

    /// Who reads: a reader (its moves drive read-ahead and drop-behind, and a block it read to
    /// its end leaves memory with store_blocks off), or a check re-reading bytes a reader just
    /// got (SequentialCheck's hashing thread): not a move of the reader, nothing dropped.
    enum class Access { reader, check };
    /// Copies up to `len` bytes at `offset` into `dst` (short only at the object's end): from
    /// memory, the block store, or fetched. Returns the bytes copied, -EWOULDBLOCK when a
    /// block must be fetched on a thread that may not wait for the network
    /// (gguf::NoNetworkWaitScope), or -errno. `shared` (may be null) is told which of the
    /// bytes were copied from blocks in memory, with those blocks' buffers (the in-order check
    /// hashes them from there). Never throws.
    ssize_t read(void* dst, size_t len, uint64_t offset, Access access = Access::reader,
                 SharedSpans* shared = nullptr) const noexcept;
    /// A reader's read of up to `len` bytes at `offset` answered without a copy: when they lie
    /// in one block that is in memory, `*bytes` points at the first of them (holding the block)
    /// and the count is returned (as read() would, the reader's move counted the same way);
    /// 0 when they do not (nothing done: read() them instead). Never throws.
    size_t view(size_t len, uint64_t offset, std::shared_ptr<const char[]>* bytes) const noexcept;
    /// Keeps the fetched bytes of block `block` in memory until a reader read its last byte
    /// (with store_blocks off: the opening GET's block 0). Never throws.
    void hold(uint64_t block, std::shared_ptr<const char[]> bytes) noexcept;
    /// Removes every block of this version from the block cache and lets go of the kept ones
    /// (their bytes are wrong). Never throws.
    void drop_cached() const noexcept;

private:
    /// get_range_parts (parts of BlockCache::kBlockSize bytes) through the last resolved
    /// location, falling back to url_ (see the class note): the blocks' buffers and their
    /// handing over as they come are `hooks`' (numbered from the block at `offset`); every try
    /// asks only for the blocks after the first `taken` (those `hooks` took).
    ObjectInfo get_blocks(uint64_t offset, size_t len, size_t* got, const Client::PartHooks& hooks,
                          const size_t& taken) const;
    /// Makes block `block` available: fetched by this call, or by another thread (waited for),
    /// or already held by the store; 0 or -errno. `*bytes` (if given) receives the block's
    /// bytes when they are in memory; null when it is to be read from the store. With `run` >
    /// 1, the blocks after `block` that nobody holds or fetches (while they follow each other,
    /// up to block + run - 1) come in the same request. Read-ahead (`bytes` null): the run
    /// starts at its first block of [block, block + run) that nobody holds or fetches, and
    /// nothing is waited for.
    int fetch(uint64_t block, std::shared_ptr<const char[]>* bytes, unsigned run = 1) const noexcept;
    /// True when block `block` is neither in memory, in the store, nor being fetched. Under
    /// mutex_. Never throws.
    bool unclaimed_locked(uint64_t block) const noexcept;
    /// The bytes of `block` in memory (just fetched, held, being staged, or kept), else null.
    std::shared_ptr<const char[]> memory(uint64_t block) const noexcept;
    /// For each block of the window after `block`: a cached one is loaded from disk by a
    /// prefetcher worker (BlockCache::load), a missing one fetched by a worker (not offline).
    void read_ahead(uint64_t block) const noexcept;
    /// A reader's read in `block`: one that moves on from the previous block into this one is
    /// sequential (re-reads inside one block, like the header reads of planning, are not) and
    /// has read-ahead and drop-behind run for it.
    void reader_in(uint64_t block) const noexcept;
    /// A reader copied [in_block, in_block + n) of `block` from memory: with store_blocks off a
    /// block read to its end leaves memory (a sequential reader is done with it).
    void reader_took(uint64_t block, uint64_t in_block, size_t n) const noexcept;
    /// For a sequential reader that entered `block`: drops the page-cache pages of the cached
    /// block drop_lag_blocks behind it (the mounted file's page cache holds its bytes).
    void drop_behind(uint64_t block) const noexcept;

    Client& client_;
    BlockStore& store_;
    Prefetcher& prefetcher_;
    const BlockReading reading_;
    const std::string url_;   // as given (may hold a query string: never logged)
    const std::string name_;  // without credentials or query
    const std::string key_;
    const ObjectInfo info_;
    const bool size_only_;  // the validator of answers is not compared
    mutable std::atomic<bool> other_version_logged_{false};
    mutable std::atomic<uint64_t> bytes_fetched_{0};
    mutable std::atomic<bool> offline_logged_{false};
    mutable std::atomic<uint64_t> next_block_{~uint64_t{0}};  // block after the last one read
    mutable std::atomic<uint64_t> advised_{0};  // read_ahead handled blocks up to this one
    mutable std::mutex mutex_;
    mutable std::condition_variable cv_;
    mutable std::string location_;  // URL after redirects of the last good answer ("" = url_); under mutex_
    mutable time_t location_expires_ = 0;  // when location_ expires (signed URLs), 0 = it does not say; under mutex_
    mutable std::map<uint64_t, uint64_t> fetching_;  // blocks being downloaded -> serial of that fetch
    mutable uint64_t fetch_serial_ = 0;              // under mutex_
    /// Blocks whose last fetch failed -> {its serial, -errno}: what the readers that waited for
    /// that fetch return (erased when a fetch of the block succeeds).
    mutable std::map<uint64_t, std::pair<uint64_t, int>> failed_;
    /// Fetched blocks in memory here: until put() into the store (it then has them), or, with
    /// store_blocks off, until a reader read the block's last byte.
    mutable std::map<uint64_t, std::shared_ptr<const char[]>> fresh_;
};

}  // namespace gguf_mount::remote
