// The inode tree of a gguf-mount file system: plain classes with no libfuse dependency, so they
// can be unit-tested without a mount. fs/ops.cpp turns FUSE requests into calls on them.
//
// A Snapshot is an immutable tree built from a gguf::Catalog. Example, for a SOURCE holding
// README.md and Q4_K_M/x-0000k-of-00002.gguf (first mount, inodes in path order):
//   inode 1  /                 directory, mode 0555
//   inode 2  /Q4_K_M           directory
//   inode 3  /Q4_K_M/x.gguf    regular file, the merged view of the set
//   inode 4  /README.md        regular file, the companion as it is
// The live file system (fs/live.hpp) replaces the snapshot when SOURCE changes. Inode numbers
// come from an InodeTable that lives as long as the mount: the same path with the same content
// keeps its number across snapshots, and a number is never given to different content (a file
// whose sources changed gets a fresh number), so the kernel's caches for an inode never go stale.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/model/catalog.hpp"
#include "gguf/bytes/virtual_file.hpp"

namespace gguf_mount::fs {

/// Inode number of the root directory. The FUSE protocol fixes it at 1 (FUSE_ROOT_ID in
/// libfuse's fuse_lowlevel.h).
inline constexpr uint64_t kRootInode = 1;

/// Allocates inode numbers for one mount: path + content fingerprint -> number.
/// Not thread-safe; used by whoever builds snapshots (one thread at a time).
class InodeTable {
public:
    /// The number for `path` with content `fingerprint`: the one it had before when both are
    /// unchanged, else a new number (2, 3, ... in call order; never reused). The root path ""
    /// is always kRootInode.
    uint64_t assign(const std::string& path, const std::string& fingerprint);

    /// Number of paths remembered.
    size_t size() const noexcept { return table_.size(); }

    /// Forgets every path for which `keep` is false (paths no longer served), so the table
    /// holds the names of one snapshot, not every name ever seen. Numbers are still never
    /// reused: a forgotten path that comes back gets a fresh number.
    void retain(const std::function<bool(const std::string& path)>& keep);

private:
    struct Slot {
        uint64_t ino;
        std::string fingerprint;
    };
    std::unordered_map<std::string, Slot> table_;
    uint64_t next_ = kRootInode + 1;
};

/// The bytes of one served file: its planned layout and physical parts, and the
/// gguf::VirtualFile that reads them, which holds one descriptor per part (plus, once an
/// uncached random read needs it, an O_DIRECT one). Descriptors are bounded by design:
///  - pinned (pin()): opened once and kept for the life of this object (merged sets and
///    byte-split files, while the mount's descriptor budget allows: see Snapshot::build);
///  - otherwise opened on demand by acquire() (a FUSE open) and closed when the last holder
///    of the returned pointer lets go (the last FUSE release), so a SOURCE of 10,000
///    companions needs descriptors only for the files clients hold open.
/// Thread-safe.
class FileSource {
public:
    /// `layout`: the served bytes (Source extent k reads parts[k]); `parts` with the stat the
    /// layout was planned from (checked at every open, see gguf::VirtualFile::open).
    FileSource(gguf::VirtualLayout layout, std::vector<gguf::FilePart> parts);

    /// Served size in bytes.
    uint64_t size() const noexcept { return size_; }
    /// The physical parts, as planned.
    const std::vector<gguf::FilePart>& parts() const noexcept { return parts_; }
    /// Descriptors a pinned file keeps: one per part, plus one O_DIRECT per part at most.
    size_t pinned_descriptors() const noexcept { return 2 * parts_.size(); }

    /// Opens every part now and keeps them open. Throws gguf::Error like
    /// gguf::VirtualFile::open (Code::Io with sys_errno() EMFILE/ENFILE when descriptors ran
    /// out; the file then stays usable on demand).
    void pin();
    bool pinned() const;

    /// The open file: the pinned one, the one an earlier acquire() handed out and someone
    /// still holds, or one opened now. Throws gguf::Error like gguf::VirtualFile::open (a part
    /// changed or vanished since it was planned: Code::BadSplit / Code::Io ENOENT).
    std::shared_ptr<const gguf::VirtualFile> acquire() const;

    /// True when a part is no longer what it was planned from (gguf::part_changed, one stat(2)
    /// per local part). For log messages.
    bool source_changed() const noexcept;

