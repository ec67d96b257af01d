// The maintenance of a block cache directory by `gguf-mount cache list|trim|clear`: what is
// cached per source, and removal in least-recently-used order that never touches what a running
// process reads (its source's lock, remote/store/cache_inventory.hpp; a block being read; the
// blocks of a live single open). The cache's layout and trust rule are BlockCache's
// (remote/store/cache.hpp); nothing is created but DIR/v1's missing sub-directories.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "remote/store/cache_inventory.hpp"

namespace gguf_mount::remote {

/// What one source has in the cache.
struct SourceUsage {
    std::string name;     ///< the SOURCE as shown (no query, no credentials); "" for files no source recorded
    size_t objects = 0;   ///< object versions (remote files) with at least one block
    uint64_t bytes = 0;   ///< bytes of its block files and records (st_size)
    time_t last_use = 0;  ///< newest mtime among them and its lock (touched when a process claims it)
    bool in_use = false;  ///< a running process (a mount, a prefetch) reads it now
};

/// What a cache holds.
struct CacheReport {
    std::string dir;                    ///< DIR/v1
    std::vector<SourceUsage> sources;   ///< newest last use first; the unrecorded files last
    size_t objects = 0;                 ///< totals, each file counted once
    uint64_t bytes = 0;
    size_t records = 0;                 ///< listing and meta records among them
};

/// What trim() did.
struct TrimOutcome {
    size_t removed_files = 0;
    uint64_t removed_bytes = 0;
    uint64_t bytes_left = 0;            ///< what the bound counts after the trim
    uint64_t in_use_bytes = 0;          ///< of which kept because a running process reads it
    std::vector<std::string> in_use;    ///< the sources in use (as shown)
};

/// One cache directory, opened for maintenance.
class CacheAdmin {
public:
    /// Opens the cache in `dir` (absolute; DIR/v1 below it) without creating it. Throws
    /// std::runtime_error with the one line of the trust rule (DIR or a directory below it not
    /// owned by this uid, or writable by group or others; a link where a directory should be)
    /// or naming the path and the errno.
    explicit CacheAdmin(const std::string& dir);

    /// False when DIR or DIR/v1 does not exist (nothing cached).
    bool exists() const noexcept { return static_cast<bool>(d_); }
    /// What is cached, per source. Throws std::runtime_error as the constructor (an object
    /// directory that is not trusted), std::bad_alloc.
    CacheReport list() const;
    /// Removes files (blocks, listing and meta records) least recently used first until the
    /// cache holds at most `max_bytes` (0: everything), skipping what a running process reads;
    /// then the object directories left empty, and the records of sources left with nothing.
    /// Holds DIR/v1/lock (as eviction does) and the lock of every source not in use meanwhile
    /// (a mount starting waits for it). Throws as list().
    TrimOutcome trim(uint64_t max_bytes);

private:
    std::string dir_;
    cache_inventory::Dirs d_;
};

}  // namespace gguf_mount::remote
