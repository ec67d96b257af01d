#include "gguf/bytes/byte_source.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gguf/bytes/client_direct.hpp"
#include "gguf/bytes/logical_file.hpp"
#include "gguf/error.hpp"

namespace gguf {

namespace {

/// Size and mtime unchanged (the descriptor is the same file by construction).
bool same_content_state(const struct stat& a, const struct stat& b) noexcept {
    return a.st_size == b.st_size && a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

struct stat fstat_or_throw(int fd, const std::string& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        throw Error(Code::Io, path + ": cannot stat: " + std::strerror(e), e);
    }
    return st;
}

}  // namespace

// ---- ByteSource defaults ------------------------------------------------------------------

Served ByteSource::read_served(char* buf, size_t len, uint64_t offset, CopyKept, bool) const noexcept {
    Served s;
    s.result = pread(buf, len, offset);
    s.data = buf;
    return s;
}

void ByteSource::will_need(uint64_t, uint64_t) const noexcept {}

std::string ByteSource::failure_reason() const {
    return changed() ? "the remote file changed since it was opened (validator differs)" : std::string();
}

int64_t ByteSource::seek(uint64_t offset, bool hole) const noexcept {
    if (offset >= size()) return -ENXIO;
    return hole ? static_cast<int64_t>(size()) : static_cast<int64_t>(offset);
}

ssize_t ByteSource::copy_to(int, uint64_t, size_t, uint64_t) const noexcept { return -EOPNOTSUPP; }

void ByteSource::update_stat(struct stat*) const noexcept {}

// ---- LocalFileSource ----------------------------------------------------------------------

LocalFileSource::LocalFileSource(const std::string& path)
    : path_(path), fd_(open_read_only(path)), st_(fstat_or_throw(fd_.get(), path)), cached_before_(size()) {}

LocalFileSource::LocalFileSource(UniqueFd fd, std::string path, const struct stat& st)
    : path_(std::move(path)), fd_(std::move(fd)), st_(st), cached_before_(size()) {}

std::shared_ptr<const LocalFileSource> LocalFileSource::open(const std::string& path, const struct stat& expected) {
    auto src = std::make_shared<const LocalFileSource>(path);
    if (expected.st_ino != 0 && !same_file_state(expected, src->st_)) {
        throw Error(Code::BadSplit, path + ": changed while it was being read");
    }
    return src;
}

void LocalFileSource::will_need(const std::string& path, uint64_t offset, uint64_t len) noexcept {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return;
    ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(len), POSIX_FADV_WILLNEED);
    ::close(fd);
}

ssize_t LocalFileSource::pread(void* dst, size_t len, uint64_t offset) const noexcept {
    return pread_full(fd_.get(), dst, len, offset);
}

bool LocalFileSource::changed() const noexcept {
    struct stat now {};
    // A rewrite that raced with a read has already moved the mtime (file systems update it
    // before copying the new data in).
    return ::fstat(fd_.get(), &now) != 0 || !same_content_state(now, st_);
}

void LocalFileSource::will_need(uint64_t offset, uint64_t len) const noexcept {
    ::posix_fadvise(fd_.get(), static_cast<off_t>(offset), static_cast<off_t>(len), POSIX_FADV_WILLNEED);
}

std::string LocalFileSource::failure_reason() const {
    struct stat now {};
    if (::fstat(fd_.get(), &now) != 0) return {};
    if (now.st_size < st_.st_size) {
        return "short read: the file is now " + std::to_string(now.st_size) + " bytes, it was " +
               std::to_string(st_.st_size) + " when opened";
    }
    if (!same_content_state(now, st_)) {
        return "the file was modified in place since it was opened (size or mtime changed)";
    }
    return {};
}

int64_t LocalFileSource::current_size() const noexcept {
    struct stat now {};
    return ::fstat(fd_.get(), &now) == 0 ? static_cast<int64_t>(now.st_size) : -1;
}

int64_t LocalFileSource::seek(uint64_t offset, bool hole) const noexcept {
    const off_t r = ::lseek(fd_.get(), static_cast<off_t>(offset), hole ? SEEK_HOLE : SEEK_DATA);
    return r < 0 ? -errno : static_cast<int64_t>(r);
}

ssize_t LocalFileSource::copy_to(int out_fd, uint64_t out_offset, size_t len, uint64_t offset) const noexcept {
    loff_t a = static_cast<loff_t>(offset);
    loff_t b = static_cast<loff_t>(out_offset);
    const ssize_t n = ::copy_file_range(fd_.get(), &a, out_fd, &b, len, 0);
    return n < 0 ? -errno : n;
}