    /// Number of gguf::VirtualFile objects currently open (pinned or held), for tests.
    static size_t open_count() noexcept;

private:
    uint64_t size_ = 0;
    std::vector<gguf::FilePart> parts_;
    mutable std::mutex mutex_;
    gguf::VirtualLayout layout_;  // moved into pinned_ by pin() (one copy of a big header)
    std::shared_ptr<const gguf::VirtualFile> pinned_;
    mutable std::weak_ptr<const gguf::VirtualFile> open_;
};

/// One node of a snapshot: a directory or a regular file.
struct Node {
    uint64_t ino = 0;
    uint64_t parent = kRootInode;  // inode of the parent directory (the root is its own parent)
    std::string name;              // last path component; "" for the root
    std::string path;              // relative path in the mount: "Q4_K_M/x.gguf"; "" for the root
    bool directory = false;
    struct stat attr {};           // what getattr and lookup report
    std::shared_ptr<FileSource> file;  // regular files: never null
    gguf::EntryKind kind = gguf::EntryKind::Companion;  // regular files
    bool edited = false;           // served with KV edits (overrides, a sidecar): a new header
    std::string fingerprint;       // the content identity the inode number was assigned for
    /// The source paths a direct reader would open (as reached from SOURCE): a file's parts
    /// (gguf::CatalogEntry::access_paths), a directory's source directory; fs/ops.cpp checks
    /// the caller's access on them. Empty for a directory the catalog gave no source.
    std::vector<std::string> access_paths;
    std::vector<size_t> children;  // directories: indices into Snapshot::nodes(), sorted by name
};

/// True for the files served from a plan over their sources (merged sets, byte-split files,
/// shard-view shards): pinned while the descriptor budget allows, random uncached reads O_DIRECT.
/// Companions and shards shown as they are: false.
inline bool planned_kind(gguf::EntryKind kind) noexcept {
    return kind == gguf::EntryKind::MergedSet || kind == gguf::EntryKind::ByteSplit ||
           kind == gguf::EntryKind::SplitShard;
}

/// Identity of an entry's content: kind, size, every physical part's path, device, inode,
/// size and mtime, for an entry with KV edits the digest of its rendered header
/// (CatalogEntry::header_digest), and its identity (what else makes the bytes: the split
/// options and shard of a shard view). Two catalog entries with equal fingerprints serve the
/// same bytes.
std::string entry_fingerprint(const gguf::CatalogEntry& entry);

/// stat(2) attributes for a catalog entry served as inode `ino`: S_IFREG | attr.mode, uid, gid,
/// st_size = entry.size() bytes, st_blocks in 512-byte units rounded up, st_blksize 4096,
/// st_nlink 1, st_mtim/st_atim = attr.mtime, st_ctim = attr.ctime.
struct stat entry_stat(const gguf::CatalogEntry& entry, uint64_t ino);

/// An immutable directory tree. Thread-safe: every method is const.
class Snapshot {
public:
    /// Builds the tree of `catalog`, numbering nodes with `inodes`. Files reuse the
    /// FileSource of the node with the same path and inode in `previous` (if given), so open
    /// descriptors and planned layouts carry over. New merged sets and byte-split files are
    /// pinned (FileSource::pin) in path order while the descriptors of all pinned files stay
    /// within `pin_budget`; every other file (companions, shards) is opened on demand. A set
    /// past the budget (or whose pin found no descriptor left) is opened once to check it and
    /// then served on demand; `*unpinned` (if given) counts those. A set that cannot be opened
    /// (it changed or vanished since the catalog was built, or no descriptor is left at all) is
    /// left out, its one-line reason appended to `*errors`. Directory attributes: S_IFDIR | their catalog mode,
    /// st_nlink 2 + subdirectories. Forgets (InodeTable::retain) the paths it does not serve.
    static std::shared_ptr<const Snapshot> build(const gguf::Catalog& catalog, InodeTable& inodes,
                                                 const Snapshot* previous, std::vector<std::string>* errors,
                                                 size_t pin_budget = SIZE_MAX, size_t* unpinned = nullptr);

    /// The root directory.
    const Node& root() const noexcept { return nodes_.front(); }
    /// Every node; index 0 is the root, then directories and files in path order.
    const std::vector<Node>& nodes() const noexcept { return nodes_; }

    /// The node with inode `ino`, or nullptr. O(1).
    const Node* node(uint64_t ino) const noexcept;
    /// The child `name` of directory `parent`, or nullptr (also when `parent` is unknown or a
    /// file). O(log children).
    const Node* lookup(uint64_t parent, std::string_view name) const noexcept;
    /// The node at relative `path` ("" is the root), or nullptr. O(log n).
    const Node* find(const std::string& path) const noexcept;

    /// Number of regular files, and the sum of their sizes in bytes (statfs).
    size_t file_count() const noexcept { return file_count_; }
    uint64_t total_bytes() const noexcept { return total_bytes_; }

private:
    std::vector<Node> nodes_;
    std::unordered_map<uint64_t, size_t> by_ino_;
    std::map<std::string, size_t, std::less<>> by_path_;
    size_t file_count_ = 0;
    uint64_t total_bytes_ = 0;
};

/// What changed between two snapshots, as the kernel must be told (fs/watcher.cpp sends it with
/// fuse_lowlevel_notify_inval_entry / _inval_inode).
struct SnapshotChanges {
    struct Entry {
        uint64_t parent;   // directory inode the name is (or was) in
        std::string name;
    };
    std::vector<Entry> entries;            // names added, removed or now pointing to another inode
    std::vector<uint64_t> attributes;      // inodes kept whose attributes changed (dirs included)
    std::vector<std::string> added;        // paths of files now served
    std::vector<std::string> removed;      // paths of files no longer served
    std::vector<std::string> replaced;     // paths of files served with new content (new inode)
    bool empty() const noexcept { return entries.empty() && attributes.empty(); }
};

/// Compares `before` and `after` by path. Pure.
SnapshotChanges diff_snapshots(const Snapshot& before, const Snapshot& after);

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
