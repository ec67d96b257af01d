#include "remote/store/cache_inventory.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace gguf_mount::remote::cache_inventory {

using cache_files::Dir;

namespace {

/// Calls fn(name, stat) for every entry of `dir` but "." and ".." (lstat). Throws only bad_alloc.
void for_each_entry(const Dir& dir, const std::function<void(const char*, const struct stat&)>& fn) {
    int fd = ::openat(dir.fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
    if (!d) {
        if (fd >= 0) ::close(fd);
        return;
    }
    while (dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
        struct stat st {};
        if (::fstatat(dir.fd(), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        try {
            fn(e->d_name, st);
        } catch (...) {
            ::closedir(d);
            throw;
        }
    }
    ::closedir(d);
}

/// The records of `dir` (listings/ or meta/): regular files that are not temporaries.
void add_records(const Dir& dir, Kind kind, std::vector<File>* out) {
    for_each_entry(dir, [&](const char* name, const struct stat& st) {
        if (name[0] == '.' || !S_ISREG(st.st_mode)) return;
        out->push_back({kind, "", name, static_cast<uint64_t>(st.st_size), mtime_ns(st)});
    });
}

}  // namespace

Dirs open_dirs(const std::string& dir, bool create) {
    Dirs d;
    Dir top = cache_files::open_top(dir, create);
    if (!top) return d;
    d.path = dir + "/v1";
    std::string why;
    int err = 0;
    d.root = cache_files::open_sub(top, "v1", d.path, create, &why, &err);
    if (!d.root) {
        if (!create && err == ENOENT) return Dirs();
        throw std::runtime_error(why.empty() ? d.path + ": " + std::strerror(err) : why);
    }
    d.meta = cache_files::open_sub_or_throw(d.root, "meta", d.path + "/meta");
    d.listings = cache_files::open_sub_or_throw(d.root, "listings", d.path + "/listings");
    d.objects = cache_files::open_sub_or_throw(d.root, "objects", d.path + "/objects");
    d.sources = cache_files::open_sub_or_throw(d.root, "sources", d.path + "/sources");
    return d;
}

int64_t mtime_ns(const struct stat& st) noexcept {
    return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

std::string tag_of(const File& f) {
    switch (f.kind) {
    case Kind::Block: return "o." + f.dir;
    case Kind::Listing: return "l." + f.name;
    case Kind::Meta: return "m." + f.name;
    }
    return "";
}

void for_each_block_file(const Dir& objects, const std::string& path,
                         const std::function<void(const char*, const std::string&)>& bad,
                         const std::function<void(const Dir&, const char*, const char*, const struct stat&)>& fn) {
    for_each_entry(objects, [&](const char* key, const struct stat&) {
        if (key[0] == '.') return;
        std::string why;
        Dir od = cache_files::open_sub(objects, key, path + "/" + key, false, &why);
        if (!od) {
            if (!why.empty()) bad(key, why);
            return;
        }
        for_each_entry(od, [&](const char* name, const struct stat& st) {
            if (S_ISREG(st.st_mode)) fn(od, key, name, st);
        });
    });
}

std::vector<File> files(const Dirs& d, const std::function<void(const std::string&)>& bad) {
    std::vector<File> out;
    for_each_block_file(
        d.objects, d.path + "/objects", [&](const char*, const std::string& why) { bad(why); },
        [&](const Dir&, const char* key, const char* name, const struct stat& st) {
            if (name[0] == '.') return;  // a temporary or an owner file
            out.push_back({Kind::Block, key, name, static_cast<uint64_t>(st.st_size), mtime_ns(st)});
        });
    std::vector<File> r = records(d);
    out.insert(out.end(), r.begin(), r.end());
    return out;
}

std::vector<File> records(const Dirs& d) {
    std::vector<File> out;
    add_records(d.listings, Kind::Listing, &out);
    add_records(d.meta, Kind::Meta, &out);
    return out;
}

bool remove(const Dirs& d, const File& f) noexcept {
    try {
        Dir od;
        const Dir* in = f.kind == Kind::Listing ? &d.listings : f.kind == Kind::Meta ? &d.meta : nullptr;
        if (!in) {
            std::string why;
            od = cache_files::open_sub(d.objects, f.dir, f.dir, false, &why);
            if (!od) return false;
            in = &od;
        }
        int fd = ::openat(in->fd(), f.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) return false;
        bool removed = false;
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {  // not being read
            removed = ::unlinkat(in->fd(), f.name.c_str(), 0) == 0;
        }
        ::close(fd);
        return removed;
    } catch (...) {
        return false;
    }
}

void remove_object_dir(const Dir& objects, const std::string& key) noexcept {
    try {
        std::string why;
        Dir od = cache_files::open_sub(objects, key, key, false, &why);
        if (!od) return;
        std::vector<std::string> names;
        for_each_entry(od, [&](const char* name, const struct stat& st) {
            if (!S_ISDIR(st.st_mode)) names.push_back(name);
        });
        for (const auto& n : names) ::unlinkat(od.fd(), n.c_str(), 0);
        ::unlinkat(objects.fd(), key.c_str(), AT_REMOVEDIR);
    } catch (...) {
    }
}

bool once_dir_is_free(const Dir& od) {
    int fd = ::openat(od.fd(), kOwner, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        struct stat st {};
        return errno == ENOENT && ::fstat(od.fd(), &st) == 0 && st.st_mtime + 3600 < ::time(nullptr);
    }
    const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    ::close(fd);
    return free;
}

bool is_tag(const std::string& name) noexcept {
    if (name.size() < 3 || name.size() > 202 || name[1] != '.') return false;
    if (name[0] != 'o' && name[0] != 'l' && name[0] != 'm') return false;
    for (size_t i = 2; i < name.size(); ++i) {
        const char c = name[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '.'))
            return false;
    }
    return true;
}

std::set<std::string> read_tags(const Dir& dir) {
    std::set<std::string> out;
    if (std::optional<std::string> text = cache_files::read_file(dir, kTags)) {
        size_t from = 0;
        for (size_t nl; (nl = text->find('\n', from)) != std::string::npos; from = nl + 1) {
            std::string line = text->substr(from, nl - from);
            if (is_tag(line)) out.insert(std::move(line));
        }
    }
    for_each_entry(dir, [&](const char* name, const struct stat& st) {
        if (S_ISREG(st.st_mode) && is_tag(name)) out.insert(name);
    });
    return out;
}

void write_tags(const Dir& dir, const std::set<std::string>& tags) noexcept {
    try {
        std::string text;
        for (const std::string& t : tags) text += t + "\n";
        // Rewritten (and synced) only when it changes: a trim visits every source not in use.
        if (cache_files::read_file(dir, kTags) != std::optional<std::string>(text) &&
            cache_files::write_durably(dir, kTags, text) != 0)
            return;  // the old file stays whole
        std::vector<std::string> old;
        for_each_entry(dir, [&](const char* name, const struct stat& st) {
            if (S_ISREG(st.st_mode) && is_tag(name)) old.push_back(name);
        });
        for (const std::string& n : old) ::unlinkat(dir.fd(), n.c_str(), 0);
    } catch (...) {
    }
}

SourceClaim::SourceClaim(const Dirs& d, const std::string& name) {
    if (!d.sources) return;
    const std::string id = cache_files::sha256_hex(name);
    // A clear running meanwhile may remove an unused source's directory while this waits for
    // its lock: then the claim is made again, on a new one.
    for (int attempt = 0; attempt < 3; ++attempt) {
        if (lock_fd_ >= 0) ::close(lock_fd_);
        lock_fd_ = -1;
        std::string why;
        dir_ = cache_files::open_sub(d.sources, id, d.path + "/sources/" + id, true, &why);
        if (!dir_) return;
        try {
            lock_fd_ = cache_files::open_lock(dir_, "lock", d.path + "/sources/" + id + "/lock");
        } catch (const std::runtime_error&) {
            dir_ = Dir();
            return;
        }
        while (::flock(lock_fd_, LOCK_SH) != 0 && errno == EINTR) {
        }
        struct stat st {};
        if (::fstat(dir_.fd(), &st) == 0 && st.st_nlink > 0) break;
    }
    ::futimens(lock_fd_, nullptr);  // the source's last use: now
    const std::optional<std::string> known = cache_files::read_file(dir_, "name");
    if (!known || *known != name) cache_files::write_durably(dir_, "name", name);
    tagged_ = read_tags(dir_);  // an earlier claim's tags are not appended again
    tags_fd_ = ::openat(dir_.fd(), kTags, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat st {};
    if (tags_fd_ >= 0 && (::fstat(tags_fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid())) {
        ::close(tags_fd_);
        tags_fd_ = -1;
    }
}

SourceClaim::~SourceClaim() {
    if (tags_fd_ >= 0) ::close(tags_fd_);
    if (lock_fd_ >= 0) ::close(lock_fd_);
}

void SourceClaim::tag(const std::string& tag) noexcept {
    if (!dir_) return;
    try {
        if (tags_fd_ < 0 || !is_tag(tag)) return;
        const std::string line = tag + "\n";
        std::lock_guard<std::mutex> lock(mutex_);
        if (!tagged_.insert(tag).second) return;
        // One write of a short line with O_APPEND: whole, after every other line.
        if (::write(tags_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) tagged_.erase(tag);
    } catch (...) {
    }
}

}  // namespace gguf_mount::remote::cache_inventory
