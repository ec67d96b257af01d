// Logging setup shared by every subcommand (spdlog).
#pragma once

#include <string>

namespace gguf_mount::cli {

/// Installs the default spdlog logger: colored stderr in the foreground, or syslog (ident
/// "gguf-mount", facility daemon) when `to_syslog` is true (a daemonized mount).
/// `level` is an spdlog level name ("trace", "debug", "info", "warn", "error", "off").
/// Every message is escaped with gguf::escape (common/text.hpp) as it is written: call sites pass
/// names and gguf::Error::what() raw.
/// Throws std::invalid_argument for an unknown level name.
void setup_logging(const std::string& level, bool to_syslog);

}  // namespace gguf_mount::cli
