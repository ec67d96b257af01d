#include "fs/self_read.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace gguf_mount::fs {

namespace {

/// The report pipe's descriptor number in the child.
constexpr int kReportFd = 3;

/// Everything the child needs, prepared before the fork (the child must not allocate).
struct ChildPlan {
    const char* mountpoint;
    const char* const* paths;
    const unsigned char* empty;
    size_t count;
    int report_fd;         // write end of the pipe, as inherited
    int fuse_fd;           // the session's /dev/fuse descriptor, or -1
    int max_fd;            // highest descriptor number to close when close_range is missing
    struct sigaction dfl;  // SIG_DFL, empty mask
    sigset_t blocked;      // SIGINT, SIGTERM, SIGHUP
};

/// Writes one report to the pipe; _exit(1) when it cannot (the parent is gone).
void report(uint32_t kind, int32_t error, uint64_t value, uint64_t fs_type = 0) noexcept {
    SelfReadReport r;
    r.kind = kind;
    r.error = error;
    r.value = value;
    r.fs_type = fs_type;
    for (;;) {
        ssize_t n = ::write(kReportFd, &r, sizeof r);
        if (n == static_cast<ssize_t>(sizeof r)) return;
        if (n < 0 && errno == EINTR) continue;
        ::_exit(1);
    }
}

/// The child: async-signal-safe calls only (see the header), never returns.
[[noreturn]] void run_child(const ChildPlan& p) noexcept {
    if (p.report_fd != kReportFd && ::dup2(p.report_fd, kReportFd) < 0) ::_exit(2);
    // A /dev/fuse descriptor at 0-2 (never the case after ensure_standard_fds_open) or 3 (then
    // replaced by dup2 above) would survive close_range below.
    if (p.fuse_fd >= 0 && p.fuse_fd < kReportFd) ::close(p.fuse_fd);
    bool closed = false;
#ifdef SYS_close_range
    closed = ::syscall(SYS_close_range, kReportFd + 1, ~0U, 0) == 0;
#endif
    if (!closed) {
        for (int fd = kReportFd + 1; fd <= p.max_fd; ++fd) ::close(fd);
    }
    // The daemon's handlers mean nothing here. The termination signals stay blocked: a Ctrl-C or
    // a systemd stop reaches the whole group, and the daemon ends this child itself.
    for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &p.dfl, nullptr);  // EINVAL for KILL, STOP
    ::sigprocmask(SIG_SETMASK, &p.blocked, nullptr);

    struct stat root {};
    struct statfs sfs {};
    if (::stat(p.mountpoint, &root) != 0 || ::statfs(p.mountpoint, &sfs) != 0) {
        report(SelfReadReport::kGone, errno, 0);
        ::_exit(0);
    }
    report(SelfReadReport::kRoot, 0, static_cast<uint64_t>(root.st_dev), static_cast<uint64_t>(sfs.f_type));
    for (size_t i = 0; i < p.count; ++i) {
        int err = 0;
        int fd = ::open(p.paths[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            err = errno;
        } else {
            char byte;
            ssize_t n = p.empty[i] ? 1 : ::pread(fd, &byte, 1, 0);
            if (n < 0) err = errno;
            if (n == 0) err = EIO;  // shorter than served
            ::close(fd);
        }
        if (err == 0) continue;
        // Unmounted meanwhile, or the daemon died: the path no longer shows this mount.
        struct stat now {};
        if (::stat(p.mountpoint, &now) != 0 || now.st_dev != root.st_dev) {
            report(SelfReadReport::kGone, err, i);
            ::_exit(0);
        }
        report(SelfReadReport::kFileFailed, err, i);
    }
    report(SelfReadReport::kDone, 0, p.count);
    ::_exit(0);
}

}  // namespace

SelfReader::SelfReader(std::string mountpoint, std::vector<std::string> files, std::vector<bool> empty)
    : mountpoint_(std::move(mountpoint)), files_(std::move(files)) {
    paths_.reserve(files_.size());
    for (const std::string& f : files_) paths_.push_back(f.c_str());
    empty_.resize(files_.size(), 0);
    for (size_t i = 0; i < files_.size() && i < empty.size(); ++i) empty_[i] = empty[i] ? 1 : 0;
}

SelfReader::~SelfReader() {
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        finish();
    }
    if (reports_ >= 0) ::close(reports_);
}

bool SelfReader::start(int fuse_fd) noexcept {
    if (pid_ > 0) return true;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    ChildPlan plan{};
    plan.mountpoint = mountpoint_.c_str();
    plan.paths = paths_.data();
    plan.empty = empty_.data();
    plan.count = paths_.size();
    plan.report_fd = fds[1];
    plan.fuse_fd = fuse_fd;
    struct rlimit rl {};
    plan.max_fd = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (1u << 20)
                      ? static_cast<int>(rl.rlim_cur) - 1
                      : (1 << 20) - 1;
    plan.dfl.sa_handler = SIG_DFL;
    sigemptyset(&plan.dfl.sa_mask);
    sigemptyset(&plan.blocked);
    sigaddset(&plan.blocked, SIGINT);
    sigaddset(&plan.blocked, SIGTERM);
    sigaddset(&plan.blocked, SIGHUP);

    pid_t pid = ::fork();
    if (pid == 0) run_child(plan);
    int saved = errno;
    ::close(fds[1]);
    if (pid < 0) {
        ::close(fds[0]);
        errno = saved;
        return false;
    }
    pid_ = pid;
    reports_ = fds[0];
    return true;
}

bool SelfReader::next(SelfReadReport* out, int stop_fd) noexcept {
    if (reports_ < 0) return false;
    for (;;) {
        pollfd p[2] = {{reports_, POLLIN, 0}, {stop_fd, POLLIN, 0}};
        const nfds_t n = stop_fd >= 0 && !killed_ ? 2 : 1;
        if (::poll(p, n, -1) < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        if (n == 2 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            if (pid_ > 0) ::kill(pid_, SIGKILL);  // not reaped yet: the PID is still this child's
            killed_ = true;
        }
        if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t got = ::read(reports_, out, sizeof *out);
        if (got < 0 && errno == EINTR) continue;
        return got == static_cast<ssize_t>(sizeof *out);
    }
}

int SelfReader::finish() noexcept {
    if (pid_ <= 0) return -1;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0) {
        if (errno != EINTR) {
            status = -1;
            break;
        }
    }
    pid_ = -1;
    if (reports_ >= 0) {
        ::close(reports_);
        reports_ = -1;
    }
    return status;
}

}  // namespace gguf_mount::fs
