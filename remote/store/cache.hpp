// The persistent block cache of remote objects (--cache-dir, --cache-max-size).
//
// Layout under DIR (mode 0700: a private repository's bytes land here):
//   DIR/v1/lock                      flock(LOCK_EX) while evicting
//   DIR/v1/meta/<sha256(url)>        "size\nvalidator\nmtime\n" of the last version seen of a URL,
//                                    sealed (cache_files::seal_record: written without fdatasync)
//   DIR/v1/listings/<sha256(url)>    the last good listing of a directory URL (nginx JSON autoindex
//                                    form), for --offline directory mounts
//   DIR/v1/objects/<key>/<block>     block `block` (decimal) of the object: its bytes, then a
//                                    16-byte checksum record (cache_files::BlockChecksum)
//   DIR/v1/objects/once-<hex>/       blocks of one open of a file whose server sends no validator
//                                    (.owner is flock()ed while the open lives; swept once free)
//   DIR/v1/sources/<sha256(name)>/   the SOURCE a process reads, its lock (LOCK_SH while it reads
//                                    it) and what it used (remote/store/cache_inventory.hpp)
// where key = sha256(without credentials or query URL + "\n" + validator): a changed remote file has a new key, so
// old and new blocks never mix.
//
// Trust (remote/store/cache_files.hpp): DIR and every directory below it must be owned by the
// daemon's euid and not writable by group or others, or the cache is refused with one line;
// below DIR everything is opened relative to verified descriptors without following links.
// A block file's bytes are checked against its checksum the first time this process serves
// it (read() or load()), and again whenever its inode or ctime changes; a mismatch drops the
// file (it is fetched again) with one line naming it. meta/ and listings/ records and staged
// temporaries are not checksummed.
//
// Durability: a block is written to a temporary name in its object directory (stage), later
// fdatasync()ed and rename()d to its final name (commit); a block file that exists therefore holds
// its final bytes, whatever moment a kill -9 or a crash hit (the temporary is left behind and
// swept later). Between the two steps the staged temporary is readable by its writer
// (read_staged). Blocks are written past the page cache (O_DIRECT) where the file system allows
// it; the daemon keeps its last fetched blocks in memory for readers (Prefetcher::keep).
// Several daemons may share DIR: renames are atomic, two fetches of one block write the same
// bytes, readers hold flock(LOCK_SH) on a block file while reading it, and eviction (under the
// DIR lock) skips blocks that are locked.
//
// Bound (max_bytes): the block files and the listing and meta records count (st_size), and go
// least recently used first (mtime: written, or last read). A block is touched when read and
// more than 10 s old, a record when read and more than an hour old.
//
// Block size: 4 MiB. It equals the FUSE readahead window the mount sets (fs/session.hpp
// kDefaultReadaheadKb), so a sequential reader's window is one request to the server, and the
// per-request overhead (one round trip, headers) is small against a 4 MiB transfer even on a slow
// link; mountpoint-s3 documents 8 MiB parts as the smallest size for full throughput against S3,
// we halve it to keep the header read of a shard (one block per shard at mount) small.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "remote/store/cache_files.hpp"
#include "remote/store/cache_inventory.hpp"
#include "remote/client.hpp"

namespace gguf_mount::remote {

class BlockCache {
public:
    static constexpr uint64_t kBlockSize = uint64_t{4} << 20;
    /// Blocks shorter than this are staged through the page cache even when `direct` is asked
    /// (stage()): O_DIRECT keeps 4 MiB blocks from crowding the page cache, but makes each
    /// write wait for the device, which for the one short block of each of 1,200 small shards
    /// (the header block a mount reads at once) was a large part of a cold mount.
    static constexpr size_t kDirectMin = size_t{1} << 20;
    /// The default bound (default_max_bytes): this share of the file system, in percent ...
    static constexpr uint64_t kDefaultMaxPercent = 25;
    /// ... and never more than this (100G, in the units of --cache-max-size: 10^9 bytes).
    static constexpr uint64_t kDefaultMaxCap = uint64_t{100} * 1000000000;

