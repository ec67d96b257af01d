// What the block cache (remote/store/cache.hpp) holds, walked the one way that eviction
// (BlockCache::evict, --cache-max-size) and the cache command (remote/store/cache_admin.hpp,
// `gguf-mount cache list|trim|clear`) both count: every block file and every record (listings,
// meta), with its size and last use (mtime), and the sources recorded as using them.
//
// Sources, under DIR/v1/sources/<sha256(NAME)>/, where NAME is a SOURCE as messages show it (a
// URL without query or credentials, an hf:// source as given):
//   name       NAME
//   lock       flock(LOCK_SH) by every process reading the source for as long as it does (a mount
//              for its life, prefetch, check, merge); the cache command takes LOCK_EX | LOCK_NB:
//              a source it cannot lock is in use, and nothing recorded for it is removed
//   tags       one line per tag, appended (O_APPEND) the first time a claim uses what it names:
//                o.<key>    object <key> (objects/<key>/) was read for this source
//                l.<hash>   listing record listings/<hash> was written or read for it
//                m.<hash>   meta record meta/<hash> was written or read for it
//              One file, not one per tag: a cold mount of a 1,200-shard set would otherwise
//              create 2,400 inodes here, and ext4's inode allocator made that most of the
//              mount's time after a `cache clear` (many recently deleted inodes to skip).
//              Caches written before hold one empty file per tag, named as the tag: read too.
// Every file is opened relative to verified directories without following links (cache_files).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "remote/store/cache_files.hpp"

namespace gguf_mount::remote::cache_inventory {

constexpr const char* kOncePrefix = "once-";  ///< object directories of BlockCache::open_once
constexpr const char* kOwner = ".owner";      ///< their flock()ed owner file

/// The verified directories of one cache (DIR/v1 and its sub-directories).
struct Dirs {
    std::string path;  ///< DIR/v1
    cache_files::Dir root, objects, meta, listings, sources;
    explicit operator bool() const noexcept { return static_cast<bool>(root); }
};

/// Opens DIR/v1 and its sub-directories (creating with mode 0700 what is missing when
/// `create`; else a missing DIR or v1/ gives an empty Dirs, a missing sub-directory is
/// created only when DIR/v1 exists). `dir` must be absolute. Throws std::runtime_error with
/// the one line of the trust rule (cache_files::untrusted_dir) or naming the path and errno.
Dirs open_dirs(const std::string& dir, bool create);

/// What a file counted by the bound is.
enum class Kind { Block, Listing, Meta };

/// One file counted by the bound.
struct File {
    Kind kind = Kind::Block;
    std::string dir;   ///< the object key of a block; "" for records
    std::string name;  ///< its name in its directory
    uint64_t bytes = 0;  ///< st_size
    int64_t used = 0;    ///< st_mtim in ns since the epoch: written, or last read (BlockCache touches what it reads)
};

/// st_mtim of `st` in ns since the epoch.
int64_t mtime_ns(const struct stat& st) noexcept;

/// The name of the tag a source keeps for `f` ("o.KEY", "l.HASH", "m.HASH").
std::string tag_of(const File& f);

/// Every block file (names not starting with '.') of every trusted object directory, then
/// every regular file of listings/ and meta/ (temporaries excluded); `bad(line)` is called for
/// each entry of objects/ that is not a trusted directory. Throws only std::bad_alloc.
std::vector<File> files(const Dirs& d, const std::function<void(const std::string&)>& bad);

/// The records alone (listings/, meta/), as files() gives them. Throws only std::bad_alloc.
std::vector<File> records(const Dirs& d);

/// Removes `f` unless a reader holds a flock on it (BlockCache::read holds LOCK_SH). True when
/// it was removed. Never throws.
bool remove(const Dirs& d, const File& f) noexcept;

/// Calls fn(object_dir, key, name, stat) for every regular file (lstat) of every object
/// directory of `objects` (at `path`), and bad(key, why) for each entry of `objects` that is
/// not a trusted directory. Names starting with '.' are temporaries (".tmp.") and owner files.
void for_each_block_file(const cache_files::Dir& objects, const std::string& path,
                         const std::function<void(const char*, const std::string&)>& bad,
                         const std::function<void(const cache_files::Dir&, const char*, const char*,
                                                  const struct stat&)>& fn);

/// Removes the files of object directory `key` of `objects`, then the directory itself (when
/// nothing else is left in it). Never throws.
void remove_object_dir(const cache_files::Dir& objects, const std::string& key) noexcept;

constexpr const char* kTags = "tags";  ///< a source directory's file of tags, one per line

/// True when `name` has the form of a tag ("o.", "l." or "m." and 1 to 200 letters, digits,
/// '-' or '.'): a line of a tags file, or a file of a cache written before it. Never throws.
bool is_tag(const std::string& name) noexcept;

/// The tags of the source directory `dir`: the lines of its tags file that are tags (a line
/// cut short by a crash is not one) and its older one-file-per-tag names. Throws only
/// std::bad_alloc.
std::set<std::string> read_tags(const cache_files::Dir& dir);

/// Makes `tags` the tags of the source directory `dir`: its tags file rewritten (temporary and
/// rename) and the older one-file-per-tag files removed. Only for a source no process holds
/// (the caller holds its lock LOCK_EX). Never throws.
void write_tags(const cache_files::Dir& dir, const std::set<std::string>& tags) noexcept;

/// True when no process holds the .owner lock of the once- directory `od` (or it has none and
/// is older than an hour: its maker died before taking it).
bool once_dir_is_free(const cache_files::Dir& od);

/// A process's record of the one source it reads (see the file note): creates
/// sources/<sha256(name)>/ with its name file, holds LOCK_SH on its lock for the claim's life
/// (waiting while a trim or clear holds it), and tags the objects and records used for it.
/// Failures to record are ignored (the source then shows less in `cache list`, and a trim may
/// remove what it uses: it reads them again). Thread-safe.
class SourceClaim {
public:
    SourceClaim() = default;
    /// Claims `name` in `d` (sources/ must be open). Never throws but bad_alloc.
    SourceClaim(const Dirs& d, const std::string& name);
    ~SourceClaim();
    SourceClaim(const SourceClaim&) = delete;
    SourceClaim& operator=(const SourceClaim&) = delete;

    explicit operator bool() const noexcept { return static_cast<bool>(dir_); }
    /// Records `tag` (tag_of(); "o." + object key, ...) once per claim. Never throws.
    void tag(const std::string& tag) noexcept;

private:
    cache_files::Dir dir_;
    int lock_fd_ = -1;
    int tags_fd_ = -1;  // the tags file, O_APPEND
    std::mutex mutex_;
    std::set<std::string> tagged_;
};

}  // namespace gguf_mount::remote::cache_inventory
