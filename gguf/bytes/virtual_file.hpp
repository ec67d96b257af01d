// A virtual file ready to serve: an extent table plus open descriptors for its sources.
// This is the whole contract the FUSE adapter and the offline merge use: size() and read().
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/bytes/file_io.hpp"
#include "gguf/bytes/layout.hpp"
#include "gguf/bytes/logical_file.hpp"
#include "gguf/bytes/page_cache.hpp"

namespace gguf {

/// One source file of a virtual file, opened once: a local file (fd) or a ByteSource (`remote`
/// set, fd not open: every read goes through it, never O_DIRECT or page-cache calls).
struct SourceFile {
    std::string path;
    UniqueFd fd;
    std::shared_ptr<const ByteSource> remote;
    struct stat st {};  // fstat of fd when it was opened (checked against the planned stat)
    DirectDescriptor direct;  // the same file with O_DIRECT, opened on first uncached read
};

/// What VirtualFile::serve() did with one request.
struct Served {
    ssize_t result = 0;          ///< bytes served, or -errno (as VirtualFile::read)
    const char* data = nullptr;  ///< where the served bytes start (inside the caller's buffer)
    bool direct = false;         ///< read with O_DIRECT: no source page was cached for it
};

class VirtualFile {
public:
    /// Takes ownership of `sources`; every Source extent of `layout` must index into it.
    /// A source whose `st` is unset (st_ino == 0) gets the fstat of its descriptor now: the
    /// state read() checks the source against.
    VirtualFile(VirtualLayout layout, std::vector<SourceFile> sources);

    /// Opens every part of `parts` read-only once; Source extent k of `layout` reads parts[k].
    /// A part whose recorded stat is set (st_ino != 0) must still be the same file
    /// (same_file_state: device, inode, size, mtime), so the layout planned from it is still
    /// right. Throws gguf::Error(Io) naming the part that cannot be opened, Code::BadSplit
    /// "PART: changed while it was being read" when it changed.
    static VirtualFile open(VirtualLayout layout, const std::vector<FilePart>& parts);

    /// A logical file served as is (a companion file, or byte-split parts concatenated): one
    /// Source extent per non-empty part. Throws like open().
    static VirtualFile concatenation(const LogicalFile& file);

    uint64_t size() const { return layout_.size(); }
    const VirtualLayout& layout() const { return layout_; }
    const std::vector<SourceFile>& sources() const { return sources_; }

    /// True when source `index` no longer has the size and mtime recorded when it was opened
    /// (one fstat), or, for a ByteSource, when it reports changed(). False for an unknown index
    /// or when fstat fails.
    bool source_changed(uint32_t index) const noexcept;

    /// For writers (merge), after the last byte was copied and before publishing: throws
    /// gguf::Error(Code::BadSplit) "PATH: changed while it was being ACTION (size or modification
    /// time differs); nothing was written" for the first source for which source_changed() is
    /// true. The descriptor pins the inode, so a source rewritten in place is caught; one replaced
    /// by rename was not read from and cannot matter.
    void ensure_sources_unchanged(const std::string& action) const;

    /// Copies bytes [offset, offset + len) of the virtual file into `dst` (clipped at size()).
    /// Returns the number of bytes copied, or -errno: -EIO when a source returns fewer bytes
    /// than its extent promises (a truncated shard) or when, after the bytes were read, the
    /// source's fstat no longer shows the size and mtime it had when opened (it was rewritten in
    /// place, so the bytes may be a mix of old and new content: never served); the pread errno
    /// otherwise. On error `*failed_source` (if given) receives the index of the source that
    /// failed. A source that was deleted or renamed over keeps serving its old content through
    /// the open descriptor. Thread-safe, never allocates, never throws.
    ///
    /// Cost of the change check: one fstat(2) per source piece of a request. Measured through
    /// the mount (O_DIRECT dd of a page-cached 1 GiB file, 128 KiB and 1 MiB requests, 2.7-3.8
    /// GB/s either way): no difference above the run-to-run noise of about 10 %.
    ssize_t read(uint64_t offset, size_t len, char* dst, uint32_t* failed_source = nullptr) const noexcept;

    /// Alignment (bytes) serve() needs of its buffer, and the extra room it needs past `len`:
    /// an O_DIRECT read is widened to DirectDescriptor::kMaxAlign boundaries on both sides.
    static constexpr size_t kServeAlign = DirectDescriptor::kMaxAlign;
    static constexpr size_t kServeSlack = 2 * DirectDescriptor::kMaxAlign;

    /// Reads bytes [offset, offset + len) like read(), for a server that keeps its own cached
    /// copy of what it returns (the FUSE page cache of the merged file). A request that lies
    /// inside one Source extent, does not continue a sequential stream of earlier requests
    /// (StreamTracker) and whose source bytes are not all in the page cache (cachestat(2)) is
    /// read with O_DIRECT: the source's page cache then gets no copy of bytes that the server's
    /// cache will hold anyway, and no pages are allocated for it. Sequential streams stay
    /// buffered, where the source file system's readahead keeps the disk busy ahead of the
    /// requests. Falls back to a buffered read whenever O_DIRECT is unavailable or refused.
    ///
    /// `buf` must be kServeAlign-aligned and hold len + kServeSlack bytes. On success
    /// `result` is the byte count and `data` points at them inside `buf` (at `buf` itself
    /// unless `direct`). Errors, change checks and `*failed_source` as read(). Thread-safe,
    /// never allocates, never throws.
    ///
    /// Measured (bench/results): 4,096 random 1 MiB preads from cold through the mount;
    /// see the README's performance section.
    Served serve(uint64_t offset, size_t len, char* buf, uint32_t* failed_source = nullptr) const noexcept;

private:
    /// The O_DIRECT path of serve() for bytes [source_offset, + len) of source `index`: returns
    /// the Served result, or result == -EAGAIN when O_DIRECT cannot be used (the caller then
    /// reads buffered).
    Served read_direct(uint32_t index, uint64_t source_offset, size_t len, char* buf) const noexcept;

    VirtualLayout layout_;
    std::vector<SourceFile> sources_;
    mutable StreamTracker streams_;
};

}  // namespace gguf
