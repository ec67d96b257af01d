// The one errno map of the FUSE adapter: what a request whose handler failed is answered with.
// The core (gguf/, remote/) throws; fs/ops.cpp catches at the handler boundary and replies
// reply_errno() of what it caught. No libfuse here, so the map is unit-tested without a mount.
#pragma once

#include <cerrno>
#include <exception>

namespace gguf_mount::fs {

/// The errno to reply to a request whose handler threw `error`:
///  - gguf::Error: its sys_errno() when descriptors ran out (EMFILE, ENFILE: the one file fails,
///    the mount serves on), else `core_errno` (EIO; an open passes ESTALE: the file's sources
///    are no longer what was planned, and ESTALE makes the VFS look the name up again);
///  - std::bad_alloc: ENOMEM;
///  - std::system_error whose code is an errno (generic or system category): that errno;
///  - anything else (a null `error` included): EIO.
/// Never throws.
int reply_errno(std::exception_ptr error, int core_errno = EIO) noexcept;

}  // namespace gguf_mount::fs
