#include "gguf/bytes/file_io.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gguf/error.hpp"

namespace gguf {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = o.release();
    }
    return *this;
}

UniqueFd::~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
}

UniqueFd open_read_only(const std::string& path) {
    // Refuse anything but a regular file before opening it: open() on a FIFO blocks until a
    // writer appears (a hang), and opening a device node can have side effects. O_NONBLOCK
    // covers a name swapped between stat() and open(); it changes nothing for regular files.
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        throw Error(Code::Io, path + ": not a regular file");
    }
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        throw Error(Code::Io, path + ": cannot open: " + std::strerror(e), e);
    }
    return UniqueFd(fd);
}

namespace {

const char* file_type_name(mode_t mode) {
    if (S_ISLNK(mode)) return "a symbolic link";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    return "not a regular file";
}

[[noreturn]] void throw_errno(const std::string& shown, const char* what, int e) {
    throw Error(Code::Io, shown + ": " + what + std::strerror(e), e);
}

/// The regular file behind the O_PATH descriptor `path_fd`, opened for reading through
/// /proc/self/fd (the same inode, whatever the name now holds); where /proc is not mounted,
/// `reopen` opens the name again and the inode must be the same.
template <typename Reopen>
UniqueFd open_checked(UniqueFd path_fd, const std::string& shown, struct stat* st, Reopen reopen) {
    struct stat first {};
    if (::fstat(path_fd.get(), &first) != 0) throw_errno(shown, "cannot stat: ", errno);
    if (!S_ISREG(first.st_mode)) {
        throw Error(Code::Io, shown + ": " + (S_ISLNK(first.st_mode) ? "is a symbolic link (not followed)"
                                                                       : std::string("not a regular file (") +
                                                                             file_type_name(first.st_mode) + ")"));
    }
    constexpr int kFlags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
    const std::string proc = "/proc/self/fd/" + std::to_string(path_fd.get());
    int fd = ::open(proc.c_str(), kFlags);
    if (fd < 0 && errno == ENOENT) fd = reopen(kFlags | O_NOFOLLOW);
    if (fd < 0) throw_errno(shown, "", errno);
    UniqueFd out(fd);
    struct stat now {};
    if (::fstat(out.get(), &now) != 0) throw_errno(shown, "cannot stat: ", errno);
    if (now.st_dev != first.st_dev || now.st_ino != first.st_ino || !S_ISREG(now.st_mode)) {
        throw Error(Code::Io, shown + ": changed while it was being opened");
    }
    if (st) *st = now;
    return out;
}

}  // namespace

UniqueFd open_regular(const std::string& path, bool follow_last, struct stat* st) {
    const int flags = O_PATH | O_CLOEXEC | (follow_last ? 0 : O_NOFOLLOW);
    int fd = ::open(path.c_str(), flags);
    if (fd < 0) throw_errno(path, "", errno);
    return open_checked(UniqueFd(fd), path, st, [&](int f) { return ::open(path.c_str(), f); });
}

bool is_plain_relative_path(const std::string& rel) noexcept {
    if (rel.empty() || rel.front() == '/') return false;
    size_t at = 0;
    while (at <= rel.size()) {
        size_t end = rel.find('/', at);
        if (end == std::string::npos) end = rel.size();
        const size_t n = end - at;
        if (n == 0 || (n == 1 && rel[at] == '.') || (n == 2 && rel[at] == '.' && rel[at + 1] == '.')) return false;
        at = end + 1;
    }
    return true;
}

UniqueFd open_regular_beneath(int dirfd, const std::string& rel, const std::string& shown, struct stat* st) {
    if (!is_plain_relative_path(rel)) {
        throw Error(Code::BadArgument, shown + ": not a plain relative name (absolute, or with an empty, '.' or '..' "
                                               "component)");
    }
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    long r = ::syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof how);
    UniqueFd path_fd;
    if (r >= 0) {
        path_fd = UniqueFd(static_cast<int>(r));
    } else if (errno == ELOOP) {
        throw Error(Code::Io, shown + ": is or passes through a symbolic link (not followed)", ELOOP);
    } else if (errno != ENOSYS && errno != EPERM) {
        throw_errno(shown, "", errno);
    } else {
        // No openat2 (before Linux 5.6, or a seccomp filter): one component at a time.
        UniqueFd dir(::fcntl(dirfd, F_DUPFD_CLOEXEC, 0));
        if (!dir) throw_errno(shown, "", errno);
        size_t at = 0;
        for (;;) {
            const size_t slash = rel.find('/', at);
            const std::string name = rel.substr(at, slash == std::string::npos ? std::string::npos : slash - at);
            const int fd = ::openat(dir.get(), name.c_str(), O_PATH | O_CLOEXEC | O_NOFOLLOW);
            if (fd < 0) throw_errno(shown, "", errno);
            UniqueFd next(fd);
            if (slash == std::string::npos) {
                path_fd = std::move(next);
                break;
            }
            struct stat ds {};
            if (::fstat(next.get(), &ds) != 0) throw_errno(shown, "cannot stat: ", errno);
            if (S_ISLNK(ds.st_mode)) {
                throw Error(Code::Io, shown + ": is or passes through a symbolic link (not followed)", ELOOP);
            }
            if (!S_ISDIR(ds.st_mode)) throw Error(Code::Io, shown + ": " + std::strerror(ENOTDIR), ENOTDIR);
            dir = std::move(next);
            at = slash + 1;
        }
    }
    return open_checked(std::move(path_fd), shown, st,
                        [&](int f) { return ::openat(dirfd, rel.c_str(), f); });
}

std::string read_bounded(int fd, uint64_t limit, const std::string& shown) {
    std::string out;
    char buf[65536];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_errno(shown, "read failed: ", errno);
        if (n == 0) break;
        out.append(buf, static_cast<size_t>(n));
        if (out.size() > limit) {
            throw Error(Code::TooLarge, shown + ": more than the " + std::to_string(limit) + " bytes allowed");
        }
    }
    return out;
}

ssize_t pread_full(int fd, void* dst, size_t len, uint64_t offset, size_t block) noexcept {
    auto* out = static_cast<char*>(dst);
    size_t done = 0;
    while (done < len) {
        ssize_t n = ::pread(fd, out + done, len - done, static_cast<off_t>(offset + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) break;
        done += static_cast<size_t>(n);
        if (done < len && done % block != 0) break;  // end of file under O_DIRECT
    }
    return static_cast<ssize_t>(done);
}

int write_full(int fd, const void* src, size_t len) noexcept {
    const auto* in = static_cast<const char*>(src);
    while (len > 0) {
        ssize_t n = ::write(fd, in, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        in += n;
        len -= static_cast<size_t>(n);
    }
    return 0;
}

std::string base_name(const std::string& path) {
    auto slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string dir_name(const std::string& path) {
    auto slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

bool same_time(const timespec& a, const timespec& b) noexcept { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; }

void throw_io(const std::string& what, int err) { throw Error(Code::Io, what + ": " + std::strerror(err), err); }

}  // namespace gguf
