// The access rule of a served file or directory (catalog rule 8, gguf/model/catalog.hpp):
// served modes never grant a class more than its every member could open directly. The
// arithmetic on mode bits (classes_passing, file_attributes) and the judge that walks a path the
// way the kernel resolves it (AccessJudge) live here; the catalog only asks.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <ctime>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "gguf/bytes/logical_file.hpp"

namespace gguf {

/// Attributes served for an entry (rule 8). `mode` holds permission bits only (no file type).
struct EntryAttributes {
    mode_t mode = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    timespec mtime{};
    timespec ctime{};
};

/// One permission check the kernel makes when a path is opened directly: `need` (4 read, 1
/// search) on an object with owner `uid`, group `gid`, permission bits `mode`, and `acl` true
/// when it carries a POSIX access ACL (its group bits are then only the ACL mask).
struct AccessCheck {
    uid_t uid = 0;
    gid_t gid = 0;
    mode_t mode = 0;
    bool acl = false;
    unsigned need = 4;
};

/// The classes of a file served as `uid`:`gid` whose every member passes every check in
/// `checks` (rule 8), as read bits: 0400 owner, 0040 group, 0004 other. Group membership is not
/// known statically, so a class passes an object only when each way its members can match it
/// grants `need`: the served owner passes an object owned by someone else only if both its group
/// and other bits grant; the served group passes only if the object's owner bit grants (unless
/// the object's owner is the served owner) and its group bit grants (and, for another group,
/// its other bit too); "other" needs the object's other bit, and its owner and group bits unless
/// those name the served owner or group. An object with an ACL passes the served owner only
/// when owned by it (the ACL's owner entry is the owner bits), never group or other. Root's
/// capabilities are not modelled. No checks: 0444.
/// Examples (served 0:0): {0:0 0644 read} -> 0444; {0:0 0700 search} -> 0400;
/// {65534:0 0640 read} -> 0040 (the served owner may or may not be in group 0: needs group and
/// other bits); {0:0 0644 read, 0:0 0755 search, 1000:1000 0700 search} -> 0000.
mode_t classes_passing(uid_t uid, gid_t gid, const std::vector<AccessCheck>& checks) noexcept;

/// Attributes of a file made of `parts` judged on the parts' own bits only (rule 8 without the
/// directories on the way): owner and group of the first part, newest mtime and ctime, mode =
/// classes_passing() of a read check on every part. So the served file is never readable by
/// someone who cannot read every part. Examples: same owner 0644+0600 -> 0400; shard 1
/// nobody's 0600 + root's 0600 -> 0000. No parts: mode 0444, uid/gid 0, times 0.
EntryAttributes file_attributes(const std::vector<FilePart>& parts) noexcept;

/// Rule 8 on the file system: walks the paths an entry is reached through the way the kernel
/// resolves them (lstat, readlink, from / down through every symlink) and narrows served modes
/// to what every member of a class could open directly (classes_passing). Caches what it stats
/// and reads: one judge per catalog build. Not thread-safe.
class AccessJudge {
public:
    /// Narrows `attr` (owner, group and bits from the parts alone) of a file made of `parts`
    /// (read on every part's path). Returns a note when an ACL or a path that cannot be walked
    /// decides the mode ("PATH has a POSIX ACL ...; served with mode 0400"), else "".
    std::string narrow_file(const std::vector<FilePart>& parts, EntryAttributes* attr);

    /// Narrows the attributes of the directory reached at `abs`: read and search bits per class.
    /// Returns a note like narrow_file.
    std::string narrow_directory(const std::string& abs, EntryAttributes* attr);

private:
    struct Object {
        bool ok = false;
        struct stat st {};
        bool acl = false;
    };
    /// What a canonical path names, from lstat(2) and readlink(2), cached.
    struct Name {
        bool exists = false;
        bool link = false;
        std::string target;  // links: the link text (never empty)
    };

    /// Appends the checks of opening `path`: search on every directory walked, `need` on the
    /// object reached. Records in `*why` what makes the result not a plain mode-bit judgement.
    void add_path(const std::string& path, unsigned need, std::vector<AccessCheck>* checks, std::string* why);
    void add_object(const std::string& canonical, unsigned need, std::vector<AccessCheck>* checks, std::string* why);
    /// Applies `passing` to `attr`; the note for `why` (empty: none).
    static std::string finish(mode_t passing, EntryAttributes* attr, const std::string& why);
    /// The kernel's walk of `path` (made absolute against the working directory), following
    /// every symlink: appends each directory a name is looked up in (canonical, no links) to
    /// `*searched` and sets `*target` to the canonical object reached. False when a component
    /// is missing or more than 40 links are followed (ELOOP).
    bool walk(const std::string& path, std::vector<std::string>* searched, std::string* target);
    const Name& name_at(const std::string& path);
    static void push_components(const std::string& p, std::deque<std::string>* out);

    std::map<std::string, Object> objects_;
    std::map<std::string, Name> names_;
};

}  // namespace gguf
