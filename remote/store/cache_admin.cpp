#include "remote/store/cache_admin.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>

namespace gguf_mount::remote {

using cache_files::Dir;
using cache_inventory::File;
using cache_inventory::Kind;

namespace {

/// One source directory as the admin found it.
struct SourceDir {
    std::string id, name;
    Dir dir;
    int lock_fd = -1;  // held LOCK_EX by trim() when not in use
    bool in_use = false;
    time_t claimed = 0;  // mtime of its lock
    std::set<std::string> tags;
};

/// Every source of `d`. With `hold`, the lock of each source not in use stays held (LOCK_EX)
/// until close_sources(); else it is only tested. Throws std::runtime_error for an untrusted
/// source directory.
std::vector<SourceDir> read_sources(const cache_inventory::Dirs& d, bool hold) {
    std::vector<SourceDir> out;
    std::set<std::string> ids;
    cache_inventory::for_each_block_file(
        d.sources, d.path + "/sources",
        [](const char*, const std::string& why) { throw std::runtime_error(why); },
        [&](const Dir&, const char* id, const char*, const struct stat&) { ids.insert(id); });
    // A source directory with no file at all (a claim cut short) is not seen, and stays empty.
    for (const std::string& id : ids) {
        SourceDir s;
        s.id = id;
        std::string why;
        s.dir = cache_files::open_sub(d.sources, id, d.path + "/sources/" + id, false, &why);
        if (!s.dir) {
            if (!why.empty()) throw std::runtime_error(why);
            continue;
        }
        s.tags = cache_inventory::read_tags(s.dir);
        s.name = cache_files::read_file(s.dir, "name").value_or("");
        s.lock_fd = ::openat(s.dir.fd(), "lock", O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat st {};
        if (s.lock_fd >= 0 && ::fstat(s.lock_fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) {
            s.claimed = st.st_mtime;
            s.in_use = ::flock(s.lock_fd, LOCK_EX | LOCK_NB) != 0;
            if (!hold || s.in_use) {
                ::close(s.lock_fd);
                s.lock_fd = -1;
            }
        } else if (s.lock_fd >= 0) {
            ::close(s.lock_fd);
            s.lock_fd = -1;
        }
        out.push_back(std::move(s));
    }
    return out;
}

void close_sources(std::vector<SourceDir>* sources) {
    for (SourceDir& s : *sources) {
        if (s.lock_fd >= 0) ::close(s.lock_fd);
        s.lock_fd = -1;
    }
}

/// The files of `d`, throwing for an untrusted object directory (as BlockCache refuses it).
std::vector<File> all_files(const cache_inventory::Dirs& d) {
    return cache_inventory::files(d, [](const std::string& why) { throw std::runtime_error(why); });
}

bool is_once(const std::string& key) {
    return key.rfind(cache_inventory::kOncePrefix, 0) == 0;
}

/// True when the once- object `key` belongs to an open that is still alive.
bool once_alive(const cache_inventory::Dirs& d, const std::string& key) {
    std::string why;
    Dir od = cache_files::open_sub(d.objects, key, key, false, &why);
    return od && !cache_inventory::once_dir_is_free(od);
}

}  // namespace

CacheAdmin::CacheAdmin(const std::string& dir) : dir_(dir), d_(cache_inventory::open_dirs(dir, false)) {}

CacheReport CacheAdmin::list() const {
    CacheReport r;
    r.dir = d_.path;
    if (!d_) return r;
    std::vector<SourceDir> sources = read_sources(d_, false);
    std::vector<File> files = all_files(d_);
    std::map<std::string, std::vector<size_t>> owners;  // tag -> sources
    for (size_t i = 0; i < sources.size(); ++i) {
        for (const auto& t : sources[i].tags) owners[t].push_back(i);
    }
    std::vector<SourceUsage> usage(sources.size() + 1);  // the last: no source recorded
    std::vector<std::set<std::string>> objects(usage.size());
    std::set<std::string> all_objects;
    for (size_t i = 0; i < sources.size(); ++i) {
        usage[i].name = sources[i].name;
        usage[i].in_use = sources[i].in_use;
        usage[i].last_use = sources[i].claimed;
    }
    for (const File& f : files) {
        r.bytes += f.bytes;
        if (f.kind == Kind::Block) {
            all_objects.insert(f.dir);
        } else {
            ++r.records;
        }
        auto it = owners.find(cache_inventory::tag_of(f));
        std::vector<size_t> none = {sources.size()};
        for (size_t i : it == owners.end() ? none : it->second) {
            usage[i].bytes += f.bytes;
            usage[i].last_use = std::max(usage[i].last_use, static_cast<time_t>(f.used / 1000000000));
            if (f.kind == Kind::Block) objects[i].insert(f.dir);
        }
    }
    r.objects = all_objects.size();
    for (size_t i = 0; i < usage.size(); ++i) usage[i].objects = objects[i].size();
    SourceUsage unrecorded = usage.back();
    usage.pop_back();
    // A source with nothing left (all evicted) is listed only while in use.
    usage.erase(std::remove_if(usage.begin(), usage.end(),
                               [](const SourceUsage& u) { return u.bytes == 0 && !u.in_use; }),
                usage.end());
    std::stable_sort(usage.begin(), usage.end(),
                     [](const SourceUsage& a, const SourceUsage& b) { return a.last_use > b.last_use; });
    if (unrecorded.bytes > 0) usage.push_back(unrecorded);
    r.sources = std::move(usage);
    return r;
}

TrimOutcome CacheAdmin::trim(uint64_t max_bytes) {
    TrimOutcome out;
    if (!d_) return out;
    const int lock = cache_files::open_lock(d_.root, "lock", d_.path + "/lock");
    while (::flock(lock, LOCK_EX) != 0 && errno == EINTR) {
    }
    std::vector<SourceDir> sources;
    try {
        sources = read_sources(d_, true);
        std::set<std::string> kept;  // tags of sources in use
        for (const SourceDir& s : sources) {
            if (!s.in_use) continue;
            out.in_use.push_back(s.name);
            kept.insert(s.tags.begin(), s.tags.end());
        }
        std::vector<File> files = all_files(d_);
        std::map<std::string, bool> once;  // once- key -> its open is alive
        auto protected_file = [&](const File& f) {
            if (kept.count(cache_inventory::tag_of(f))) return true;
            if (f.kind != Kind::Block || !is_once(f.dir)) return false;
            auto it = once.find(f.dir);
            if (it == once.end()) it = once.emplace(f.dir, once_alive(d_, f.dir)).first;
            return it->second;
        };
        uint64_t total = 0;
        for (const File& f : files) {
            total += f.bytes;
            if (protected_file(f)) out.in_use_bytes += f.bytes;
        }
        std::stable_sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.used < b.used; });
        for (const File& f : files) {
            if (total <= max_bytes) break;
            if (protected_file(f) || !cache_inventory::remove(d_, f)) continue;
            total -= f.bytes;
            out.removed_bytes += f.bytes;
            ++out.removed_files;
        }
        out.bytes_left = total;
        // What is left: object directories without blocks (no temporary being written, not a
        // live single open), then the tags of files that are gone and sources left with none.
        std::set<std::string> with_blocks, busy;
        cache_inventory::for_each_block_file(
            d_.objects, d_.path + "/objects", [](const char*, const std::string&) {},
            [&](const Dir&, const char* key, const char* name, const struct stat& st) {
                if (name[0] != '.') with_blocks.insert(key);
                if (std::strncmp(name, ".tmp.", 5) == 0 && st.st_mtime + 3600 >= ::time(nullptr)) busy.insert(key);
                if (std::strcmp(name, cache_inventory::kOwner) == 0 && once_alive(d_, key)) busy.insert(key);
            });
        std::set<std::string> keys;
        cache_inventory::for_each_block_file(
            d_.objects, d_.path + "/objects", [](const char*, const std::string&) {},
            [&](const Dir&, const char* key, const char*, const struct stat&) { keys.insert(key); });
        for (const std::string& k : keys) {
            if (!with_blocks.count(k) && !busy.count(k) && !kept.count("o." + k)) {
                cache_inventory::remove_object_dir(d_.objects, k);
            }
        }
        std::set<std::string> present;
        for (const File& f : cache_inventory::files(d_, [](const std::string&) {})) {
            present.insert(cache_inventory::tag_of(f));
        }
        for (SourceDir& s : sources) {
            if (s.in_use || s.lock_fd < 0) continue;
            std::set<std::string> left;
            for (const std::string& t : s.tags) {
                if (present.count(t)) left.insert(t);
            }
            if (!left.empty()) {
                cache_inventory::write_tags(s.dir, left);  // also turns an older cache's tag files into lines
            } else {  // nothing of it is cached: its record goes (a claim waiting on it retries)
                cache_inventory::write_tags(s.dir, {});
                ::unlinkat(s.dir.fd(), cache_inventory::kTags, 0);
                ::unlinkat(s.dir.fd(), "name", 0);
                ::unlinkat(s.dir.fd(), "lock", 0);
                ::unlinkat(d_.sources.fd(), s.id.c_str(), AT_REMOVEDIR);
            }
        }
    } catch (...) {
        close_sources(&sources);
        ::close(lock);
        throw;
    }
    close_sources(&sources);
    ::close(lock);
    return out;
}

}  // namespace gguf_mount::remote
