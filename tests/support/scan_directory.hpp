// scan_directory: the split sets of one flat directory, for tests and the fuzzer (the mount and
// `check` use gguf::build_catalog, which knows every rule of a model directory).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gguf/model/split_set.hpp"

namespace gguf {

/// The outcome of looking at one candidate set in a directory.
struct SetScan {
    std::string name;                  // merged file name, e.g. "qwen.gguf"
    std::string first_shard;           // path of the (expected) first shard
    std::optional<SplitSet> set;       // present when valid
    std::string error;                 // one-line reason when not valid
};

/// Finds every split set in directory `dir` (not recursive): each distinct prefix among the
/// names matching the shard pattern is one candidate, validated with SplitSet::open. Candidates
/// whose first shard is absent are reported with an error naming it. Sorted by name.
/// Plain shard files only: the mount and `check` use gguf::build_catalog (gguf/model/catalog.hpp),
/// which also handles byte-split shards, nested folders, links and name clashes.
/// Throws gguf::Error(Io) when `dir` cannot be listed.
std::vector<SetScan> scan_directory(const std::string& dir);

}  // namespace gguf
