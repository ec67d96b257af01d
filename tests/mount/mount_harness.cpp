#include "mount/mount_harness.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "fs/mount_point.hpp"
#include "support/support.hpp"

extern char** environ;

namespace mount_test {

namespace {

constexpr milliseconds kPollInterval{10};

}  // namespace

std::string fusermount3_path() {
    std::vector<std::string> dirs;
    if (const char* path = std::getenv("PATH")) {
        std::stringstream ss(path);
        std::string d;
        while (std::getline(ss, d, ':')) {
            if (!d.empty()) dirs.push_back(d);
        }
    }
    dirs.push_back("/usr/bin");
    dirs.push_back("/bin");
    for (const auto& d : dirs) {
        std::string p = d + "/fusermount3";
        if (::access(p.c_str(), X_OK) == 0) return p;
    }
    return "";
}

bool fuse_available(std::string* why) {
    int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        *why = std::string("/dev/fuse cannot be opened (") + std::strerror(errno) + "): FUSE mounts are not possible here";
        return false;
    }
    ::close(fd);
    if (fusermount3_path().empty()) {
        *why = "fusermount3 is not installed (package fuse3): mounts could not be undone";
        return false;
    }
    return true;
}

std::optional<MountEntry> find_mount(const std::string& mount_point) {
    std::optional<gguf_mount::fs::MountInfo> m = gguf_mount::fs::topmost_mount(mount_point);
    if (!m) return std::nullopt;
    MountEntry e;
    e.mount_point = m->mount_point;
    e.fstype = m->fstype;
    e.source = m->source;
    e.mount_options = m->mount_options;
    e.super_options = m->super_options;
    e.major = m->major;
    e.minor = m->minor;
    return e;
}

bool unmount(const std::string& mount_point) {
    if (!find_mount(mount_point)) return true;
    const std::string fm = fusermount3_path();
    gguf_test::run({fm, "-u", mount_point});
    if (!find_mount(mount_point)) return true;
    gguf_test::run({fm, "-uz", mount_point});
    return !find_mount(mount_point);
}

Daemon::~Daemon() {
    if (pid_ > 0 && !exit_code_) {
        ::kill(pid_, SIGKILL);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
    }
}

bool Daemon::start(const std::vector<std::string>& argv, const std::string& log_path,
                   const std::optional<rlimit>& nofile) {
    // fork, and only async-signal-safe calls in the child (posix_spawn can set neither a limit
    // nor the parent-death signal); everything it needs is prepared here.
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    exit_code_.reset();
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) {
        pid_ = -1;
        return false;
    }
    if (pid_ == 0) {
        // A test process that dies without running its destructors takes its foreground daemon
        // along (SIGTERM: it unmounts and exits) instead of leaving a mount behind.
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(127);
        int in = ::open("/dev/null", O_RDONLY);
        int out = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
        if (in < 0 || out < 0 || ::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(out, 2) < 0) ::_exit(127);
        if (in > 2) ::close(in);
        if (out > 2) ::close(out);
        if (nofile && ::setrlimit(RLIMIT_NOFILE, &*nofile) != 0) ::_exit(127);
        ::execve(args[0], args.data(), environ);
        ::_exit(127);
    }
    return true;
}

bool Daemon::poll_exit() {
    if (exit_code_) return true;
    if (pid_ <= 0) return true;
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return true;
    }
    return false;
}

bool Daemon::wait_mounted(const std::string& mount_point, milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (find_mount(mount_point)) return true;
        if (poll_exit()) return false;
        std::this_thread::sleep_for(kPollInterval);
    }
    return false;
}

std::optional<int> Daemon::wait_exit(milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!poll_exit()) {
        if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
        std::this_thread::sleep_for(kPollInterval);
    }
    return exit_code_;
}

std::optional<int> Daemon::stop(const std::string& mount_point) {
    unmount(mount_point);
    if (pid_ <= 0) return exit_code_;
    if (auto code = wait_exit(kTimeout)) return code;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    exit_code_ = 128 + SIGKILL;
    unmount(mount_point);  // a killed daemon leaves a dead mount behind
    return std::nullopt;
}

