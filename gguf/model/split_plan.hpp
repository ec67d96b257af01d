// Planning a split: which tensors and KV pairs go into which shard, as llama.cpp's gguf-split
// decides it, and the byte layout of every shard. Pure: no I/O.
//
// Rules (llama.cpp tools/gguf-split/gguf-split.cpp, split_strategy):
//  - shard 0 gets every KV pair of the input, then the writer "sets" split.no (u16 = shard
//    index), split.count (u16 placeholder) and split.tensors.count (i32 = total tensors); a set
//    removes an existing key and appends it, and split.count is set again once the shard count
//    is known, so the KV list ends in split.no, split.tensors.count, split.count (also when the
//    input already carried split.* keys: re-splitting a merged file reproduces the shards);
//  - shards 1..N-1 carry only those three keys;
//  - with --no-tensor-first-split shard 0 holds no tensors and tensors start in shard 1;
//  - tensors are visited in file order; a new shard starts before tensor i when
//      by tensors: i > 0 and i % max_tensors == 0;
//      by size:    running + pad(nbytes_i) > max_bytes; the running total then restarts at
//                  pad(nbytes_i) (metadata is not counted);
//    closing a shard that holds zero tensors is an error (except the deliberately empty first
//    shard of --no-tensor-first-split), so a first tensor larger than the limit is an error
//    while a later oversized tensor gets a shard of its own;
//  - every shard is a complete GGUF v3 file laid out by plan_gguf_file.
// Alignment: the reference lays every shard out at 32 bytes even when general.alignment says
// otherwise, producing files a strict reader rejects. We honour general.alignment: shards are
// padded with it, the size rule pads with it, and when it is not 32 the general.alignment KV is
// copied into shards 1..N-1 too (before the split keys) so every shard parses strictly. For an
// alignment of 32 (declared or default) the result is byte-identical to the reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/format/file_plan.hpp"
#include "gguf/format/header.hpp"
#include "gguf/bytes/layout.hpp"

namespace gguf {

/// How to cut a model into shards (gguf-split's --split-max-tensors / --split-max-size /
/// --no-tensor-first-split). The two modes are mutually exclusive.
struct SplitOptions {
    enum class Mode { Tensors, Size };
    Mode mode = Mode::Tensors;
    /// Tensors mode: at most this many tensors per shard (gguf-split default 128). Must be > 0.
    uint64_t max_tensors = 128;
    /// Size mode: soft limit in bytes on the sum of a shard's padded tensor sizes (metadata not
    /// counted). Must be > 0.
    uint64_t max_bytes = 0;
    /// Shard 0 carries only the metadata, no tensors (gguf-split --no-tensor-first-split).
    bool no_tensor_first_split = false;
};

/// One planned output shard.
struct ShardPlan {
    /// KV pairs in file order, split keys included.
    std::vector<KeyValue> kvs;
    /// The shard's tensors in order; `source` is always 0 (the input file) and
    /// `source_offset` the absolute byte offset of the tensor data in the input.
    std::vector<PlacedTensor> tensors;
    /// The complete shard file: rendered header (padded to the alignment), then each tensor's
    /// bytes from source 0 followed by zero padding. layout.size() is the shard's size in bytes.
    VirtualLayout layout;
    /// Sum of the tensors' unpadded byte sizes (used by the dry-run summary).
    uint64_t tensor_bytes = 0;
    /// Bytes before the data section: the rendered header plus its padding to the alignment
    /// (= layout.size() minus the padded tensor bytes; what gguf_get_meta_size reports).
    uint64_t header_bytes = 0;
};

/// The largest number of shards a split may produce: split.count is a u16.
inline constexpr uint64_t kMaxShards = 65535;

/// Plans the split of the file whose parsed header is `input` (as returned by read_header; its
/// tensor offsets, data_offset and alignment locate the tensor data). Returns the shards in
/// order (at least one). Never touches a file.
///
/// Throws gguf::Error:
///  - Code::BadArgument for max_tensors == 0 or max_bytes == 0 in the chosen mode; when a shard
///    would hold zero tensors ("one of the splits would have 0 tensors", naming the tensor and
///    the limit); when more than kMaxShards shards would be needed; when the input has more
///    tensors than split.tensors.count (an i32) can hold;
///  - Code::BadSplit when the input itself is one shard of a larger set (split.count >= 2):
///    splitting it would produce a set claiming to be the whole model. The reference accepts
///    such input silently; we refuse.
std::vector<ShardPlan> plan_split(const Header& input, const SplitOptions& options);

/// Parses a --split-max-size value: a whole number followed by M (10^6 bytes) or G (10^9 bytes),
/// as gguf-split accepts it ("500M", "2G"). Returns bytes.
/// The reference reads the number with sscanf("%d") and so takes "1.5G" as 1G and "0x10G" as 0G;
/// we reject instead of guessing. Throws gguf::Error(Code::BadArgument) with a one-line message
/// quoting the value for: an empty value, a missing or unknown unit (anything but M or G), a
/// fraction ("1.5G"), a sign, non-digits, zero, or a value above 2^63 bytes. `option` names the
/// option in messages (the same sizes are read for --cache-max-size).
uint64_t parse_split_max_size(const std::string& value, const std::string& option = "--split-max-size");

/// Parses a --split-max-tensors value: a whole number 1..2^31-1 (the reference stores it in an
/// int). Throws gguf::Error(Code::BadArgument) quoting the value for anything else ("abc", "0",
/// "-3", "1.5", "" — the reference divides by zero on 0 and on non-numbers).
uint64_t parse_split_max_tensors(const std::string& value);

/// The plan summary that gguf-split prints (and that `--dry-run` prints on stdout):
///   "n_split: N\n" then per shard "split %05d: n_tensors = T, total_size = SM\n"
/// with the 1-based shard number and S = (rendered header size including the padding to the
/// alignment + sum of unpadded tensor bytes) / 1000 / 1000, integer division (reference
/// split_strategy::print_info).
std::string split_summary(const std::vector<ShardPlan>& shards);

}  // namespace gguf
