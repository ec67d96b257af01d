// GGUF header serializer: the single place that turns KV pairs and tensor infos into bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/format/header.hpp"

namespace gguf {

/// Serializes a GGUF v3 header: magic, version 3, counts, every KV pair in order (values
/// written from their raw bytes, so byte-identical to what was read), every tensor info
/// (name, n_dims without trailing 1s as ggml's writer does, ne, type, offset as given), then
/// zero padding to a multiple of `alignment` (the writer always pads, also without tensors).
///
/// Returns the bytes; size() is the data section start. Tensor offsets are written as they
/// are in `tensors`: callers compute them (see plan_gguf_file).
std::string render_header(const std::vector<KeyValue>& kvs, const std::vector<TensorInfo>& tensors,
                          uint64_t alignment);

}  // namespace gguf
