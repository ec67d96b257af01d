#include "remote/store/cache_files.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <xxhash.h>
#if defined(__x86_64__)
// XXH3 through libxxhash's run-time dispatch (the AVX2 / AVX-512 code where the CPU has it;
// the same hash): the checksum of every cached block is computed when it is first served, and
// the generic SSE2 code was about 8 % of a cached remount's CPU (bench/README.md).
#include <xxh_x86dispatch.h>
#endif

#include <atomic>
#include <climits>
#include <deque>
#include <vector>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace gguf_mount::remote::cache_files {

namespace {

constexpr size_t kDirectAlign = 4096;  // O_DIRECT: address, offset and length in whole pages
constexpr char kMagic[8] = {'g', 'g', 'm', 'b', 'l', 'k', '1', '\n'};

std::string mode_text(mode_t mode) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
    return buf;
}

/// What `st` is, for a message: "a symbolic link", "a regular file", ...
const char* kind_text(const struct stat& st) {
    if (S_ISLNK(st.st_mode)) return "a symbolic link";
    if (S_ISREG(st.st_mode)) return "a regular file";
    if (S_ISDIR(st.st_mode)) return "a directory";
    return "a special file";
}

std::string euid_text() { return std::to_string(::geteuid()); }

/// Why the entry `name` of `parent` (at `path`) could not be opened as a directory: its kind
/// when it is not one (lstat), else the errno.
std::string open_failure(int parent, const std::string& name, const std::string& path, int err) {
    struct stat st {};
    if ((err == ELOOP || err == ENOTDIR) && ::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        return path + ": is not a directory of this daemon's uid " + euid_text() + " (" + kind_text(st) +
               "): refused; remove it";
    }
    return path + ": cannot open the cache directory: " + std::strerror(err);
}

}  // namespace

std::string hex(const unsigned char* p, size_t n) {
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (size_t i = 0; i < n; ++i) {
        out += digits[p[i] >> 4];
        out += digits[p[i] & 15];
    }
    return out;
}

std::string sha256_hex(const std::string& s) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr);
    return hex(md, n);
}

std::string untrusted_dir(const std::string& path, const struct stat& st) {
    if (!S_ISDIR(st.st_mode)) {
        return path + ": is not a directory of this daemon's uid " + euid_text() + " (" + kind_text(st) +
               "): refused; remove it";
    }
    if (st.st_uid != ::geteuid()) {
        return path + ": the cache directory is owned by uid " + std::to_string(st.st_uid) +
               ", not by this daemon's uid " + euid_text() +
               ": refused (its links could point the daemon's writes anywhere); chown " + euid_text() + " " + path +
               " or give another --cache-dir";
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return path + ": the cache directory is writable by its group or others (mode " + mode_text(st.st_mode) +
               "): refused (another user could plant links in it); chmod 0700 " + path;
    }
    return "";
}

Dir& Dir::operator=(Dir&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = o.fd_;
        o.fd_ = -1;
    }
    return *this;
}

Dir::~Dir() {
    if (fd_ >= 0) ::close(fd_);
}

namespace {

/// Why the directory `st` at `at`, a parent on the way to the cache directory `top`, is not
/// trusted (one line naming both), or "": owned by geteuid() or root, and not writable by its
/// group or others unless sticky (only the owner of an entry may then rename or remove it; the
/// rule ssh applies to the folders of its files, sshd_config(5) StrictModes).
std::string untrusted_parent(const std::string& top, const std::string& at, const struct stat& st) {
    if (st.st_uid != ::geteuid() && st.st_uid != 0) {
        return top + ": its parent folder " + at + " is owned by uid " + std::to_string(st.st_uid) +
               ", neither this daemon's uid " + euid_text() +
               " nor root: refused (its owner could put a link where the cache directory is); give another --cache-dir";
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
        return top + ": its parent folder " + at + " is writable by its group or others without the sticky bit (mode " +
               mode_text(st.st_mode) +
               "): refused (another user could put a link where the cache directory is); give another --cache-dir";
    }
    return "";
}

/// `at` + "/" + `name`, for messages.
std::string child_path(const std::string& at, const std::string& name) {
    return at == "/" ? "/" + name : at + "/" + name;
}

/// The components of `path` in order, without empty ones and ".".
void push_components(const std::string& path, std::deque<std::string>* out, bool front) {
    std::vector<std::string> parts;
    for (size_t at = 0; at <= path.size();) {
        size_t end = path.find('/', at);
        if (end == std::string::npos) end = path.size();
        const std::string part = path.substr(at, end - at);
        if (!part.empty() && part != ".") parts.push_back(part);
        at = end + 1;
    }
    if (front) out->insert(out->begin(), parts.begin(), parts.end());
    else out->insert(out->end(), parts.begin(), parts.end());
}

}  // namespace

