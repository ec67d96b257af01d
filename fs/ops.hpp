// The libfuse low-level operation table of gguf-mount (handlers in fs/ops.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_set>

#include "fs/filesystem.hpp"
#include "fs/fuse_api.hpp"
#include "fs/live.hpp"

namespace gguf_mount::fs {

/// Largest read request, in bytes: 1 MiB. libfuse 3.14 caps its request buffer at 256 pages
/// (and the kernel's fs.fuse.max_pages_limit is 256), so the kernel never sends more (libfuse
/// lib/fuse_lowlevel.c, fs/fuse/inode.c). The init handler
/// sets conn->max_read to this value and fs/session.cpp passes the same `-o max_read=`:
/// libfuse 3.14 refuses to start when the two differ.
inline constexpr size_t kMaxRead = size_t{1} << 20;

/// How many asynchronous (readahead) requests the kernel may have queued for the daemon at
/// once, and from how many on it counts the connection as congested. The kernel's defaults
/// (12 and 9) are sized for its 128 KiB readahead; with the 4 MiB window gguf-mount sets, a
/// single sequential reader already queues 8 requests of 1 MiB, the connection turns congested,
/// and fuse_readahead() then skips the window's asynchronous part, whose folios the kernel has
/// already inserted and now deletes again (mm/readahead.c read_pages). With 64/48 a cold read
/// inserts each page once and deletes none (bench/trace-folios.sh traces it; the counts are in
/// bench/README.md). Root may set any value;
/// for other users the kernel clamps them to fs.fuse.max_user_bgreq / max_user_congthresh.
inline constexpr unsigned kMaxBackground = 64;
inline constexpr unsigned kCongestionThreshold = 48;

/// Attribute timeout of regular files, in seconds. An inode number is never reused for other
/// content (fs/filesystem.hpp InodeTable), so a file's attributes only change on a chmod or
/// chown of its sources, and the watcher then invalidates them (notify_inval_inode); the kernel
/// may keep them for a day. A timeout of 0 would cost one GETATTR request per read() (its
/// share of warm throughput is in bench/README.md).
inline constexpr double kFileAttrTimeoutSeconds = 86400.0;

/// Entry timeout of every name (positive and negative) and attribute timeout of directories,
/// in seconds. The watcher invalidates changed names at once (notify_inval_entry); this bound
/// covers the one race it cannot: a lookup answered from the old snapshot just after the
/// invalidation was sent. With it, a set that appears or disappears in SOURCE is seen within
/// about 1 s + the watcher's delay. Its cost is one LOOKUP per path component per second of
/// use, not per read.
inline constexpr double kEntryTimeoutSeconds = 1.0;

class DeferredReads;  // fs/deferred_reads.hpp

/// What the handlers receive as libfuse userdata (the `userdata` of fuse_session_new).
struct Context {
    LiveFilesystem* live = nullptr;
    /// Where reads that would wait for a remote server are served (not owned; null: every read
    /// is served on the worker that received it).
    DeferredReads* deferred = nullptr;
    WarningLimiter read_warnings;   // rate limit for "shard read failed" warnings
    /// Check every open, opendir and lookup on the caller's own credentials (fs/access.hpp);
    /// set when the daemon can switch credentials (can_switch_credentials()).
    bool check_callers = false;
    /// Every fi->fh handed out by open/opendir and not yet released (guarded by
    /// handles_mutex; open and release only, never read). The kernel sends no RELEASE for
    /// handles still open when the session ends on a signal: free_open_handles() frees those.
    std::mutex handles_mutex;
    std::unordered_set<uint64_t> open_files;
    std::unordered_set<uint64_t> open_dirs;
};

/// Frees the handles left in `c` once the session loop has ended (no handler runs any more).
void free_open_handles(Context& c) noexcept;

/// The operation table to pass to fuse_session_new together with a Context*.
/// Served: init, lookup, forget, forget_multi, getattr, open, read, release, opendir, readdir,
/// releasedir, statfs. With Context::check_callers, open (read on every part), opendir (read on
/// the source directory) and lookup (search on the parent's source directory) first ask
/// access_as() on the caller's uid, gid and groups and reply its errno (EACCES) when refused.
/// An open file's handle (fi->fh) holds the VirtualFile it was opened with,
/// so it keeps serving those bytes (or EIO) after SOURCE changed; an open directory's handle
/// holds a copy of the listing it was opened with (names, inode numbers, types; no files), so
/// a listing is consistent across readdir calls. An open that finds no descriptor left fails
/// with EMFILE/ENFILE (logged, rate-limited); the mount serves on.
/// Every modifying operation (setattr, mknod, mkdir, unlink, rmdir, symlink, rename, link,
/// write, create, setxattr, removexattr, fallocate, copy_file_range) and every open for
/// writing fails with EROFS. Handlers never throw: what escapes a handler is answered with
/// the errno map (reply_errno, fs/errors.hpp: EIO, ENOMEM for an allocation failure).
const fuse_lowlevel_ops& lowlevel_ops() noexcept;

}  // namespace gguf_mount::fs
