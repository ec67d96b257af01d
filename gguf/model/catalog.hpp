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
//  2. Byte-split pieces (gguf/model/byte_split.hpp) of one complete group form the logical file
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
//     Each directory (device, inode) is walked once: a later path to a directory already
//     walked (another link to it) is not shown, and is a Problem naming where it is shown.
//     At most max_entries names are listed in all; the cut is a Problem.
//  8. Attributes never widen access: a served mode grants a class (owner, group, other of the
//     served uid:gid) read (and, for directories, search) only when every member of that class
//     could open the source directly by the path it is reached through: read on every physical
//     part, search on every directory the kernel walks to reach it (from / down, through every
//     symlink: the path as reached and the resolved target, HF-cache links included), see
//     classes_passing(). Owner and group are those of the first part; times the newest of the
//     parts. Never write or execute bits on files. A POSIX ACL (system.posix_acl_access) on a
//     part or a directory on the way cannot be judged from mode bits: such an entry is served
//     owner-only, or mode 0000 when the served owner does not own every ACL'd object, and a
//     Note says so. A path that cannot be walked (it vanished, too many links) is served 0000.
//  9. A regular file that is not a shard by name but whose GGUF header says split.count > 1 is
//     never served as it is: when it holds a whole set joined with cat (shard 1 at byte 0, the
//     other shards after it, SplitSet::open_concatenated) it is served under its own name as
//     the merged model (kind MergedSet, members = byte ranges of the file); otherwise (a lone
//     shard under another name, shards out of order, truncated, trailing bytes) it is a Problem
//     saying what to run instead. A SOURCE file is treated the same way. A byte-split file with
//     such a header is a Problem too.
// 10. A name whose path cannot be looked at (longer than PATH_MAX, or lstat fails for another
//     reason than having vanished) is a Problem naming the path, cut to its first and last bytes.
// 11. KV overrides (gguf/model/kv_override.hpp, gguf/model/catalog_kv.hpp): a file NAME.gguf.kv
//     (a sidecar) is never shown; its edits apply to the model served as NAME.gguf in the same
//     directory (a merged set whose first shard is there, a byte-split or cat-joined file, or a
//     single unsplit GGUF file, then served as a virtual file: the new header and the original
//     data range), followed by CatalogOptions::overrides, which apply to every model (every
//     .gguf file that is a GGUF file). A sidecar with a bad line, or edits that do not fit the
//     model, make that model a Problem naming the file and line (not shown); a sidecar with no
//     model of its name is a Problem too. Shards served as they are (show_shards) are not edited.
//     A local sidecar and its @FILEs follow the rules of gguf/model/kv_override.hpp (no links,
//     @FILE beneath the sidecar's folder, bounded reads); one that may not speak for the model
//     (another owner than the daemon's euid or the model's, or group/other-writable) is not
//     applied: the model is served without it and a Note says why. The served mode and mtime
//     are judged over the sidecar and its @FILEs too (CatalogEntry::edit_files). A real file
//     NAME.gguf that would shadow a merged set (rule 6) must pass the same owner rule against
//     the set's first shard; else the merged set is served and the file is a Problem.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gguf/bytes/layout.hpp"
#include "gguf/bytes/logical_file.hpp"
#include "gguf/model/access.hpp"
#include "gguf/model/split_plan.hpp"
#include "gguf/model/kv_override.hpp"

namespace gguf {

/// An immutable list of strings that copies of it share (a reference-counted vector).
class SharedStrings {
public:
    SharedStrings() = default;
    explicit SharedStrings(std::vector<std::string> items)
        : items_(std::make_shared<const std::vector<std::string>>(std::move(items))) {}
    bool empty() const noexcept { return !items_ || items_->empty(); }
    size_t size() const noexcept { return items_ ? items_->size() : 0; }
    std::vector<std::string>::const_iterator begin() const noexcept { return list().begin(); }
    std::vector<std::string>::const_iterator end() const noexcept { return list().end(); }
    const std::string& operator[](size_t i) const { return list()[i]; }
    /// The strings (an empty list when there are none).
    const std::vector<std::string>& list() const noexcept {
        static const std::vector<std::string> kNone;
        return items_ ? *items_ : kNone;
    }
    friend bool operator==(const SharedStrings& a, const std::vector<std::string>& b) { return a.list() == b; }

private:
    std::shared_ptr<const std::vector<std::string>> items_;
};

/// What a catalog entry is made of.
enum class EntryKind : uint8_t {
    MergedSet,   // a gguf-split set served merged (rule 3)
    ByteSplit,   // byte-split pieces served concatenated (rule 2)
    Companion,   // any other regular file, served as is (rule 4)
    Shard,       // a shard file or byte piece, served as is with show_shards (rule 4)
    SplitShard,  // one shard of a model shown as gguf-split shards (CatalogOptions::split_view)
};

/// "merged-set", "byte-split", "companion", "shard", "split-shard" (used in `check` output, text and JSON).
const char* entry_kind_name(EntryKind kind) noexcept;

/// How `check`'s text and the mount's "serving" lines name an entry of `kind` at `path`:
/// "single-file model" for a companion whose name ends in ".gguf" (an unsplit model, a registry
/// or store model of one GGUF layer: served as it is, but to a reader it is the model), else
/// entry_kind_name. JSON keeps entry_kind_name.
const char* entry_label(EntryKind kind, const std::string& path) noexcept;

/// One file of the mount.
struct CatalogEntry {
    std::string path;                  // relative to the mount root, '/'-separated: "Q4_K_M/x.gguf"
    EntryKind kind = EntryKind::Companion;
    std::vector<LogicalFile> members;  // MergedSet: its shards in order; otherwise one file
    VirtualLayout layout;              // Source extents index parts() (flattened members); empty
                                       // when built without CatalogOptions::keep_layouts
    uint64_t bytes = 0;                // served size in bytes (layout.size() when it was planned)
    uint64_t tensor_count = 0;         // MergedSet and ByteSplit: tensors of the GGUF file; else 0
    EntryAttributes attr;
    /// SplitShard: the path the model has in a merged mount ("Q4_K_M/x.gguf"); else empty.
    std::string view_of;
    /// What besides the members' parts makes the served bytes (part of the entry's content
    /// identity, fs::entry_fingerprint): for a SplitShard the split options and "shard i of N".
    std::string identity;
    /// Rule 11: the KV edits in force (KvEdit::spelled(), in the order applied; empty: none).
    /// Shared, not copied, by the shards of a shard view (a 16 MiB sidecar's lines, copied
    /// into each of 100 shards, held 1.65 GB).
    SharedStrings kv_edits;
    /// Rule 11: with edits, the lowercase hex sha256 of the rendered header bytes (the header
    /// then depends on more than the parts, so it is part of the entry's identity); else "".
    std::string header_digest;

