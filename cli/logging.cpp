#include "cli/logging.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>

#include "common/text.hpp"

namespace gguf_mount::cli {

namespace {

constexpr const char* kLoggerName = "gguf-mount";
constexpr const char* kTimePattern = "%Y-%m-%d %H:%M:%S.%e ";
constexpr const char* kStderrPattern = "gguf-mount: %^%l%$: %*";

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

/// The file sink of `path`, opened (append) at its first use and kept: the logger is rebuilt
/// before the daemonizing fork, the file stays the same open file.
std::shared_ptr<spdlog::sinks::sink> file_sink(const std::string& path) {
    static std::string open_path;
    static std::shared_ptr<spdlog::sinks::sink> sink;
    if (sink && open_path == path) return sink;
    // Opened here first for a one-line reason (spdlog's own message is longer); 0640: the log
    // names files and URLs (never a secret), readable by the owner's group.
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
    if (fd < 0) throw std::runtime_error("--log-file " + path + ": cannot open for appending: " + std::strerror(errno));
    ::close(fd);
    sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
    sink->set_formatter(escaping_formatter(std::string(kTimePattern) + "[%P] %l: %*"));
    open_path = path;
    return sink;
}

/// True when a socket of `type` connects to the AF_UNIX address `path`; else false, errno set.
bool connects(const std::string& path, int type) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) {
        errno = ENAMETOOLONG;
        return false;
    }
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    const int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
    const int e = errno;
    ::close(fd);
    errno = e;
    return ok;
}

}  // namespace

void setup_logging(const std::string& level, const LogTargets& targets) {
    auto lvl = spdlog::level::from_str(level);
    if (lvl == spdlog::level::off && level != "off") {
        throw std::invalid_argument("unknown log level '" + level + "' (trace, debug, info, warn, error, off)");
    }
    std::vector<spdlog::sink_ptr> sinks;
    if (targets.to_syslog) {
        // Without a log file, syslog; with one, the file alone (a daemon's stderr is /dev/null).
        if (targets.file.empty()) {
            auto s = std::make_shared<spdlog::sinks::syslog_sink_mt>(kLoggerName, LOG_PID, LOG_DAEMON, true);
            s->set_formatter(escaping_formatter("%*"));
            sinks.push_back(s);
        }
    } else {
        auto s = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
        s->set_formatter(escaping_formatter((targets.timestamps ? kTimePattern : "") + std::string(kStderrPattern)));
        sinks.push_back(s);
    }
    if (!targets.file.empty()) sinks.push_back(file_sink(targets.file));
    spdlog::drop(kLoggerName);
    auto logger = std::make_shared<spdlog::logger>(kLoggerName, sinks.begin(), sinks.end());
    logger->set_level(lvl);
    logger->flush_on(targets.file.empty() ? spdlog::level::warn : spdlog::level::trace);
    spdlog::set_default_logger(logger);
}

void setup_logging(const std::string& level, bool to_syslog) {
    LogTargets t;
    t.to_syslog = to_syslog;
    setup_logging(level, t);
}

std::string syslog_unavailable() {
    const char* env = std::getenv("GGUF_MOUNT_SYSLOG_SOCKET");
    const std::string path = env && *env ? env : "/dev/log";
    if (connects(path, SOCK_DGRAM)) return "";
    const int e = errno;
    if (e == EPROTOTYPE && connects(path, SOCK_STREAM)) return "";
    return path + ": " + std::strerror(e == EPROTOTYPE ? errno : e);
}

}  // namespace gguf_mount::cli
