#include "remote/store/cache.hpp"
#include "remote/url_parts.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "gguf/bytes/file_io.hpp"
#include "common/text.hpp"

namespace gguf_mount::remote {

using cache_files::Dir;
using cache_files::kTrailerSize;
using cache_files::hex;
using cache_files::sha256_hex;
using cache_inventory::kOncePrefix;
using cache_inventory::kOwner;
using cache_inventory::for_each_block_file;
using cache_inventory::remove_object_dir;
using cache_inventory::once_dir_is_free;

namespace {

constexpr size_t kCheckChunk = size_t{256} << 10;  // a block is read and checked in pieces of this size

/// A key is a file name we made: hex digits, '-' and lowercase letters, no '/' nor a leading '.'.
bool valid_key(const std::string& key) {
    if (key.empty() || key.size() > 100 || key[0] == '.') return false;
    return std::all_of(key.begin(), key.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-'; });
}

int64_t ctime_ns(const struct stat& st) {
    return static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
}

std::string block_name(uint64_t block) { return std::to_string(block); }

bool is_temporary(const char* name) { return std::strncmp(name, ".tmp.", 5) == 0; }

}  // namespace

BlockCache::BlockCache(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {
    if (dir_.empty() || dir_.front() != '/') {  // the daemon chdirs to / when it daemonizes: keep an absolute path
        char cwd[PATH_MAX];
        if (!::getcwd(cwd, sizeof cwd)) throw std::runtime_error(dir_ + ": cannot resolve the cache directory");
        dir_ = std::string(cwd) + "/" + dir_;
    }
    d_ = cache_inventory::open_dirs(dir_, true);
    dir_ = d_.path;
    lock_fd_ = cache_files::open_lock(d_.root, "lock", dir_ + "/lock");
    // Count what is there, sweep temporaries older than an hour (left by a killed daemon) and
    // refuse the cache when an object directory is not trusted.
    uint64_t used = 0;
    std::string refused;
    std::set<std::string> once;
    for_each_block_file(
        d_.objects, dir_ + "/objects",
        [&](const char*, const std::string& why) {
            if (refused.empty()) refused = why;
        },
        [&](const Dir& od, const char* key, const char* name, const struct stat& st) {
            if (std::strncmp(key, kOncePrefix, std::strlen(kOncePrefix)) == 0) once.insert(key);
            if (is_temporary(name)) {
                if (st.st_mtime + 3600 < ::time(nullptr)) ::unlinkat(od.fd(), name, 0);
            } else if (name[0] != '.') {
                used += static_cast<uint64_t>(st.st_size);
            }
        });
    if (!refused.empty()) {
        ::close(lock_fd_);
        throw std::runtime_error(refused);
    }
    for (const cache_inventory::File& r : cache_inventory::records(d_)) used += r.bytes;  // listing and meta records
    // Blocks of single opens whose process is gone.
    for (const auto& key : once) {
        std::string why;
        Dir od = cache_files::open_sub(d_.objects, key, key, false, &why);
        if (od && once_dir_is_free(od)) remove_object_dir(d_.objects, key);
    }
    used_ = used;
}

BlockCache::~BlockCache() {
    for (const auto& [key, fd] : once_owners_) {
        remove_object_dir(d_.objects, key);
        if (fd >= 0) ::close(fd);
    }
    if (lock_fd_ >= 0) ::close(lock_fd_);
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

bool BlockCache::validates(const std::string& validator) {
    // remote/http.cpp: "lm:" + Last-Modified + ":" + size, so "lm::SIZE" when both headers are
    // absent (an ETag is quoted, never starts so).
    return !validator.empty() && validator.rfind("lm::", 0) != 0;
}

std::string BlockCache::open_once(const std::string& url) {
    unsigned char r[16];
    if (RAND_bytes(r, sizeof r) != 1) {  // no entropy source: still unique in this process
        static std::atomic<uint64_t> n{0};
        const uint64_t v[2] = {static_cast<uint64_t>(::getpid()) << 32 ^ static_cast<uint64_t>(::time(nullptr)),
                               n.fetch_add(1)};
        std::memcpy(r, v, sizeof r);
    }
    const std::string key = kOncePrefix + hex(r, sizeof r);
    if (Dir od = object_dir(key, true)) {
        int fd = ::openat(od.fd(), kOwner, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            ::flock(fd, LOCK_SH);
            std::lock_guard<std::mutex> lock(once_mutex_);
            once_owners_[key] = fd;
        }
    }
    static std::mutex logged_mutex;
    static std::set<std::string> logged;  // servers said once per process
    const std::string name = url_for_message(url);
    const size_t scheme = name.find("://");
    const std::string server = name.substr(0, name.find('/', scheme == std::string::npos ? 0 : scheme + 3));
    std::lock_guard<std::mutex> lock(logged_mutex);
    if (logged.insert(server).second) {
        spdlog::warn(
            "{} sends neither ETag nor Last-Modified (first seen for {}): a file replaced by another of the "
            "same size could not be told apart, so its files' cached blocks serve one open only and each "
            "mount fetches them again",
            gguf::quote_name(server), gguf::quote_name(name));
    }
    return key;
}

Dir BlockCache::object_dir(const std::string& key, bool create, int* err) const noexcept {
    try {
        if (!valid_key(key)) {
            if (err) *err = EINVAL;
            return Dir();
        }
        std::string why;
        int e = 0;
        Dir od = cache_files::open_sub(d_.objects, key, dir_ + "/objects/" + key, create, &why, &e);
        if (!od && e == EPERM && !untrusted_logged_.exchange(true)) spdlog::warn("{}", why);
        if (err) *err = e;
        return od;
    } catch (...) {
        if (err) *err = ENOMEM;
        return Dir();
    }
}

int BlockCache::open_block(const Dir& od, uint64_t block, uint64_t block_len, struct stat* st) const noexcept {
    int fd = ::openat(od.fd(), block_name(block).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT || errno == ELOOP ? -ENOENT : -errno;
    ::flock(fd, LOCK_SH);  // eviction skips blocks in use
    if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_uid != ::geteuid() || st->st_nlink == 0 ||
        static_cast<uint64_t>(st->st_size) != block_len + kTrailerSize) {
        ::close(fd);
        return -ENOENT;
    }
    return fd;
}

int BlockCache::verify(const Dir& od, const std::string& key, uint64_t block, int fd, const struct stat& st,
                       uint64_t block_len, uint64_t offset, size_t len, char* dst) const noexcept {
    const auto id = std::make_pair(st.st_dev, st.st_ino);
    const int64_t changed = ctime_ns(st);
    try {
        std::lock_guard<std::mutex> lock(checked_mutex_);
        auto it = checked_.find(id);
        if (it != checked_.end() && it->second == changed) return 0;
    } catch (...) {
        return -ENOMEM;
    }
    thread_local std::unique_ptr<char[]> buf(new (std::nothrow) char[kCheckChunk]);
    cache_files::BlockChecksum sum(key, block);
    if (!buf || !sum.ok()) return -ENOMEM;
    for (uint64_t at = 0; at < block_len;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kCheckChunk, block_len - at));
        ssize_t r = gguf::pread_full(fd, buf.get(), n, at);
        if (r < 0) return static_cast<int>(r);
        if (static_cast<size_t>(r) != n) return -EIO;
        sum.update(buf.get(), n);
        const uint64_t from = std::max(at, offset), to = std::min(at + n, offset + len);
        if (dst && from < to) std::memcpy(dst + (from - offset), buf.get() + (from - at), to - from);
        at += n;
    }
    char stored[kTrailerSize];
    const bool good = gguf::pread_full(fd, stored, kTrailerSize, block_len) == static_cast<ssize_t>(kTrailerSize) &&
                      sum.matches(stored);
    bool first = true;
    try {
        std::lock_guard<std::mutex> lock(checked_mutex_);
        auto [it, added] = checked_.emplace(id, good ? changed : -1);
        first = added || it->second != -1;
        it->second = good ? changed : -1;
    } catch (...) {
    }
    if (good) return 1;
    // Changed on disk: drop it (unless a new block was renamed in meanwhile), so it is fetched again.
    const std::string name = block_name(block);
    struct stat now {};
    if (::fstatat(od.fd(), name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == st.st_ino &&
        now.st_dev == st.st_dev && ::unlinkat(od.fd(), name.c_str(), 0) == 0) {
        const uint64_t size = static_cast<uint64_t>(st.st_size);
        uint64_t used = used_.load();
        while (!used_.compare_exchange_weak(used, used > size ? used - size : 0)) {
        }
    }
    if (first) {
        spdlog::warn("{}/objects/{}/{}: cached block changed on disk (checksum mismatch): removed, it is fetched again",
                     dir_, key, block);
    }
    return -ENOENT;
}

ssize_t BlockCache::read(const std::string& key, uint64_t block, uint64_t block_len, uint64_t offset, size_t len,
                         char* dst) const noexcept {
    Dir od = object_dir(key, false);
    if (!od) return -ENOENT;
    struct stat st {};
    int fd = open_block(od, block, block_len, &st);
    if (fd < 0) return fd;
    ssize_t out = -ENOENT;
    if (offset + len <= block_len) {
        const int v = verify(od, key, block, fd, st, block_len, offset, len, dst);
        if (v < 0) {
            out = v;
        } else if (v == 1) {
            out = static_cast<ssize_t>(len);
        } else {
            out = gguf::pread_full(fd, dst, len, offset);
            if (out >= 0 && static_cast<size_t>(out) != len) out = -EIO;
        }
        if (out >= 0 && st.st_mtime + 10 < ::time(nullptr) && ::futimens(fd, nullptr) == 0) {  // recently used (LRU)
            // The touch changes the ctime: the check stays valid for the file as it was checked.
            struct stat after {};
            if (::fstat(fd, &after) == 0) {
                try {
                    std::lock_guard<std::mutex> lock(checked_mutex_);
                    auto it = checked_.find({st.st_dev, st.st_ino});
                    if (it != checked_.end() && it->second == ctime_ns(st)) it->second = ctime_ns(after);
                } catch (...) {
                }
            }
        }
    }
    ::close(fd);
    return out;
}

bool BlockCache::has(const std::string& key, uint64_t block, uint64_t block_len) const noexcept {
    Dir od = object_dir(key, false);
    struct stat st {};
    try {
        return od && ::fstatat(od.fd(), block_name(block).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
               S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
               static_cast<uint64_t>(st.st_size) == block_len + kTrailerSize;
    } catch (...) {
        return false;
    }
}

void BlockCache::load(const std::string& key, uint64_t block, uint64_t block_len) const noexcept {
    static const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    Dir od = object_dir(key, false);
    if (!od) return;
    struct stat st {};
    int fd = open_block(od, block, block_len, &st);
    if (fd < 0) return;
    // Not checked yet: checking reads it all (into the page cache). Checked: sendfile.
    if (verify(od, key, block, fd, st, block_len, 0, 0, nullptr) == 0) {
        off_t at = 0;
        while (null_fd >= 0 && static_cast<uint64_t>(at) < block_len) {
            if (::sendfile(null_fd, fd, &at, static_cast<size_t>(block_len - static_cast<uint64_t>(at))) <= 0) break;
        }
        if (null_fd < 0) ::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);  // no /dev/null (a bare chroot)
    }
    ::close(fd);
}

void BlockCache::drop_pages(const std::string& key, uint64_t block) const noexcept {
    Dir od = object_dir(key, false);
    if (!od) return;
    int fd = -1;
    try {
        fd = ::openat(od.fd(), block_name(block).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
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

int BlockCache::stage(const std::string& key, uint64_t block, const char* data, size_t len, std::string* tmp,
                      bool direct) noexcept {
    int err = 0;
    Dir od = object_dir(key, true, &err);
    if (!od) return -err;
    std::string name;
    int fd = cache_files::create_temporary(od, &name, direct && len >= kDirectMin);
    if (fd < 0) return fd;
    char trailer[kTrailerSize];
    cache_files::BlockChecksum sum(key, block);
    sum.update(data, len);
    sum.trailer(trailer);
    int rc = sum.ok() ? cache_files::write_file(fd, data, len, trailer, kTrailerSize) : -ENOMEM;
    ::close(fd);
    try {
        if (rc == 0) *tmp = key + "/" + name;
    } catch (...) {
        rc = -ENOMEM;
    }
    if (rc != 0) ::unlinkat(od.fd(), name.c_str(), 0);
    return rc;
}

int BlockCache::commit(const std::string& key, uint64_t block, const std::string& tmp, size_t len) noexcept {
    try {
        const size_t slash = tmp.find('/');
        if (slash == std::string::npos || tmp.compare(0, slash, key) != 0) return -EINVAL;
        int err = 0;
        Dir od = object_dir(key, false, &err);
        if (!od) return -err;
        int rc = cache_files::publish(od, tmp.substr(slash + 1), block_name(block));
        if (rc != 0) return rc;
        used_ += len + kTrailerSize;
        return 0;
    } catch (...) {
        return -ENOMEM;
    }
}

void BlockCache::remove(const std::string& key, uint64_t block) noexcept {
    try {
        Dir od = object_dir(key, false);
        if (!od) return;
        const std::string name = block_name(block);
        struct stat st {};
        if (::fstatat(od.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            ::unlinkat(od.fd(), name.c_str(), 0) == 0) {
            const uint64_t n = static_cast<uint64_t>(st.st_size);
            uint64_t was = used_.load();
            while (!used_.compare_exchange_weak(was, was > n ? was - n : 0)) {
            }
        }
    } catch (...) {
        // out of memory for the name: the block stays (a later check fails again)
    }
}

ssize_t BlockCache::read_staged(const std::string& tmp, uint64_t offset, size_t len, char* dst) const noexcept {
    int fd = -1;
    try {
        const size_t slash = tmp.find('/');
        if (slash == std::string::npos) return -ENOENT;
        Dir od = object_dir(tmp.substr(0, slash), false);
        if (!od) return -ENOENT;
        fd = ::openat(od.fd(), tmp.c_str() + slash + 1, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    } catch (...) {
        return -ENOMEM;
    }
    if (fd < 0) return errno == ENOENT ? -ENOENT : -errno;
    ssize_t out = gguf::pread_full(fd, dst, len, offset);
    if (out >= 0 && static_cast<size_t>(out) != len) out = -EIO;
    ::close(fd);
    return out;
}

void BlockCache::evict() noexcept {
    try {
        std::lock_guard<std::mutex> guard(evict_mutex_);
        ::flock(lock_fd_, LOCK_EX);  // one daemon evicts at a time
        std::vector<cache_inventory::File> all = cache_inventory::files(d_, [&](const std::string& why) {
            if (!untrusted_logged_.exchange(true)) spdlog::warn("{}", why);
        });
        uint64_t total = 0;
        for (const auto& f : all) total += f.bytes;
        std::set<std::string> whole;
        {
            std::lock_guard<std::mutex> lock(keep_mutex_);
            whole = keep_whole_;
        }
        // Least recently used first; blocks of objects kept whole (a prefetch) after all others.
        auto kept = [&](const cache_inventory::File& f) {
            return f.kind == cache_inventory::Kind::Block && whole.count(f.dir) > 0;
        };
        std::stable_sort(all.begin(), all.end(), [&](const auto& a, const auto& b) {
            const bool ka = kept(a), kb = kept(b);
            return ka != kb ? kb : a.used < b.used;
        });
        const uint64_t target = max_bytes_ / 10 * 9;  // leave room: no sweep per stored block
        for (const auto& f : all) {
            // Kept objects go only while the bound itself is passed, never for the room.
            if (total <= (kept(f) ? max_bytes_ : target)) break;
            if (cache_inventory::remove(d_, f)) total -= f.bytes;
        }
        used_ = total;
        ::flock(lock_fd_, LOCK_UN);
    } catch (...) {
        ::flock(lock_fd_, LOCK_UN);
    }
}

void BlockCache::keep_whole(const std::string& key) {
    std::lock_guard<std::mutex> lock(keep_mutex_);
    keep_whole_.insert(key);
}

void BlockCache::claim_source(const std::string& name) {
    claim_ = std::make_unique<cache_inventory::SourceClaim>(d_, name);
}

void BlockCache::use_object(const std::string& key) const noexcept {
    if (claim_) claim_->tag("o." + key);
}

void BlockCache::add_record_bytes(const cache_files::Dir& dir, const std::string& name, uint64_t bytes,
                                  const char* tag) const noexcept {
    struct stat st {};
    const uint64_t old = ::fstatat(dir.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)
                             ? static_cast<uint64_t>(st.st_size)
                             : 0;
    uint64_t was = used_.load();
    while (!used_.compare_exchange_weak(was, was + bytes > old ? was + bytes - old : 0)) {
    }
    if (claim_) claim_->tag(tag + name);
}

std::optional<std::string> BlockCache::read_record(const cache_files::Dir& dir, const std::string& name,
                                                   const char* tag) const {
    std::optional<std::string> text = cache_files::read_file(dir, name);
    if (!text) return text;
    if (claim_) claim_->tag(tag + name);
    // Recently used (LRU), at most once an hour: a record is read at every open or revalidation.
    struct stat st {};
    if (::fstatat(dir.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_mtime + 3600 < ::time(nullptr)) {
        ::utimensat(dir.fd(), name.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
    }
    return text;
}

std::optional<ObjectInfo> BlockCache::load_meta(const std::string& url) const {
    std::optional<std::string> record = read_record(d_.meta, sha256_hex(url_for_message(url)), "m.");
    if (!record) return std::nullopt;
    // Sealed since meta records are written without fdatasync (a power loss may cut one: then
    // it is not there, and the file is asked for again); an unsealed record of three whole
    // lines was written durably by an earlier version.
    std::optional<std::string> text = cache_files::unseal_record(*record);
    if (!text && std::count(record->begin(), record->end(), '\n') == 3 && record->back() == '\n' &&
        record->find('\0') == std::string::npos)
        text = record;
    if (!text) return std::nullopt;
    std::istringstream in(*text);
    ObjectInfo info;
    std::string size, mtime;
    if (!std::getline(in, size) || !std::getline(in, info.validator) || !std::getline(in, mtime)) return std::nullopt;
    info.size = std::strtoull(size.c_str(), nullptr, 10);
    info.mtime = static_cast<time_t>(std::strtoll(mtime.c_str(), nullptr, 10));
    return info;
}

void BlockCache::save_meta(const std::string& url, const ObjectInfo& info) const noexcept {
    try {
        const std::string text = cache_files::seal_record(std::to_string(info.size) + "\n" + info.validator + "\n" +
                                                          std::to_string(info.mtime) + "\n");
        const std::string name = sha256_hex(url_for_message(url));
        add_record_bytes(d_.meta, name, text.size(), "m.");
        // Not synced: one fdatasync per shard was much of a cold mount of many shards, and a
        // record lost to a power loss only costs asking the server again (load_meta).
        cache_files::write_replacing(d_.meta, name, text);
    } catch (...) {
    }
}

void BlockCache::save_listing(const std::string& name, const std::string& text) noexcept {
    try {
        const std::string file = sha256_hex(url_for_message(name));
        add_record_bytes(d_.listings, file, text.size(), "l.");
        cache_files::write_durably(d_.listings, file, text);
    } catch (...) {
    }
    evict_if_over();
}

std::optional<std::string> BlockCache::load_listing(const std::string& name) const {
    return read_record(d_.listings, sha256_hex(url_for_message(name)), "l.");
}

uint64_t BlockCache::default_max_bytes(const std::string& dir) noexcept {
    // The file system that holds (or will hold) the cache: `dir` or its nearest existing parent.
    std::string at = dir.empty() ? "/" : dir;
    struct statvfs fs {};
    while (::statvfs(at.c_str(), &fs) != 0) {
        const size_t slash = at.find_last_of('/');
        if (slash == std::string::npos || at == "/") return kDefaultMaxCap;
        at = slash == 0 ? "/" : at.substr(0, slash);
    }
    const uint64_t size = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
    return std::min<uint64_t>(size / 100 * kDefaultMaxPercent + size % 100 * kDefaultMaxPercent / 100, kDefaultMaxCap);
}

}  // namespace gguf_mount::remote
