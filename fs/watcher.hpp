// Live updates of a mount: a thread that notices changes in SOURCE, rescans it off the request
// path (LiveFilesystem::rescan) and tells the kernel which cached names and attributes are
// stale. No libfuse dependency: the kernel notifications go through the Notifier callbacks
// (fs/session.cpp implements them with fuse_lowlevel_notify_inval_entry/_inval_inode).
//
// How a change is noticed, in order of speed:
//  1. inotify on every directory the last scan walked (new subdirectories are added after each
//     rescan): create, delete, rename, close-after-write and attribute changes; events are
//     allowed to settle for `settle` (at most `max_settle`) before one rescan. A watch follows
//     a directory, not a path: when a watched directory is moved or deleted (IN_MOVE_SELF,
//     IN_DELETE_SELF) its watch is dropped at once, so writes in a directory that left SOURCE
//     trigger nothing, and after each rescan every path is watched again if the directory
//     found there now is another one (device, inode), e.g. `mv new SOURCE/sub`;
//  2. every `poll_interval`, a stat() of every file and directory the last scan looked at
//     (size, mtime, ctime, inode, mode, owner), which also catches what inotify cannot see:
//     link targets outside SOURCE (Hugging Face blobs), in-place writes, network file systems;
//  3. request_rescan() (SIGHUP), immediately;
//  4. every `revalidate` (when not zero), an unconditional rescan: for sources that nothing local
//     can watch (remote URLs, remote/catalog.hpp and remote/listing.hpp): the catalog builder asks
//     the server again (a HEAD per cached file, the index pages), so a file changed on the server
//     appears as a new generation and a server that was down at mount is retried. The rescan
//     runs on this thread only: reads never wait for it.
// So a set that becomes complete is served within poll_interval + rescan time at worst
// (about 1 s), typically within settle + rescan time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "fs/live.hpp"

namespace gguf_mount::fs {

/// Kernel cache invalidation, called from the watcher thread only (never from a request
/// handler, where libfuse's notify calls can deadlock against the kernel's directory lock).
struct Notifier {
    /// The name `name` in directory inode `parent` is stale (added, removed or replaced).
    std::function<void(uint64_t parent, const std::string& name)> inval_entry;
    /// The attributes of inode `ino` are stale (and, for a directory, its listing).
    std::function<void(uint64_t ino)> inval_inode;
    /// Called after every rescan with the number of served files (e.g. for sd_notify STATUS=).
    std::function<void(size_t files)> served;
};

/// Logs what a rescan found: one info line per file now served, no longer served or served
/// with new content, one line per new problem (log_problem), one warning per entry left out.
void log_rescan(const RescanResult& result, const std::string& source);

/// Logs one problem of a scan: an error, or an info line for a set not complete yet
/// (gguf::Problem::incomplete: shards still arriving are a state, not a fault).
void log_problem(const gguf::Problem& problem);

class Watcher {
public:
    /// Timing of change detection.
    struct Options {
        std::chrono::milliseconds poll_interval{1000};  // stat() poll of every watched path
        std::chrono::milliseconds settle{100};          // quiet time after an inotify event
        std::chrono::milliseconds max_settle{500};      // rescan at the latest this long after one
        std::chrono::milliseconds revalidate{0};        // unconditional rescan period (0: never)
    };

    /// Creates the wake pipe (so wake_fd() is usable at once, e.g. by a signal handler installed
    /// before daemonizing: pipes survive fork). Throws std::system_error when it cannot.
    Watcher(LiveFilesystem& live, Notifier notifier, Options options);
    Watcher(LiveFilesystem& live, Notifier notifier) : Watcher(live, std::move(notifier), Options{}) {}
    Watcher(const Watcher&) = delete;
    Watcher& operator=(const Watcher&) = delete;
    /// Stops the thread (stop() with a 5 s limit) and closes the pipe.
    ~Watcher();

    /// Write end of the wake pipe (non-blocking): writing 'R' requests a rescan. For signal
    /// handlers, which may only call write(2).
    int wake_fd() const noexcept { return wake_write_; }

    /// Starts the thread, with SIGINT, SIGTERM and SIGHUP blocked in it (they must reach the
    /// FUSE loop threads). Call after fuse_daemonize: no thread may exist before the fork.
    void start();

    /// Asks for a rescan now (async-signal-safe).
    void request_rescan() noexcept;

    /// Number of rescans done by the thread so far.
    uint64_t rescans() const noexcept { return rescans_.load(); }

    /// Asks the thread to finish and waits up to `timeout` for it. Returns true when it finished
    /// (or never started). False means it is stuck (in a kernel notification that waits for a
    /// request nobody will answer any more): the thread is detached, and this object and the
    /// FUSE session it notifies must then be leaked, not destroyed.
    bool stop(std::chrono::milliseconds timeout);

private:
    void run();
    void rescan_and_notify(const char* why);
    void sync_inotify_watches();
    bool any_watched_path_changed() const;
    /// Reads the pending inotify events; returns true when one of them calls for a rescan.
    bool read_inotify_events();
    /// Removes watch `wd` and every path mapped to it.
    void drop_watch(int wd, bool remove_from_kernel);

    LiveFilesystem& live_;
    Notifier notifier_;
    Options options_;
    int wake_read_ = -1;
    int wake_write_ = -1;
    int inotify_fd_ = -1;
    struct Watch {
        int wd;
        dev_t dev;  // the directory the watch was added for
        ino_t ino;
    };
    std::unordered_map<int, std::string> watches_;      // inotify wd -> directory
    std::unordered_map<std::string, Watch> watch_by_path_;
    bool inotify_full_logged_ = false;
    std::vector<gguf::WatchedPath> watched_;           // what the last rescan looked at
    std::thread thread_;
    std::atomic<bool> stopping_{false};
    std::atomic<uint64_t> rescans_{0};
    std::string last_rescan_failure_;  // the message of the last failed rescan, "" after a good one
    std::mutex done_mutex_;
    std::condition_variable done_cv_;
    bool done_ = false;
};

}  // namespace gguf_mount::fs
