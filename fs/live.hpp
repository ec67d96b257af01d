// The live file system of one mount: the current Snapshot of SOURCE, swapped atomically when a
// rescan finds SOURCE changed, plus the inodes the kernel still holds. No libfuse dependency.
//
// Threads: FUSE request handlers call current(), remember_lookup(), forget() and
// known_attributes(); exactly one thread at a time calls rescan() (the mount's watcher thread,
// or the main thread before any other thread exists). Reads never touch this object: an open
// file's handle holds its own shared_ptr to the VirtualFile it was opened with.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "fs/filesystem.hpp"
#include "gguf/model/catalog.hpp"

namespace gguf_mount::fs {

/// What one rescan did.
struct RescanResult {
    SnapshotChanges changes;             // for kernel cache invalidation and the log
    std::vector<gguf::Problem> new_problems;  // problems not reported by an earlier scan
    std::vector<gguf::Problem> new_notes;     // catalog notes (narrowed access) not reported before
    std::vector<std::string> errors;     // entries left out because they could not be opened
    size_t unpinned = 0;                 // sets served on demand: past the descriptor budget
};

/// Descriptors the pinned files of one mount may hold (Snapshot::build's pin_budget) under a
/// soft RLIMIT_NOFILE of `soft_limit`: half of what is left after 64 for the daemon itself
/// (FUSE, inotify, pipes, logs), so the other half serves on-demand opens of companions.
/// 1,024 -> 480 (240 shards pinned, each with room for its O_DIRECT descriptor).
size_t descriptor_budget(uint64_t soft_limit) noexcept;

class LiveFilesystem {
public:
    /// Serves `source` (a directory or a first shard, see gguf::build_catalog) with `options`.
    /// Nothing is scanned until the first rescan(); until then the tree is an empty root.
    LiveFilesystem(std::string source, gguf::CatalogOptions options);

    /// Builds a catalog of something that is not a local path (remote/catalog.hpp: a URL);
    /// may throw gguf::Error like gguf::build_catalog for an unusable SOURCE.
    using CatalogBuilder = std::function<gguf::Catalog()>;
    /// Serves what `build` returns; `source` is only its name in logs (a redacted URL).
    static std::unique_ptr<LiveFilesystem> with_builder(std::string source, CatalogBuilder build);

    /// Rebuilds the catalog of SOURCE, builds the next snapshot (reusing unchanged files and
    /// their inode numbers) and publishes it atomically. SOURCE that vanished or cannot be read
    /// gives an empty root and a Problem. Problems are reported once: new_problems holds those
    /// whose masked reason (problem_key: long numbers masked, so a shard that keeps growing during a
    /// download is reported once) was not yet reported for their path while the path kept
    /// having a problem; once a path scans clean it is forgotten. Catalog notes (access
    /// narrowed, rule 8) are reported once the same way, in new_notes. A catalog builder
    /// (with_builder: a remote URL) that throws gguf::Error(Io) with an errno other than ENOENT
    /// (server unreachable) while files are served keeps the current snapshot unchanged and
    /// reports "...; still serving the last version found" once; ENOENT (404/410) empties the
    /// root like a vanished local SOURCE. Never throws for
    /// problems in SOURCE; may throw std::bad_alloc.
    RescanResult rescan();

    /// The current snapshot (never null): one std::atomic_load of a shared_ptr (libstdc++ guards
    /// it with a tiny per-address mutex pool, held for a pointer copy). Used by lookup, getattr,
    /// open, opendir and statfs; never by read, which only touches its handle.
    std::shared_ptr<const Snapshot> current() const;

    /// Every path the last scan looked at (for change detection by the watcher).
    std::vector<gguf::WatchedPath> watched() const;

    /// Records that the kernel got a reference to inode `ino` (a successful lookup reply) with
    /// attributes `attr`. Thread-safe.
    void remember_lookup(uint64_t ino, const struct stat& attr);

    /// The kernel dropped `n` references to `ino` (FUSE forget). Thread-safe.
    void forget(uint64_t ino, uint64_t n);

    /// Attributes of an inode the kernel still holds but the current snapshot no longer has
    /// (a file removed or replaced while open). Returns false when unknown. Thread-safe.
    bool known_attributes(uint64_t ino, struct stat* out) const;

    /// Number of inodes the kernel holds references to (for tests and the log).
    size_t known_inodes() const;

    /// Never walk the directory (dev, ino) again (CatalogOptions::skip): the root of this mount
    /// when the mount point lies inside SOURCE. Call only from the thread that calls rescan(),
    /// or before the thread that rescans starts.
    void skip_directory(dev_t dev, ino_t ino) { options_.skip.emplace_back(dev, ino); }

    /// SOURCE as given to the constructor (a directory or a first shard).
    const std::string& source() const noexcept { return source_; }

private:
    std::string source_;
    gguf::CatalogOptions options_;
    CatalogBuilder build_;  // empty: gguf::build_catalog(source_, options_)
    InodeTable inodes_;  // rescan thread only
    std::shared_ptr<const Snapshot> current_;  // std::atomic_load / std::atomic_store only
    /// Rescan thread only: for each path with a problem in the last scan, the masked reasons
    /// (problem_key) already reported while it kept having one.
    std::map<std::string, std::set<std::string>> reported_;
    std::vector<gguf::WatchedPath> watched_;   // guarded by watched_mutex_
    mutable std::mutex watched_mutex_;

    struct Known {
        uint64_t lookups = 0;
        struct stat attr {};
    };
    std::unordered_map<uint64_t, Known> known_;  // guarded by known_mutex_
    mutable std::mutex known_mutex_;
};

/// The masked form of a problem used to report it once: "path\x1freason" with every run of 4
/// or more decimal digits replaced by '#' (sizes and offsets that move while a shard is being
/// written; small numbers such as "missing shard 6 of 7" are kept). Exposed for tests.
std::string problem_key(const gguf::Problem& p);

}  // namespace gguf_mount::fs
