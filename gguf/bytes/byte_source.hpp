// The byte-source seam: every physical part a reader, split set, virtual file or writer reads
// is a ByteSource. A local file is one (LocalFileSource: a descriptor, with its page-cache
// policy: O_DIRECT for uncached random requests, drop-behind of served bytes, read-ahead hints,
// kernel copies and holes for writers); an HTTP object behind a block cache is another
// (remote/). Nothing above this file asks which kind a source is: the policy hooks have
// defaults (plain reads, no hints) for sources that have no page cache of their own to manage.
// No network code here: gguf/ never learns HTTP.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "gguf/bytes/file_io.hpp"
#include "gguf/bytes/page_cache.hpp"

namespace gguf {

struct FilePart;

/// Who keeps a copy of the bytes a read returns, which decides what a source does with its
/// own cache of them.
enum class CopyKept : uint8_t {
    /// Nobody: the source's cache is the only copy (a FUSE client that opened with O_DIRECT, a
    /// merge writing the bytes out). Plain reads.
    None,
    /// The reader caches them (the FUSE page cache of the served file): a source may drop its
    /// own copy behind the stream, so a model read through the mount is cached once.
    ByReader,
    /// As ByReader, and the request is large or does not continue a sequential stream of the
    /// served file (VirtualFile::serve and its kDirectStreamMin decide): if uncached it may be
    /// read bypassing the source's cache altogether (O_DIRECT), which allocates no page for it.
    ByReaderDirect,
};

/// What one read for a server did (ByteSource::read_served, VirtualFile::serve).
struct Served {
    ssize_t result = 0;          ///< bytes read, or -errno
    /// Where the bytes start: inside the caller's buffer, or (a whole request) inside memory
    /// the source holds for the caller through `hold`.
    const char* data = nullptr;
    /// Set when `data` is the source's own memory (a remote block kept in memory, served
    /// without a copy): keeps it valid while this Served lives. Null: `data` is in the buffer.
    std::shared_ptr<const void> hold;
    bool direct = false;         ///< read with O_DIRECT: no source page was cached for it
    /// On error (VirtualFile::serve): the failing source, and the byte range of it that was
    /// being read (source offsets).
    uint32_t failed_source = 0;
    uint64_t failed_offset = 0;
    uint64_t failed_length = 0;
};

/// A read-only, fixed-size sequence of bytes. Implementations must be thread-safe: the FUSE
/// worker threads call every method concurrently.
class ByteSource {
public:
    /// Alignment (bytes) of the buffer read_served() may widen an O_DIRECT read into, and the
    /// extra room it needs past `len`: both sides are widened to this boundary.
    static constexpr size_t kServeAlign = DirectDescriptor::kMaxAlign;
    static constexpr size_t kServeSlack = 2 * DirectDescriptor::kMaxAlign;
    /// The default copy_chunk(): few, large reads for a source behind a network or a cache.
    static constexpr size_t kLargeCopyChunk = size_t{1} << 20;

    virtual ~ByteSource() = default;

    /// Reads up to `len` bytes at `offset` into `dst`, like pread(2): returns the number of
    /// bytes read (fewer than `len` only at the end of the source), or -errno (-EIO when the
    /// bytes cannot be had: never zeros or a short block in their place). Never throws.
    virtual ssize_t pread(void* dst, size_t len, uint64_t offset) const noexcept = 0;

    /// Size in bytes, fixed for the life of the object.
    virtual uint64_t size() const noexcept = 0;

    /// True once the underlying object is known to differ from the one this source was opened
    /// on (local file: size or mtime moved; HTTP object: the validator changed). Bytes read
    /// after that are not served. Never throws.
    virtual bool changed() const noexcept = 0;

    /// A name for messages and logs (a path, or a URL without its query string, which may hold
    /// a signature, and without credentials).
    virtual std::string display_name() const = 0;

    /// What identifies this version of the content: "" for a local file (its stat identifies
    /// it), the ETag or Last-Modified + size of an HTTP object. Part of the inode fingerprint.
    virtual std::string validator() const = 0;

    // ---- policy hooks: defaults for a source with no page cache of its own to manage ----

    /// Reads bytes [offset, offset + len) for a server, `kept` saying who keeps a copy.
    /// With `whole_request` the piece is the server's whole request and `buf` is kServeAlign
    /// aligned with kServeSlack bytes of room past `len`, so a source may read a wider aligned
    /// range into it (then `data` points past buf's start), or answer from memory of its own
    /// without copying (`data` points there, `hold` keeps it). Returns the bytes read (`len`, fewer
    /// only at the end of the source) or -errno in `result`. Change checks are the caller's
    /// (changed() after the read). Never throws, never allocates. Default: pread into `buf`.
    virtual Served read_served(char* buf, size_t len, uint64_t offset, CopyKept kept,
                               bool whole_request) const noexcept;

