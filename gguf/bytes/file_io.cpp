#include "gguf/bytes/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
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
