#include "fs/live.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <atomic>
#include <cctype>

#include "gguf/error.hpp"

namespace gguf_mount::fs {

std::string problem_key(const gguf::Problem& p) {
    std::string key = p.path + '\x1f';
    const std::string& r = p.reason;
    for (size_t i = 0; i < r.size();) {
        size_t j = i;
        while (j < r.size() && std::isdigit(static_cast<unsigned char>(r[j]))) ++j;
        if (j - i >= 4) {
            key += '#';  // sizes, offsets and counts that move while a file is being written
        } else {
            key.append(r, i, std::max<size_t>(j - i, 1));
        }
        i = std::max(j, i + 1);
    }
    return key;
}

size_t descriptor_budget(uint64_t soft_limit) noexcept {
    constexpr uint64_t kReserved = 64;
    if (soft_limit <= kReserved) return 0;
    const uint64_t half = (soft_limit - kReserved) / 2;
    return half > SIZE_MAX ? SIZE_MAX : static_cast<size_t>(half);
}

std::unique_ptr<LiveFilesystem> LiveFilesystem::with_builder(std::string source, CatalogBuilder build) {
    auto live = std::make_unique<LiveFilesystem>(std::move(source), gguf::CatalogOptions{});
    live->build_ = std::move(build);
    return live;
}

LiveFilesystem::LiveFilesystem(std::string source, gguf::CatalogOptions options)
    : source_(std::move(source)), options_(options) {
    gguf::Catalog empty;
    empty.directories.push_back(gguf::CatalogDirectory{"", {}, {}});
    empty.directories.back().attr.mode = 0555;
    std::atomic_store(&current_, Snapshot::build(empty, inodes_, nullptr, nullptr));
}

RescanResult LiveFilesystem::rescan() {
    gguf::Catalog catalog;
    try {
        catalog = build_ ? build_() : gguf::build_catalog(source_, options_);
    } catch (const gguf::Error& e) {
        std::shared_ptr<const Snapshot> served = current();
        if (build_ && e.code() == gguf::Code::Io && e.sys_errno() != ENOENT && served->file_count() > 0) {
            // A remote SOURCE that cannot be reached now (a periodic revalidation during an
            // outage) keeps what it serves: open files keep their cached blocks, and the
            // next revalidation that reaches the server publishes what it finds.
            // The other paths' reported problems stay as they are: nothing was scanned.
            RescanResult kept;
            gguf::Problem p{".", std::string(e.what()) + "; still serving the last version found"};
            if (reported_[p.path].insert(problem_key(p)).second) kept.new_problems.push_back(std::move(p));
            return kept;
        }
        // SOURCE itself is gone or unusable: serve an empty root (keeping its attributes) and
        // watch the path so that its return is noticed.
        std::shared_ptr<const Snapshot> old = current();
        gguf::CatalogDirectory root;
        root.attr.mode = old->root().attr.st_mode & 0555;
        root.attr.uid = old->root().attr.st_uid;
        root.attr.gid = old->root().attr.st_gid;
        root.attr.mtime = old->root().attr.st_mtim;
        root.attr.ctime = old->root().attr.st_ctim;
        catalog = gguf::Catalog{};
        catalog.source = source_;
        catalog.directories.push_back(root);
        catalog.problems.push_back(gguf::Problem{".", std::string(e.what()) + "; serving an empty directory"});
        catalog.watched.push_back(gguf::WatchedPath{source_, true, false, {}});
    }

    RescanResult result;
    std::shared_ptr<const Snapshot> before = current();
    rlimit nofile{};
    const uint64_t soft = ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY
                              ? static_cast<uint64_t>(nofile.rlim_cur)
                              : UINT64_MAX;
    std::shared_ptr<const Snapshot> after = Snapshot::build(catalog, inodes_, before.get(), &result.errors,
                                                            descriptor_budget(soft), &result.unpinned);
    result.changes = diff_snapshots(*before, *after);
    std::atomic_store(&current_, std::shared_ptr<const Snapshot>(after));

    std::map<std::string, std::set<std::string>> now;
    auto report_once = [&](const std::vector<gguf::Problem>& list, std::vector<gguf::Problem>* fresh) {
        for (const auto& p : list) {
            std::string key = problem_key(p);
            auto old = reported_.find(p.path);
            bool seen = old != reported_.end() && old->second.count(key);
            if (!seen) fresh->push_back(p);
            auto& keys = now[p.path];
            if (old != reported_.end() && keys.empty()) keys = old->second;
            keys.insert(std::move(key));
        }
    };
    report_once(catalog.problems, &result.new_problems);
    report_once(catalog.notes, &result.new_notes);
    reported_ = std::move(now);  // a path without a problem now is forgotten
    {
        std::lock_guard<std::mutex> lock(watched_mutex_);
        watched_ = std::move(catalog.watched);
    }
    return result;
}

std::shared_ptr<const Snapshot> LiveFilesystem::current() const { return std::atomic_load(&current_); }

std::vector<gguf::WatchedPath> LiveFilesystem::watched() const {
    std::lock_guard<std::mutex> lock(watched_mutex_);
    return watched_;
}

void LiveFilesystem::remember_lookup(uint64_t ino, const struct stat& attr) {
    if (ino == kRootInode) return;  // the root is never forgotten
    std::lock_guard<std::mutex> lock(known_mutex_);
    Known& k = known_[ino];
    ++k.lookups;
    k.attr = attr;
}

void LiveFilesystem::forget(uint64_t ino, uint64_t n) {
    std::lock_guard<std::mutex> lock(known_mutex_);
    auto it = known_.find(ino);
    if (it == known_.end()) return;
    if (it->second.lookups <= n) {
        known_.erase(it);
    } else {
        it->second.lookups -= n;
    }
}

bool LiveFilesystem::known_attributes(uint64_t ino, struct stat* out) const {
    std::lock_guard<std::mutex> lock(known_mutex_);
    auto it = known_.find(ino);
    if (it == known_.end()) return false;
    *out = it->second.attr;
    return true;
}

size_t LiveFilesystem::known_inodes() const {
    std::lock_guard<std::mutex> lock(known_mutex_);
    return known_.size();
}

}  // namespace gguf_mount::fs
