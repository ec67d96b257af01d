// Split sets as written by llama.cpp's gguf-split: discovery, validation and the merged plan.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <functional>

#include "gguf/format/header.hpp"
#include "gguf/bytes/layout.hpp"
#include "gguf/bytes/logical_file.hpp"

namespace gguf {

/// The parts of a shard file name "PREFIX-%05d-of-%05d.gguf" (llama.cpp llama_split_path).
struct ShardName {
    std::string prefix;  // may contain a directory; never empty
    uint32_t index = 0;  // 1-based shard number
    uint32_t count = 0;  // number of shards
};

/// Parses a shard path. The name must END with "-NNNNN-of-MMMMM.gguf" (at least 5 digits each,
/// as %05d prints), 1 <= index <= count, with a non-empty prefix. Returns nullopt otherwise.
/// Example: "dir/qwen-00002-of-00003.gguf" -> {"dir/qwen", 2, 3}.
std::optional<ShardName> parse_shard_name(const std::string& path);

/// Formats "PREFIX-%05d-of-%05d.gguf" for a 1-based `index`.
std::string shard_path(const std::string& prefix, uint32_t index, uint32_t count);

/// One validated shard of a set.
struct Shard {
    std::string path;   // logical path "dir/m-00002-of-00003.gguf" (== file.path)
    LogicalFile file;   // its physical file(s), each with the fstat taken when the header was read
    Header header;
};

/// Finds the logical file behind a shard path: returns nullopt when there is no such shard
/// (it is reported as missing). The default (SplitSet::open(path)) is the regular file at that
/// path; the catalog passes one that also knows byte-split shards ("m-00001-of-00002.gguf"
/// made of "m-00001-of-00002.gguf.part1of2" + ".part2of2").
using ShardResolver = std::function<std::optional<LogicalFile>(const std::string& shard_path)>;

/// A complete, validated split set.
///
/// Rules checked (llama.cpp tools/gguf-split/gguf-split.cpp, ggml src/gguf.cpp, and what the
/// reference misses):
///  - the first shard's name matches PREFIX-00001-of-NNNNN.gguf with NNNNN == its split.count;
///  - split.count is present, a u16 and >= 1 in every shard and equal to N (the reference reads
///    it with gguf_get_val_u16, which asserts the type); split.no equals the shard's 0-based
///    position; split.tensors.count is equal in every shard and equal to the real number of
///    tensors over all shards. gguf-split writes those two as u16 and i32, but its merge never
///    reads them, so sets from other tools that use another integer type (split.no as i32,
///    split.tensors.count as u32, ...) are accepted, and plan_merge copies them unchanged;
///  - every shard parses as a strict GGUF header with all tensor data inside the file;
///  - tensor names are unique across shards.
class SplitSet {
public:
    /// Opens and validates the set whose first shard is `first_shard_path`.
    /// Throws gguf::Error whose one-line message names the offending file and key.
    static SplitSet open(const std::string& first_shard_path);

    /// Same, with the shard files found by `resolve` (see ShardResolver); shard paths are
    /// built as shard_path(prefix, i, N) from `first_shard_path`.
    static SplitSet open(const std::string& first_shard_path, const ShardResolver& resolve);

    /// The set held by one file made by joining its shards with cat
    /// (`cat x-0000{1,2,3}-of-00003.gguf > x.gguf`): shard 1's header at byte 0, each next
    /// shard right after the previous one's padded tensor data (gguf-split writes the header,
    /// padding to the alignment, then each tensor padded to the alignment), and nothing after
    /// the last. Each Shard's file is then the byte range of `file` it occupies (FilePart
    /// offset/size), so plan_merge() serves the merged model, byte-identical to
    /// `gguf-split --merge` of the original shards. Same rules as open(), split.no checked
    /// against the shard's position in the file. prefix() is the path without ".gguf".
    /// Throws gguf::Error naming the file, the shard and its byte offset, and saying what to
    /// run instead, when the bytes are not such a set: split.count missing or not above 1
    /// (Code::BadArgument), a shard out of order (BadSplit), fewer shards than split.count
    /// (Truncated), bytes after the last shard or between shards (BadSplit).
    /// `file` must be one whole file (one part, offset 0).
    static SplitSet open_concatenated(const LogicalFile& file);

    /// What `gguf-mount merge FILE` reads: open(path) for a shard name, open_concatenated()
    /// for any other name whose GGUF header says split.count > 1 (a cat-joined set), else
    /// open(path), which throws its "not a first shard" error. Throws like those.
    static SplitSet open_first_or_joined(const std::string& path);

    /// Like open() but accepts any shard of the set (the first is derived from its name).
    static SplitSet open_any(const std::string& shard_path);

    /// "dir/qwen" for dir/qwen-00001-of-00003.gguf.
    const std::string& prefix() const { return prefix_; }
    /// The merged file's name: base name of the prefix + ".gguf" ("qwen.gguf").
    std::string merged_name() const;
    const std::vector<Shard>& shards() const { return shards_; }
    uint64_t tensor_count() const { return tensor_count_; }

private:
    std::string prefix_;
    std::vector<Shard> shards_;
    uint64_t tensor_count_ = 0;
};

/// True when `header` has a split.count above 1 (an integer of any type): the file is one
/// shard of a set (or a cat-joined set) and must never be served or used as a model as is.
bool has_split_count_above_one(const Header& header);

}  // namespace gguf
