// File primitives of the block cache (remote/store/cache.hpp) that trust nothing found on disk.
//
// Trust rule: a cache directory is used only when it is a directory owned by the daemon's
// effective uid and not writable by its group or others (a directory another user may write is
// one where links can be planted: a root daemon would then write server bytes, create files or
// delete files wherever they point); its parents, owned by the euid or root and not writable by
// others unless sticky, and it is no link itself (open_top). Below it, nothing is reached by
// path: every directory is opened with openat(O_DIRECTORY | O_NOFOLLOW) relative to a verified
// parent descriptor and verified itself (fstat), files are opened O_NOFOLLOW, new files are made
// O_CREAT | O_EXCL, renames and unlinks stay within one verified descriptor (renameat, unlinkat),
// and walks use fstatat(AT_SYMLINK_NOFOLLOW).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace gguf_mount::remote::cache_files {

/// `n` bytes of `p` as lowercase hex digits (2 per byte).
std::string hex(const unsigned char* p, size_t n);

/// The SHA-256 (OpenSSL EVP) of `s` as 64 lowercase hex digits: the file names of the cache.
std::string sha256_hex(const std::string& s);

/// Why a directory whose lstat/fstat is `st` (at `path`) is not trusted, as one line naming it and
/// the fix (chown / chmod 0700 / remove it), or "" when it is trusted: a directory owned by
/// geteuid() with no group or other write bit.
std::string untrusted_dir(const std::string& path, const struct stat& st);

