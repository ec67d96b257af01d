// The mount point rules of `gguf-mount SOURCE MOUNTPOINT`, checked before anything is mounted
// (README "Mount point rules"):
//  - a mount point with a live mount on it (of anything) is refused, naming what is mounted and
//    the command that unmounts it: mounts are never stacked;
//  - a dead FUSE mount there (statfs gives ENOTCONN: its daemon was killed) of type
//    fuse.gguf-mount is cleared (umount2 MNT_DETACH as root, else fusermount3 -uz) with one log
//    line, then mounted over; a dead mount of another type is refused with the command to run;
//  - SOURCE equal to MOUNTPOINT or inside it is refused (the mount would hide SOURCE);
//  - a non-empty mount point is refused unless allowed (--allow-non-empty, -o nonempty).
// A mount point inside SOURCE is allowed: the catalog walk skips it (CatalogOptions::skip).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace gguf_mount::fs {

/// One line of /proc/self/mountinfo (proc(5)), octal escapes (\040) decoded.
struct MountInfo {
    std::string mount_point;  // absolute path
    std::string fstype;       // "fuse.gguf-mount", "tmpfs", ...
    std::string source;       // mount source (the fsname of a FUSE mount)
    std::string mount_options;
    std::string super_options;
    unsigned major = 0, minor = 0;  // st_dev of the mounted file system
};

/// Parses mountinfo text (the format of /proc/self/mountinfo); malformed lines are skipped.
std::vector<MountInfo> parse_mountinfo(const std::string& text);

/// The topmost mount on `mount_point` (absolute, symlink-free) in /proc/self/mountinfo, or
/// nullopt when nothing is mounted there (or mountinfo cannot be read).
std::optional<MountInfo> topmost_mount(const std::string& mount_point);

/// `path` made absolute and symlink-free without touching a dead mount on its last component:
/// realpath(3) of the whole path when it resolves, else realpath of the parent directory plus
/// the last name (a dead FUSE mount point fails every lookup with ENOTCONN). Trailing slashes
/// are ignored. Returns `path` unchanged when not even the parent resolves.
std::string absolute_mount_path(const std::string& path);

/// What prepare_mount_point() found and did.
struct MountPointCheck {
    /// Empty when the mount may go ahead; otherwise the one-line reason (what is wrong and the
    /// command that fixes it), to log as an error with exit status 1.
    std::string refusal;
    /// One line per dead gguf-mount mount that was cleared (for the log, info level).
    std::vector<std::string> cleared;
};

/// Applies the mount point rules above to `mountpoint` (from absolute_mount_path) for serving
/// `source` (absolute and symlink-free; a directory, or a first shard whose directory counts).
/// Clears dead gguf-mount mounts (all of them, when several are stacked). Never throws for
/// what it finds on disk.
MountPointCheck prepare_mount_point(const std::string& mountpoint, const std::string& source, bool allow_non_empty);

}  // namespace gguf_mount::fs
