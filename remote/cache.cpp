#include "remote/index.hpp"
#include "remote/cache.hpp"
#include "remote/url_parts.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gguf/bytes/file_io.hpp"

namespace gguf_mount::remote {

namespace {

std::string sha256_hex(const std::string& s) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr);
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < n; ++i) {
        out += hex[md[i] >> 4];
        out += hex[md[i] & 15];
    }
    return out;
}

void make_dir(const std::string& path) {
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
        throw std::runtime_error(path + ": cannot create the cache directory: " + std::strerror(errno));
    }
}

void make_dirs(const std::string& path) {
    for (size_t i = 1; i <= path.size(); ++i) {
        if (i == path.size() || path[i] == '/') make_dir(path.substr(0, i));
    }
}

/// A temporary name unique to this process and thread, starting with '.tmp.'.
std::string temp_name(const std::string& dir) {
    static std::atomic<uint64_t> counter{0};
    return dir + "/.tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
}

constexpr size_t kDirectAlign = 4096;  // O_DIRECT: address, offset and length in whole pages

/// Creates a new temporary for a block in `dir` (its path into `*tmp`) and opens it for
/// writing, with O_DIRECT where the file system allows it (`direct`). A descriptor or -errno.
int open_temporary(const std::string& dir, std::string* tmp, bool direct) noexcept {
    try {
        *tmp = temp_name(dir);
    } catch (...) {
        return -ENOMEM;
    }
    const int flags = O_WRONLY | O_CLOEXEC | O_CREAT | O_EXCL;
    int fd = ::open(tmp->c_str(), flags | (direct ? O_DIRECT : 0), 0600);
    if (fd < 0 && direct && errno == EINVAL) {
        // No O_DIRECT here (tmpfs before Linux 6.6, some FUSE file systems); the name is ours
        // either way, so a file the refused open may have left is simply reused.
        fd = ::open(tmp->c_str(), flags & ~O_EXCL, 0600);
    }
    return fd < 0 ? -errno : fd;
}

/// Writes the `len` bytes of a block (or a record) to `fd` from offset 0 and cuts the file there. On an
/// O_DIRECT descriptor the whole pages of a page-aligned `data` go to the device as they are,
/// not through the page cache: a fetched block is then copied once less, and into no fresh
/// page (on the bench VM that copy into new page-cache pages was the largest single cost of a
/// cold remote read, 20 % of all CPU by perf; the daemon keeps its last fetched blocks in
/// memory for readers anyway, RemoteSource). The tail of a block shorter than a page, and
/// whatever O_DIRECT refuses, go through the page cache. 0 or -errno.
int write_block(int fd, const char* data, size_t len) noexcept {
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
        if (done < len && ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) != 0) return -errno;
    }
    while (done < len) {
        ssize_t w = ::pwrite(fd, data + done, len - done, static_cast<off_t>(done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? -errno : -EIO;
        done += static_cast<size_t>(w);
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) return -errno;
    if (static_cast<uint64_t>(st.st_size) != len && ::ftruncate(fd, static_cast<off_t>(len)) != 0) return -errno;
    return 0;
}

/// Writes `data` to a new temporary in `dir` (no fdatasync; `direct`: write_block's O_DIRECT
/// path where the file system allows it); its path into `*tmp`. 0 or -errno; nothing is left
/// on failure.
int write_temporary(const std::string& dir, const char* data, size_t len, std::string* tmp,
                    bool direct = false) noexcept {
    int fd = open_temporary(dir, tmp, direct);
    if (fd < 0) {
        if (!tmp->empty()) ::unlink(tmp->c_str());  // a refused O_DIRECT open may have made it
        return fd;
    }
    int rc = write_block(fd, data, len);
    ::close(fd);
    if (rc != 0) ::unlink(tmp->c_str());
    return rc;
}

/// Makes the temporary `tmp` durable (fdatasync) and renames it to `final_path`. 0 or -errno;
/// the temporary is removed on failure.
int publish_temporary(const std::string& tmp, const std::string& final_path) noexcept {
    int rc = 0;
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        ::unlink(tmp.c_str());
        return rc;
    }
    if (::fdatasync(fd) != 0) rc = -errno;
    ::close(fd);
    if (rc == 0 && ::rename(tmp.c_str(), final_path.c_str()) != 0) rc = -errno;
    if (rc != 0) ::unlink(tmp.c_str());
    return rc;
}

/// Writes `data` to `final_path` durably: temporary, fdatasync, rename. 0 or -errno.
int write_durably(const std::string& dir, const std::string& final_path, const char* data, size_t len) noexcept {
    std::string tmp;
    int rc = write_temporary(dir, data, len, &tmp);
    return rc != 0 ? rc : publish_temporary(tmp, final_path);
}

