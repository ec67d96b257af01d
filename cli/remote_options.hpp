// The remote-source options shared by the offline subcommands that take a URL or hf:// SOURCE
// (check, merge, prefetch): --cache-dir, --net-timeout, --ca-cert. The mount has its own set
// (cmd_mount.cpp: also --offline, --cache-max-size).
#pragma once

#include <string>

#include <cxxopts.hpp>

#ifdef GGUF_MOUNT_WITH_REMOTE
#include "remote/source.hpp"
#endif

namespace gguf_mount::cli {

/// Adds --cache-dir DIR, --net-timeout SECONDS (default 30) and --ca-cert FILE to `options`;
/// each help text starts with `prefix` (e.g. "URL: " where the command also takes local files).
void add_remote_options(cxxopts::Options& options, const std::string& prefix);

#ifdef GGUF_MOUNT_WITH_REMOTE
/// Copies the options add_remote_options added from `parsed` into `ro` (a timeout below 1 s is
/// taken as 1 s). Throws what cxxopts throws for a malformed value.
void read_remote_options(const cxxopts::ParseResult& parsed, remote::RemoteOptions* ro);
#endif

}  // namespace gguf_mount::cli
