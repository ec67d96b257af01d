// `gguf-mount umount|unmount [--lazy] MOUNTPOINT...`: unmounts gguf-mount mounts with
// fusermount3(1) -u (-z with --lazy), which works for the user who mounted and for root.
// A mount point that holds no gguf-mount mount is refused (umount(8) is for other file systems).

#ifdef GGUF_MOUNT_WITH_FUSE

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "cli/commands.hpp"
#include "cli/completion.hpp"
#include "fs/mount_point.hpp"

extern char** environ;

namespace gguf_mount::cli {

namespace {

constexpr const char* kFsType = "fuse.gguf-mount";

/// Runs `fusermount3 -u [-z] PATH`, its stderr collected into `*err` (trimmed). Returns its exit
/// status, or 127 (with `*err` set) when it cannot be started.
int run_fusermount(const std::string& path, bool lazy, std::string* err) {
    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) {
        *err = std::string("cannot create a pipe: ") + std::strerror(errno);
        return 127;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDERR_FILENO);
    std::vector<const char*> argv = {"fusermount3", lazy ? "-uz" : "-u", path.c_str(), nullptr};
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, "fusermount3", &fa, nullptr, const_cast<char* const*>(argv.data()), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(pipefd[1]);
    if (rc != 0) {
        ::close(pipefd[0]);
        *err = std::string("cannot run fusermount3 (package fuse3): ") + std::strerror(rc);
        return 127;
    }
    char buf[512];
    ssize_t n;
    while ((n = ::read(pipefd[0], buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        if (err->size() < 4096) err->append(buf, static_cast<size_t>(n));
    }
    ::close(pipefd[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    while (!err->empty() && (err->back() == '\n' || err->back() == ' ')) err->pop_back();
    const size_t nl = err->find('\n');
    if (nl != std::string::npos) err->resize(nl);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Unmounts one mount point; prints one line and returns 1 when it cannot.
int unmount_one(const std::string& arg, bool lazy) {
    const std::string path = fs::absolute_mount_path(arg);
    const auto m = fs::topmost_mount(path);
    if (!m) {
        std::fprintf(stderr, "gguf-mount umount: %s: nothing is mounted there\n", arg.c_str());
        return 1;
    }
    if (m->fstype != kFsType) {
        std::fprintf(stderr, "gguf-mount umount: %s: holds a %s mount, not gguf-mount's; not unmounted (use umount(8))\n",
                     arg.c_str(), m->fstype.c_str());
        return 1;
    }
    std::string err;
    const int rc = run_fusermount(path, lazy, &err);
    if (rc == 0) return 0;
    std::string line = "gguf-mount umount: " + arg + ": " + (err.empty() ? "fusermount3 failed" : err);
    if (!lazy && err.find("busy") != std::string::npos) {
        line += " (a process still has a file or its working directory in it: 'fuser -vm " + arg +
                "' lists them; 'gguf-mount umount --lazy " + arg + "' detaches the mount now and ends it once they are done)";
    }
    std::fprintf(stderr, "%s\n", line.c_str());
    return 1;
}

}  // namespace

int run_umount(int argc, char** argv) {
    cxxopts::Options options("gguf-mount umount", "Unmount gguf-mount mounts (fusermount3 -u)");
    options.custom_help("[options]");
    options.positional_help("MOUNTPOINT...");
    options.add_options()
        ("z,lazy", "detach now, even while files in it are open; the mount ends when the last one is closed "
                   "(fusermount3 -uz)")
        ("h,help", "show this help")
        ("mountpoints", "", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"mountpoints"});
    std::vector<std::string> points;
    bool lazy = false;
    if (completion_words_requested()) return print_completion_words(options, {"mountpoints"});
    try {
        auto r = options.parse(argc, argv);
        if (r.count("help")) {
            std::printf("%s\nExit status: 0 when every MOUNTPOINT was unmounted, 1 otherwise, 2 for a usage error.\n",
                        options.help().c_str());
            return 0;
        }
        lazy = r.count("lazy") > 0;
        if (r.count("mountpoints")) points = r["mountpoints"].as<std::vector<std::string>>();
    } catch (const cxxopts::exceptions::exception& e) {
        std::fprintf(stderr, "gguf-mount umount: %s (see 'gguf-mount umount --help')\n", e.what());
        return 2;
    }
    if (points.empty()) {
        std::fprintf(stderr, "gguf-mount umount: expected MOUNTPOINT (see 'gguf-mount umount --help')\n");
        return 2;
    }
    int status = 0;
    for (const auto& p : points) status = unmount_one(p, lazy) != 0 ? 1 : status;
    return status;
}

}  // namespace gguf_mount::cli

#endif  // GGUF_MOUNT_WITH_FUSE