Dir open_top(const std::string& given, bool create) {
    std::string path = given;
    if (path.empty() || path.front() != '/') {
        char cwd[PATH_MAX];
        if (!::getcwd(cwd, sizeof cwd)) throw std::runtime_error(given + ": cannot resolve the cache directory");
        path = std::string(cwd) + "/" + path;
    }
    // Walked from "/" one component at a time, each opened relative to its verified parent with
    // O_NOFOLLOW: a link in a parent position is followed only when a verified folder holds it,
    // the last component must not be a link at all.
    std::deque<std::string> todo;
    push_components(path, &todo, false);
    Dir cur(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    std::string at = "/";
    int links = 0;
    for (;;) {
        struct stat st {};
        if (!cur || ::fstat(cur.fd(), &st) != 0) throw std::runtime_error(at + ": " + std::strerror(errno));
        if (todo.empty()) {  // the cache directory itself
            std::string why = untrusted_dir(path, st);
            if (!why.empty()) throw std::runtime_error(why);
            return cur;
        }
        std::string why = untrusted_parent(path, at, st);
        if (!why.empty()) throw std::runtime_error(why);
        const std::string name = todo.front();
        todo.pop_front();
        const bool last = todo.empty();
        const std::string next = name == ".." ? (at.rfind('/') == 0 ? "/" : at.substr(0, at.rfind('/')))
                                              : child_path(at, name);
        if (create && name != ".." && ::mkdirat(cur.fd(), name.c_str(), 0700) != 0 && errno != EEXIST) {
            throw std::runtime_error(next + ": cannot create the cache directory: " + std::strerror(errno));
        }
        Dir d(::openat(cur.fd(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!d) {
            const int e = errno;
            if (e == ENOENT && !create) return Dir();
            struct stat lst {};
            const bool link = (e == ELOOP || e == ENOTDIR) &&
                              ::fstatat(cur.fd(), name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode);
            if (link && last) {
                throw std::runtime_error(path +
                                         ": is a symbolic link: refused (the cache directory must be a directory "
                                         "itself); give the folder it points to as --cache-dir");
            }
            if (!link) throw std::runtime_error(open_failure(cur.fd(), name, next, e));
            if (++links > 40) {
                throw std::runtime_error(path + ": cannot open the cache directory: " + std::strerror(ELOOP));
            }
            std::string target(PATH_MAX, '\0');
            const ssize_t n = ::readlinkat(cur.fd(), name.c_str(), target.data(), target.size());
            if (n <= 0) throw std::runtime_error(next + ": " + std::strerror(n < 0 ? errno : ENOENT));
            target.resize(static_cast<size_t>(n));
            push_components(target, &todo, true);
            if (target.front() == '/') {
                cur = Dir(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
                at = "/";
            }
            continue;
        }
        cur = std::move(d);
        at = next;
    }
}

Dir open_sub(const Dir& parent, const std::string& name, const std::string& path, bool create, std::string* why,
             int* err) {
    int e = 0;
    why->clear();
    if (create && ::mkdirat(parent.fd(), name.c_str(), 0700) != 0 && errno != EEXIST) {
        e = errno;
        *why = path + ": cannot create the cache directory: " + std::strerror(e);
    }
    Dir dir;
    if (e == 0) {
        dir = Dir(::openat(parent.fd(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!dir) {
            e = errno;
            if (e != ENOENT) *why = open_failure(parent.fd(), name, path, e);
            if (e == ELOOP || e == ENOTDIR) e = EPERM;
        }
    }
    struct stat st {};
    if (e == 0 && ::fstat(dir.fd(), &st) != 0) {
        e = errno;
        *why = path + ": " + std::strerror(e);
    }
    if (e == 0) {
        *why = untrusted_dir(path, st);
        if (!why->empty()) e = EPERM;
    }
    if (err) *err = e;
    return e == 0 ? std::move(dir) : Dir();
}

Dir open_sub_or_throw(const Dir& parent, const std::string& name, const std::string& path) {
    std::string why;
    int err = 0;
    Dir dir = open_sub(parent, name, path, true, &why, &err);
    if (!dir) throw std::runtime_error(why.empty() ? path + ": " + std::strerror(err) : why);
    return dir;
}

int open_lock(const Dir& dir, const std::string& name, const std::string& path) {
    int fd = ::openat(dir.fd(), name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    struct stat st {};
    if (fd < 0) {
        const int err = errno;
        if (err == ELOOP && ::fstatat(dir.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
            throw std::runtime_error(path + ": is not a regular file of this daemon's uid " + euid_text() + " (" +
                                     kind_text(st) + "): refused; remove it");
        }
        throw std::runtime_error(path + ": cannot create: " + std::strerror(err));
    }
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
        ::close(fd);
        throw std::runtime_error(path + ": is not a regular file of this daemon's uid " + euid_text() + " (" +
                                 (S_ISREG(st.st_mode) ? "owned by uid " + std::to_string(st.st_uid)
                                                      : std::string(kind_text(st))) +
                                 "): refused; remove it");
    }
    return fd;
}

int create_temporary(const Dir& dir, std::string* name, bool direct) noexcept {
    static std::atomic<uint64_t> counter{0};
    try {
        *name = ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    } catch (...) {
        return -ENOMEM;
    }
    int fd = ::openat(dir.fd(), name->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    if (direct) {
        // Refused (tmpfs before Linux 6.6, some FUSE file systems): the page cache it is.
        const int flags = ::fcntl(fd, F_GETFL);
        if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_DIRECT);
    }
    return fd;
}

int write_file(int fd, const char* data, size_t len, const char* tail, size_t tail_len) noexcept {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0) return -errno;
    size_t done = 0;
    if ((flags & O_DIRECT) != 0) {
        const size_t whole =
            reinterpret_cast<uintptr_t>(data) % kDirectAlign == 0 ? len / kDirectAlign * kDirectAlign : 0;
        while (done < whole) {
            ssize_t w = ::pwrite(fd, data + done, whole - done, static_cast<off_t>(done));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0 && errno != EINVAL) return -errno;
            if (w <= 0) break;  // refused: the rest through the page cache
            done += static_cast<size_t>(w);
            if (done % kDirectAlign != 0) break;  // cut short off a page boundary
        }
        if (::fcntl(fd, F_SETFL, flags & ~O_DIRECT) != 0) return -errno;
    }
    auto put = [fd](const char* p, size_t n, size_t at) {
        size_t k = 0;
        while (k < n) {
            ssize_t w = ::pwrite(fd, p + k, n - k, static_cast<off_t>(at + k));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return w < 0 ? -errno : -EIO;
            k += static_cast<size_t>(w);
        }
        return 0;
    };
    int rc = put(data + done, len - done, done);
    if (rc == 0 && tail_len) rc = put(tail, tail_len, len);
    if (rc != 0) return rc;
    struct stat st {};
    if (::fstat(fd, &st) != 0) return -errno;
    const uint64_t total = len + tail_len;
    if (static_cast<uint64_t>(st.st_size) != total && ::ftruncate(fd, static_cast<off_t>(total)) != 0) return -errno;
    return 0;
}

int publish(const Dir& dir, const std::string& tmp, const std::string& final_name) noexcept {
    int rc = 0;
    int fd = ::openat(dir.fd(), tmp.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        ::unlinkat(dir.fd(), tmp.c_str(), 0);
        return rc;
    }
    if (::fdatasync(fd) != 0) rc = -errno;
    ::close(fd);
    if (rc == 0 && ::renameat(dir.fd(), tmp.c_str(), dir.fd(), final_name.c_str()) != 0) rc = -errno;
    if (rc != 0) ::unlinkat(dir.fd(), tmp.c_str(), 0);
    return rc;
}

namespace {

/// `data` to a new temporary of `dir`, then renamed to `final_name` (after fdatasync when
/// `sync`). 0 or -errno; the temporary is removed on failure.
int write_via_temporary(const Dir& dir, const std::string& final_name, const std::string& data, bool sync) noexcept {
    std::string tmp;
    int fd = create_temporary(dir, &tmp, false);
    if (fd < 0) return fd;
    int rc = write_file(fd, data.data(), data.size());
    ::close(fd);
    if (rc == 0 && sync) return publish(dir, tmp, final_name);
    if (rc == 0 && ::renameat(dir.fd(), tmp.c_str(), dir.fd(), final_name.c_str()) != 0) rc = -errno;
    if (rc != 0) ::unlinkat(dir.fd(), tmp.c_str(), 0);
    return rc;
}

}  // namespace

int write_durably(const Dir& dir, const std::string& final_name, const std::string& data) noexcept {
    return write_via_temporary(dir, final_name, data, true);
}

int write_replacing(const Dir& dir, const std::string& final_name, const std::string& data) noexcept {
    return write_via_temporary(dir, final_name, data, false);
}

namespace {

/// "x:" + the 16 lower-case hex digits of XXH3-64 of `text` + "\n".
std::string seal_of(const char* text, size_t len) {
    char line[24];
    std::snprintf(line, sizeof line, "x:%016llx\n", static_cast<unsigned long long>(XXH3_64bits(text, len)));
    return line;
}

constexpr size_t kSealSize = 19;  // "x:" + 16 hex digits + "\n"

}  // namespace

std::string seal_record(const std::string& text) {
    return text + seal_of(text.data(), text.size());
}

std::optional<std::string> unseal_record(const std::string& record) {
    if (record.size() < kSealSize) return std::nullopt;
    const size_t body = record.size() - kSealSize;
    if (record.compare(body, kSealSize, seal_of(record.data(), body)) != 0) return std::nullopt;
    return record.substr(0, body);
}

std::optional<std::string> read_file(const Dir& dir, const std::string& name) {
    int fd = ::openat(dir.fd(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    std::optional<std::string> out;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        std::string text;
        char buf[65536];
        ssize_t n;
        while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
            if (n > 0) text.append(buf, static_cast<size_t>(n));
        }
        if (n == 0) out = std::move(text);
    }
    ::close(fd);
    return out;
}

BlockChecksum::BlockChecksum(const std::string& key, uint64_t block) noexcept : state_(XXH3_createState()) {
    if (!state_) return;
    char id[80];
    const int n = std::snprintf(id, sizeof id, "%.64s/%llu", key.c_str(), static_cast<unsigned long long>(block));
    XXH3_64bits_reset_withSeed(static_cast<XXH3_state_t*>(state_), XXH3_64bits(id, static_cast<size_t>(n)));
}

BlockChecksum::~BlockChecksum() {
    if (state_) XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

void BlockChecksum::update(const char* data, size_t len) noexcept {
    if (state_) XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, len);
}

void BlockChecksum::trailer(char out[kTrailerSize]) noexcept {
    std::memcpy(out, kMagic, sizeof kMagic);
    uint64_t h = state_ ? XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_)) : 0;
    for (size_t i = 0; i < 8; ++i) out[8 + i] = static_cast<char>((h >> (8 * i)) & 0xff);
}

bool BlockChecksum::matches(const char stored[kTrailerSize]) noexcept {
    if (!state_) return false;
    char want[kTrailerSize];
    trailer(want);
    return std::memcmp(want, stored, kTrailerSize) == 0;
}

}  // namespace gguf_mount::remote::cache_files