    /// Opens (creating with mode 0700 what is missing) the cache in `dir`. `max_bytes` bounds the
    /// sum of the block files and records (0: unbounded). Throws std::runtime_error with one line naming the
    /// directory or file when it cannot be created or opened, or is not trusted: `dir`, v1/,
    /// meta/, listings/, objects/ or an object directory that is not a directory owned by
    /// geteuid() without group/other write bits (the line says chown or chmod 0700), or a
    /// v1/lock that is not a regular file owned by geteuid() (say: a planted link).
    BlockCache(std::string dir, uint64_t max_bytes);
    /// Removes the object directories of open_once() keys this cache made.
    ~BlockCache();
    BlockCache(const BlockCache&) = delete;
    BlockCache& operator=(const BlockCache&) = delete;

    /// $CACHE_DIRECTORY (its first ':'-separated entry; systemd sets it for CacheDirectory=, e.g.
    /// /var/cache/gguf-mount for the system unit), else $XDG_CACHE_HOME/gguf-mount, else
    /// $HOME/.cache/gguf-mount, else /var/cache/gguf-mount. Relative values are ignored.
    static std::string default_dir();

    /// The bound of a cache in `dir` when none is given: kDefaultMaxPercent of the size of the
    /// file system holding `dir` (or its nearest existing parent), at most kDefaultMaxCap. A
    /// quarter keeps the cache a guest on a disk that holds other things; the cap holds a 70B
    /// model at 8 bits (about 75 GB) and keeps a cache on a large shared volume from growing
    /// without end. kDefaultMaxCap when no parent can be examined. Never throws.
    static uint64_t default_max_bytes(const std::string& dir) noexcept;

    /// Records that this process reads the SOURCE shown as `name` (no query, no credentials)
    /// for the cache's life: its record under sources/ holds a shared lock that `gguf-mount
    /// cache trim|clear` respect, and the objects (use_object) and records this cache reads or
    /// writes from now on are tagged as its (cache_inventory::SourceClaim). Call once, before
    /// any source is opened. Throws only std::bad_alloc.
    void claim_source(const std::string& name);
    /// Tags object `key` as read for the claimed source (nothing without a claim). Never throws.
    void use_object(const std::string& key) const noexcept;
    /// Asks eviction to remove the blocks of object `key` only while the cache is over its
    /// bound with every other file gone, never to make room below it (a prefetch that fits
    /// under the bound never evicts what it fetched). For this cache's life. Throws only
    /// std::bad_alloc.
    void keep_whole(const std::string& key);

    /// The key of a version of a remote object: hex sha256 of "URL\nVALIDATOR" (URL as url_for_message gives it).
    static std::string object_key(const std::string& url, const std::string& validator);

    /// True when `validator` (ObjectInfo::validator) tells versions of a file apart across
    /// opens: an ETag, a Last-Modified, a listing's hash. One made of the size alone (the server
    /// sent neither ETag nor Last-Modified, remote/http.cpp) does not: a file replaced by another
    /// of the same size would keep its key.
    static bool validates(const std::string& validator);

    /// A key for one open of `url` whose server sends no validator: "once-" + 32 random hex
    /// digits, never the key of another open, so its blocks are never served to a later open.
    /// Its object directory holds a .owner file flock()ed while this cache lives; the directory
    /// is removed by this cache's destructor, or by the next cache opened on DIR once no process
    /// holds the lock. Logs once per server (scheme://host:port), naming it and `url`. Never
    /// throws but bad_alloc.
    std::string open_once(const std::string& url);

