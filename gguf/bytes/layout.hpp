// The extent table of a virtual file: which bytes come from memory, from a range of a source
// file, or are zero padding. Pure value type: no I/O.
//
// Example: a merged file of two shards whose header renders to 96 bytes and whose only tensor
// (40 bytes, in shard 1 at offset 64) is padded to 32:
//   [0, 96)    Header  bytes 0..95 of header()
//   [96, 136)  Source  source 1, offset 64
//   [136, 160) Zeros
// size() == 160; map(90, 10) yields Header [90,96) then Source [96,100) from offset 64.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>


namespace gguf {

/// One contiguous extent of the virtual file.
struct Extent {
    enum class Kind : uint8_t { Header, Source, Zeros };
    uint64_t start = 0;          // virtual offset, bytes
    uint64_t length = 0;         // bytes, > 0
    Kind kind = Kind::Zeros;
    uint32_t source = 0;         // Source: index of the source file (shard index for a merge)
    uint64_t source_offset = 0;  // Source: byte offset in that file; Header: offset in header()
};

/// A piece of a read request: `length` bytes of `extent` starting `skip` bytes into it.
struct Piece {
    const Extent* extent;
    uint64_t skip;
    uint64_t length;
};

/// Sorted, gap-free extent table covering [0, size()).
class VirtualLayout {
public:
    VirtualLayout() = default;

    /// Total size of the virtual file in bytes.
    uint64_t size() const { return size_; }
    /// The in-memory bytes that Header extents refer to (the rendered GGUF header + padding;
    /// see gguf/format/file_plan.hpp for when the padding is a Zeros extent instead).
    const std::string& header() const { return header_; }
    const std::vector<Extent>& extents() const { return extents_; }

    /// Calls `fn(const Piece&)` for each extent piece overlapping [offset, offset+length),
    /// clipped to size(), in order. O(log n + pieces); never allocates (safe on the read path).
    /// Reads past the end yield nothing.
    template <typename Fn>
    void for_each_piece(uint64_t offset, uint64_t length, Fn&& fn) const {
        if (offset >= size_ || length == 0) return;
        uint64_t end = offset + std::min(length, size_ - offset);
        auto it = std::upper_bound(extents_.begin(), extents_.end(), offset,
                                   [](uint64_t off, const Extent& e) { return off < e.start; });
        --it;  // extents_[0].start == 0 <= offset
        for (; it != extents_.end() && it->start < end; ++it) {
            uint64_t from = std::max(offset, it->start);
            uint64_t to = std::min(end, it->start + it->length);
            fn(Piece{&*it, from - it->start, to - from});
        }
    }

    /// Appends extents, merging a new extent into the previous one when they are contiguous
    /// (zeros after zeros, a source range continuing the previous one of the same source).
    void append_header(std::string bytes);
    /// Sets the in-memory header bytes without adding an extent (for copying a layout with
    /// append_header_range; see flatten_sources).
    void set_header(std::string bytes) { header_ = std::move(bytes); }
    /// Moves the in-memory header bytes out, leaving header() empty (for flatten_sources).
    std::string take_header() { return std::move(header_); }
    /// Appends a Header extent for bytes [offset, offset + length) of header(); the caller
    /// guarantees they exist.
    void append_header_range(uint64_t offset, uint64_t length);
    void append_source(uint32_t source, uint64_t source_offset, uint64_t length);
    void append_zeros(uint64_t length);

private:
    void push(Extent e);
    std::string header_;
    std::vector<Extent> extents_;
    uint64_t size_ = 0;
};

}  // namespace gguf
