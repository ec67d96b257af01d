// A logical file: one physical file, or the plain concatenation of several physical files
// (raw byte-split parts, gguf/model/byte_split.hpp). The reader, split
// sets and virtual files see shards and models through this type, so a shard made of byte
// pieces is handled exactly like a shard that is one file.
//
// Example: "m.gguf" published as "m.gguf.part1of2" (1000 bytes) + "m.gguf.part2of2" (500 bytes)
// is LogicalFile{path "dir/m.gguf", parts [{dir/m.gguf.part1of2, 1000}, {dir/m.gguf.part2of2, 500}]},
// size() == 1500; logical byte 1200 is byte 200 of the second part.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/bytes/byte_source.hpp"
#include "gguf/bytes/file_io.hpp"
#include "gguf/bytes/layout.hpp"

namespace gguf {

/// One physical file of a logical file, or a byte range of one: the bytes [offset, offset + size)
/// of a local file (source == nullptr: opened from `path` when read, see open_part) or of any
/// other ByteSource (gguf/bytes/byte_source.hpp; e.g. an HTTP object). A whole file has offset 0 and size ==
/// its size; a range (offset > 0 or size < the file's size) is one shard of a cat-joined split
/// set (`cat x-0000{1,2,3}-of-00003.gguf > x.gguf`, see SplitSet::open_concatenated).
struct FilePart {
    std::string path;     // the name it is read through (a symlink is followed when opened); for
                          // a ByteSource, its display_name() (a URL without query string)
    uint64_t size = 0;    // bytes of the part (of the range)
    struct stat st {};    // stat(2) of the file (through symlinks) when it was listed or read; for
                          // a ByteSource, made up: S_IFREG | 0444, size, owner and time given by it
                          // (st_ino 0, so the local "changed since listed" checks do not apply)
    uint64_t offset = 0;  // byte offset of the part inside the file at `path`
    std::shared_ptr<const ByteSource> source;  // null for a local file
    std::string validator;  // source->validator() ("" for local files): part of the identity
};

/// An ordered list of physical parts read as one file. `path` is the logical name (for a
/// single-part file, the part's own path; for byte-split parts, the name of the concatenation,
/// which may not exist on disk). Value type, no open descriptors.
struct LogicalFile {
    std::string path;
    std::vector<FilePart> parts;

    /// Sum of the parts' sizes, in bytes.
    uint64_t size() const noexcept;
    /// True when the file is made of more than one physical part.
    bool is_concatenation() const noexcept { return parts.size() > 1; }

    /// The single file `path`, stat()ed now (following symlinks). Throws gguf::Error(Code::Io)
    /// naming the path when it cannot be stat()ed or is not a regular file.
    static LogicalFile single(const std::string& path);

    /// Calls `fn(size_t part, uint64_t part_offset, uint64_t length)` for each part overlapping
    /// the logical range [offset, offset + length), in order, clipped to size(). `part_offset`
    /// counts from the start of the part (add parts[part].offset for the file offset). No I/O.
    /// Example (parts of 1000 and 500 bytes): range (990, 20) -> (0, 990, 10), (1, 0, 10).
    template <typename Fn>
    void for_each_part_range(uint64_t offset, uint64_t length, Fn&& fn) const {
        uint64_t start = 0;
        for (size_t i = 0; i < parts.size() && length > 0; ++i) {
            uint64_t end = start + parts[i].size;
            if (offset < end) {
                uint64_t skip = offset - start;
                uint64_t n = std::min<uint64_t>(length, parts[i].size - skip);
                fn(i, skip, n);
                offset += n;
                length -= n;
            }
            start = end;
        }
    }
};

/// True when `a` and `b` describe the same file content as far as stat can tell: same device,
/// inode, size and modification time (to the nanosecond). Used to detect a part that was
/// replaced, grown, truncated or rewritten between two looks.
bool same_file_state(const struct stat& a, const struct stat& b) noexcept;

/// A logical file with every part open (open_part). Move-only.
class OpenLogicalFile {
public:
    /// Opens each part of `file` (open_part: a local part read-only, checked against its
    /// recorded stat; a part with a ByteSource through it); the stat recorded in the result is
    /// what opening found (ByteSource::update_stat: a local file's fstat), and a whole part whose
    /// stat was unknown (st_ino == 0, offset 0) gets its source's size. Throws gguf::Error(Code::Io)
    /// naming the part that cannot be opened, Code::BadSplit "PART: changed while it was being
    /// read" when `file` carries a stat (st_ino != 0) that differs from the fstat (see
    /// same_file_state), and Code::Truncated when a range runs past the end of its source.
    static OpenLogicalFile open(const LogicalFile& file);

    /// The file with every part's stat refreshed from its open source.
    const LogicalFile& file() const noexcept { return file_; }
    /// Total size in bytes, from those stats.
    uint64_t size() const noexcept { return size_; }

    /// pread(2) over the concatenation: reads up to `len` bytes at logical `offset` into `dst`.
    /// Returns the bytes read (fewer only at the end, or where a part is shorter than its
    /// recorded size), or -errno. Never throws, never allocates.
    ssize_t pread(void* dst, size_t len, uint64_t offset) const noexcept;

private:
    LogicalFile file_;
    std::vector<std::shared_ptr<const ByteSource>> sources_;  // one per part
    uint64_t size_ = 0;
};

/// Rewrites a layout whose Source extents index logical files (`files[source]`, offsets in the
/// logical file) into one whose Source extents index the flattened list of physical parts:
/// part p of file f gets index (number of parts of files 0..f-1) + p, and source_offset
/// becomes the offset in that part's file (the part's `offset` added). A Source extent that
/// spans a part boundary is cut in two. Header and Zeros extents are kept. Pure; no I/O.
/// Throws gguf::Error(Code::BadArgument) when an extent names a file that does not exist or runs
/// past its end. Takes `layout` by value and moves its header bytes into the result (pass an
/// rvalue to avoid a copy of a large header).
VirtualLayout flatten_sources(VirtualLayout layout, const std::vector<LogicalFile>& files);

/// The layout of `file` served as it is: one Source extent per non-empty part (source = part
/// index, source_offset = the part's offset in its file). Pure.
VirtualLayout concatenation_layout(const LogicalFile& file);

/// The physical parts of `files`, in the order flatten_sources numbers them.
std::vector<FilePart> flattened_parts(const std::vector<LogicalFile>& files);

/// The state of every part of `files` as one string: per part "|PATH:DEV:INO:SIZE:MTIME_S.NS"
/// and ":v=VALIDATOR" when it has one. Equal strings: the same files as far as stat (and the
/// remote validator) can tell. Used in content identities (fs::entry_fingerprint).
std::string files_state(const std::vector<LogicalFile>& files);

}  // namespace gguf