    /// Copies bytes [offset, offset + len) of block `block` of object `key` into `dst` when the
    /// block is present with `block_len` bytes. Returns len, or -ENOENT when it is absent (also:
    /// not a regular file of ours, or its checksum fails: then it is removed and logged once),
    /// or -errno. The first read of a block file by this process reads and checks all of it.
    /// Marks the block recently used. Never throws.
    ssize_t read(const std::string& key, uint64_t block, uint64_t block_len, uint64_t offset, size_t len,
                 char* dst) const noexcept;

    /// True when the block is present with `block_len` bytes.
    bool has(const std::string& key, uint64_t block, uint64_t block_len) const noexcept;

    /// Reads a present block's file into the page cache ahead of a reader, on the calling
    /// thread (it returns once the bytes are in memory, or the block is absent or unreadable).
    /// A block not yet checked by this process is read and checked instead (read()'s rule):
    /// a sequential reader of cached blocks then finds them in memory as a local file's are.
    /// The bytes go to /dev/null through sendfile, so the kernel's own read-ahead brings them
    /// in with large folios and nothing is copied. posix_fadvise WILLNEED, used before, fills
    /// the page cache one 4 KiB page at a time (page_cache_ra_unbounded), which cost a cached
    /// remount much of the daemon's CPU (bench/results/remote-design-measurements.md).
    /// Never throws.
    void load(const std::string& key, uint64_t block, uint64_t block_len) const noexcept;

    /// Drops block `block`'s pages from the page cache (posix_fadvise DONTNEED), for a reader
    /// that has moved on: the bytes it read live on in the mounted file's own page cache, and
    /// freed pages are reused where fresh ones cost a fault each (gguf::LocalFileSource's
    /// drop-behind does the same for local shards). Never throws.
    void drop_pages(const std::string& key, uint64_t block) const noexcept;

    /// Stores a block durably: stage() through the page cache (not `direct`: this is the block
    /// a source is opened with, whose header planning reads back at once), then commit().
    /// Returns 0 or -errno (a full disk only costs a refetch later). Never throws.
    int store(const std::string& key, uint64_t block, const char* data, size_t len) noexcept;

    /// First half of a store: writes the `len` bytes of block `block` of object `key` to a new
    /// temporary file (name starting with ".tmp.") in the object's directory, with its
    /// checksum record, without fdatasync: the block is not present yet. With `direct`, whole
    /// pages of a page-aligned `data` of at least kDirectMin bytes bypass the page cache
    /// (O_DIRECT, where the file system allows it; read_staged then reads from disk); else the
    /// bytes go through the page cache. `*tmp` receives the temporary's name ("KEY/.tmp.PID.N"). Returns 0 or -errno (the
    /// temporary is removed on failure; -EPERM when the object directory is not trusted, logged
    /// once). Never throws.
    int stage(const std::string& key, uint64_t block, const char* data, size_t len, std::string* tmp,
              bool direct = true) noexcept;

    /// Second half: fdatasync()s the staged temporary `tmp` (any descriptor of the file flushes
    /// its pages), renames it to the block's final name (now present) and counts its `len`
    /// bytes. Returns 0 or -errno (the temporary is removed on failure). The caller then calls
    /// evict_if_over() (after it stopped pointing readers at `tmp`). Never throws.
    int commit(const std::string& key, uint64_t block, const std::string& tmp, size_t len) noexcept;

    /// Removes block `block` of object `key` (a version whose bytes failed their check, e.g. a
    /// sha256 mismatch): readers that have it open keep reading their copy, later reads miss.
    /// Never throws.
    void remove(const std::string& key, uint64_t block) noexcept;

    /// Evicts least recently used blocks not being read, and records, when the cache is over
    /// its bound (down to 90 % of it; keep_whole() objects last). Never throws.
    void evict_if_over() noexcept;

    /// Copies bytes [offset, offset + len) of the staged temporary `tmp` (stage()'s name) into
    /// `dst`. Returns len, -ENOENT when the temporary is gone (committed under its final name,
    /// or removed), or -errno. Never throws.
    ssize_t read_staged(const std::string& tmp, uint64_t offset, size_t len, char* dst) const noexcept;

