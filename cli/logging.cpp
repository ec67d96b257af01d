#include "cli/logging.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
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

/// A sink appending each formatted line to the descriptor `fd` with one write(2) (O_APPEND):
/// the log file stays the file that was checked when it was opened, whatever is later put at
/// its path (spdlog's basic_file_sink would open the path again).
class DescriptorSink final : public spdlog::sinks::base_sink<std::mutex> {
public:
    explicit DescriptorSink(int fd) : fd_(fd) {}

protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        spdlog::memory_buf_t line;
        formatter_->format(msg, line);
        const char* p = line.data();
        size_t left = line.size();
        while (left > 0) {
            const ssize_t n = ::write(fd_, p, left);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return;  // a full disk loses log lines, never the mount
            p += n;
            left -= static_cast<size_t>(n);
        }
    }
    void flush_() override {}

private:
    int fd_;  // kept open for the life of the process
};

std::string mode_text(mode_t mode) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
    return buf;
}

/// Opens the log file `path` (absolute) for appending, creating it 0640 (the log names files
/// and URLs, never a secret: readable by the owner's group), or throws std::runtime_error with
/// one line naming it: its folder writable by its group or others without the sticky bit
/// (another user could put a link or their own file there), a symbolic link (O_NOFOLLOW: a root
/// daemon would append to whatever it points to, issue 30), not a regular file (O_NONBLOCK:
/// a FIFO never blocks the start), owned by another uid than the daemon's euid, or with more
/// than one hard link.
int open_log_file(const std::string& path) {
    const size_t slash = path.rfind('/');
    const std::string folder = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    const std::string what = "--log-file " + path + ": ";
    const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) throw std::runtime_error(what + "cannot open its folder: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(dir, &st) != 0) {
        const int e = errno;
        ::close(dir);
        throw std::runtime_error(what + "cannot open its folder: " + std::strerror(e));
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
        ::close(dir);
        throw std::runtime_error(what + "its folder " + folder +
                                 " is writable by its group or others without the sticky bit (mode " +
                                 mode_text(st.st_mode) +
                                 "): refused (another user could put a link there); give a folder only its owner "
                                 "may write");
    }
    const int fd = ::openat(dir, name.c_str(),
                            O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK, 0640);
    const int e = errno;
    struct stat lst {};
    const bool link = fd < 0 && e == ELOOP && ::fstatat(dir, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
                      S_ISLNK(lst.st_mode);
    ::close(dir);
    if (link) {
        throw std::runtime_error(what + "is a symbolic link: refused (the daemon would append to whatever it points "
                                        "to); give the file itself");
    }
    if (fd < 0) throw std::runtime_error(what + "cannot open for appending: " + std::strerror(e));
    std::string why;
    if (::fstat(fd, &st) != 0) {
        why = std::strerror(errno);
    } else if (!S_ISREG(st.st_mode)) {
        why = "is not a regular file: refused";
    } else if (st.st_uid != ::geteuid()) {
        why = "is owned by uid " + std::to_string(st.st_uid) + ", not by this daemon's uid " +
              std::to_string(::geteuid()) + ": refused (its owner chose what it is); remove it or give another file";
    } else if (st.st_nlink != 1) {
        why = "has " + std::to_string(st.st_nlink) + " hard links: refused (another name of it may be any file); "
              "remove it or give another file";
    }
    if (!why.empty()) {
        ::close(fd);
        throw std::runtime_error(what + why);
    }
    return fd;
}

/// The file sink of `path`, opened (append) at its first use and kept: the logger is rebuilt
/// before the daemonizing fork, the file stays the same open file.
std::shared_ptr<spdlog::sinks::sink> file_sink(const std::string& path) {
    static std::string open_path;
    static std::shared_ptr<spdlog::sinks::sink> sink;
    if (sink && open_path == path) return sink;
    sink = std::make_shared<DescriptorSink>(open_log_file(path));
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