    /// Read-ahead hint: bytes [offset, offset + len) will be read soon. Best effort, returns
    /// at once, never throws. Default: nothing.
    virtual void will_need(uint64_t offset, uint64_t len) const noexcept;

    /// Why a read of this source failed, beyond its errno, for the one-line warning of a failed
    /// FUSE read; "" when there is nothing to add. Default, for a source identified by its
    /// validator (an HTTP object): says so when changed().
    virtual std::string failure_reason() const;

    /// The size the object has now, for a writer's "ends before offset" message (a local file:
    /// its fstat; -1 when it cannot be told). Default: size().
    virtual int64_t current_size() const noexcept { return static_cast<int64_t>(size()); }

    /// For writers that skip holes (SEEK_DATA, SEEK_HOLE of lseek(2)): the offset of the first
    /// data (`hole` false) or hole (`hole` true) byte at or after `offset`; -ENXIO when there
    /// is no data at or after `offset`; another -errno when the source cannot tell (the writer
    /// then copies everything). Default: everything before size() is data.
    virtual int64_t seek(uint64_t offset, bool hole) const noexcept;

    /// Copies up to `len` bytes at `offset` into descriptor `out_fd` at `out_offset` in the
    /// kernel (copy_file_range(2)): returns the bytes copied (0 at the end of the source), or
    /// -errno (EXDEV, EINVAL, ENOSYS, EOPNOTSUPP, EBADF, EPERM: not possible here; the writer
    /// then copies through a buffer with pread). Default: -EOPNOTSUPP.
    virtual ssize_t copy_to(int out_fd, uint64_t out_offset, size_t len, uint64_t offset) const noexcept;

    /// Bytes per pread when a writer copies through a buffer. Default kLargeCopyChunk.
    virtual size_t copy_chunk() const noexcept { return kLargeCopyChunk; }

    /// Refreshes the stat a listing recorded for this source with what opening it found (a local
    /// file: its fstat). Default: leaves `st` as it is (made up by the listing).
    virtual void update_stat(struct stat* st) const noexcept;

    /// True when the source reads the local file at its display_name() (and its part's path): a
    /// caller's permission on that path is what a direct reader would need (part_has_local_path).
    /// Default: false (a network object).
    virtual bool is_local_file() const noexcept { return false; }
};

/// While an object of this class lives on a thread, ByteSource::pread calls made on that
/// thread that would have to wait for the network (a block that is neither cached nor in
/// memory, or being fetched by another thread) return -EWOULDBLOCK at once instead of waiting.
/// The FUSE read handler serves such reads on its own threads (fs/deferred_reads.hpp), so a
/// slow server never holds the workers that answer stat, readdir and cached reads. Nests.
class NoNetworkWaitScope {
public:
    NoNetworkWaitScope() noexcept : previous_(active()) { active() = true; }
    ~NoNetworkWaitScope() { active() = previous_; }
    NoNetworkWaitScope(const NoNetworkWaitScope&) = delete;
    NoNetworkWaitScope& operator=(const NoNetworkWaitScope&) = delete;
    /// True on a thread inside such a scope. Never throws.
    static bool on() noexcept { return active(); }

private:
    static bool& active() noexcept {
        thread_local bool flag = false;
        return flag;
    }
    bool previous_;
};

/// A local file: an open descriptor read with pread_full, changed() when fstat no longer shows
/// the size and mtime it had when opened. Owns its page-cache policy:
///  - read_served() with CopyKept::ByReaderDirect (a large request, or one that does not
///    continue a stream of the served file), for a whole request whose bytes are not all in the
///    page cache (cachestat(2)), reads with O_DIRECT (DirectDescriptor, opened on first use):
///    the file's page cache then gets no copy of bytes the server's cache holds anyway.
///    Streams of small requests stay buffered, where the file system's readahead keeps the
///    disk busy ahead of them. Falls back to a buffered read whenever O_DIRECT is unavailable
///    or refused;
///  - a buffered read_served() with CopyKept::ByReader(Direct) drops the file's pages behind the
///    bytes served (drop_behind), except the 2 MiB blocks that were wholly cached before this
///    source's reads came near them (CachedBefore: another program's cache is left alone);
///  - will_need() is posix_fadvise(POSIX_FADV_WILLNEED); copy_to() is copy_file_range(2); seek()
///    is lseek SEEK_DATA / SEEK_HOLE.
class LocalFileSource final : public ByteSource {
public:
    /// Opens `path` read-only (open_read_only) and records its fstat. Throws gguf::Error(Io)
    /// naming the path when it cannot be opened or stat()ed.
    explicit LocalFileSource(const std::string& path);
    /// Takes `fd` (an open descriptor of `path`) and its fstat `st`.
    LocalFileSource(UniqueFd fd, std::string path, const struct stat& st);