/// Calls fn(path, stat, temporary) for every file in every object directory of `objects`
/// (temporary: its name starts with '.', a block being written or left by a killed daemon).
template <typename Fn>
void for_each_block_file(const std::string& objects, Fn&& fn) {
    DIR* top = ::opendir(objects.c_str());
    if (!top) return;
    while (dirent* o = ::readdir(top)) {
        if (o->d_name[0] == '.') continue;
        const std::string od = objects + "/" + o->d_name;
        DIR* blocks = ::opendir(od.c_str());
        if (!blocks) continue;
        while (dirent* b = ::readdir(blocks)) {
            if (std::strcmp(b->d_name, ".") == 0 || std::strcmp(b->d_name, "..") == 0) continue;
            struct stat st {};
            const std::string bp = od + "/" + b->d_name;
            if (::stat(bp.c_str(), &st) != 0) continue;
            fn(bp, st, b->d_name[0] == '.');
        }
        ::closedir(blocks);
    }
    ::closedir(top);
}

}  // namespace

BlockCache::BlockCache(std::string dir, uint64_t max_bytes) : dir_(std::move(dir) + "/v1"), max_bytes_(max_bytes) {
    if (dir_.front() != '/') {  // the daemon chdirs to / when it daemonizes: keep an absolute path
        char cwd[PATH_MAX];
        if (!::getcwd(cwd, sizeof cwd)) throw std::runtime_error(dir_ + ": cannot resolve the cache directory");
        dir_ = std::string(cwd) + "/" + dir_;
    }
    make_dirs(dir_);
    make_dir(dir_ + "/meta");
    make_dir(dir_ + "/listings");
    make_dir(dir_ + "/objects");
    int fd = ::open((dir_ + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) throw std::runtime_error(dir_ + "/lock: cannot create: " + std::strerror(errno));
    ::close(fd);
    // Count what is there (and sweep temporaries older than an hour: left by a killed daemon).
    uint64_t used = 0;
    for_each_block_file(dir_ + "/objects", [&](const std::string& path, const struct stat& st, bool temporary) {
        if (!temporary) {
            used += static_cast<uint64_t>(st.st_size);
        } else if (st.st_mtime + 3600 < ::time(nullptr)) {
            ::unlink(path.c_str());
        }
    });
    used_ = used;
}

std::string BlockCache::default_dir() {
    // systemd's CacheDirectory=gguf-mount sets CACHE_DIRECTORY=/var/cache/gguf-mount (several
    // directories are separated by ':'; the first is ours).
    if (const char* sd = std::getenv("CACHE_DIRECTORY"); sd && *sd == '/') {
        std::string first(sd);
        first = first.substr(0, first.find(':'));
        if (first.size() > 1) return first;
    }
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    if (xdg && *xdg == '/') return std::string(xdg) + "/gguf-mount";
    const char* home = std::getenv("HOME");
    if (home && *home == '/') return std::string(home) + "/.cache/gguf-mount";
    return "/var/cache/gguf-mount";
}

std::string BlockCache::object_key(const std::string& url, const std::string& validator) {
    return sha256_hex(url_for_message(url) + "\n" + validator);
}

std::string BlockCache::block_path(const std::string& key, uint64_t block) const {
    return dir_ + "/objects/" + key + "/" + std::to_string(block);
}

ssize_t BlockCache::read(const std::string& key, uint64_t block, uint64_t block_len, uint64_t offset, size_t len,
                         char* dst) const noexcept {
    std::string path;
    try {
        path = block_path(key, block);
    } catch (...) {
        return -ENOMEM;
    }
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? -ENOENT : -errno;
    ::flock(fd, LOCK_SH);  // eviction skips blocks in use
    struct stat st {};
    ssize_t out = -ENOENT;
    if (::fstat(fd, &st) == 0 && st.st_nlink > 0 && static_cast<uint64_t>(st.st_size) == block_len &&
        offset + len <= block_len) {
        out = gguf::pread_full(fd, dst, len, offset);
        if (out >= 0 && static_cast<size_t>(out) != len) out = -EIO;
        if (st.st_mtime + 10 < ::time(nullptr)) ::futimens(fd, nullptr);  // recently used (LRU)
    }
    ::close(fd);
    return out;
}

bool BlockCache::has(const std::string& key, uint64_t block, uint64_t block_len) const noexcept {
    struct stat st {};
    try {
        return ::stat(block_path(key, block).c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == block_len;
    } catch (...) {
        return false;
    }
}

void BlockCache::load(const std::string& key, uint64_t block, uint64_t block_len) const noexcept {
    static const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    int fd = -1;
    try {
        fd = ::open(block_path(key, block).c_str(), O_RDONLY | O_CLOEXEC);
    } catch (...) {
        return;
    }
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == block_len) {
        off_t at = 0;
        while (null_fd >= 0 && static_cast<uint64_t>(at) < block_len) {
            if (::sendfile(null_fd, fd, &at, static_cast<size_t>(block_len - static_cast<uint64_t>(at))) <= 0) break;
        }
        if (null_fd < 0) ::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);  // no /dev/null (a bare chroot)
    }
    ::close(fd);
}