    /// Rule 11: the local files of the model's folder its edits were read from (its sidecar,
    /// the sidecar's str:@FILEs; stat of what was read). They are judged with the parts by
    /// rule 8 (mode, newest mtime) and checked by fs/ like them (access_paths). Command-line
    /// edits' files are the operator's own and not listed.
    std::vector<FilePart> edit_files;

    /// Served size in bytes.
    uint64_t size() const noexcept { return bytes; }
    /// What rule 8 judges the served attributes over: parts(), then edit_files.
    std::vector<FilePart> judged_parts() const;
    /// The physical files, in the order the layout's Source extents number them.
    std::vector<FilePart> parts() const { return flattened_parts(members); }
    /// The paths a direct reader opens to read this entry: every part's path as reached from
    /// SOURCE (links not resolved), in parts() order, then edit_files'. fs/ checks the caller's
    /// access on these.
    std::vector<std::string> access_paths() const;
};

/// One directory of the mount. The root is path "".
struct CatalogDirectory {
    std::string path;
    EntryAttributes attr;
    std::string source;  // the source directory as reached from SOURCE (links not resolved)
};

/// Something in SOURCE that is not shown, and why. `path` is the name it would have in the
/// mount (relative, e.g. "Q8_0/x.gguf"), or the source name for links and special files;
/// `reason` names the offending source file. Both hold names as raw bytes: print them through
/// gguf::escape (common/text.hpp), which also makes `reason` one line.
struct Problem {
    std::string path;
    std::string reason;
    /// Rule 11: the model is not shown because an edit of CatalogOptions::overrides (the command
    /// line) does not fit it; a mount refuses to start over it.
    bool refused_override = false;
    /// A split set some of whose shards are not there (yet): usually a download in progress,
    /// shown once the last shard arrives (a mount logs it at info level, not as an error).
    bool incomplete = false;
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

/// The same with KV edits (rule 11): layout plan_merge(set, overrides), kv_edits and
/// header_digest set when `overrides` is not empty. Throws like plan_merge(set, overrides).
CatalogEntry merged_set_entry(const SplitSet& set, const std::string& path, const KvOverrides& overrides);

/// Options of build_catalog.
struct CatalogOptions {
    bool show_shards = false;  // also serve shard files and byte pieces as they are (rule 4)
    unsigned max_depth = 64;   // directories nested deeper are a Problem, not walked
    /// Most names (files, directories, links) listed under SOURCE in all; the walk stops there
    /// and the cut is one Problem (rule 7). Bounds the time and memory of one scan.
    size_t max_entries = 100000;
    /// Keep each entry's planned layout (the daemon serves from it). Without it (`check`),
    /// a merged set's layout, which holds its whole rendered header, is released as soon as the
    /// entry is recorded: peak memory is then that of one set, not the sum of all headers.
    bool keep_layouts = true;
    /// Directories neither walked nor shown nor watched, by (st_dev, st_ino) as stat(2) gives them
    /// through links: a mount point inside SOURCE (its directory before mounting, and the root of
    /// the mount once mounted), so a mount never scans itself (README "Mount point rules").
    std::vector<std::pair<dev_t, ino_t>> skip;
    /// The same by path (absolute, symlink-free: SOURCE + "/" + names as walked): never even
    /// lstat()ed. A stat of the mount point would be a request to this very daemon; one issued
    /// while the session is ending is never answered and the daemon cannot exit (seen as a test
    /// run waiting forever on a daemon whose last thread sat in the kernel's FUSE request wait).
    std::vector<std::string> skip_paths;
    /// Shard view (gguf/model/shard_view.hpp): every model is shown as the shards
    /// `gguf-mount split` with these options writes, instead of merged or as it is. A SOURCE
    /// file that is a single GGUF file (not a shard) is then served too.
    std::optional<SplitOptions> split_view;
    /// Rule 11: edits applied to every model served, after its sidecar's (--override-kv,
    /// --remove-kv, --chat-template-file). Empty: only sidecars edit.
    KvOverrides overrides;
};

/// The whole catalog: sorted by path (directories: "" first), problems by path then reason.
struct Catalog {
    std::string source;
    std::vector<CatalogDirectory> directories;
    std::vector<CatalogEntry> entries;
    std::vector<Problem> problems;
    /// Entries that are served, but more narrowly than their mode bits say (rule 8: POSIX ACLs,
    /// paths that cannot be walked); same shape as problems, sorted the same way.
    std::vector<Problem> notes;
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
        /// Non-empty: a file that cannot be read now (e.g. its server refuses Range requests or
        /// does not answer); one line naming it. The catalog records a Problem and does not
        /// show it (a rebuild lists it again).
        std::string error;
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
