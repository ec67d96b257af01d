// The inode table of a gguf-mount file system: a plain class with no libfuse dependency, so it
// can be unit-tested without a mount. fs/ops.cpp turns FUSE requests into calls on it.
//
// Layout of a mount whose SOURCE holds the sets "a-0000k-of-00002.gguf" and "b-0000k-of-00003.gguf":
//   inode 1  /          directory, mode 0555
//   inode 2  /a.gguf    regular file, the merged view of set a
//   inode 3  /b.gguf    regular file, the merged view of set b
// Inode numbers follow the sorted file names, so the same SOURCE gets the same numbers on
// every mount. Nothing changes while mounted: the table is immutable after construction and
// every method is const and thread-safe.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/virtual_file.hpp"

namespace gguf_mount::fs {

/// Inode number of the root directory. The FUSE protocol fixes it at 1 (FUSE_ROOT_ID in
/// libfuse's fuse_lowlevel.h).
inline constexpr uint64_t kRootInode = 1;

/// A file to serve: its name in the mount root and the virtual file behind it.
struct ServedFile {
    std::string name;                                  // "qwen.gguf": no '/', not "." or ".."
    std::shared_ptr<const gguf::VirtualFile> file;     // never null
};

/// One regular file of the mount.
struct FileNode {
    uint64_t ino = 0;                                  // >= 2
    std::string name;
    std::shared_ptr<const gguf::VirtualFile> file;
    struct stat attr {};                               // what getattr/lookup report
};

/// One directory entry as readdir lists it: index 0 is ".", 1 is "..", then the files in
/// inode order. The index + 1 is the readdir offset of the next entry.
struct DirEntry {
    const char* name = nullptr;                        // NUL-terminated, owned by the Filesystem
    uint64_t ino = 0;
    mode_t type = 0;                                   // S_IFDIR or S_IFREG
};

/// Attributes of a served file, derived from its sources (the shards), in st_* units:
///  - st_mode: S_IFREG | (the AND of every shard's permission bits & 0444): read bits only,
///    never write or execute bits, and never more readable than the least readable shard;
///  - st_uid/st_gid: those of the first shard;
///  - st_size: VirtualFile::size() in bytes; st_blocks: st_size in 512-byte units, rounded up
///    (stat(2)); st_blksize: 4096 bytes; st_nlink: 1;
///  - st_mtim/st_atim: the newest shard mtime; st_ctim: the newest shard ctime.
/// A virtual file without sources (not produced by VirtualFile::merged) gets mode 0444, uid 0.
struct stat file_attributes(const gguf::VirtualFile& file, uint64_t ino);

/// The immutable inode table. Thread-safe: every method is const and touches no shared state.
class Filesystem {
public:
    /// Builds the table. `files` may come in any order; they are sorted by name and numbered
    /// from 2. `source_dir` is the stat of the SOURCE directory (or of the directory holding the
    /// first shard): the root directory takes its uid and gid, mode S_IFDIR | 0555, and the
    /// newest mtime of the served files (the directory's own mtime when there are none).
    /// Throws std::invalid_argument for an empty, ".", "..", '/'-containing or duplicate name
    /// or a null file.
    Filesystem(std::vector<ServedFile> files, const struct stat& source_dir);

    /// Attributes of the root directory (inode 1).
    const struct stat& root_attr() const noexcept { return root_attr_; }

    /// The file named `name` in directory `parent`; nullptr when `parent` is not the root or
    /// no such file exists. O(log n).
    const FileNode* lookup(uint64_t parent, std::string_view name) const noexcept;

    /// The file with inode `ino`; nullptr for the root and for unknown inodes. O(1).
    const FileNode* file(uint64_t ino) const noexcept;

    /// Fills `*out` with the attributes of `ino` (root or file). Returns 0, or -ENOENT for an
    /// unknown inode.
    int getattr(uint64_t ino, struct stat* out) const noexcept;

    /// Number of root directory entries, "." and ".." included.
    size_t dir_size() const noexcept { return files_.size() + 2; }

    /// The directory entry at `index` (< dir_size()); see DirEntry for the order.
    DirEntry dir_entry(size_t index) const noexcept;

    /// All files, in inode order (sorted by name).
    const std::vector<FileNode>& files() const noexcept { return files_; }

    /// Sum of the files' sizes in bytes (reported by statfs).
    uint64_t total_bytes() const noexcept { return total_bytes_; }

private:
    std::vector<FileNode> files_;
    struct stat root_attr_ {};
    uint64_t total_bytes_ = 0;
};

/// Rate limiter for warnings emitted on the request path (a shard that went bad would
/// otherwise log one line per FUSE read, forever): lets `burst` messages through per
/// `window`, and counts the rest so the next admitted message can say how many were dropped.
/// Thread-safe (one mutex; only taken on error paths).
class WarningLimiter {
public:
    using Clock = std::chrono::steady_clock;

    /// Defaults: 5 messages per 60 seconds.
    explicit WarningLimiter(unsigned burst = 5, Clock::duration window = std::chrono::seconds(60))
        : burst_(burst), window_(window) {}

    /// Returns true when a message may be logged at time `now`. Then `*suppressed` receives
    /// the number of messages refused since the last admitted one (0 if none).
    bool admit(Clock::time_point now, uint64_t* suppressed);

    /// Returns the number of messages refused since the last admitted one and resets it
    /// (for a final "N more were not logged" line when the session ends).
    uint64_t take_suppressed();

private:
    std::mutex mutex_;
    unsigned burst_;
    Clock::duration window_;
    Clock::time_point window_start_{};
    bool started_ = false;
    unsigned in_window_ = 0;
    uint64_t suppressed_ = 0;
};

}  // namespace gguf_mount::fs
