#include "fs/session.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include "fs/access.hpp"
#include "fs/deferred_reads.hpp"
#include "fs/mount_point.hpp"
#include "fs/ops.hpp"
#include "fs/self_read.hpp"
#include "common/text.hpp"
#include "common/threads.hpp"

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

/// Raises the readahead window of the mount at `mountpoint`, whose root has device number
/// `dev`, to `kb` KiB (0: leave it).
///
/// Called after the mount root answered a stat(), i.e. after the kernel processed the INIT
/// reply: only then may the window be raised, because the INIT reply sets
/// ra_pages = min(ra_pages, max_readahead) and the kernel offered only 128 KiB.
/// The bdi of a FUSE mount is named after its anonymous st_dev ("0:53").
void raise_readahead(const std::string& mountpoint, dev_t dev, unsigned kb) {
    if (kb == 0) return;
    std::string path =
        "/sys/class/bdi/" + std::to_string(major(dev)) + ":" + std::to_string(minor(dev)) + "/read_ahead_kb";
    std::ofstream out(path);
    out << kb << '\n';
    out.flush();
    if (!out) {
        spdlog::info("{}: readahead left at the kernel default: cannot write {} (needs root)",
                     gguf::quote_name(mountpoint), path);
        return;
    }
    spdlog::debug("{}: FUSE readahead set to {} KiB ({})", gguf::quote_name(mountpoint), kb, path);
}

/// The sd_notify STATUS= line of a mount serving `files` files at `mountpoint`.
std::string serving_status(size_t files, const std::string& mountpoint) {
    return "STATUS=serving " + std::to_string(files) + " file(s) at " + mountpoint;
}

/// The moment the mount is ready to be used: sd_notify READY=1 (sd_notify(3); nothing without
/// NOTIFY_SOCKET) with `status_line` and, for a daemonized mount, one byte to the foreground
/// process waiting in daemonize_until_ready, which then exits 0. Only the first announce()
/// acts. The destructor closes the pipe to the parent; with no byte sent, the parent then
/// reports that the mount never became ready.
class Readiness {
public:
    Readiness() = default;
    Readiness(const Readiness&) = delete;
    Readiness& operator=(const Readiness&) = delete;
    ~Readiness() {
        if (parent_fd_ >= 0) ::close(parent_fd_);
    }

    /// Takes the write end of the pipe the daemonized parent reads (closed after the byte).
    void set_parent_pipe(int fd) { parent_fd_ = fd; }

    void announce(const std::string& status_line) {
        if (announced_.exchange(true)) return;
        sd_notifyf(0, "READY=1\n%s", status_line.c_str());
        if (parent_fd_ < 0) return;
        const char byte = 'R';
        while (::write(parent_fd_, &byte, 1) < 0 && errno == EINTR) {
        }
        ::close(parent_fd_);
        parent_fd_ = -1;
    }

private:
    std::atomic<bool> announced_{false};
    int parent_fd_ = -1;
};

/// The daemon's PID, for the waiting parent's signal handler.
volatile sig_atomic_t g_daemon_pid = 0;

/// SIGINT, SIGTERM in the waiting parent: pass them on to the daemon, which unmounts and exits
/// (the parent then reports that the mount never became ready). Async-signal-safe.
extern "C" void forward_to_daemon(int sig) {
    int saved = errno;
    if (g_daemon_pid > 0) ::kill(static_cast<pid_t>(g_daemon_pid), sig);
    errno = saved;
}

