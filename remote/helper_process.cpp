#include "remote/helper_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <openssl/crypto.h>

#include "gguf/error.hpp"

namespace gguf_mount::remote {
namespace {

using gguf::Code;
using gguf::Error;

constexpr size_t kHelperMaxStdout = 64u << 10;
constexpr size_t kHelperMaxStderr = 4u << 10;

/// Why `st` (of `path`, `what` it is) fails the ownership rule, "" when it passes.
std::string stat_ownership_problem(const std::string& path, const std::string& what, const struct stat& st) {
    const uid_t euid = ::geteuid();
    if (st.st_uid != euid && st.st_uid != 0)
        return what + " " + path + " is owned by uid " + std::to_string(st.st_uid) + ", not by uid " +
               std::to_string(euid) + " (this process) or root";
    // A folder such as /tmp (root's, sticky: nobody can replace what others own in it) is fine.
    const bool sticky_root_dir = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) && st.st_uid == 0;
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky_root_dir) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        return what + " " + path + " is writable by its group or others (mode " + mode + ")";
    }
    return "";
}

struct HelperFd {
    int fd = -1;
    ~HelperFd() { reset(); }
    void reset() {
        if (fd >= 0) ::close(fd);
        fd = -1;
    }
};

}  // namespace

std::string ownership_problem(const std::string& path, const std::string& what) {
    std::unique_ptr<char, decltype(&std::free)> real(::realpath(path.c_str(), nullptr), &std::free);
    if (!real) return "";  // not there: the caller says so, or does without it
    std::string at = real.get();
    struct stat st {};
    if (::stat(at.c_str(), &st) != 0) return "";
    std::string why = stat_ownership_problem(at, what, st);
    while (why.empty() && at.size() > 1) {
        const size_t slash = at.find_last_of('/');
        at = slash == 0 ? "/" : at.substr(0, slash);
        if (::stat(at.c_str(), &st) != 0) break;
        why = stat_ownership_problem(at, "its folder", st);
    }
    return why;
}

std::string find_on_path(const std::string& name) {
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

std::string first_line_of(const std::string& text) {
    std::string line = text.substr(0, text.find('\n'));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() > 200) line = line.substr(0, 200) + "...";
    return line;
}

void wipe(std::string& s) noexcept {
    OPENSSL_cleanse(s.data(), s.size());
    s.clear();
}

HelperRun run_helper(const std::vector<std::string>& args, const std::string& input, const std::string& what,
                     std::chrono::milliseconds timeout) {
    std::vector<std::string> words = args;
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);

    int out_pipe[2], err_pipe[2], in_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw Error(Code::Io, what + ": pipe: " + std::strerror(errno), errno);
    HelperFd out_r{out_pipe[0]}, out_w{out_pipe[1]};
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) throw Error(Code::Io, what + ": pipe: " + std::strerror(errno), errno);
    HelperFd err_r{err_pipe[0]}, err_w{err_pipe[1]};
    HelperFd in_r, in_w;
    if (input.empty()) {
        in_r.fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (in_r.fd < 0) throw Error(Code::Io, what + ": /dev/null: " + std::strerror(errno), errno);
    } else {
        if (::pipe2(in_pipe, O_CLOEXEC) != 0) throw Error(Code::Io, what + ": pipe: " + std::strerror(errno), errno);
        in_r.fd = in_pipe[0];
        in_w.fd = in_pipe[1];
    }

    pid_t pid = ::fork();
    if (pid < 0) throw Error(Code::Io, what + ": fork: " + std::strerror(errno), errno);
    if (pid == 0) {
        // Only async-signal-safe calls from here to exec.
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        if (::dup2(in_r.fd, 0) < 0 || ::dup2(out_w.fd, 1) < 0 || ::dup2(err_w.fd, 2) < 0) _exit(127);
        ::close_range(3, ~0U, 0);
        ::execv(argv[0], argv.data());
        _exit(127);
    }
    out_w.reset();
    err_w.reset();
    in_r.reset();
    if (in_w.fd >= 0) {
        // A few hundred bytes at most (a registry's name): the pipe's buffer takes them whole.
        // A helper that exits without reading makes the write fail with EPIPE: SIGPIPE is
        // blocked in this thread meanwhile and a pending one taken back (other threads unaffected).
        sigset_t pipe_set, old_set;
        sigemptyset(&pipe_set);
        sigaddset(&pipe_set, SIGPIPE);
        ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
        size_t done = 0;
        while (done < input.size()) {
            ssize_t n = ::write(in_w.fd, input.data() + done, input.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EPIPE) {
                const struct timespec zero {};
                ::sigtimedwait(&pipe_set, nullptr, &zero);
            }
            if (n <= 0) break;
            done += static_cast<size_t>(n);
        }
        ::pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
        in_w.reset();
    }

    HelperRun run;
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
            std::string& dest = k == 0 ? run.out : run.err;
            size_t cap = k == 0 ? kHelperMaxStdout : kHelperMaxStderr;
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
    if (timed_out) {
        wipe(run.out);
        throw Error(Code::Io, what + " did not finish within " + std::to_string(timeout.count() / 1000) +
                                  " s (killed)");
    }
    if (too_much) {
        wipe(run.out);
        throw Error(Code::Io, what + " wrote more than 64 KiB to its standard output (killed)");
    }
    if (WIFSIGNALED(status)) {
        wipe(run.out);
        throw Error(Code::Io, what + " was killed by signal " + std::to_string(WTERMSIG(status)));
    }
    run.exit_status = WEXITSTATUS(status);
    return run;
}

}  // namespace gguf_mount::remote