/// A descriptor of a verified directory (see the trust rule above); closes it when destroyed.
class Dir {
public:
    Dir() = default;
    explicit Dir(int fd) noexcept : fd_(fd) {}
    Dir(Dir&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    Dir& operator=(Dir&& o) noexcept;
    Dir(const Dir&) = delete;
    Dir& operator=(const Dir&) = delete;
    ~Dir();
    int fd() const noexcept { return fd_; }
    explicit operator bool() const noexcept { return fd_ >= 0; }

private:
    int fd_ = -1;
};

/// Opens the cache directory `path` (relative: to the working directory), creating it and
/// missing parents with mode 0700 first when `create`, and verifies it. It is reached from "/"
/// one component at a time, each opened with openat(O_DIRECTORY | O_NOFOLLOW) relative to its
/// verified parent: every folder on the way must be owned by geteuid() or root and not writable
/// by its group or others unless sticky (as sshd_config(5) StrictModes asks of a key's folders),
/// a link on the way is followed only out of such a folder, and the last component must be a
/// directory, not a link to one (a user who may write its parent could point it anywhere: root
/// would build, evict and clear the cache there). Returns an empty Dir when !create and a
/// component is missing. Throws std::runtime_error with one line naming `path`, the folder and
/// what is wrong (untrusted_dir() for the directory itself), or naming the path and the errno.
Dir open_top(const std::string& path, bool create);

/// Opens the sub-directory `name` of the verified `parent` (at `path`, for messages) without
/// following a link, creating it with mode 0700 when `create` and it is missing, and verifies
/// it. Returns the directory, or an empty Dir with *why set: the one line saying what is wrong
/// (a link, another owner, a group/other write bit, or the errno), "" when it does not exist;
/// *err (when set) receives the errno, EPERM when the directory is not trusted. Never throws
/// but bad_alloc.
Dir open_sub(const Dir& parent, const std::string& name, const std::string& path, bool create, std::string* why,
             int* err = nullptr);

/// open_sub(), throwing std::runtime_error(*why) on failure.
Dir open_sub_or_throw(const Dir& parent, const std::string& name, const std::string& path);

/// Opens (creating with mode 0600 if missing) the lock file `name` in `dir` (at `path`) without
/// following a link, and checks it is a regular file owned by geteuid(). A descriptor; throws
/// std::runtime_error naming the file and what is wrong.
int open_lock(const Dir& dir, const std::string& name, const std::string& path);

/// A new temporary in `dir`, named ".tmp.PID.N" (unique in this process; *name receives it),
/// opened for writing with O_CREAT | O_EXCL | O_NOFOLLOW. With `direct`, O_DIRECT is then set
/// with fcntl where the file system allows it (never a second create without O_EXCL). A
/// descriptor or -errno.
int create_temporary(const Dir& dir, std::string* name, bool direct) noexcept;

/// Writes `len` bytes of `data`, then `tail_len` bytes of `tail`, to `fd` from offset 0 and cuts
/// the file there. On an O_DIRECT descriptor the whole pages of a page-aligned `data` go to the
/// device as they are; the rest through the page cache. 0 or -errno.
int write_file(int fd, const char* data, size_t len, const char* tail = nullptr, size_t tail_len = 0) noexcept;

/// fdatasync()s the temporary `tmp` of `dir` and renames it to `final_name` in the same
/// directory (renameat). 0 or -errno; the temporary is removed on failure.
int publish(const Dir& dir, const std::string& tmp, const std::string& final_name) noexcept;

/// Writes `data` to `final_name` in `dir` durably: temporary, fdatasync, renameat. 0 or -errno.
int write_durably(const Dir& dir, const std::string& final_name, const std::string& data) noexcept;

/// Writes `data` to `final_name` in `dir` atomically but not durably: temporary, renameat, no
/// fdatasync. After a kill -9 the old or the new file is there, whole; after a power loss or a
/// kernel crash the new one may be empty or cut short, so only for records whose reader
/// detects that (a sealed record, seal_record()). 0 or -errno.
int write_replacing(const Dir& dir, const std::string& final_name, const std::string& data) noexcept;

/// `text` followed by its seal: a line "x:" + 16 hex digits of XXH3-64 of `text` + "\n".
/// Throws only std::bad_alloc.
std::string seal_record(const std::string& text);
/// The text of a sealed record (seal_record()'s input) when `record` ends with its seal and the
/// seal matches; nullopt otherwise (cut short, zeroed, or changed). Throws only std::bad_alloc.
std::optional<std::string> unseal_record(const std::string& record);

/// The bytes of the regular file `name` in `dir` (opened O_NOFOLLOW), or nullopt when it is
/// absent, not a regular file, or unreadable.
std::optional<std::string> read_file(const Dir& dir, const std::string& name);

/// Bytes of the checksum record kept after a block's bytes in its file.
constexpr size_t kTrailerSize = 16;

/// The checksum record of a block: 8 bytes "ggmblk1\n", then the XXH3-64 hash (little-endian)
/// of the block's bytes seeded with the block's identity (`key`, `block`): a block file copied or
/// moved to another name fails too. XXH3 is not a cryptographic hash: it detects bytes changed
/// on disk by anything else (a disk, a tool, a restore), not a forger who may write the cache
/// directory (the trust rule keeps those out; a keyless hash of any strength could be
/// recomputed by one). XXH3-64 is the cheapest of the checks compared (zlib crc32, OpenSSL
/// SHA-256; bench/results/remote-design-measurements.md).
class BlockChecksum {
public:
    BlockChecksum(const std::string& key, uint64_t block) noexcept;
    ~BlockChecksum();
    BlockChecksum(const BlockChecksum&) = delete;
    BlockChecksum& operator=(const BlockChecksum&) = delete;
    /// False when the hash state could not be allocated (then nothing matches).
    bool ok() const noexcept { return state_ != nullptr; }
    /// Adds the next `len` bytes of the block.
    void update(const char* data, size_t len) noexcept;
    /// The record of the bytes added so far.
    void trailer(char out[kTrailerSize]) noexcept;
    /// True when `stored` is the record of the bytes added so far.
    bool matches(const char stored[kTrailerSize]) noexcept;

private:
    void* state_;  // XXH3_state_t
};

}  // namespace gguf_mount::remote::cache_files
