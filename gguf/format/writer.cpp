#include "gguf/format/writer.hpp"

#include <cstring>

namespace gguf {

namespace {
template <typename T>
void put(std::string& out, T v) {
    char b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    out.append(b, sizeof v);
}

void put_string(std::string& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out.append(s);
}
}  // namespace

std::string render_header(const std::vector<KeyValue>& kvs, const std::vector<TensorInfo>& tensors,
                          uint64_t alignment) {
    std::string out;
    size_t estimate = 24;
    for (const auto& kv : kvs) estimate += 12 + kv.key.size() + kv.value.raw.size();
    estimate += tensors.size() * (8 + kMaxTensorName + 4 + 8 * kMaxDims + 12) + alignment;
    out.reserve(estimate);

    out.append("GGUF", 4);
    put<uint32_t>(out, kWriteVersion);
    put<int64_t>(out, static_cast<int64_t>(tensors.size()));
    put<int64_t>(out, static_cast<int64_t>(kvs.size()));
    for (const auto& kv : kvs) {
        put_string(out, kv.key);
        put<uint32_t>(out, static_cast<uint32_t>(kv.value.type));
        out.append(kv.value.raw.data(), kv.value.raw.size());
    }
    for (const auto& t : tensors) {
        put_string(out, t.name);
        uint32_t n_dims = t.effective_dims();
        put<uint32_t>(out, n_dims);
        for (uint32_t d = 0; d < n_dims; ++d) put<int64_t>(out, t.ne[d]);
        put<uint32_t>(out, t.type);
        put<uint64_t>(out, t.offset);
    }
    out.resize(align_up(out.size(), alignment), '\0');
    return out;
}

}  // namespace gguf
