// The catalog of a model directory: what a mount of SOURCE shows, and why anything is not shown.
// Pure core (no FUSE): `gguf-mount check` prints it, the FUSE adapter serves it and rebuilds it
// when SOURCE changes.
//
// Example. SOURCE:
//   README.md
//   Q4_K_M/x-00001-of-00002.gguf  Q4_K_M/x-00002-of-00002.gguf
//   Q8_0/x-00001-of-00003.gguf    Q8_0/x-00002-of-00003.gguf        (shard 3 still downloading)
//   big.gguf.part1of2  big.gguf.part2of2
//   mmproj-f16.gguf
// Catalog entries: "Q4_K_M/x.gguf" (merged set), "README.md" (companion), "big.gguf" (byte-split),
// "mmproj-f16.gguf" (companion); directories "", "Q4_K_M", "Q8_0"; one problem:
// {"Q8_0/x.gguf", ".../Q8_0/x-00003-of-00003.gguf: missing shard 3 of 3"}.
//
// Rules (each one documented in the README, "Model directories"):
//  1. The tree mirrors SOURCE: every directory is walked, symlinks followed. A file is classified
//     by the name it has in SOURCE (the link name) and read through the link (Hugging Face cache:
//     snapshots/<rev>/x-00001-of-00002.gguf -> ../../blobs/<sha>). Names starting with '.' are
//     skipped (tool state such as .git, .cache, .locks and our own temporary files).
//  2. Byte-split pieces (gguf/byte_split.hpp) of one complete group form the logical file
//     NAME.gguf: only the first piece may start with "GGUF", and the concatenation must pass the
//     strict reader. Groups are resolved first; gguf-split sets are then found among the logical
//     names, so byte-split shards of a set work.
//  3. Every gguf-split set (PREFIX-NNNNN-of-MMMMM.gguf, validated by SplitSet::open) is served as
//     PREFIX.gguf in the same directory.
//  4. Shard files and byte-split pieces are hidden unless show_shards is set (then they are also
//     served as they are, kind Shard). Every other regular file is a companion, served as is.
//  5. An incomplete or invalid set or group is not shown; it yields one Problem with the reason.
//  6. Name clashes: a real entry of SOURCE (any file or directory with that name, shown or
//     hidden) wins over a virtual file (merged set or byte-split concatenation). Among virtual
//     candidates for one name, the one whose first physical file name sorts first (byte order)
//     wins; x-00001-of-00002.gguf beats x-00001-of-00003.gguf. Each loser is a Problem.
//  7. Symlink loops (a directory that is its own ancestor), dangling links, unreadable
//     directories and special files (FIFOs, sockets, devices) are Problems and never followed.
//  8. Attributes never widen access: a file's mode is S_IFREG | the AND of its physical parts'
//     permission bits & 0444, owner of the first part, newest mtime/ctime of the parts; a
//     directory's mode is its source's permission bits & 0555.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/layout.hpp"
#include "gguf/logical_file.hpp"

namespace gguf {

/// What a catalog entry is made of.
enum class EntryKind : uint8_t {
    MergedSet,   // a gguf-split set served merged (rule 3)
    ByteSplit,   // byte-split pieces served concatenated (rule 2)
    Companion,   // any other regular file, served as is (rule 4)
    Shard,       // a shard file or byte piece, served as is with show_shards (rule 4)
};

/// "merged-set", "byte-split", "companion", "shard" (used in `check` output, text and JSON).
const char* entry_kind_name(EntryKind kind) noexcept;

/// Attributes served for an entry (rule 8). `mode` holds permission bits only (no file type).
struct EntryAttributes {
    mode_t mode = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    timespec mtime{};
    timespec ctime{};
};

/// Attributes of a file made of `parts` (rule 8): owner and group of the first part, newest
/// mtime and ctime, and read bits only (never write or execute): the "other" bit when every part
/// grants it; the group (owner) bit when every part grants it and all parts share the group
/// (owner), or, for mixed groups (owners), only when every part is readable by everyone. So the
/// served file is never readable by someone who cannot read every part directly.
/// Examples: same owner 0644+0600 -> 0400; shard 1 nobody's 0600 + root's 0600 -> 0000.
/// No parts: mode 0444, uid/gid 0, times 0.
EntryAttributes file_attributes(const std::vector<FilePart>& parts) noexcept;

/// One file of the mount.
struct CatalogEntry {
    std::string path;                  // relative to the mount root, '/'-separated: "Q4_K_M/x.gguf"
    EntryKind kind = EntryKind::Companion;
    std::vector<LogicalFile> members;  // MergedSet: its shards in order; otherwise one file
    VirtualLayout layout;              // Source extents index parts() (flattened members)
    uint64_t tensor_count = 0;         // MergedSet and ByteSplit: tensors of the GGUF file; else 0
    EntryAttributes attr;