/// The foreground process after daemonize_until_ready forked the daemon `pid`: waits until the
/// daemon writes its ready byte to `ready_fd` (then _exit(0)), or until the pipe closes without
/// it, i.e. the daemon is ending: then reaps it, prints one line on stderr and _exit(1).
/// Single-threaded (no thread exists before the fork), so stdio is safe here.
[[noreturn]] void wait_until_ready(const std::string& mnt, pid_t pid, int ready_fd) {
    g_daemon_pid = pid;
    struct sigaction sa {};
    sa.sa_handler = forward_to_daemon;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    sa.sa_handler = SIG_IGN;  // a closed terminal does not end the wait (the daemon rescans on SIGHUP)
    ::sigaction(SIGHUP, &sa, nullptr);
    for (;;) {
        char byte = 0;
        const ssize_t n = ::read(ready_fd, &byte, 1);
        if (n == 1) ::_exit(0);
        if (n < 0 && errno == EINTR) continue;
        break;
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            status = -1;
            break;
        }
    }
    std::string how = "ended";
    if (status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) how = "was unmounted";
    if (status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        how = "exited with status " + std::to_string(WEXITSTATUS(status));
    }
    if (status >= 0 && WIFSIGNALED(status)) {
        how = "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
    }
    std::fprintf(stderr,
                 "gguf-mount: error: %s: the daemon %s before the mount was ready (its messages went to syslog; "
                 "mount with -f to see them)\n",
                 gguf::escape(mnt).c_str(), how.c_str());
    ::_exit(1);
}

/// Daemonizes as fuse_daemonize(3) does (fork; in the child setsid, chdir("/"), stdin, stdout
/// and stderr on /dev/null), except that the foreground process does not return once the child
/// runs but once the mount is ready to be used (Readiness::announce, the daemonized
/// counterpart of READY=1): `gguf-mount SRC MNT && fusermount3 -u MNT` then never finds the
/// start-up read check's files open (EBUSY). Exit status of the foreground process: 0 when
/// ready, 1 when the daemon ended first (wait_until_ready). It closes its copy of `fuse_fd`
/// first, so a daemon killed during start-up still aborts the connection. Returns only in the
/// daemon: true with `ready` holding the pipe to the parent, false with errno set when the
/// pipe, the fork or setsid failed (then nothing was forked, or the parent reports the exit).
bool daemonize_until_ready(const std::string& mnt, int fuse_fd, Readiness* ready) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    const pid_t pid = ::fork();
    if (pid < 0) {
        int saved = errno;
        ::close(fds[0]);
        ::close(fds[1]);
        errno = saved;
        return false;
    }
    if (pid > 0) {
        ::close(fds[1]);
        if (fuse_fd >= 0) ::close(fuse_fd);
        wait_until_ready(mnt, pid, fds[0]);
    }
    ::close(fds[0]);
    ready->set_parent_pipe(fds[1]);
    if (::setsid() < 0) return false;
    if (::chdir("/") != 0) {
        // "/" always exists; keep serving from where we are (libfuse ignores this too).
    }
    const int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
        ::dup2(null_fd, 0);
        ::dup2(null_fd, 1);
        ::dup2(null_fd, 2);
        if (null_fd > 2) ::close(null_fd);
    }
    return true;
}

