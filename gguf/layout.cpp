#include "gguf/layout.hpp"

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
    header_ += bytes;
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
    std::vector<TensorInfo> infos;
    infos.reserve(tensors.size());
    uint64_t offset = 0;
    for (const auto& t : tensors) {
        infos.push_back(t.info);
        infos.back().offset = offset;
        offset += align_up(t.info.nbytes, alignment);
    }
    VirtualLayout layout;
    layout.append_header(render_header(kvs, infos, alignment));
    for (const auto& t : tensors) {
        layout.append_source(t.source, t.source_offset, t.info.nbytes);
        layout.append_zeros(align_up(t.info.nbytes, alignment) - t.info.nbytes);
    }
    return layout;
}

}  // namespace gguf
