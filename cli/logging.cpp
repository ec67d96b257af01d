#include "cli/logging.hpp"

#include <stdexcept>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>

#include "common/text.hpp"

namespace gguf_mount::cli {

namespace {

/// The pattern flag %* : the message escaped with gguf::escape, so that no name logged by any
/// call site can end the log line, forge another one or send escape sequences to a terminal.
class EscapedMessage : public spdlog::custom_flag_formatter {
public:
    void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
        const std::string s = gguf::escape(std::string_view(msg.payload.data(), msg.payload.size()));
        dest.append(s.data(), s.data() + s.size());
    }
    std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<EscapedMessage>(); }
};

/// A formatter for `pattern`, in which %* is the escaped message.
std::unique_ptr<spdlog::formatter> escaping_formatter(const std::string& pattern) {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<EscapedMessage>('*').set_pattern(pattern);
    return f;
}

}  // namespace

void setup_logging(const std::string& level, bool to_syslog) {
    auto lvl = spdlog::level::from_str(level);
    if (lvl == spdlog::level::off && level != "off") {
        throw std::invalid_argument("unknown log level '" + level + "' (trace, debug, info, warn, error, off)");
    }
    std::shared_ptr<spdlog::logger> logger;
    if (to_syslog) {
        logger = spdlog::syslog_logger_mt("gguf-mount", "gguf-mount", LOG_PID, LOG_DAEMON);
        logger->set_formatter(escaping_formatter("%*"));
    } else {
        logger = spdlog::stderr_color_mt("gguf-mount");
        logger->set_formatter(escaping_formatter("gguf-mount: %^%l%$: %*"));
    }
    logger->set_level(lvl);
    logger->flush_on(spdlog::level::warn);
    spdlog::set_default_logger(logger);
}

}  // namespace gguf_mount::cli
