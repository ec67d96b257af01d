// The byte-source seam: what the reader, split sets and virtual files read a physical part
// through when it is not a local file. Local files keep their descriptor fast path (pread,
// O_DIRECT, page-cache dropping, fstat change checks) and need no ByteSource; a FilePart whose
// `source` is set (e.g. an HTTP object behind a block cache, remote/) is read only through it.
// No network code here: gguf/ never learns HTTP.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "gguf/bytes/file_io.hpp"

namespace gguf {

/// A read-only, fixed-size sequence of bytes. Implementations must be thread-safe: the FUSE
/// worker threads call pread() concurrently.
class ByteSource {
public:
    virtual ~ByteSource() = default;

    /// Reads up to `len` bytes at `offset` into `dst`, like pread(2): returns the number of
    /// bytes read (fewer than `len` only at the end of the source), or -errno (-EIO when the
    /// bytes cannot be had: never zeros or a short block in their place). Never throws.
    virtual ssize_t pread(void* dst, size_t len, uint64_t offset) const noexcept = 0;

    /// Size in bytes, fixed for the life of the object.
    virtual uint64_t size() const noexcept = 0;

    /// True once the underlying object is known to differ from the one this source was opened
    /// on (local file: size or mtime moved; HTTP object: the validator changed). Bytes read
    /// after that are not served. Never throws.
    virtual bool changed() const noexcept = 0;

    /// A name for messages and logs (a path, or a URL without its query string, which may hold
    /// a signature, and without credentials).
    virtual std::string display_name() const = 0;

    /// What identifies this version of the content: "" for a local file (its stat identifies
    /// it), the ETag or Last-Modified + size of an HTTP object. Part of the inode fingerprint.
    virtual std::string validator() const = 0;
};

/// While an object of this class lives on a thread, ByteSource::pread calls made on that
/// thread that would have to wait for the network (a block that is neither cached nor in
/// memory, or being fetched by another thread) return -EWOULDBLOCK at once instead of waiting.
/// The FUSE read handler serves such reads on its own threads (fs/deferred_reads.hpp), so a
/// slow server never holds the workers that answer stat, readdir and cached reads. Nests.
class NoNetworkWaitScope {
public:
    NoNetworkWaitScope() noexcept : previous_(active()) { active() = true; }
    ~NoNetworkWaitScope() { active() = previous_; }
    NoNetworkWaitScope(const NoNetworkWaitScope&) = delete;
    NoNetworkWaitScope& operator=(const NoNetworkWaitScope&) = delete;
    /// True on a thread inside such a scope. Never throws.
    static bool on() noexcept { return active(); }

private:
    static bool& active() noexcept {
        thread_local bool flag = false;
        return flag;
    }
    bool previous_;
};

/// The default implementation for a local file: an open descriptor read with pread_full,
/// changed() when fstat no longer shows the size and mtime it had when opened. The read path
/// of VirtualFile does not go through it (it keeps its own descriptor fast path); it is the
/// same behaviour for callers that only have a ByteSource.
class LocalFileSource final : public ByteSource {
public:
    /// Opens `path` read-only (open_read_only) and records its fstat. Throws gguf::Error(Io)
    /// naming the path when it cannot be opened or stat()ed.
    explicit LocalFileSource(const std::string& path);

    ssize_t pread(void* dst, size_t len, uint64_t offset) const noexcept override;
    uint64_t size() const noexcept override { return static_cast<uint64_t>(st_.st_size); }
    bool changed() const noexcept override;
    std::string display_name() const override { return path_; }
    std::string validator() const override { return ""; }

private:
    std::string path_;
    UniqueFd fd_;
    struct stat st_ {};
};

}  // namespace gguf