/// Work that needs the mount to be live, run on its own thread once the loop serves requests.
/// A child process (fs/self_read.hpp: no thread of the daemon ever waits on its own mount, so a
/// kill -9 always ends the daemon) stats the mount root (which waits until INIT is done) and
/// reads the first byte of every served file through the mount; on its reports this thread
/// raises the readahead window, logs the files that failed, and then tells systemd READY=1
/// (sd_notify(3); a no-op when NOTIFY_SOCKET is unset), so a unit ordered after
/// gguf-mount@.service finds the merged files readable. A file that cannot be read is skipped
/// and logged (one warning; "changed while starting" when its source is being written, e.g. a
/// download log: the watcher serves it again once it settles), never a reason to withhold
/// READY=1: under Type=notify systemd would otherwise restart the unit forever. `fuse_fd` is
/// the session's /dev/fuse descriptor (closed in the child); a readable `stop_fd` (the session
/// ended) kills the child, and READY=1 is not sent. READY=1 (and `ready`, the daemonized
/// parent's wait) comes only after the child has been reaped: by then it has closed every file
/// it opened in the mount, so an unmount right after finds nothing of ours busy.
void after_mount(const std::string& mountpoint, const LiveFilesystem& live, unsigned readahead_kb, int fuse_fd,
                 int stop_fd, Readiness& ready) {
    std::shared_ptr<const Snapshot> snap = live.current();
    std::vector<const Node*> nodes;
    std::vector<std::string> paths;
    std::vector<bool> empty;
    for (const Node& n : snap->nodes()) {
        if (n.directory) continue;
        nodes.push_back(&n);
        paths.push_back(mountpoint + "/" + n.path);
        empty.push_back(n.attr.st_size == 0);
    }
    SelfReader reader(mountpoint, paths, std::move(empty));
    if (!reader.start(fuse_fd)) {
        spdlog::warn("{}: cannot start the start-up read check ({}); READY=1 without it", gguf::quote_name(mountpoint),
                     std::strerror(errno));
        ready.announce(serving_status(snap->file_count(), mountpoint));
        return;
    }
    size_t skipped = 0;
    bool root = false, gone = false, done = false;
    SelfReadReport r;
    while (!gone && !done && reader.next(&r, stop_fd)) {
        switch (r.kind) {
            case SelfReadReport::kRoot:
                root = true;
                if (r.fs_type != FUSE_SUPER_MAGIC) {
                    gone = true;
                } else {
                    raise_readahead(mountpoint, static_cast<dev_t>(r.value), readahead_kb);
                }
                break;
            case SelfReadReport::kGone:
                gone = true;
                break;
            case SelfReadReport::kDone:
                done = true;
                break;
            case SelfReadReport::kFileFailed: {
                if (!root || r.value >= nodes.size()) break;
                ++skipped;
                if (live.current() != snap) break;  // SOURCE changed meanwhile: the rescan logged it
                const Node& n = *nodes[r.value];
                if (n.file->source_changed()) {
                    spdlog::warn(
                        "{}: skipped at start-up: its source changed while starting (still being written?); "
                        "served again once it settles",
                        gguf::quote_name(paths[r.value]));
                } else {
                    spdlog::warn("{}: not readable through the mount at start-up: {}", gguf::quote_name(paths[r.value]),
                                 std::strerror(r.error));
                }
                break;
            }
            default:
                break;
        }
    }
    const int status = reader.finish();
    if (!done) {
        // Unmounted or stopped before the check ended; or the reader died otherwise (killed from
        // outside, e.g. by the OOM killer): say so, and serve.
        bool stopping = false;
        pollfd p{stop_fd, POLLIN, 0};
        if (stop_fd >= 0 && ::poll(&p, 1, 0) == 1) stopping = true;
        if (gone || stopping) {
            spdlog::info("{}: the mount went away before it became ready", gguf::quote_name(mountpoint));
            return;
        }
        std::string how = "status unknown";
        if (status >= 0 && WIFSIGNALED(status)) how = std::string("killed by ") + strsignal(WTERMSIG(status));
        if (status >= 0 && WIFEXITED(status)) how = "exit status " + std::to_string(WEXITSTATUS(status));
        spdlog::warn("{}: the start-up read check ended early ({}); READY=1 without it", gguf::quote_name(mountpoint),
                     how);
    }
    std::string status_line = serving_status(snap->file_count(), mountpoint);
    if (skipped) status_line += " (" + std::to_string(skipped) + " not readable at start-up, see the log)";
    ready.announce(status_line);
    spdlog::debug("{}: ready", gguf::quote_name(mountpoint));
}

/// Starts after_mount on a thread that blocks the termination signals, so they keep
/// reaching the loop threads that libfuse's handlers must interrupt.
/// Without that thread, or when after_mount throws, the mount is announced ready at once (it
/// serves; nothing of ours reads it).
std::thread start_after_mount_thread(const std::string& mountpoint, const LiveFilesystem& live, unsigned kb,
                                     int fuse_fd, int stop_fd, Readiness& ready) {
    try {
        return gguf::start_thread_without_termination_signals([mountpoint, &live, kb, fuse_fd, stop_fd, &ready] {
            try {
                after_mount(mountpoint, live, kb, fuse_fd, stop_fd, ready);
            } catch (...) {
                // Out of memory, most likely. The reader is reaped (~SelfReader) and the mount
                // serves: say it is ready rather than keep systemd or the parent waiting.
                spdlog::warn("{}: the start-up read check failed; READY=1 without it", gguf::quote_name(mountpoint));
                ready.announce(serving_status(live.current()->file_count(), mountpoint));
            }
        }, "gm-after-mount");
    } catch (const std::exception& e) {
        spdlog::warn("{}: cannot start the post-mount thread: {}; READY=1 without the start-up read check",
                     gguf::quote_name(mountpoint), e.what());
        ready.announce(serving_status(live.current()->file_count(), mountpoint));
        return {};
    }
}