    /// Served size in bytes.
    uint64_t size() const noexcept { return layout.size(); }
    /// The physical files, in the order the layout's Source extents number them.
    std::vector<FilePart> parts() const { return flattened_parts(members); }
};

/// One directory of the mount. The root is path "".
struct CatalogDirectory {
    std::string path;
    EntryAttributes attr;
};

/// Something in SOURCE that is not shown, and why. `path` is the name it would have in the
/// mount (relative, e.g. "Q8_0/x.gguf"), or the source name for links and special files;
/// `reason` is one line naming the offending source file.
struct Problem {
    std::string path;
    std::string reason;
};

/// A file or directory the catalog looked at, for change detection (fs/ rescans when any of
/// them changes). `exists` is false for a dangling link.
struct WatchedPath {
    std::string path;   // absolute (as reached from SOURCE, links not resolved)
    bool directory = false;
    bool exists = true;
    struct stat st {};  // stat(2) through links when exists
};

class SplitSet;

/// The entry serving `set` merged at relative path `path` (rule 3): kind MergedSet, members the
/// shards' files in order, layout plan_merge(set), tensor_count, attributes from the physical
/// parts (rule 8). Pure; throws like plan_merge.
CatalogEntry merged_set_entry(const SplitSet& set, const std::string& path);

/// Options of build_catalog.
struct CatalogOptions {
    bool show_shards = false;  // also serve shard files and byte pieces as they are (rule 4)
    unsigned max_depth = 64;   // directories nested deeper are a Problem, not walked
};

/// The whole catalog: sorted by path (directories: "" first), problems by path then reason.
struct Catalog {
    std::string source;
    std::vector<CatalogDirectory> directories;
    std::vector<CatalogEntry> entries;
    std::vector<Problem> problems;
    std::vector<WatchedPath> watched;
};

/// Builds the catalog of `source`: a directory (walked recursively, rules above), or a regular
/// file, which must be the first shard of a set (PREFIX-00001-of-N.gguf; byte-split shards in
/// its directory are used): the catalog then holds that set alone, as PREFIX.gguf at the root
/// (or a Problem). Never throws for problems inside SOURCE; throws gguf::Error(Code::Io) only
/// when `source` itself cannot be stat()ed or is neither a directory nor a regular file.
Catalog build_catalog(const std::string& source, const CatalogOptions& options = {});

/// A model directory tree that is not on the local file system (remote/: the index pages of an
/// HTTP server). build_catalog(listing) applies the rules above to it, except those about
/// links, special files and loops (a listing has none); nothing in it is watched.
class DirectoryListing {
public:
    virtual ~DirectoryListing() = default;

    /// One entry of a directory: a subdirectory, or a file whose `part` carries its ByteSource
    /// (path = the name shown in messages, size, made-up stat as FilePart describes).
    struct Item {
        std::string name;  // one path segment, never starting with '.' to be shown
        bool directory = false;
        FilePart part;     // files only
    };

    /// The entries of directory `path` ('/'-separated, relative to the root; "" is the root),
    /// in any order. Throws gguf::Error with one line naming the directory when it cannot be
    /// listed (the catalog records it as a Problem and goes on).
    virtual std::vector<Item> list(const std::string& path) = 0;

    /// The root's name in messages and the catalog's `source` (e.g. "http://host/models"),
    /// without a trailing '/'; entries are named ROOT/PATH/NAME in problems.
    virtual std::string root() const = 0;
};

/// The catalog of `listing` (rules above). Never throws for problems inside it.
Catalog build_catalog(DirectoryListing& listing, const CatalogOptions& options = {});

}  // namespace gguf
