// `gguf-mount --completion-words COMMAND` (hidden): the option words COMMAND declares, for the
// bash completion (packaging/completion/gguf-mount.bash), so that it offers what the binary
// accepts, taken from the cxxopts declarations rather than from --help prose.
#pragma once

#include <string>
#include <vector>

#include <cxxopts.hpp>

namespace gguf_mount::cli {

/// Called by main for `--completion-words`: the next subcommand run prints its words instead.
void request_completion_words() noexcept;

/// True once request_completion_words() was called.
bool completion_words_requested() noexcept;

/// Prints every option word `options` declares, one per line ("--cache-dir", "-o"), skipping
/// the options named in `positional` (those given to parse_positional: no words of their own).
/// Returns 0, the exit status.
int print_completion_words(const cxxopts::Options& options, const std::vector<std::string>& positional);

}  // namespace gguf_mount::cli
