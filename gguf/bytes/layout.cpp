#include "gguf/bytes/layout.hpp"

#include <cstdint>

namespace gguf {

void VirtualLayout::push(Extent e) {
    if (e.length == 0) return;
    e.start = size_;
    if (!extents_.empty()) {
        Extent& last = extents_.back();
        bool joins = last.kind == e.kind &&
                     (e.kind == Extent::Kind::Zeros ||
                      (last.source == e.source && last.source_offset + last.length == e.source_offset));
        if (joins) {
            last.length += e.length;
            size_ += e.length;
            return;
        }
    }
    extents_.push_back(e);
    size_ += e.length;
}

void VirtualLayout::append_header(std::string bytes) {
    Extent e;
    e.kind = Extent::Kind::Header;
    e.source_offset = header_.size();
    e.length = bytes.size();
    if (header_.empty()) {
        header_ = std::move(bytes);  // the usual case: no second copy of a large header
    } else {
        header_ += bytes;
    }
    push(e);
}

void VirtualLayout::append_header_range(uint64_t offset, uint64_t length) {
    Extent e;
    e.kind = Extent::Kind::Header;
    e.source_offset = offset;
    e.length = length;
    push(e);
}

void VirtualLayout::append_source(uint32_t source, uint64_t source_offset, uint64_t length) {
    Extent e;
    e.kind = Extent::Kind::Source;
    e.source = source;
    e.source_offset = source_offset;
    e.length = length;
    push(e);
}

void VirtualLayout::append_zeros(uint64_t length) {
    Extent e;
    e.kind = Extent::Kind::Zeros;
    e.length = length;
    push(e);
}

}  // namespace gguf