void BlockCache::drop_pages(const std::string& key, uint64_t block) const noexcept {
    int fd = -1;
    try {
        fd = ::open(block_path(key, block).c_str(), O_RDONLY | O_CLOEXEC);
    } catch (...) {
        return;
    }
    if (fd < 0) return;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

int BlockCache::store(const std::string& key, uint64_t block, const char* data, size_t len) noexcept {
    std::string tmp;
    int rc = stage(key, block, data, len, &tmp, false);
    if (rc == 0) rc = commit(key, block, tmp, len);
    if (rc == 0) evict_if_over();
    return rc;
}

void BlockCache::evict_if_over() noexcept {
    if (max_bytes_ && used_.load() > max_bytes_) evict();
}

int BlockCache::stage(const std::string& key, uint64_t /*block*/, const char* data, size_t len, std::string* tmp,
                      bool direct) noexcept {
    try {
        const std::string od = dir_ + "/objects/" + key;
        if (::mkdir(od.c_str(), 0700) != 0 && errno != EEXIST) return -errno;
        return write_temporary(od, data, len, tmp, direct);
    } catch (...) {
        return -ENOMEM;
    }
}

int BlockCache::commit(const std::string& key, uint64_t block, const std::string& tmp, size_t len) noexcept {
    try {
        int rc = publish_temporary(tmp, block_path(key, block));
        if (rc != 0) return rc;
        used_ += len;
        return 0;
    } catch (...) {
        ::unlink(tmp.c_str());
        return -ENOMEM;
    }
}

ssize_t BlockCache::read_staged(const std::string& tmp, uint64_t offset, size_t len, char* dst) noexcept {
    int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? -ENOENT : -errno;
    ssize_t out = gguf::pread_full(fd, dst, len, offset);
    if (out >= 0 && static_cast<size_t>(out) != len) out = -EIO;
    ::close(fd);
    return out;
}

void BlockCache::evict() noexcept {
    try {
        std::lock_guard<std::mutex> guard(evict_mutex_);
        int lock = ::open((dir_ + "/lock").c_str(), O_RDWR | O_CLOEXEC);
        if (lock < 0) return;
        ::flock(lock, LOCK_EX);  // one daemon evicts at a time
        struct Block {
            time_t used;
            uint64_t size;
            std::string path;
        };
        std::vector<Block> all;
        uint64_t total = 0;
        for_each_block_file(dir_ + "/objects", [&](const std::string& path, const struct stat& st, bool temporary) {
            if (temporary) return;
            all.push_back({st.st_mtime, static_cast<uint64_t>(st.st_size), path});
            total += static_cast<uint64_t>(st.st_size);
        });
        std::sort(all.begin(), all.end(), [](const Block& a, const Block& b) { return a.used < b.used; });
        const uint64_t target = max_bytes_ / 10 * 9;  // leave room: no sweep per stored block
        for (const Block& b : all) {
            if (total <= target) break;
            int fd = ::open(b.path.c_str(), O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {  // not being read
                if (::unlink(b.path.c_str()) == 0) total -= b.size;
            }
            ::close(fd);
        }
        used_ = total;
        ::close(lock);
    } catch (...) {
    }
}

std::optional<ObjectInfo> BlockCache::load_meta(const std::string& url) const {
    std::ifstream in(dir_ + "/meta/" + sha256_hex(url_for_message(url)));
    ObjectInfo info;
    std::string size, mtime;
    if (!std::getline(in, size) || !std::getline(in, info.validator) || !std::getline(in, mtime)) return std::nullopt;
    info.size = std::strtoull(size.c_str(), nullptr, 10);
    info.mtime = static_cast<time_t>(std::strtoll(mtime.c_str(), nullptr, 10));
    return info;
}

void BlockCache::save_meta(const std::string& url, const ObjectInfo& info) const noexcept {
    try {
        std::string text = std::to_string(info.size) + "\n" + info.validator + "\n" + std::to_string(info.mtime) + "\n";
        write_durably(dir_ + "/meta", dir_ + "/meta/" + sha256_hex(url_for_message(url)), text.data(), text.size());
    } catch (...) {
    }
}

void BlockCache::save_listing(const std::string& name, const std::string& text) const noexcept {
    try {
        write_durably(dir_ + "/listings", dir_ + "/listings/" + sha256_hex(url_for_message(name)), text.data(), text.size());
    } catch (...) {
    }
}

std::optional<std::string> BlockCache::load_listing(const std::string& name) const {
    std::ifstream in(dir_ + "/listings/" + sha256_hex(url_for_message(name)), std::ios::binary);
    if (!in) return std::nullopt;
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return std::nullopt;
    return text;
}

}  // namespace gguf_mount::remote
