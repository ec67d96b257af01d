// Synthetic GGUF models for the split/merge tests: a real header rendered with
// gguf::render_header, tensor data left as holes (ftruncate) except small marker patterns, so a
// multi-GiB model costs no disk space and almost no time to create.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/format/header.hpp"

namespace gguf_test {

/// One tensor of a synthetic model. ne: 1 to 4 dimensions; type: ggml type id (0 = F32).
struct SparseTensor {
    std::string name;
    std::vector<int64_t> ne;
    uint32_t type = 0;
};

/// Bytes of marker pattern written at the start and at the end of every tensor's data.
inline constexpr uint64_t kMarkerBytes = 4096;

/// The marker byte at byte `pos` of the data of tensor number `index` (0-based, file order).
inline char marker_byte(size_t index, uint64_t pos) {
    return static_cast<char>((index * 131 + pos * 7 + 1) & 0xff);
}

/// Writes a GGUF v3 file at `path`: `kvs` (plus general.architecture = "synthetic" first, and
/// general.alignment when `alignment` != 32), the tensor infos, then the data section
/// (each tensor padded to `alignment`, the file ending after the last padding). Tensor data is
/// a hole except marker_byte() patterns over the first and last kMarkerBytes of each tensor.
/// Returns the header as gguf::read_header parses it back. Fails the test on any error.
gguf::Header write_sparse_model(const std::string& path, const std::vector<SparseTensor>& tensors,
                                uint64_t alignment = 32, const std::vector<gguf::KeyValue>& kvs = {});

}  // namespace gguf_test
