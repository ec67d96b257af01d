// Small POSIX file helpers shared by the reader, the virtual file and the offline tools.
#pragma once

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
