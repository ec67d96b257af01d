// The split options shared by `split` (the shards written) and the mount and `check` (the
// shards shown, gguf/model/shard_view.hpp): --split-max-tensors, --split-max-size,
// --no-tensor-first-split, parsed with the same rules and messages.
#pragma once

#include <optional>

#include <cxxopts.hpp>

#include "gguf/model/split_plan.hpp"

namespace gguf_mount::cli {

/// Adds the three options to `options` for showing SOURCE as shards (mount, check).
void add_split_view_options(cxxopts::Options& options);

/// The split options given, or nullopt when neither --split-max-tensors nor --split-max-size
/// was given. Throws gguf::Error(Code::BadArgument) with split's one-line message for a bad
/// value (gguf::parse_split_max_tensors / parse_split_max_size), for both modes at once, and,
/// with `need_mode`, for --no-tensor-first-split without a mode.
std::optional<gguf::SplitOptions> read_split_options(const cxxopts::ParseResult& parsed, bool need_mode);

}  // namespace gguf_mount::cli
