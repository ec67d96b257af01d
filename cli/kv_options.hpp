// The KV override options shared by the commands that serve or write a model with changed
// metadata (merge; the mount next): --override-kv, --remove-kv, --chat-template-file.
#pragma once

#include <cxxopts.hpp>

#include "gguf/model/kv_override.hpp"

namespace gguf_mount::cli {

/// Adds --override-kv KEY=TYPE:VALUE, --remove-kv KEY and --chat-template-file FILE to
/// `options`, each repeatable (every occurrence counts, in order).
void add_kv_override_options(cxxopts::Options& options);

/// The edits given with those options, in command-line order (the order new keys are
/// appended in). Throws gguf::Error(Code::BadArgument) "--override-kv: ..." for a malformed
/// one, Code::Io naming a FILE that cannot be read (see gguf::parse_kv_override).
gguf::KvOverrides read_kv_override_options(const cxxopts::ParseResult& parsed);

/// Help text on the override options, for a command's help tail.
extern const char* const kKvOverrideHelp;

}  // namespace gguf_mount::cli
