// The libfuse low-level operation table of gguf-mount (handlers in fs/ops.cpp).
#pragma once

#include <cstddef>

#include "fs/filesystem.hpp"
#include "fs/fuse_api.hpp"

namespace gguf_mount::fs {

/// Largest read request, in bytes: 1 MiB. libfuse 3.14 caps its request buffer at 256 pages
/// (and the kernel's fs.fuse.max_pages_limit is 256), so the kernel never sends more
/// (shared/docs/fuse-performance.md, "Read sizes the kernel actually sent"). The init handler
/// sets conn->max_read to this value and fs/session.cpp passes the same `-o max_read=`:
/// libfuse 3.14 refuses to start when the two differ.
inline constexpr size_t kMaxRead = size_t{1} << 20;

/// Entry and attribute timeout, in seconds. The served files never change while mounted, so
/// the kernel may cache names and attributes for a day; a timeout of 0 would cost one GETATTR
/// per read() (≈40 % of warm throughput, shared/docs/fuse-performance.md).
inline constexpr double kCacheTimeoutSeconds = 86400.0;

/// What the handlers receive as libfuse userdata (the `userdata` of fuse_session_new).
struct Context {
    const Filesystem* fs = nullptr;
    WarningLimiter read_warnings;   // rate limit for "shard read failed" warnings
};

/// The operation table to pass to fuse_session_new together with a Context*.
/// Served: init, lookup, getattr, open, read, release, opendir, readdir, releasedir, statfs.
/// Every modifying operation (setattr, mknod, mkdir, unlink, rmdir, symlink, rename, link,
/// write, create, setxattr, removexattr, fallocate, copy_file_range) and every open for
/// writing fails with EROFS. Handlers never throw: a catch-all replies EIO.
const fuse_lowlevel_ops& lowlevel_ops() noexcept;

}  // namespace gguf_mount::fs
