#include "remote/s3/credential_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>
#include <openssl/crypto.h>

#include "gguf/error.hpp"
#include "remote/s3/aws_files.hpp"

namespace gguf_mount::remote::s3 {
namespace {

using gguf::Code;
using gguf::Error;

constexpr size_t kMaxStdout = 64u << 10;
constexpr size_t kMaxStderr = 4u << 10;

/// Resolves argv0 like execvp would, before fork (execvp itself may allocate in the child).
std::string resolve_program(const std::string& name) {
    if (name.find('/') != std::string::npos) return name;
    const char* path = std::getenv("PATH");
    std::string dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
    size_t start = 0;
    while (start <= dirs.size()) {
        size_t end = dirs.find(':', start);
        std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
        std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        if (end == std::string::npos) break;
        start = end + 1;
    }
    return "";
}

struct Fd {
    int fd = -1;
    ~Fd() { reset(); }
    void reset() {
        if (fd >= 0) ::close(fd);
        fd = -1;
    }
};

std::string first_line(const std::string& text) {
    std::string line = text.substr(0, text.find('\n'));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() > 200) line = line.substr(0, 200) + "...";
    return line;
}

}  // namespace

std::vector<std::string> split_command(const std::string& command) {
    std::vector<std::string> words;
    std::string word;
    bool in_word = false;
    for (size_t i = 0; i < command.size(); ++i) {
        char c = command[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            if (in_word) words.push_back(std::move(word));
            word.clear();
            in_word = false;
        } else if (c == '\'') {
            size_t close = command.find('\'', i + 1);
            if (close == std::string::npos) throw Error(Code::BadValue, "credential_process: an unclosed ' quote");
            word += command.substr(i + 1, close - i - 1);
            i = close;
            in_word = true;
        } else if (c == '"') {
            size_t j = i + 1;
            for (; j < command.size() && command[j] != '"'; ++j) {
                if (command[j] == '\\' && j + 1 < command.size() && (command[j + 1] == '"' || command[j + 1] == '\\'))
                    ++j;
                word += command[j];
            }
            if (j >= command.size()) throw Error(Code::BadValue, "credential_process: an unclosed \" quote");
            i = j;
            in_word = true;
        } else if (c == '\\') {
            if (i + 1 >= command.size()) throw Error(Code::BadValue, "credential_process: a trailing backslash");
            word += command[++i];
            in_word = true;
        } else {
            word += c;
            in_word = true;
        }
    }
    if (in_word) words.push_back(std::move(word));
    return words;
}

std::optional<std::time_t> parse_iso8601(const std::string& text) {
    std::tm tm{};
    int consumed = 0;
    if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                    &tm.tm_min, &tm.tm_sec, &consumed) != 6 ||
        consumed != 19)
        return std::nullopt;
    if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
        tm.tm_sec > 60)
        return std::nullopt;
    size_t i = 19;
    if (i < text.size() && text[i] == '.') {
        ++i;
        size_t digits = 0;
        while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++digits;
        if (digits == 0) return std::nullopt;
    }
    long offset = 0;
    std::string zone = text.substr(i);
    if (zone == "Z" || zone == "z") {
        offset = 0;
    } else if (zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':' &&
               std::isdigit(static_cast<unsigned char>(zone[1])) && std::isdigit(static_cast<unsigned char>(zone[2])) &&
               std::isdigit(static_cast<unsigned char>(zone[4])) && std::isdigit(static_cast<unsigned char>(zone[5]))) {
        offset = (std::stol(zone.substr(1, 2)) * 60 + std::stol(zone.substr(4, 2))) * 60;
        if (zone[0] == '-') offset = -offset;
    } else {
        return std::nullopt;
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return timegm(&tm) - offset;
}

Credentials parse_process_output(const std::string& output, const std::string& what) {
    nlohmann::json j = nlohmann::json::parse(output, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) throw Error(Code::BadValue, what + ": the output is not a JSON object");
    auto version = j.find("Version");
    if (version == j.end() || !version->is_number_integer() || version->get<long long>() != 1)
        throw Error(Code::BadValue, what + ": \"Version\" is not 1");
    auto text = [&](const char* name) -> std::string {
        auto it = j.find(name);
        if (it == j.end() || it->is_null()) return "";
        if (!it->is_string()) throw Error(Code::BadValue, what + ": \"" + name + "\" is not a string");
        return it->get<std::string>();
    };
    Credentials c;
    c.access_key_id = text("AccessKeyId");
    c.secret_access_key = text("SecretAccessKey");
    c.session_token = text("SessionToken");
    if (c.access_key_id.empty()) throw Error(Code::BadValue, what + ": no \"AccessKeyId\"");
    if (c.secret_access_key.empty()) throw Error(Code::BadValue, what + ": no \"SecretAccessKey\"");
    std::string expiration = text("Expiration");
    if (!expiration.empty()) {
        std::optional<std::time_t> t = parse_iso8601(expiration);
        if (!t) throw Error(Code::BadValue, what + ": \"Expiration\" \"" + first_line(expiration) + "\" is not an ISO 8601 time");
        c.expiration = std::chrono::system_clock::from_time_t(*t);
    }
    return c;
}

