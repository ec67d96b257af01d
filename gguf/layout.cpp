#include "gguf/layout.hpp"

#include <cstdint>

#include "gguf/error.hpp"
#include "gguf/writer.hpp"

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

VirtualLayout plan_gguf_file(const std::vector<KeyValue>& kvs, const std::vector<PlacedTensor>& tensors,
                             uint64_t alignment) {
    if (!is_power_of_two(alignment)) {
        throw Error(Code::BadArgument, "alignment " + std::to_string(alignment) + " is not a power of two");
    }
    // Offsets and the total size are summed with overflow checks: tensors taken from several
    // files (up to 2^63 - 1 bytes each) can add up to more than a file can hold.
    constexpr uint64_t kMaxFileSize = static_cast<uint64_t>(INT64_MAX);
    auto too_large = [] {
        return Error(Code::TooLarge, "the planned file would be larger than 2^63 - 1 bytes, the largest file size");
    };
    std::vector<TensorInfo> infos;
    infos.reserve(tensors.size());
    uint64_t offset = 0;
    for (const auto& t : tensors) {
        if (t.info.nbytes > kMaxFileSize) throw too_large();
        infos.push_back(t.info);
        infos.back().offset = offset;
        if (__builtin_add_overflow(offset, align_up(t.info.nbytes, alignment), &offset)) throw too_large();
    }
    // The header's padding is kept in memory only when it is small: a hostile general.alignment
    // of 2^31 would otherwise cost a 2 GiB string. Larger padding becomes a Zeros extent.
    // Without tensors there is no data section: the header is padded to 32 bytes, as ggml's
    // writer in gguf-split pads every output (the notensors fixtures), whatever the alignment.
    const uint64_t pad_to = tensors.empty() ? kDefaultAlignment : alignment;
    std::string header = render_header(kvs, infos, pad_to <= kMaxHeaderPadding ? pad_to : 1);
    uint64_t data_start = align_up(header.size(), pad_to);
    if (data_start > kMaxFileSize || offset > kMaxFileSize - data_start) throw too_large();

    VirtualLayout layout;
    layout.append_header(std::move(header));
    layout.append_zeros(data_start - layout.size());
    for (const auto& t : tensors) {
        layout.append_source(t.source, t.source_offset, t.info.nbytes);
        layout.append_zeros(align_up(t.info.nbytes, alignment) - t.info.nbytes);
    }
    return layout;
}

}  // namespace gguf