void LocalFileSource::drop_behind(uint64_t offset, uint64_t len) const noexcept {
    uint64_t hi = (offset + len) / kDropBlock * kDropBlock;
    if (hi <= kDropLag) return;
    hi -= kDropLag;
    uint64_t lo = offset / kDropBlock * kDropBlock;
    lo = lo > kDropLag ? lo - kDropLag : 0;
    // Runs of blocks this source's reads brought in; a block another program had cached stays.
    uint64_t run = lo;
    for (uint64_t at = lo; at <= hi; at += kDropBlock) {
        if (at < hi && !cached_before_.cached_before(at / kDropBlock)) continue;
        if (at > run) ::posix_fadvise(fd_.get(), static_cast<off_t>(run), static_cast<off_t>(at - run), POSIX_FADV_DONTNEED);
        run = at + kDropBlock;
    }
}

Served LocalFileSource::read_direct(char* buf, size_t len, uint64_t offset) const noexcept {
    Served out;
    out.result = -EAGAIN;
    const int fd = direct_.get(fd_.get());
    if (fd < 0) return out;
    constexpr uint64_t a = kServeAlign;
    const uint64_t from = offset / a * a;
    const uint64_t to = (offset + len + a - 1) / a * a;
    const ssize_t n = pread_full(fd, buf, static_cast<size_t>(to - from), from, a);
    if (n == -EINVAL) {  // the file system refused this O_DIRECT read: never try again
        direct_.disable();
        return out;
    }
    if (n < 0) {
        out.result = n;
        return out;
    }
    const uint64_t skip = offset - from;
    const uint64_t got = static_cast<uint64_t>(n) > skip ? static_cast<uint64_t>(n) - skip : 0;
    out.result = static_cast<ssize_t>(got < len ? got : len);
    out.data = buf + skip;
    out.direct = true;
    return out;
}

namespace {

/// RWF_DONTCACHE (Linux 6.14, include/uapi/linux/fs.h): a buffered read whose pages leave the
/// page cache once copied, readahead included; pages that were cached before stay. Debian 12's
/// headers predate it.
constexpr int kRwfDontcache = 0x00000080;

/// pread_full() with preadv2(RWF_DONTCACHE): `len` bytes at `offset` of `fd` into `dst`, fewer
/// at end of file. Returns the bytes read or -errno; -EOPNOTSUPP (or -EINVAL on kernels that do
/// not know the flag) when the kernel or file system cannot read uncached.
ssize_t pread_uncached_full(int fd, char* dst, size_t len, uint64_t offset) noexcept {
    size_t done = 0;
    while (done < len) {
        iovec v{dst + done, len - done};
        const ssize_t n = ::preadv2(fd, &v, 1, static_cast<off_t>(offset + done), kRwfDontcache);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) break;
        done += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(done);
}

}  // namespace

Served LocalFileSource::read_served(char* buf, size_t len, uint64_t offset, CopyKept kept,
                                    bool whole_request) const noexcept {
    // ByReaderDirect: a random request of a page-cache client; None inside a ClientDirectScope:
    // any request of an O_DIRECT client (gguf/bytes/client_direct.hpp).
    const bool direct_if_uncached =
        kept == CopyKept::ByReaderDirect || (kept == CopyKept::None && ClientDirectScope::on());
    if (direct_if_uncached && whole_request) {
        const Residency r = page_cache_residency(fd_.get(), offset, len);
        if (r == Residency::None || r == Residency::Partial) {
            Served s = read_direct(buf, len, offset);
            if (s.result != -EAGAIN) return s;
        }
    }
    Served s;
    s.result = -EOPNOTSUPP;
    if (kept != CopyKept::None) cached_before_.before_read(fd_.get(), offset, len);
    // An O_DIRECT client's bytes that were not read direct (cached, or one piece of a request
    // spanning several): read without leaving new pages (or their readahead) in the cache.
    if (kept == CopyKept::None && ClientDirectScope::on()) s.result = pread_uncached_full(fd_.get(), buf, len, offset);
    if (s.result == -EOPNOTSUPP || s.result == -EINVAL) s.result = pread_full(fd_.get(), buf, len, offset);
    s.data = buf;
    if (kept != CopyKept::None && s.result == static_cast<ssize_t>(len)) drop_behind(offset, len);
    return s;
}

// ---- parts --------------------------------------------------------------------------------

std::shared_ptr<const ByteSource> open_part(const FilePart& part, bool check_state) {
    if (part.source) return part.source;
    if (!check_state) return std::make_shared<const LocalFileSource>(part.path);
    return LocalFileSource::open(part.path, part.st);
}

void will_need_part(const FilePart& part, uint64_t len) noexcept {
    if (part.source) {
        part.source->will_need(part.offset, len);
    } else {
        LocalFileSource::will_need(part.path, part.offset, len);
    }
}

bool part_has_local_path(const FilePart& part) noexcept { return !part.source || part.source->is_local_file(); }

bool part_changed(const FilePart& part) noexcept {
    if (part.source) return part.source->changed();
    struct stat now {};
    return ::stat(part.path.c_str(), &now) != 0 || !same_file_state(now, part.st);
}

}  // namespace gguf
