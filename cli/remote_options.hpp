// The remote-source options, declared once for every subcommand that takes a SOURCE (mount,
// check, merge, prefetch: each picks its subset with RemoteOption flags): --source-file,
// --cache-dir, --net-timeout, --ca-cert, and for the mount --offline, --cache-max-size,
// --revalidate. And the handling of secrets in SOURCE URLs: kept out of the command line
// (hide_url_secrets), or given in a file.
#pragma once

#include <cstdint>
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

/// A cache size given to `option` (--cache-max-size, cache trim --max-size): "0" is 0 (no
/// bound; trim: everything), else gguf::parse_split_max_size's form (500M, 20G). Throws
/// gguf::Error(BadArgument) naming `option` and the value.
uint64_t parse_cache_size(const std::string& option, const std::string& value);

/// The remote options a command may take (bits of add_remote_options' `which`).
enum RemoteOption : unsigned {
    kSourceFileOption = 1u << 0,    ///< --source-file FILE: SOURCE from FILE (read_source_file)
    kCacheDirOption = 1u << 1,      ///< --cache-dir DIR: the block cache
    kNetTimeoutOption = 1u << 2,    ///< --net-timeout SECONDS (default 30)
    kCaCertOption = 1u << 3,        ///< --ca-cert FILE: an extra CA certificate (PEM)
    kOfflineOption = 1u << 4,       ///< --offline: no network, the cache only
    kCacheMaxSizeOption = 1u << 5,  ///< --cache-max-size N[M|G]: bound of the cache
    kRevalidateOption = 1u << 6,    ///< --revalidate SECONDS (default 60): a mount asks again
    /// --no-sign-request, --endpoint-url URL, --region R, --profile P: an s3:// SOURCE
    kS3Options = 1u << 7,
    /// --plain-http: an oci:// or ollama:// registry without TLS
    kOciOptions = 1u << 8,
    /// What check, merge and prefetch take.
    kOfflineCommandOptions =
        kSourceFileOption | kCacheDirOption | kNetTimeoutOption | kCaCertOption | kS3Options | kOciOptions,
    /// What a mount takes.
    kMountOptions = kOfflineCommandOptions | kOfflineOption | kCacheMaxSizeOption | kRevalidateOption,
};

/// Adds the remote options named by the RemoteOption bits of `which` to `options`; each help
/// text but those of --source-file and of the S3 options ("s3:// SOURCE: ") starts with `prefix`
/// (e.g. "URL: " where the command also takes
/// local files).
void add_remote_options(cxxopts::Options& options, const std::string& prefix,
                        unsigned which = kOfflineCommandOptions);

#ifdef GGUF_MOUNT_WITH_REMOTE
/// Copies the options add_remote_options added from `parsed` into `ro` (a timeout below 1 s is
/// taken as 1 s; --cache-max-size as parse_cache_size reads it, and without it the default bound
/// of the cache directory, remote::BlockCache::default_max_bytes). --revalidate is not
/// a RemoteOptions field: the mount reads it. Throws what cxxopts throws for a malformed value,
/// gguf::Error(BadArgument) for a malformed --cache-max-size.
void read_remote_options(const cxxopts::ParseResult& parsed, remote::RemoteOptions* ro);

/// The usage error for an option of one kind of SOURCE given with another, else "": the S3
/// options (--no-sign-request, --endpoint-url, --region, --profile) with a SOURCE that is not
/// s3://, --plain-http with one that is not oci:// or ollama:// (each would be ignored, and a
/// user who gives one expects it to act). `source`: SOURCE as given.
std::string misplaced_source_option(const cxxopts::ParseResult& parsed, const std::string& source);
#endif

}  // namespace gguf_mount::cli
