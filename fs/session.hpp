// Running a gguf-mount file system: create the libfuse session, mount, daemonize, serve
// requests until unmounted or signalled, unmount and clean up.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "fs/live.hpp"
#include "fs/watcher.hpp"

namespace gguf_mount::fs {

/// Default FUSE readahead window in KiB written to /sys/class/bdi/<dev>/read_ahead_kb after
/// mounting. The kernel starts every FUSE mount at 128 KiB, which also caps read requests at
/// 128 KiB; a 1–4 MiB window lets the kernel send 1 MiB requests (bench/README.md has the gain).
inline constexpr unsigned kDefaultReadaheadKb = 4096;

/// How to run the session.
struct SessionOptions {
    /// Absolute path of the mount point (the daemon chdirs to / when daemonizing).
    std::string mountpoint;
    /// Mount options for fuse_session_new, one option per element ("allow_other",
    /// "fsname=/models", "subtype=gguf-mount"). run_session always adds "ro",
    /// "default_permissions" and "max_read=1048576" (kMaxRead, see fs/ops.hpp).
    std::vector<std::string> mount_options;
    bool foreground = false;     // false: daemonize after mounting; the foreground process exits once ready
    bool debug = false;          // libfuse's -d: print every request to stderr (use with foreground)
    bool single_thread = false;  // fuse_session_loop instead of fuse_session_loop_mt
    /// FUSE readahead window in KiB to set after mounting; 0 keeps the kernel default.
    /// Failing to set it (non-root) is logged at info level and is not an error.
    unsigned readahead_kb = kDefaultReadaheadKb;
    /// Called right before the daemonizing fork when !foreground, while stderr still works:
    /// the place to switch logging to syslog. May be empty.
    std::function<void()> before_daemonize;
    /// Called right after daemonizing, in the daemon (also in the foreground, where it does not fork),
    /// before any thread of the session starts: the place to let threads start that must not
    /// exist across the fork. May be empty.
    std::function<void()> after_daemonize;
    /// Live updates (fs/watcher.hpp): poll interval and inotify settling time.
    Watcher::Options watch;
};

/// Mounts `live` (already scanned once: LiveFilesystem::rescan) on opts.mountpoint and serves it
/// until the file system is unmounted (fusermount3 -u, umount) or SIGINT/SIGTERM arrives
/// (libfuse's fuse_set_signal_handlers; then it unmounts itself). While mounted, a Watcher
/// thread rescans SOURCE when it changes and invalidates the kernel's caches; SIGHUP asks it
/// for a rescan at once (libfuse's SIGHUP handler, which would exit, is replaced).
/// Returns the process exit status: 0 after a clean unmount, 1 when the session cannot be
/// created, mounted or run (each failure logged as one line naming the mount point).
/// Daemonized (!opts.foreground), the foreground process does not return: it exits 0 only once
/// the mount is ready to be used, at the moment READY=1 is sent (the start-up read check below
/// has ended and its process is reaped, so nothing of ours keeps the mount busy and
/// `fusermount3 -u` right after succeeds), or exits 1 with one line on stderr when the daemon
/// ends before that; SIGINT and SIGTERM it receives meanwhile are passed on to the daemon.
/// `live` must outlive the call.
///
/// Order (libfuse 3.14 examples, hello_ll.c): fuse_session_new, fuse_set_signal_handlers (then
/// our SIGHUP handler), fuse_session_mount, daemonize (fuse_daemonize(3)'s steps, with the
/// foreground process waiting for readiness), watcher and post-mount threads,
/// loop, stop the watcher, fuse_session_unmount, fuse_remove_signal_handlers,
/// fuse_session_destroy. No thread exists before the daemonizing fork. The post-mount thread has a
/// forked child read every served file once through the mount (fs/self_read.hpp; the child is
/// killed when the session ends), raises the readahead window, logs what was not readable and
/// sends sd_notify READY=1.
int run_session(LiveFilesystem& live, const SessionOptions& opts);

/// The items of `options` (FUSE mount options, one per item, as SessionOptions::mount_options)
/// that libfuse does not know, as libfuse names them ("cache_dirx=/x"; several joined by ", "),
/// or "" when it knows every one. Asked of libfuse itself (fuse_session_new parses them as
/// run_session would, then the session is destroyed: nothing is mounted, no request is sent),
/// so the answer holds for the libfuse this binary runs with. libfuse's own message is kept off
/// stderr. Errors other than unknown options (out of memory) give "".
std::string unknown_mount_options(const std::vector<std::string>& options);

/// Makes sure file descriptors 0, 1 and 2 are open (on /dev/null if need be), so a shard opened
/// later never gets one of them: daemonizing redirects 0-2 to /dev/null and would
/// silently replace it (squashfuse ll_main.c does the same). Returns false if /dev/null cannot
/// be opened.
bool ensure_standard_fds_open() noexcept;

/// Escapes ',' and '\' with a backslash so that `value` survives libfuse's comma-separated
/// option parsing (fuse_opt.h, fuse_opt_add_opt_escaped): "a,b" -> "a\,b".
std::string escape_option_value(const std::string& value);

}  // namespace gguf_mount::fs
