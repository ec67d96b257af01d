#include "fs/session.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include "fs/ops.hpp"

namespace gguf_mount::fs {

namespace {

/// Upper bound of fuse_session_loop_mt workers (libfuse's default, FUSE_LOOP_MT_DEF_MAX_THREADS).
/// Idle workers are kept (max idle = max threads) so their per-thread read buffers are reused
/// instead of being allocated and faulted in again.
constexpr unsigned kMaxWorkerThreads = 10;

struct SessionDeleter {
    void operator()(fuse_session* se) const noexcept { fuse_session_destroy(se); }
};
struct LoopConfigDeleter {
    void operator()(fuse_loop_config* c) const noexcept { fuse_loop_cfg_destroy(c); }
};
struct ArgsGuard {
    fuse_args args = FUSE_ARGS_INIT(0, nullptr);
    ~ArgsGuard() { fuse_opt_free_args(&args); }
};

/// Raises the readahead window of the mount at `mountpoint` to `kb` KiB (0: leave it).
///
/// Called after the mount root answered a stat(), i.e. after the kernel processed the INIT
/// reply: only then may the window be raised, because the INIT reply sets
/// ra_pages = min(ra_pages, max_readahead) and the kernel offered only 128 KiB.
/// The bdi of a FUSE mount is named after its anonymous st_dev ("0:53").
void raise_readahead(const std::string& mountpoint, const struct stat& root, unsigned kb) {
    if (kb == 0) return;
    std::string path = "/sys/class/bdi/" + std::to_string(major(root.st_dev)) + ":" +
                       std::to_string(minor(root.st_dev)) + "/read_ahead_kb";
    std::ofstream out(path);
    out << kb << '\n';
    out.flush();
    if (!out) {
        spdlog::info("{}: readahead left at the kernel default: cannot write {} (needs root)", mountpoint, path);
        return;
    }
    spdlog::debug("{}: FUSE readahead set to {} KiB ({})", mountpoint, kb, path);
}

/// Work that needs the mount to be live, run on its own thread once the loop serves requests:
/// waits for the mount root to answer (stat blocks until INIT is done), raises the readahead
/// window, reads the first byte of every served file through the mount, and only then tells
/// systemd READY=1 (sd_notify(3); a no-op when NOTIFY_SOCKET is unset), so a unit ordered
/// after gguf-mount@.service finds the merged files readable.
void after_mount(const std::string& mountpoint, const Filesystem& filesystem, unsigned readahead_kb) {
    struct stat st {};
    struct statfs sfs {};
    if (::stat(mountpoint.c_str(), &st) != 0 || ::statfs(mountpoint.c_str(), &sfs) != 0 ||
        static_cast<unsigned long>(sfs.f_type) != FUSE_SUPER_MAGIC) {
        spdlog::info("{}: the mount went away before it became ready", mountpoint);
        return;
    }
    raise_readahead(mountpoint, st, readahead_kb);
    for (const FileNode& f : filesystem.files()) {
        std::string path = mountpoint + "/" + f.name;
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        char byte;
        bool ok = fd >= 0 && ::pread(fd, &byte, 1, 0) == 1;
        int err = errno;
        if (fd >= 0) ::close(fd);
        if (!ok) {
            spdlog::error("{}: not readable through the mount: {}", path, std::strerror(err));
            return;
        }
    }
    std::string status = "STATUS=serving " + std::to_string(filesystem.files().size()) + " file(s) at " + mountpoint;
    sd_notifyf(0, "READY=1\n%s", status.c_str());
    spdlog::debug("{}: ready", mountpoint);
}

/// Starts after_mount on a thread that blocks the termination signals, so they keep
/// reaching the loop threads that libfuse's handlers must interrupt.
std::thread start_after_mount_thread(const std::string& mountpoint, const Filesystem& filesystem, unsigned kb) {
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    std::thread t;
    try {
        t = std::thread([mountpoint, &filesystem, kb] {
            try {
                after_mount(mountpoint, filesystem, kb);
            } catch (...) {
                // Best effort: the mount works without a raised window; systemd times out.
            }
        });
    } catch (const std::exception& e) {
        spdlog::warn("{}: cannot start the post-mount thread: {}", mountpoint, e.what());
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return t;
}

}  // namespace

std::string escape_option_value(const std::string& value) {
    std::string out;
    out.reserve(value.size());
    for (char ch : value) {
        if (ch == ',' || ch == '\\') out += '\\';
        out += ch;
    }
    return out;
}

bool ensure_standard_fds_open() noexcept {
    for (;;) {
        int fd = ::open("/dev/null", O_RDWR);
        if (fd < 0) return false;
        if (fd > 2) {
            ::close(fd);
            return true;
        }
        // fd is 0, 1 or 2: it was closed; leave /dev/null in its place and check the next.
    }
}

int run_session(const Filesystem& filesystem, const SessionOptions& opts) {
    const std::string& mnt = opts.mountpoint;

    // fuse_session_new skips argv[0] and parses the rest like a command line.
    std::string option_list = "ro,default_permissions,max_read=" + std::to_string(kMaxRead);
    for (const auto& o : opts.mount_options) option_list += "," + o;
    ArgsGuard a;
    if (fuse_opt_add_arg(&a.args, "gguf-mount") != 0 || fuse_opt_add_arg(&a.args, "-o") != 0 ||
        fuse_opt_add_arg(&a.args, option_list.c_str()) != 0 || (opts.debug && fuse_opt_add_arg(&a.args, "-d") != 0)) {
        spdlog::error("{}: out of memory building the FUSE arguments", mnt);
        return 1;
    }
    spdlog::debug("{}: FUSE options {}", mnt, option_list);

    Context context;
    context.fs = &filesystem;
    const fuse_lowlevel_ops& ops = lowlevel_ops();
    std::unique_ptr<fuse_session, SessionDeleter> se(fuse_session_new(&a.args, &ops, sizeof ops, &context));
    if (!se) {
        // libfuse printed the reason (an unknown option, usually) on stderr.
        spdlog::error("{}: cannot create the FUSE session (invalid mount options: {})", mnt, option_list);
        return 1;
    }
    if (fuse_set_signal_handlers(se.get()) != 0) {
        spdlog::error("{}: cannot install the signal handlers", mnt);
        return 1;
    }
    if (fuse_session_mount(se.get(), mnt.c_str()) != 0) {
        fuse_remove_signal_handlers(se.get());
        spdlog::error("{}: cannot mount (see the libfuse message above; is /dev/fuse usable and fusermount3 installed?)",
                      mnt);
        return 1;
    }
    spdlog::info("{}: mounted ({} file{})", mnt, filesystem.files().size(), filesystem.files().size() == 1 ? "" : "s");

    if (!opts.foreground && opts.before_daemonize) {
        try {
            opts.before_daemonize();
        } catch (const std::exception& e) {
            // Keep serving: the file system is mounted and must not be left without a daemon.
            spdlog::warn("{}: {}", mnt, e.what());
        }
    }
    if (fuse_daemonize(opts.foreground ? 1 : 0) != 0) {
        spdlog::error("{}: cannot daemonize", mnt);
        fuse_session_unmount(se.get());
        fuse_remove_signal_handlers(se.get());
        return 1;
    }

    // Threads may start now: the process will not fork again.
    std::thread post_mount = start_after_mount_thread(mnt, filesystem, opts.readahead_kb);

    int rc;
    if (opts.single_thread) {
        rc = fuse_session_loop(se.get());
    } else {
        std::unique_ptr<fuse_loop_config, LoopConfigDeleter> cfg(fuse_loop_cfg_create());
        if (!cfg) {
            rc = -ENOMEM;
        } else {
            fuse_loop_cfg_set_max_threads(cfg.get(), kMaxWorkerThreads);
            fuse_loop_cfg_set_idle_threads(cfg.get(), kMaxWorkerThreads);
            fuse_loop_cfg_set_clone_fd(cfg.get(), 0);
            rc = fuse_session_loop_mt(se.get(), cfg.get());
        }
    }

    sd_notify(0, "STOPPING=1");
    fuse_session_unmount(se.get());
    fuse_remove_signal_handlers(se.get());
    // Destroy (closing /dev/fuse aborts the connection) before joining: a stat() of the mount
    // root still waiting for INIT only returns once the connection is gone.
    se.reset();
    if (post_mount.joinable()) post_mount.join();

    if (uint64_t n = context.read_warnings.take_suppressed()) {
        spdlog::warn("{}: {} more shard read errors were not logged (rate limit)", mnt, n);
    }
    if (rc < 0) {
        spdlog::error("{}: FUSE session failed: {}", mnt, std::strerror(-rc));
        return 1;
    }
    if (rc > 0) {
        spdlog::info("{}: unmounted after signal {} ({})", mnt, rc, strsignal(rc));
    } else {
        spdlog::info("{}: unmounted", mnt);
    }
    return 0;
}

}  // namespace gguf_mount::fs
