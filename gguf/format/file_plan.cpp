#include "gguf/format/file_plan.hpp"

#include <cstdint>
#include <string>

#include "gguf/error.hpp"
#include "gguf/format/writer.hpp"

namespace gguf {

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