    /// Opens `path` like the constructor and, when `expected` is set (st_ino != 0), checks it
    /// is still that file (same_file_state: device, inode, size, mtime). Throws gguf::Error(Io)
    /// naming the path when it cannot be opened, Code::BadSplit "PATH: changed while it was
    /// being read" when it changed.
    static std::shared_ptr<const LocalFileSource> open(const std::string& path, const struct stat& expected);

    /// Asks the kernel to start reading bytes [offset, offset + len) of the regular file at
    /// `path` (open, POSIX_FADV_WILLNEED, close) without holding a descriptor. Anything but a
    /// regular file (absent, FIFO, device) is stat()ed, never opened. Best effort, never throws.
    static void will_need(const std::string& path, uint64_t offset, uint64_t len) noexcept;

    ssize_t pread(void* dst, size_t len, uint64_t offset) const noexcept override;
    uint64_t size() const noexcept override { return static_cast<uint64_t>(st_.st_size); }
    bool changed() const noexcept override;
    std::string display_name() const override { return path_; }
    std::string validator() const override { return ""; }

    Served read_served(char* buf, size_t len, uint64_t offset, CopyKept kept, bool whole_request) const noexcept override;
    void will_need(uint64_t offset, uint64_t len) const noexcept override;
    /// "short read: the file is now N bytes, it was M when opened", or "the file was modified in
    /// place since it was opened (size or mtime changed)", or "".
    std::string failure_reason() const override;
    int64_t current_size() const noexcept override;
    int64_t seek(uint64_t offset, bool hole) const noexcept override;
    ssize_t copy_to(int out_fd, uint64_t out_offset, size_t len, uint64_t offset) const noexcept override;
    /// 128 KiB: small enough to stay in the CPU cache between a read and its write (a chunk
    /// larger than the cache makes a merge from a warm page cache slower; bench/README.md).
    size_t copy_chunk() const noexcept override { return size_t{128} << 10; }
    void update_stat(struct stat* st) const noexcept override { *st = st_; }
    bool is_local_file() const noexcept override { return true; }

    /// The descriptor, and its fstat when opened (for tests and page-cache probes).
    int fd() const noexcept { return fd_.get(); }
    const struct stat& opened_stat() const noexcept { return st_; }
    /// True when the O_DIRECT descriptor is (or can be) open: opens it if untried.
    bool direct_available() const noexcept { return direct_.get(fd_.get()) >= 0; }

    /// Drop-behind geometry: pages are dropped in whole blocks of kDropBlock (the largest
    /// page-cache folio on x86-64, PMD size: POSIX_FADV_DONTNEED only evicts folios that lie
    /// entirely inside its range, and ext4 caches sequentially read files in folios of up to
    /// 2 MiB, so dropping exactly the 1 MiB a request read evicted nothing) and only kDropLag
    /// behind the bytes just served (the kernel has up to 12 readahead requests of 1 MiB in
    /// flight, served out of order: pages dropped before another request copied them would be
    /// read from disk a second time).
    static constexpr uint64_t kDropBlock = CachedBefore::kBlock;
    static constexpr uint64_t kDropLag = uint64_t{16} << 20;

private:
    /// Drops the pages of the 2 MiB blocks of [offset, offset + len) shifted kDropLag back, so
    /// the last kDropLag + kDropBlock bytes stay cached, skipping blocks cached_before_ says
    /// were cached before this source read them. Best effort: errors are ignored.
    void drop_behind(uint64_t offset, uint64_t len) const noexcept;
    /// The O_DIRECT read of read_served(); result -EAGAIN when O_DIRECT cannot be used.
    Served read_direct(char* buf, size_t len, uint64_t offset) const noexcept;

    std::string path_;
    UniqueFd fd_;
    struct stat st_ {};
    DirectDescriptor direct_;  // the same file with O_DIRECT, opened on first uncached read
    CachedBefore cached_before_;  // which blocks were cached before this source read them
};

/// The source of part `part`: its ByteSource when it carries one, else the local file at its
/// path opened now (LocalFileSource::open; checked against the recorded stat unless
/// `check_state` is false). Throws like LocalFileSource::open.
std::shared_ptr<const ByteSource> open_part(const FilePart& part, bool check_state = true);

/// Read-ahead hint for bytes [0, len) of part `part` (its offset added): through its ByteSource,
/// or for a local file without holding a descriptor (LocalFileSource::will_need). Never throws.
void will_need_part(const FilePart& part, uint64_t len) noexcept;

/// True when part `part` is a local file at its path (read by opening the path, or through a
/// source that reads that file: ByteSource::is_local_file), so a caller's permission on that
/// path is what a direct reader would need; false for a part whose source is a network object.
bool part_has_local_path(const FilePart& part) noexcept;

/// True when part `part` no longer is what it was listed as: for a local file, its path no
/// longer stat()s to the recorded device, inode, size and mtime (or cannot be stat()ed); for
/// a part with a source, source->changed(). For log messages.
bool part_changed(const FilePart& part) noexcept;

}  // namespace gguf
