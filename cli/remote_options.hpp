// The remote-source options shared by the offline subcommands that take a URL or hf:// SOURCE
// (check, merge, prefetch): --source-file, --cache-dir, --net-timeout, --ca-cert. The mount has
// its own set (cmd_mount.cpp: also --offline, --cache-max-size). And the handling of secrets in
// SOURCE URLs: kept out of the command line (hide_url_secrets), or given in a file.
#pragma once

#include <string>
#include <vector>

#include <cxxopts.hpp>

#ifdef GGUF_MOUNT_WITH_REMOTE
#include "remote/source.hpp"
#endif

namespace gguf_mount::cli {

/// `arg` with the secrets of any http(s):// URL in it removed: the userinfo ("user:pass@") and
/// everything from the first '?' or '#' (a signed URL's query: X-Amz-Signature=..., token=...).
/// Text before the URL ("--source=") is kept; an argument without such a URL is returned as is.
/// Pure.
std::string without_url_secrets(const std::string& arg);

/// Keeps URL secrets out of the process's command line, which every local user can read
/// (/proc/PID/cmdline, ps) for the life of the process: overwrites each of the `argc` strings of
/// `argv` in place with without_url_secrets(), padded with NUL bytes (the argument area keeps
/// its length). Call it once the arguments were copied (parsed); the pointers of `argv` are not
/// changed. Never throws.
void hide_url_secrets(int argc, char** argv) noexcept;

/// The SOURCE given with --source-file FILE: the file's first line, blanks around it removed
/// (for a URL with credentials or a signed query, which must not appear on a command line; the
/// file should be readable by its owner only, e.g. a systemd credential). Throws gguf::Error
/// (Code::Io naming FILE) when it cannot be read, Code::BadArgument when it holds no SOURCE or
/// is larger than 64 KiB.
std::string read_source_file(const std::string& path);

/// The positional arguments `names` of `parsed` that were given, in order, preceded by the
/// SOURCE of --source-file when that option was given (so a command taking "SOURCE OUT" then
/// takes "--source-file FILE OUT"). Throws as read_source_file.
std::vector<std::string> source_and_positionals(const cxxopts::ParseResult& parsed,
                                                const std::vector<std::string>& names);

/// Adds --source-file FILE (read_source_file: SOURCE taken from FILE instead of the command
/// line), --cache-dir DIR, --net-timeout SECONDS (default 30) and --ca-cert FILE to `options`;
/// each help text starts with `prefix` (e.g. "URL: " where the command also takes local files).
void add_remote_options(cxxopts::Options& options, const std::string& prefix);

#ifdef GGUF_MOUNT_WITH_REMOTE
/// Copies the options add_remote_options added from `parsed` into `ro` (a timeout below 1 s is
/// taken as 1 s). Throws what cxxopts throws for a malformed value.
void read_remote_options(const cxxopts::ParseResult& parsed, remote::RemoteOptions* ro);
#endif

}  // namespace gguf_mount::cli
