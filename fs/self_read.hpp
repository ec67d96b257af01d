// The start-up read of a mounted gguf-mount file system (every served file read once through
// the mount before READY=1), done by a forked child process instead of a daemon thread.
//
// Why a process: a thread that waits on a FUSE request of its own daemon sits in the kernel's
// uninterruptible wait once the daemon's loop has taken the request. If the daemon is killed
// (kill -9) then, that thread never gets its answer, keeps the process's descriptor table and
// with it /dev/fuse open, and the process can never exit (until someone aborts the connection
// in /sys/fs/fuse/connections). A child that holds no /dev/fuse descriptor does not keep the
// connection alive: when the daemon dies, the kernel closes its last /dev/fuse descriptor,
// aborts the connection (fs/fuse/dev.c fuse_dev_release -> fuse_abort_conn), every request
// waiting on it fails with ENOTCONN/ECONNABORTED, and the child exits. The child inherits a
// copy of the /dev/fuse descriptor with the fork and closes it first thing; a daemon killed in
// that moment leaves the connection up until the child runs (then aborted as above; a request
// made meanwhile fails with ECONNABORTED, which fs/mount_point.cpp counts as a dead mount).
//
// Why fork without exec: the daemon has threads by then, so between fork and _exit the child
// may only make async-signal-safe calls (no malloc, no locks, no stdio, no exceptions). It does
// exactly that: dup2, close, close_range, sigaction, sigprocmask, stat, statfs, open, pread,
// write, _exit, on paths and buffers prepared before the fork. Executing a helper mode of our own
// binary instead would need the binary's path (/proc/self/exe), a way to pass thousands of paths,
// and a second process start-up (dynamic linking, sanitizer runtimes) for one byte per file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gguf_mount::fs {

/// One report of the start-up reader: a fixed 24-byte record written to the report pipe with
/// one write(2) (atomic: below PIPE_BUF).
struct SelfReadReport {
    enum Kind : uint32_t {
        kRoot = 1,        ///< the mount root answered stat and statfs: value = its st_dev, fs_type = f_type
        kFileFailed = 2,  ///< file number `value` could not be opened or read: error = its errno
        kGone = 3,        ///< the mount point no longer shows this mount (unmounted, or the daemon died)
        kDone = 4,        ///< every file was tried; the last report
    };
    uint32_t kind = 0;
    int32_t error = 0;
    uint64_t value = 0;
    uint64_t fs_type = 0;
};

/// A forked child that reads the first byte of every file through a mount and reports what
/// failed. Owned by one thread: start(), next() and finish() are not thread-safe.
class SelfReader {
public:
    /// Prepares the reading of `files` (absolute paths below `mountpoint`); `empty[i]` true
    /// means file i is served with size 0 and is only opened. Nothing runs yet.
    SelfReader(std::string mountpoint, std::vector<std::string> files, std::vector<bool> empty);
    /// Kills (SIGKILL) and reaps a child that was not finish()ed, and closes the report pipe.
    ~SelfReader();
    SelfReader(const SelfReader&) = delete;
    SelfReader& operator=(const SelfReader&) = delete;

    /// Forks the child. In the child, every descriptor but 0, 1, 2 and the report pipe is
    /// closed (explicitly also `fuse_fd`, the session's /dev/fuse descriptor, wherever it is),
    /// all signal dispositions are reset to their defaults and SIGINT, SIGTERM and SIGHUP are
    /// blocked (its owner ends it: next() with a stop descriptor, or the destructor); then it
    /// stats the mount root (kRoot, or kGone), opens and reads each file (O_RDONLY, 1 byte at
    /// offset 0), reports each failure (kFileFailed; a read of 0 bytes reports EIO; kGone and
    /// stop when the mount point no longer shows the mount root's device), reports kDone and
    /// _exit(0)s. Returns false with errno set when the pipe or the fork fails (nothing forked).
    bool start(int fuse_fd) noexcept;

    /// Waits for the next report. Returns false at the end of the reports: the child closed the
    /// pipe (it exited or was killed) or a read failed. While waiting, a readable `stop_fd`
    /// (-1: none) makes it kill the child (SIGKILL) once and keep reading until the end.
    bool next(SelfReadReport* out, int stop_fd) noexcept;

    /// Reaps the child (waitpid) and returns its wait status; -1 when no child was started or
    /// it was already reaped. Call after next() returned false.
    int finish() noexcept;

    /// PID of the child (-1 before start() and after finish()).
    pid_t pid() const { return pid_; }

private:
    std::string mountpoint_;
    std::vector<std::string> files_;
    std::vector<const char*> paths_;  // files_[i].c_str(), built before the fork
    std::vector<unsigned char> empty_;
    pid_t pid_ = -1;
    int reports_ = -1;  // read end of the report pipe
    bool killed_ = false;
};

}  // namespace gguf_mount::fs
