// Helpers for tests that really mount the gguf-mount binary: FUSE availability, the mount
// table, and a child daemon that is always unmounted and reaped.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace mount_test {

using std::chrono::milliseconds;

/// Default wait for a mount to appear or a daemon to exit.
inline constexpr milliseconds kTimeout{10000};

/// True when this process can mount FUSE file systems here: /dev/fuse opens read-write and
/// fusermount3 is on PATH (or in /usr/bin, /bin). Otherwise false and `*why` says what is missing.
bool fuse_available(std::string* why);

/// Absolute path of fusermount3, or "" when not found.
std::string fusermount3_path();

/// One line of /proc/self/mountinfo (proc(5)), with octal escapes (\040) decoded.
struct MountEntry {
    std::string mount_point;
    std::string fstype;         // "fuse.gguf-mount"
    std::string source;         // the fsname
    std::string mount_options;  // per-mount options ("ro,nosuid,...")
    std::string super_options;  // per-superblock options ("ro,user_id=0,...,max_read=1048576")
    unsigned major = 0, minor = 0;
};

/// The topmost mount on `mount_point` (an absolute, symlink-free path), or nullopt.
std::optional<MountEntry> find_mount(const std::string& mount_point);

/// Unmounts `mount_point` with `fusermount3 -u`, then `fusermount3 -uz` if it is still
/// mounted (busy). Returns true when nothing is mounted there afterwards.
bool unmount(const std::string& mount_point);

/// A gguf-mount process started by the test, with stdout and stderr going to a log file.
/// The destructor kills (SIGKILL, this PID only) and reaps it if it is still running.
class Daemon {
public:
    Daemon() = default;
    Daemon(const Daemon&) = delete;
    Daemon& operator=(const Daemon&) = delete;
    ~Daemon();

    /// Starts `argv` (argv[0] is a path) with stdin from /dev/null. With `nofile`, the child
    /// sets RLIMIT_NOFILE to it (setrlimit(2), between fork and exec) before it runs argv[0];
    /// if that fails the child exits 127 (as when argv[0] cannot be run). The child gets SIGTERM
    /// when the thread that started it ends (PR_SET_PDEATHSIG), so a killed test leaves no
    /// foreground daemon or mount behind: start daemons from the test's own thread. Returns false
    /// when the child cannot be forked.
    bool start(const std::vector<std::string>& argv, const std::string& log_path,
               const std::optional<rlimit>& nofile = std::nullopt);

    /// Waits until `mount_point` shows up in /proc/self/mountinfo. Returns false if the child
    /// exited first (exit_code() is then set) or `timeout` passed.
    bool wait_mounted(const std::string& mount_point, milliseconds timeout = kTimeout);

    /// Waits for the child to exit; returns its exit status (128 + signal if killed), or
    /// nullopt after `timeout`.
    std::optional<int> wait_exit(milliseconds timeout = kTimeout);

    /// Unmounts `mount_point` (see unmount()), waits for the child to exit and returns its exit
    /// status; kills this PID with SIGKILL if it does not exit within kTimeout (then returns
    /// nullopt). Safe to call when the child has already exited.
    std::optional<int> stop(const std::string& mount_point);

    bool running() const { return pid_ > 0 && !exit_code_; }
    pid_t pid() const { return pid_; }
    std::optional<int> exit_code() const { return exit_code_; }

private:
    bool poll_exit();  // non-blocking waitpid; true once exited
    pid_t pid_ = -1;
    std::optional<int> exit_code_;
};

/// Waits until process `pid` (not a child: e.g. a daemonized gguf-mount) no longer exists or
/// is a zombie. Returns false after `timeout`.
bool wait_gone(pid_t pid, milliseconds timeout = kTimeout);

/// PIDs of the processes whose command line contains the argument `arg` exactly (used to find
/// the daemon a test started by its unique temporary mount point).
std::vector<pid_t> pids_with_argument(const std::string& arg);

/// The daemons among pids_with_argument(arg): those whose parent is not one of them (before
/// READY=1 a daemon has a child with its command line, the start-up reader, fs/self_read.hpp).
std::vector<pid_t> daemon_pids_with_argument(const std::string& arg);

/// The fusectl file system (fs/fuse/control.c: one directory per FUSE connection, named after
/// the connection's device number, with the files waiting, abort, max_background, ...), which
/// systemd mounts on /sys/fs/fuse/connections; containers and hosts without systemd often lack
/// it. Where it is not mounted there, ensure() mounts it on a directory of the test's own (one
/// kernel-wide superblock: the same files, without touching the host's /sys or racing another
/// test that does), and the destructor unmounts it again.
class Fusectl {
public:
    Fusectl() = default;
    Fusectl(const Fusectl&) = delete;
    Fusectl& operator=(const Fusectl&) = delete;
    /// Unmounts what ensure() mounted and removes its directory.
    ~Fusectl();

    /// Makes the fusectl files available: true when /sys/fs/fuse/connections holds them, or
    /// when fusectl could be mounted on `scratch_dir` (created; needs root, mount(2)). False
    /// otherwise, with `*why` saying what is missing (the reason to print when skipping).
    bool ensure(const std::string& scratch_dir, std::string* why);

    /// Path of the file `name` of the connection behind mount `m` (FUSE mounts have major 0:
    /// the directory is named after the minor). Valid after ensure() returned true.
    std::string file(const MountEntry& m, const std::string& name) const;

private:
    std::string dir_;      // where the files are
    bool mounted_ = false;  // dir_ was mounted by ensure()
};

/// Reads the first line of `path` (without its '\n') into `*line`. Returns false with `*error`
/// naming the path and the errno when the file cannot be opened or read: a failed read is an
/// error, never the value "".
bool read_first_line(const std::string& path, std::string* line, std::string* error);

/// Names in directory `dir` (readdir), "." and ".." excluded, sorted.
std::vector<std::string> list_dir(const std::string& dir);

}  // namespace mount_test
