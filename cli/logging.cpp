#include "cli/logging.hpp"

#include <stdexcept>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>

namespace gguf_mount::cli {

void setup_logging(const std::string& level, bool to_syslog) {
    auto lvl = spdlog::level::from_str(level);
    if (lvl == spdlog::level::off && level != "off") {
        throw std::invalid_argument("unknown log level '" + level + "' (trace, debug, info, warn, error, off)");
    }
    std::shared_ptr<spdlog::logger> logger;
    if (to_syslog) {
        logger = spdlog::syslog_logger_mt("gguf-mount", "gguf-mount", LOG_PID, LOG_DAEMON);
        logger->set_pattern("%v");
    } else {
        logger = spdlog::stderr_color_mt("gguf-mount");
        logger->set_pattern("gguf-mount: %^%l%$: %v");
    }
    logger->set_level(lvl);
    logger->flush_on(spdlog::level::warn);
    spdlog::set_default_logger(logger);
}

}  // namespace gguf_mount::cli
