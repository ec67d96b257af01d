// A virtual file ready to serve: an extent table plus its open byte sources. This is the whole
// contract the FUSE adapter and the offline merge use: size(), read() and serve(). It never asks
// what kind a source is: page-cache policy is the sources' (gguf/bytes/byte_source.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/bytes/byte_source.hpp"
#include "gguf/bytes/layout.hpp"
#include "gguf/bytes/logical_file.hpp"
#include "gguf/bytes/page_cache.hpp"

namespace gguf {

class VirtualFile {
public:
    /// Holds `sources`; every Source extent of `layout` must index into it.
    VirtualFile(VirtualLayout layout, std::vector<std::shared_ptr<const ByteSource>> sources);

    /// Opens every part of `parts` once (open_part: a local file read-only, a part with a
    /// ByteSource through it); Source extent k of `layout` reads parts[k]. A local part whose
    /// recorded stat is set (st_ino != 0) must still be the same file (same_file_state: device,
    /// inode, size, mtime), so the layout planned from it is still right. Throws gguf::Error(Io)
    /// naming the part that cannot be opened, Code::BadSplit "PART: changed while it was being
    /// read" when it changed.
    static VirtualFile open(VirtualLayout layout, const std::vector<FilePart>& parts);

    /// A logical file served as is (a companion file, or byte-split parts concatenated): one
    /// Source extent per non-empty part. Throws like open().
    static VirtualFile concatenation(const LogicalFile& file);

    uint64_t size() const { return layout_.size(); }
    const VirtualLayout& layout() const { return layout_; }
    const std::vector<std::shared_ptr<const ByteSource>>& sources() const { return sources_; }

    /// True when source `index` reports changed() (a local file: its size or mtime is no
    /// longer what it was when opened). False for an unknown index.
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
    /// source reports changed() (a local file rewritten in place, so the bytes may be a mix of
    /// old and new content: never served); the source's errno otherwise. On error
    /// `*failed_source` (if given) receives the index of the source that failed. A local source
    /// that was deleted or renamed over keeps serving its old content through its descriptor.
    /// Plain reads (serve() with CopyKept::None). Thread-safe, never allocates, never throws.
    ///
    /// Cost of the change check: one changed() per source piece of a request (one fstat(2) for
    /// a local file).
    ssize_t read(uint64_t offset, size_t len, char* dst, uint32_t* failed_source = nullptr) const noexcept;

    /// Alignment (bytes) serve() needs of its buffer, and the extra room it needs past `len`
    /// (ByteSource::kServeAlign, kServeSlack).
    static constexpr size_t kServeAlign = ByteSource::kServeAlign;
    static constexpr size_t kServeSlack = ByteSource::kServeSlack;

    /// Reads bytes [offset, offset + len) like read(), in one walk of the extent table, each
    /// source piece through ByteSource::read_served with `kept` (who keeps a copy: the sources
    /// choose their page-cache policy from it; a request that lies inside one Source extent is
    /// offered to its source as a whole request, which may read it with O_DIRECT). With
    /// CopyKept::ByReaderDirect a request shorter than kDirectStreamMin is first checked against
    /// the last requests of this file (a StreamTracker over its offsets: within
    /// StreamTracker::kWindow of the end of one of the last kSlots requests, whichever source
    /// they read): one that continues a stream is passed on as CopyKept::ByReader (buffered,
    /// with the source's readahead). A longer request stays ByReaderDirect, stream or not (its
    /// uncached bytes are read with O_DIRECT). `buf` must be
    /// kServeAlign-aligned and hold len + kServeSlack bytes. On success `result` is the byte
    /// count and `data` points at them: inside `buf` (at `buf` itself unless `direct`), or,
    /// for a whole request a source answered from its own memory, there (`hold` keeps it
    /// valid while the Served lives: reply before letting it go). Errors
    /// and change checks as read(); on error failed_source, failed_offset and failed_length name
    /// the piece that failed. Thread-safe, never allocates, never throws.
    Served serve(uint64_t offset, size_t len, char* buf, CopyKept kept = CopyKept::ByReaderDirect) const noexcept;

    /// Requests of at least this many bytes (256 KiB) are read with O_DIRECT when their source
    /// bytes are not cached, also when they continue a stream: the kernel's readahead of a
    /// FUSE file sends 1 MiB requests (max_read), several at once, which keep the disk busy
    /// without the shard's own readahead, and a stream read so puts no page of the shards in
    /// the page cache (no second copy to allocate, fill and drop behind). Measured on llama.cpp's
    /// `--no-mmap` load of an 8.49 GiB model, cold: 1.13-1.29x the file against 0.75-0.83x with
    /// streams read buffered; one 1 MiB read() loop as fast as the disk goes loses 11-21 %
    /// (bench/README.md, 2026-12-07). Shorter stream requests (a reader in small steps with no
    /// FUSE readahead ahead of it) stay buffered, where the shard's readahead saves a disk round
    /// trip per request.
    static constexpr size_t kDirectStreamMin = size_t{256} << 10;

private:
    VirtualLayout layout_;
    std::vector<std::shared_ptr<const ByteSource>> sources_;
    mutable StreamTracker streams_;  // the ends of the last requests served with ByReaderDirect
};

}  // namespace gguf
