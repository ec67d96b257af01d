// A remote object read through the block cache: the gguf::ByteSource of an HTTP(S) file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gguf/bytes/byte_source.hpp"
#include "gguf/bytes/logical_file.hpp"
#include "remote/context.hpp"
#include "remote/digest.hpp"
#include "remote/source_blocks.hpp"

namespace gguf_mount::remote {

/// One version of a remote object as a gguf::ByteSource, read in BlockCache::kBlockSize blocks
/// through its SourceBlocks (remote/source_blocks.hpp: fetched through the context's Client,
/// stored by its BlockStore, read ahead and kept by its Prefetcher). changed() is never true:
/// no byte of another version is ever served (an answer of another version fails that read
/// with EIO), cached blocks stay served, and reads recover when the server answers the known
/// version again.
/// Holds the context (shared_ptr): the last source or listing let go destroys it on the thread
/// that let go (RemoteContext: no job of the context holds a source or the context).
class RemoteSource final : public gguf::ByteSource,
                           public DigestChecked,
                           public std::enable_shared_from_this<RemoteSource> {
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
    /// lowercase hex), else "" (see sha256()); when given, a reader that reads the object in
    /// order to its end (a full sequential read through a mount) has it checked: a copy of its
    /// bytes is hashed on a thread behind it (SequentialCheck), nothing read for it beyond
    /// kSequentialWindow ahead; a mismatch fails the last reads (which wait for the digest) and
    /// every later one with EIO.
    /// `key_name`: what the cache key is made of instead of the URL (a content address, e.g. an
    /// OCI blob's "sha256:HEX", so that every repository holding the blob shares its blocks);
    /// `vouched_by`: who gave `sha256`, for the mismatch line (default "the Hub's lfs.oid").
    static std::shared_ptr<RemoteSource> open_known(std::shared_ptr<RemoteContext> context, const std::string& url,
                                                    ObjectInfo info, std::string sha256 = {},
                                                    const std::string& key_name = {}, std::string vouched_by = {});

    /// A source whose size and validator a listing gives and whose answers carry the same
    /// validator (an S3 ListObjectsV2 entry: Size and ETag, as GetObject answers them), opened
    /// without a request; answers of another size or validator are another version (as open()).
    /// The info is recorded in the cache (so --offline opens it by its URL). Never throws but
    /// std::bad_alloc.
    static std::shared_ptr<RemoteSource> open_listed(std::shared_ptr<RemoteContext> context, const std::string& url,
                                                     ObjectInfo info);

    ~RemoteSource() override = default;
    ssize_t pread(void* dst, size_t len, uint64_t offset) const noexcept override;
    /// A whole request whose bytes lie in one block in memory is answered from that block
    /// (`hold` keeps it; SourceBlocks::view), not copied; anything else as pread into `buf`.
    gguf::Served read_served(char* buf, size_t len, uint64_t offset, gguf::CopyKept kept,
                             bool whole_request) const noexcept override;
    uint64_t size() const noexcept override { return blocks_->info().size; }
    bool changed() const noexcept override { return false; }
    std::string display_name() const override { return name_; }
    std::string validator() const override { return blocks_->info().validator; }
    /// The sha256 mismatch (without the URL) once one was found, else "".
    std::string failure_reason() const override;

    /// Number of BlockCache::kBlockSize blocks of the object (the last one may be shorter).
    uint64_t block_count() const noexcept { return blocks_->block_count(); }
    /// The block cache's key of this object version (BlockCache::object_key or open_once).
    const std::string& cache_key() const noexcept { return blocks_->key(); }
    /// Length of block `block` in bytes (BlockCache::kBlockSize, less for the last; 0 past the
    /// end).
    uint64_t block_length(uint64_t block) const noexcept { return blocks_->block_length(block); }
    /// Bytes of the object this source received from the server: its opening GET (block 0,
    /// when not validated by a HEAD) and every block it fetched since. Never throws.
    uint64_t bytes_fetched() const noexcept { return blocks_->bytes_fetched(); }
    /// True when the block cache holds block `block` with its full length. Never throws.
    bool cached(uint64_t block) const noexcept { return blocks_->cached(block); }
    /// Index of the first block the block cache does not hold with its full length, or
    /// block_count() when every block is cached (what `prefetch` checks). Never throws.
    uint64_t first_uncached_block() const noexcept;

    /// The content's SHA-256 that the listing vouched for (open_known), "" when none is known
    /// (plain HTTP servers give none).
    const std::string& sha256() const noexcept override { return sha256_; }
    /// From now on checks the whole object against `sha256` (64 lowercase hex): the bytes
    /// readers get are hashed in offset order as they pass (OpenSSL SHA-256), never read twice
    /// for it; a read that starts past the hashed part first has the bytes in between read (from
    /// memory, the cache or the server, like any read) and hashed. When the last byte is hashed
    /// and the digest differs, that read and every later one fail with EIO, the version's cached
    /// blocks are dropped (drop_cached) and sha256_error() says why. For a reader of every byte
    /// (prefetch, merge); call it before the reads start. Throws std::runtime_error when
    /// OpenSSL cannot hash.
    void verify_sha256(std::string sha256) override;
    /// Arms the in-order check of open_known for a source opened otherwise (open: a Hub
    /// resolve URL whose lfs.oid its folder's tree gives): sets sha256() to `sha256` (64
    /// lowercase hex) and checks it as open_known's sources are. Call before the first read;
    /// "" leaves the source unchecked. Not armed when this version's bytes hashed to `sha256`
    /// before (a check of this cache recorded it: kVerifiedRecord) and every block is in the
    /// cache now: those blocks are served as they were checked (each block file's own checksum
    /// is still verified at its first read by this process), so a cached remount does not hash
    /// every byte again (SHA-256 was 68 % of the daemon's CPU of a cached remount of an
    /// oci:// model, bench/README.md "OCI registries"). A block that leaves the cache while
    /// mounted and is fetched again is then served unchecked, as a random reader's bytes are.
    /// Never throws but std::bad_alloc.
    void expect_sha256(std::string sha256);
    /// Prefix of the cache record (BlockCache::save_listing) naming an object version whose
    /// bytes hashed to its expected SHA-256 (the record holds that hex digest): written when a
    /// check (expect_sha256, verify_sha256) matched.
    static constexpr const char* kVerifiedRecord = "sha256-verified ";
    /// Makes block 0 available on the calling thread: fetched (and stored) unless it is cached,
    /// in which case it is read and checked once (BlockCache::read's rule). For a caller that
    /// opened many sources without a request (open_known) and plans them next: a mount's
    /// planning reads every shard's header in turn, on one thread, before threads of the
    /// context are allowed, so call it for all of them at once (gguf::for_each_parallel).
    /// Failures are left to the planning's own read (which reports them). Never throws.
    void load_first_block() const noexcept;
    /// The in-order check of open_known (SequentialCheck::kWindow, kTail): the bytes in between
    /// of a read up to this far past the hashed ones are read (from memory or the cache, as a
    /// read-ahead holds them) and hashed first; once the hashed bytes reach the tail, the rest
    /// is read and the digest compared (a file this small is checked whole at its first read).
    static constexpr uint64_t kSequentialWindow = SequentialCheck::kWindow;
    static constexpr uint64_t kSequentialTail = SequentialCheck::kTail;
    /// Ends the check of verify_sha256: hashes the bytes not read yet (reading them) and
    /// returns sha256_error() ("" when it matched, or when verify_sha256 was not called). A
    /// read failure while hashing is returned as the error. Never throws.
    std::string finish_sha256() const noexcept override;
    /// The one-line mismatch error ("URL: sha256 mismatch: ..."), "" while none was found.
    std::string sha256_error() const override;
    /// Removes every block of this version from the block cache and memory (its bytes are
    /// wrong). Never throws.
    void drop_cached() const noexcept { blocks_->drop_cached(); }

    /// The FilePart of this source for the catalog: path = display name, st = S_IFREG | 0444,
    /// owner the daemon's user, mtime Last-Modified.
    gguf::FilePart part() const;

private:
    RemoteSource(std::shared_ptr<RemoteContext> context, const std::string& url, ObjectInfo info, bool size_only,
                 const std::string& key_name = {});

    /// Sets up the check of verify_sha256 (`whole`) or expect_sha256; before reads start. A
    /// match is recorded in the cache (kVerifiedRecord).
    void arm_check(std::string sha256, bool whole);
    /// True when the cache recorded that this version hashed to sha256_ and holds every block.
    bool verified_before() const noexcept;

    std::shared_ptr<RemoteContext> context_;  // first: let go last
    std::string name_;                        // the URL without credentials or query
    std::shared_ptr<SourceBlocks> blocks_;
    std::string sha256_;  // open_known: the listing's content sha256, "" when unknown
    std::string vouched_by_ = "the Hub's lfs.oid";  // who gave sha256_ (the mismatch line)
    // verify_sha256, expect_sha256; set before reads start. Last: destroyed first (its hashing
    // thread reads through blocks_).
    std::unique_ptr<SequentialCheck> digest_;
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