Credentials run_credential_process(const std::string& command, const std::string& what,
                                   std::chrono::milliseconds timeout) {
    std::vector<std::string> words = split_command(command);
    if (words.empty()) throw Error(Code::BadValue, what + ": the command is empty");
    std::string program = resolve_program(words[0]);
    if (program.empty()) throw Error(Code::Io, what + ": " + words[0] + ": command not found on $PATH");
    if (std::string why = untrusted_aws_path(program, "the credential_process program"); !why.empty())
        throw Error(Code::BadArgument, what + ": " + why, EPERM);
    std::vector<char*> argv;
    argv.push_back(program.data());
    for (size_t i = 1; i < words.size(); ++i) argv.push_back(words[i].data());
    argv.push_back(nullptr);

    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw Error(Code::Io, what + ": pipe: " + std::strerror(errno), errno);
    Fd out_r{out_pipe[0]}, out_w{out_pipe[1]};
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) throw Error(Code::Io, what + ": pipe: " + std::strerror(errno), errno);
    Fd err_r{err_pipe[0]}, err_w{err_pipe[1]};
    Fd null_in{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
    if (null_in.fd < 0) throw Error(Code::Io, what + ": /dev/null: " + std::strerror(errno), errno);

    pid_t pid = ::fork();
    if (pid < 0) throw Error(Code::Io, what + ": fork: " + std::strerror(errno), errno);
    if (pid == 0) {
        // Only async-signal-safe calls from here to exec.
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        if (::dup2(null_in.fd, 0) < 0 || ::dup2(out_w.fd, 1) < 0 || ::dup2(err_w.fd, 2) < 0) _exit(127);
        ::close_range(3, ~0U, 0);
        ::execv(argv[0], argv.data());
        _exit(127);
    }
    out_w.reset();
    err_w.reset();
    null_in.reset();

    std::string out, err;
    bool too_much = false, timed_out = false;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (out_r.fd >= 0 || err_r.fd >= 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            timed_out = true;
            break;
        }
        pollfd fds[2] = {{out_r.fd, POLLIN, 0}, {err_r.fd, POLLIN, 0}};
        int r = ::poll(fds, 2, static_cast<int>(left.count()));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        for (int k = 0; k < 2; ++k) {
            if (fds[k].fd < 0 || fds[k].revents == 0) continue;
            char buf[4096];
            ssize_t n = ::read(fds[k].fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                (k == 0 ? out_r : err_r).reset();
                continue;
            }
            std::string& dest = k == 0 ? out : err;
            size_t cap = k == 0 ? kMaxStdout : kMaxStderr;
            if (dest.size() + static_cast<size_t>(n) > cap) {
                if (k == 0) too_much = true;
                dest.append(buf, cap - dest.size());
            } else {
                dest.append(buf, static_cast<size_t>(n));
            }
        }
        if (too_much) break;
    }
    if (timed_out || too_much) ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    auto wipe = [&] { OPENSSL_cleanse(out.data(), out.size()); };
    if (timed_out) {
        wipe();
        throw Error(Code::Io, what + ": " + words[0] + " did not finish within " +
                                  std::to_string(timeout.count() / 1000) + " s (killed)");
    }
    if (too_much) {
        wipe();
        throw Error(Code::Io, what + ": " + words[0] + " wrote more than 64 KiB to its standard output (killed)");
    }
    if (WIFSIGNALED(status)) {
        wipe();
        throw Error(Code::Io, what + ": " + words[0] + " was killed by signal " + std::to_string(WTERMSIG(status)));
    }
    if (WEXITSTATUS(status) != 0) {
        wipe();
        std::string line = first_line(err);
        throw Error(Code::Io, what + ": " + words[0] + " exited with status " + std::to_string(WEXITSTATUS(status)) +
                                  (WEXITSTATUS(status) == 127 && line.empty() ? " (cannot be run)" : "") +
                                  (line.empty() ? "" : ": " + line));
    }
    try {
        Credentials c = parse_process_output(out, what);
        wipe();
        return c;
    } catch (...) {
        wipe();
        throw;
    }
}

}  // namespace gguf_mount::remote::s3
