// Logging setup shared by every subcommand (spdlog): stderr, syslog, a log file.
#pragma once

#include <string>

namespace gguf_mount::cli {

/// Where the default logger writes (setup_logging).
struct LogTargets {
    bool to_syslog = false;   ///< syslog (ident "gguf-mount", facility daemon) instead of stderr
    bool timestamps = false;  ///< stderr lines start with the local time, "2026-12-01 11:40:00.123 "
    /// Also append every message to this file, one line each with the local time ("" none).
    /// Opened once per path for the life of the process and written through that descriptor
    /// (a daemon keeps writing to it after the fork and the chdir("/"); give an absolute path).
    /// Refused unless it is a regular file of the daemon's euid with one link, not a symbolic
    /// link (O_NOFOLLOW), in a folder its group and others may not write (or a sticky one).
    std::string file;
};

/// Installs the default spdlog logger at `level` (an spdlog level name: "trace", "debug",
/// "info", "warn", "error", "off"): colored stderr ("gguf-mount: LEVEL: message"), or syslog,
/// plus the log file of `targets`. Every message is escaped with gguf::escape
/// (common/text.hpp) as it is written: call sites pass names and gguf::Error::what() raw.
/// Throws std::invalid_argument for an unknown level name, std::runtime_error naming the file
/// and the reason when the log file cannot be opened for appending or is refused (LogTargets::file).
void setup_logging(const std::string& level, const LogTargets& targets);

/// setup_logging(level, {to_syslog}): stderr in the foreground, syslog for a daemonized mount.
void setup_logging(const std::string& level, bool to_syslog);

/// "" when a syslog daemon listens on the syslog socket, else the one-line reason naming the
/// socket (e.g. "/dev/log: No such file or directory": containers and microVMs often have
/// none, and syslog(3) then drops every message without a word). The socket is /dev/log
/// (_PATH_LOG, as glibc's syslog(3) uses), or $GGUF_MOUNT_SYSLOG_SOCKET when set (tests point
/// it at a missing path). Connects a datagram socket, then a stream socket, as syslog(3) does;
/// sends nothing.
std::string syslog_unavailable();

}  // namespace gguf_mount::cli