bool wait_gone(pid_t pid, milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
        std::string content;
        if (!stat || !std::getline(stat, content)) return true;
        // "pid (comm) S ...": the state follows the last ')'.
        auto close = content.rfind(')');
        if (close != std::string::npos && close + 2 < content.size() && content[close + 2] == 'Z') return true;
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(kPollInterval);
    }
}

std::vector<pid_t> pids_with_argument(const std::string& arg) {
    std::vector<pid_t> out;
    DIR* d = ::opendir("/proc");
    if (!d) return out;
    while (dirent* e = ::readdir(d)) {
        char* end = nullptr;
        long pid = std::strtol(e->d_name, &end, 10);
        if (*end != '\0' || pid <= 0) continue;
        std::ifstream in(std::string("/proc/") + e->d_name + "/cmdline", std::ios::binary);
        std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::stringstream ss(cmd);
        std::string a;
        while (std::getline(ss, a, '\0')) {
            if (a == arg) {
                out.push_back(static_cast<pid_t>(pid));
                break;
            }
        }
    }
    ::closedir(d);
    return out;
}

std::vector<pid_t> daemon_pids_with_argument(const std::string& arg) {
    const std::vector<pid_t> all = pids_with_argument(arg);
    std::vector<pid_t> out;
    for (pid_t pid : all) {
        std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
        std::string stat;
        std::getline(in, stat);
        // "pid (comm) S ppid ...": the parent follows the state after the last ')'.
        const size_t close = stat.rfind(')');
        long ppid = close == std::string::npos ? 0 : std::strtol(stat.c_str() + close + 3, nullptr, 10);
        if (std::find(all.begin(), all.end(), static_cast<pid_t>(ppid)) == all.end()) out.push_back(pid);
    }
    return out;
}

namespace {

constexpr const char* kFusectlDir = "/sys/fs/fuse/connections";
constexpr long kFusectlMagic = 0x65735543;  // fs/fuse/control.c FUSECTL_SUPER_MAGIC

bool is_fusectl(const std::string& dir) {
    struct statfs sfs {};
    return ::statfs(dir.c_str(), &sfs) == 0 && static_cast<long>(sfs.f_type) == kFusectlMagic;
}

}  // namespace

Fusectl::~Fusectl() {
    if (!mounted_) return;
    if (::umount2(dir_.c_str(), 0) != 0) ::umount2(dir_.c_str(), MNT_DETACH);
    ::rmdir(dir_.c_str());
}

bool Fusectl::ensure(const std::string& scratch_dir, std::string* why) {
    if (!dir_.empty()) return true;
    if (is_fusectl(kFusectlDir)) {
        dir_ = kFusectlDir;
        return true;
    }
    if (::mkdir(scratch_dir.c_str(), 0755) != 0 && errno != EEXIST) {
        *why = scratch_dir + ": cannot create (" + std::strerror(errno) + ")";
        return false;
    }
    if (::mount("fusectl", scratch_dir.c_str(), "fusectl", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
        *why = std::string("fusectl is not mounted on ") + kFusectlDir + " (systemd mounts it) and cannot be mounted on " +
               scratch_dir + ": " + std::strerror(errno) + (::geteuid() != 0 ? " (needs root)" : "");
        ::rmdir(scratch_dir.c_str());
        return false;
    }
    dir_ = scratch_dir;
    mounted_ = true;
    return true;
}

std::string Fusectl::file(const MountEntry& m, const std::string& name) const {
    return dir_ + "/" + std::to_string(m.minor) + "/" + name;
}

bool read_first_line(const std::string& path, std::string* line, std::string* error) {
    std::ifstream in(path);
    if (!in) {
        *error = path + ": cannot open (" + std::strerror(errno) + ")";
        return false;
    }
    errno = 0;
    if (!std::getline(in, *line)) {
        *error = path + ": cannot read a line (" + (errno ? std::strerror(errno) : "empty") + ")";
        return false;
    }
    return true;
}

std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> out;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return out;
    while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") out.push_back(n);
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace mount_test