/// The write end of the watcher's wake pipe, for the SIGHUP handler (-1: none).
std::atomic<int> g_rescan_fd{-1};

/// SIGHUP: ask the watcher for a rescan. Async-signal-safe (one write(2)), errno preserved.
extern "C" void on_sighup(int) {
    int saved = errno;
    int fd = g_rescan_fd.load();
    if (fd >= 0) {
        char c = 'R';
        ssize_t n = ::write(fd, &c, 1);
        (void)n;
    }
    errno = saved;
}

/// Replaces libfuse's SIGHUP handler (which ends the session) with on_sighup; `old` receives
/// the disposition to restore.
bool install_sighup(int wake_fd, struct sigaction* old) {
    g_rescan_fd = wake_fd;
    struct sigaction sa {};
    sa.sa_handler = on_sighup;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    return ::sigaction(SIGHUP, &sa, old) == 0;
}

void restore_sighup() {
    struct sigaction sa {};
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGHUP, &sa, nullptr);
    g_rescan_fd = -1;
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

namespace {

/// What libfuse logged while unknown_mount_options asked it (fuse_set_log_func).
std::string* g_fuse_log = nullptr;

void capture_fuse_log(enum fuse_log_level, const char* fmt, va_list ap) {
    char line[1024];
    std::vsnprintf(line, sizeof line, fmt, ap);
    if (g_fuse_log) *g_fuse_log += line;
}

/// The fuse_session_new arguments for `options` (after the ones always set), as run_session
/// passes them.
std::string fuse_option_list(const std::vector<std::string>& options) {
    std::string list = "ro,default_permissions,max_read=" + std::to_string(kMaxRead);
    for (const auto& o : options) list += "," + o;
    return list;
}

}  // namespace

