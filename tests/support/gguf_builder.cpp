#include "support/gguf_builder.hpp"

#include <random>

#include "gguf/format/format.hpp"
#include "gguf/format/writer.hpp"

namespace gguf_test {

std::string build_gguf(const std::vector<gguf::KeyValue>& kvs, const std::vector<TestTensor>& tensors,
                       uint64_t alignment, uint32_t seed) {
    std::vector<gguf::TensorInfo> infos;
    uint64_t offset = 0;
    for (const auto& t : tensors) {
        gguf::TensorInfo ti;
        ti.name = t.name;
        ti.n_dims = static_cast<uint32_t>(t.ne.size());
        uint64_t elements = 1;
        for (size_t d = 0; d < t.ne.size(); ++d) {
            ti.ne[d] = t.ne[d];
            elements *= static_cast<uint64_t>(t.ne[d]);
        }
        ti.type = t.type;
        auto tt = gguf::ggml_type(t.type);
        ti.nbytes = elements / tt->block_size * tt->type_size;
        ti.offset = offset;
        offset += gguf::align_up(ti.nbytes, alignment);
        infos.push_back(ti);
    }
    std::string out = gguf::render_header(kvs, infos, alignment);
    std::mt19937 rng(seed);
    for (const auto& ti : infos) {
        for (uint64_t i = 0; i < ti.nbytes; ++i) out += static_cast<char>(rng() & 0xFF);
        out.resize(gguf::align_up(out.size(), alignment), '\0');
    }
    return out;
}

}  // namespace gguf_test
