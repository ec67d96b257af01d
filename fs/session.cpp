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

/// Raises the readahead window of the mount at `mountpoint` to `kb` KiB.
///
/// Runs on its own thread after the loop started: stat() of the mount root blocks until the
/// kernel processed the INIT reply, and only after that may the window be raised, because the
/// INIT reply sets ra_pages = min(ra_pages, max_readahead) and the kernel offered only 128 KiB.
/// The bdi of a FUSE mount is named after its anonymous st_dev ("0:53").
void raise_readahead(const std::string& mountpoint, unsigned kb) {
    struct stat st {};
    struct statfs sfs {};
    if (::stat(mountpoint.c_str(), &st) != 0 || ::statfs(mountpoint.c_str(), &sfs) != 0) {
        spdlog::info("{}: readahead left at the kernel default: cannot stat the mount: {}", mountpoint,
                     std::strerror(errno));
        return;
    }
    if (static_cast<unsigned long>(sfs.f_type) != FUSE_SUPER_MAGIC) {
        spdlog::info("{}: readahead left at the kernel default: the mount is already gone", mountpoint);
        return;
    }
    std::string path = "/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)) +
                       "/read_ahead_kb";
    std::ofstream out(path);
    out << kb << '\n';
    out.flush();
    if (!out) {
        spdlog::info("{}: readahead left at the kernel default: cannot write {} (needs root)", mountpoint, path);
        return;
    }
    spdlog::debug("{}: FUSE readahead set to {} KiB ({})", mountpoint, kb, path);
}

/// Starts raise_readahead on a thread that blocks the termination signals, so they keep
/// reaching the loop threads that libfuse's handlers must interrupt.
std::thread start_readahead_thread(const std::string& mountpoint, unsigned kb) {
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    std::thread t;
    try {
        t = std::thread([mountpoint, kb] {
            try {
                raise_readahead(mountpoint, kb);
            } catch (...) {
                // Best effort: the mount works with the default window.
            }
        });
    } catch (const std::exception& e) {
        spdlog::info("{}: readahead left at the kernel default: {}", mountpoint, e.what());
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
    std::thread readahead;
    if (opts.readahead_kb != 0) readahead = start_readahead_thread(mnt, opts.readahead_kb);

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

    fuse_session_unmount(se.get());
    fuse_remove_signal_handlers(se.get());
    // Destroy (closing /dev/fuse aborts the connection) before joining: a stat() of the mount
    // root still waiting for INIT only returns once the connection is gone.
    se.reset();
    if (readahead.joinable()) readahead.join();

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
