// Small POSIX file helpers shared by the reader, the virtual file and the offline tools.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>

namespace gguf {

/// Owning file descriptor; closes on destruction. Move-only.
class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
    UniqueFd& operator=(UniqueFd&& o) noexcept;
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd();

    int get() const noexcept { return fd_; }
    int release() noexcept { int fd = fd_; fd_ = -1; return fd; }
    explicit operator bool() const noexcept { return fd_ >= 0; }

private:
    int fd_ = -1;
};

/// Opens the regular file `path` read-only (O_CLOEXEC | O_NONBLOCK). Throws gguf::Error(Code::Io)
/// naming the path when it cannot be opened (sys_errno() set) or is not a regular file (a FIFO,
/// device or directory is refused without being opened: a FIFO would block the caller).
UniqueFd open_read_only(const std::string& path);

/// Opens the regular file `path` for reading without ever opening anything else: the name is
/// resolved to an O_PATH descriptor first (following symlinks, or with `follow_last` false not
/// the last component: a symlink there is refused), fstat(2)ed, and only a regular file is then
/// opened O_RDONLY | O_NONBLOCK | O_NOCTTY through that descriptor (/proc/self/fd), so a FIFO
/// is never waited on and a device node (/dev/watchdog) is never opened. `*st` (when given)
/// receives the fstat of the descriptor returned. Throws gguf::Error(Code::Io) "PATH: ..." when
/// it cannot be opened (sys_errno() set), is a symbolic link (follow_last false), or is not a
/// regular file ("PATH: not a regular file (a FIFO)").
UniqueFd open_regular(const std::string& path, bool follow_last = true, struct stat* st = nullptr);

/// Opens the regular file `rel` beneath the directory open at `dirfd`, as open_regular does,
/// never leaving that directory and following no symlink on the way: openat2(2) with
/// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, or where the kernel has no
/// openat2 one openat(O_NOFOLLOW) per component. `rel` must be relative, with no empty, "."
/// or ".." component (the caller's rule; checked again here). `shown` is the name used in
/// messages. Throws gguf::Error(Code::BadArgument) for a name that is absolute or has such a
/// component, Code::Io "SHOWN: ..." when it cannot be opened, passes through or is a symbolic
/// link ("SHOWN: is or passes through a symbolic link"), or is not a regular file.
UniqueFd open_regular_beneath(int dirfd, const std::string& rel, const std::string& shown,
                              struct stat* st = nullptr);

/// True when `rel` is a name open_regular_beneath accepts: not empty, not absolute, and no
/// component is empty, "." or "..".
bool is_plain_relative_path(const std::string& rel) noexcept;

/// Reads what is left of the open file `fd` (from its current position) into a string, stopping
/// as soon as more than `limit` bytes have come: then throws gguf::Error(Code::TooLarge) "SHOWN:
/// more than LIMIT bytes" without holding more than limit + 64 KiB. Throws Code::Io "SHOWN:
/// read failed: ..." on a read error.
std::string read_bounded(int fd, uint64_t limit, const std::string& shown);

/// Reads exactly `len` bytes at `offset`, retrying on EINTR and short reads.
/// Returns the number of bytes read (less than `len` only at end of file) or -errno.
/// With `block` > 1 (an O_DIRECT descriptor: offsets must stay multiples of it), a short read
/// that ends off a multiple of `block` is taken as end of file instead of being retried at an
/// unaligned offset, which a file system may refuse with EINVAL.
/// Never throws, never allocates: safe on the FUSE read path.
ssize_t pread_full(int fd, void* dst, size_t len, uint64_t offset, size_t block = 1) noexcept;

/// Writes all of `len` bytes at the current position, retrying on EINTR and short writes.
/// Returns 0 or -errno.
int write_full(int fd, const void* src, size_t len) noexcept;

/// The last path component: "dir/x-00001-of-00002.gguf" -> "x-00001-of-00002.gguf".
std::string base_name(const std::string& path);

/// Everything before the last '/', or "." when there is none.
std::string dir_name(const std::string& path);

/// True when two stat(2) times (st_mtim, st_ctim) are equal to the nanosecond.
bool same_time(const timespec& a, const timespec& b) noexcept;

/// Throws Error(Code::Io, "WHAT: strerror(err)") carrying `err`, an errno value.
[[noreturn]] void throw_io(const std::string& what, int err);

}  // namespace gguf