    /// The last recorded version of `url` (without credentials or query), for --offline and for remounts.
    std::optional<ObjectInfo> load_meta(const std::string& url) const;
    /// Records the version of `url` atomically (temporary + rename, sealed, not synced: a record
    /// a power loss cut is not loaded, load_meta()). Errors are ignored.
    void save_meta(const std::string& url, const ObjectInfo& info) const noexcept;

    /// A small text record about a listing (a directory's last good index, a pinned Hub tree),
    /// stored under DIR/v1/listings/ as the hex sha256 of `name` (a URL's query string and
    /// credentials are dropped first, url_for_message; the name is hashed, never stored).
    /// Written durably (temporary + fdatasync + rename); errors are ignored (a later --offline
    /// mount then lacks it). Counted by the bound (then evict_if_over()).
    void save_listing(const std::string& name, const std::string& text) noexcept;
    /// The record saved under `name`, or nullopt when there is none.
    std::optional<std::string> load_listing(const std::string& name) const;

    const std::string& dir() const noexcept { return dir_; }
    /// Bytes of block files and records counted so far (an estimate between evictions).
    uint64_t used_bytes() const noexcept { return used_.load(); }

private:
    /// The verified directory of object `key` (created when `create`), or an empty Dir (logged
    /// once when it exists but is not trusted).
    /// *err (when set) receives the errno: ENOENT when absent, EPERM when not trusted.
    cache_files::Dir object_dir(const std::string& key, bool create, int* err = nullptr) const noexcept;
    /// Opens block `block` of `key` for reading when it is a regular file of ours of `block_len`
    /// bytes plus its checksum record: the descriptor (its stat in *st), or -ENOENT / -errno.
    int open_block(const cache_files::Dir& od, uint64_t block, uint64_t block_len, struct stat* st) const noexcept;
    /// Checks the open block file `fd` (stat `st`) against its checksum unless this process
    /// already did for this inode and ctime, copying bytes [offset, offset + len) to `dst` on
    /// the way when `dst` is set. 1: checked now (the bytes were copied), 0: checked before
    /// (nothing copied), -ENOENT: it failed and was removed, or -errno.
    int verify(const cache_files::Dir& od, const std::string& key, uint64_t block, int fd, const struct stat& st,
               uint64_t block_len, uint64_t offset, size_t len, char* dst) const noexcept;
    void evict() noexcept;
    /// Counts a record `name` of `dir` about to be rewritten with `bytes` bytes (minus its old
    /// size) and tags it (`tag` + name) for the claimed source. Never throws.
    void add_record_bytes(const cache_files::Dir& dir, const std::string& name, uint64_t bytes,
                          const char* tag) const noexcept;
    /// A record's bytes (nullopt when absent), tagged for the claimed source and touched (LRU).
    std::optional<std::string> read_record(const cache_files::Dir& dir, const std::string& name,
                                           const char* tag) const;

    std::string dir_;   // DIR/v1
    uint64_t max_bytes_;
    cache_inventory::Dirs d_;
    int lock_fd_ = -1;  // DIR/v1/lock
    mutable std::atomic<uint64_t> used_{0};  // mutable: a read that drops a bad block uncounts it
    std::mutex evict_mutex_;
    mutable std::mutex checked_mutex_;
    /// Block files checked by this process: (dev, inode) -> ctime in ns when checked (-1: failed, dropped).
    mutable std::map<std::pair<dev_t, ino_t>, int64_t> checked_;
    mutable std::atomic<bool> untrusted_logged_{false};
    std::mutex once_mutex_;
    std::map<std::string, int> once_owners_;  // open_once() key -> its flock()ed .owner
    std::unique_ptr<cache_inventory::SourceClaim> claim_;
    std::mutex keep_mutex_;
    std::set<std::string> keep_whole_;
};

}  // namespace gguf_mount::remote