std::string unknown_mount_options(const std::vector<std::string>& options) {
    ArgsGuard a;
    const std::string list = fuse_option_list(options);
    if (fuse_opt_add_arg(&a.args, "gguf-mount") != 0 || fuse_opt_add_arg(&a.args, "-o") != 0 ||
        fuse_opt_add_arg(&a.args, list.c_str()) != 0) {
        return "";
    }
    std::string logged;
    g_fuse_log = &logged;
    fuse_set_log_func(capture_fuse_log);
    const fuse_lowlevel_ops& ops = lowlevel_ops();
    fuse_session* se = fuse_session_new(&a.args, &ops, sizeof ops, nullptr);
    fuse_set_log_func(nullptr);  // libfuse's default: stderr
    g_fuse_log = nullptr;
    if (se) {
        fuse_session_destroy(se);
        return "";
    }
    // libfuse 3: "fuse: unknown option(s): `-o a=1,b'" (fuse_lowlevel.c, fuse_session_new).
    const size_t open = logged.find('`');
    const size_t close = logged.rfind('\'');
    if (open == std::string::npos || close == std::string::npos || close <= open) return "";
    std::string names = logged.substr(open + 1, close - open - 1);
    std::string out;
    size_t at = 0;
    while (at < names.size()) {
        size_t end = names.find(' ', at);
        if (end == std::string::npos) end = names.size();
        std::string item = names.substr(at, end - at);
        if (item == "-o") item.clear();
        if (item.rfind("-o", 0) == 0) item.erase(0, 2);
        if (!item.empty()) out += (out.empty() ? "" : ", ") + item;
        at = end + 1;
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

int run_session(LiveFilesystem& live, const SessionOptions& opts) {
    const std::string& mnt = opts.mountpoint;

    // fuse_session_new skips argv[0] and parses the rest like a command line.
    const std::string option_list = fuse_option_list(opts.mount_options);
    ArgsGuard a;
    if (fuse_opt_add_arg(&a.args, "gguf-mount") != 0 || fuse_opt_add_arg(&a.args, "-o") != 0 ||
        fuse_opt_add_arg(&a.args, option_list.c_str()) != 0 || (opts.debug && fuse_opt_add_arg(&a.args, "-d") != 0)) {
        spdlog::error("{}: out of memory building the FUSE arguments", gguf::quote_name(mnt));
        return 1;
    }
    spdlog::debug("{}: FUSE options {}", gguf::quote_name(mnt), option_list);

    Context context;
    context.live = &live;
    DeferredReads deferred;  // threads start with the first read that waits for a server
    context.deferred = &deferred;
    context.check_callers = can_switch_credentials();
    if (context.check_callers) {
        spdlog::debug(
            "{}: each reader may open what its own user and groups may open (as root, the daemon takes "
            "on each reader's identity to check open, opendir and lookup)",
            gguf::quote_name(mnt));
    } else {
        spdlog::info(
            "{}: this daemon cannot switch to a caller's credentials (not root): access is judged from the "
            "served modes alone, narrowed by the directories on the way (README, Permissions)",
            gguf::quote_name(mnt));
    }
    const fuse_lowlevel_ops& ops = lowlevel_ops();
    std::unique_ptr<fuse_session, SessionDeleter> se(fuse_session_new(&a.args, &ops, sizeof ops, &context));
    if (!se) {
        // libfuse printed the reason (an unknown option, usually) on stderr.
        spdlog::error("{}: cannot create the FUSE session (invalid mount options: {})", gguf::quote_name(mnt),
                      option_list);
        return 1;
    }

    // Kernel notifications go through the session; the watcher calls them from its own thread.
    fuse_session* session = se.get();
    Notifier notifier;
    notifier.inval_entry = [session](uint64_t parent, const std::string& name) {
        int rc = fuse_lowlevel_notify_inval_entry(session, parent, name.c_str(), name.size());
        if (rc != 0 && rc != -ENOENT) {
            spdlog::debug("notify_inval_entry({}, {}): {}", parent, gguf::quote_name(name), std::strerror(-rc));
        }
    };
    notifier.inval_inode = [session](uint64_t ino) {
        // Negative offset: attributes only. A directory's listing is never cached (op_opendir),
        // and a file's content never changes under one inode number.
        int rc = fuse_lowlevel_notify_inval_inode(session, ino, -1, 0);
        if (rc != 0 && rc != -ENOENT) spdlog::debug("notify_inval_inode({}): {}", ino, std::strerror(-rc));
    };
    notifier.served = [mnt](size_t files) {
        sd_notify(0, serving_status(files, mnt).c_str());
    };
    std::unique_ptr<Watcher> watcher;
    try {
        watcher = std::make_unique<Watcher>(live, std::move(notifier), opts.watch);
    } catch (const std::exception& e) {
        spdlog::error("{}: {}", gguf::quote_name(mnt), e.what());
        return 1;
    }

    if (fuse_set_signal_handlers(se.get()) != 0) {
        spdlog::error("{}: cannot install the signal handlers", gguf::quote_name(mnt));
        return 1;
    }
    if (!install_sighup(watcher->wake_fd(), nullptr)) {
        fuse_remove_signal_handlers(se.get());
        spdlog::error("{}: cannot install the SIGHUP handler: {}", gguf::quote_name(mnt), std::strerror(errno));
        return 1;
    }
    if (fuse_session_mount(se.get(), mnt.c_str()) != 0) {
        restore_sighup();
        fuse_remove_signal_handlers(se.get());
        spdlog::error(
            "{}: cannot mount (see the libfuse message above; is /dev/fuse usable and fusermount3 installed?)",
            gguf::quote_name(mnt));
        return 1;
    }
    // A mount point inside SOURCE: from now on stat() of it gives the root of this mount (the
    // device number is in mountinfo at once; stat() would wait for INIT, which nobody reads
    // yet). The watcher, started below, must never walk into it.
    if (std::optional<MountInfo> m = topmost_mount(mnt)) live.skip_directory(makedev(m->major, m->minor), kRootInode);
    const size_t files = live.current()->file_count();
    spdlog::info("{}: mounted ({} file{})", gguf::quote_name(mnt), files, files == 1 ? "" : "s");

    if (!opts.foreground && opts.before_daemonize) {
        try {
            opts.before_daemonize();
        } catch (const std::exception& e) {
            // Keep serving: the file system is mounted and must not be left without a daemon.
            spdlog::warn("{}: {}", gguf::quote_name(mnt), e.what());
        }
    }
    Readiness ready;
    if (!opts.foreground ? !daemonize_until_ready(mnt, fuse_session_fd(se.get()), &ready)
                         : fuse_daemonize(1) != 0) {
        spdlog::error("{}: cannot daemonize: {}", gguf::quote_name(mnt), std::strerror(errno));
        fuse_session_unmount(se.get());
        restore_sighup();
        fuse_remove_signal_handlers(se.get());
        return 1;
    }
    if (opts.after_daemonize) opts.after_daemonize();

    // Threads may start now: the process will not fork again but for the start-up reader,
    // whose child makes async-signal-safe calls only (fs/self_read.hpp).
    // stop_reader tells the post-mount thread that the session ended (kill the reader).
    const int stop_reader = ::eventfd(0, EFD_CLOEXEC);
    std::thread post_mount =
        start_after_mount_thread(mnt, live, opts.readahead_kb, fuse_session_fd(se.get()), stop_reader, ready);
    try {
        watcher->start();
    } catch (const std::exception& e) {
        spdlog::error("{}: cannot start live updates ({}); SOURCE changes need a remount", gguf::quote_name(mnt),
                      e.what());
    }

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
    // Reads still waiting for a server: queued ones get EIO, running ones end within the HTTP
    // client's bound (remote/http.hpp). Before the session goes: they reply through it.
    deferred.stop();
    if (stop_reader >= 0 && ::eventfd_write(stop_reader, 1) != 0) {
        spdlog::debug("{}: cannot signal the start-up reader: {}", gguf::quote_name(mnt), std::strerror(errno));
    }
    // The watcher must be gone before the session: it sends notifications through it. A
    // notification can only hang if the kernel waits for a request nobody reads any more; then
    // the session and the watcher are left for the process exit to reclaim.
    bool watcher_stopped = watcher->stop(std::chrono::seconds(2));
    restore_sighup();
    if (!watcher_stopped) {
        spdlog::warn("{}: the live-update thread did not stop; leaving it to the process exit", gguf::quote_name(mnt));
        (void)watcher.release();
    }
    fuse_session_unmount(se.get());
    fuse_remove_signal_handlers(se.get());
    // Destroy (closing /dev/fuse aborts the connection) before joining: the start-up reader's
    // requests then fail at once (it was also killed above, which ends a request still queued).
    if (watcher_stopped) {
        se.reset();
    } else {
        (void)se.release();
    }
    if (post_mount.joinable()) post_mount.join();
    if (stop_reader >= 0) ::close(stop_reader);
    free_open_handles(context);

    if (uint64_t n = context.read_warnings.take_suppressed()) {
        spdlog::warn("{}: {} more shard read errors were not logged (rate limit)", gguf::quote_name(mnt), n);
    }
    if (rc < 0) {
        spdlog::error("{}: FUSE session failed: {}", gguf::quote_name(mnt), std::strerror(-rc));
        return 1;
    }
    if (rc > 0) {
        spdlog::info("{}: unmounted after signal {} ({})", gguf::quote_name(mnt), rc, strsignal(rc));
    } else {
        spdlog::info("{}: unmounted", gguf::quote_name(mnt));
    }
    return 0;
}

}  // namespace gguf_mount::fs
