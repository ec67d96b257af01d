// The plan of one complete GGUF file: its header rendered from KV pairs and tensor infos, and
// the extent table that places each tensor's bytes from its source after the header. Every
// file gguf-mount serves or writes (a merge, a split shard) is laid out here.
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/bytes/layout.hpp"
#include "gguf/format/header.hpp"

namespace gguf {

/// Largest alignment whose header padding plan_gguf_file keeps in memory (1 MiB).
inline constexpr uint64_t kMaxHeaderPadding = uint64_t{1} << 20;

/// A tensor to place in a planned GGUF file, and where its bytes come from.
struct PlacedTensor {
    TensorInfo info;          // name, dims, type, nbytes; offset is recomputed by the planner
    uint32_t source = 0;      // index of the source file holding the tensor data
    uint64_t source_offset = 0;  // absolute byte offset of the data in that file
};

/// Plans a complete GGUF file: renders the header for `kvs` and `tensors` with offsets
/// re-packed from 0 (each tensor padded to `alignment`), then lays out each tensor's bytes
/// from its source followed by zero padding to `alignment` (the last tensor included).
/// This is the byte layout of llama.cpp's gguf-split outputs (split shards and --merge)
/// when `alignment` is 32. Without tensors the file has no data section, and the header is
/// padded to 32 bytes whatever `alignment` says (what gguf-split writes, see the notensors
/// fixtures): a general.alignment of 2^28 must not cost 256 MiB of zeros. Throws gguf::Error(BadArgument) if alignment is not a power of two,
/// and Code::TooLarge if the file would exceed 2^63 - 1 bytes (offsets would wrap).
/// header() holds the header and its padding when the alignment is at most kMaxHeaderPadding
/// (so header().size() is the data section start); above that, header() holds the unpadded
/// header and a Zeros extent follows it, so that no alignment can force a large allocation.
VirtualLayout plan_gguf_file(const std::vector<KeyValue>& kvs, const std::vector<PlacedTensor>& tensors,
                             uint64_t alignment);

}  // namespace gguf
