#include "fs/filesystem.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <set>
#include <tuple>

#include "gguf/bytes/file_io.hpp"
#include "gguf/error.hpp"

namespace gguf_mount::fs {

namespace {

constexpr blksize_t kBlockSize = 4096;
/// Fingerprint of every directory: a directory keeps its inode number for as long as its path
/// is a directory.
constexpr const char* kDirectoryFingerprint = "dir";

std::string parent_path(const std::string& path) {
    auto slash = path.find_last_of('/');
    return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string last_component(const std::string& path) {
    auto slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}


bool same_attributes(const struct stat& a, const struct stat& b) {
    return a.st_mode == b.st_mode && a.st_uid == b.st_uid && a.st_gid == b.st_gid && a.st_size == b.st_size &&
           a.st_nlink == b.st_nlink && gguf::same_time(a.st_mtim, b.st_mtim) && gguf::same_time(a.st_ctim, b.st_ctim);
}

struct stat directory_stat(const gguf::CatalogDirectory& d, uint64_t ino) {
    struct stat st {};
    st.st_ino = static_cast<ino_t>(ino);
    st.st_mode = S_IFDIR | (d.attr.mode & 0555);
    st.st_nlink = 2;
    st.st_uid = d.attr.uid;
    st.st_gid = d.attr.gid;
    st.st_blksize = kBlockSize;
    st.st_mtim = d.attr.mtime;
    st.st_atim = d.attr.mtime;
    st.st_ctim = d.attr.ctime;
    return st;
}

}  // namespace

uint64_t InodeTable::assign(const std::string& path, const std::string& fingerprint) {
    if (path.empty()) return kRootInode;
    auto it = table_.find(path);
    if (it != table_.end() && it->second.fingerprint == fingerprint) return it->second.ino;
    uint64_t ino = next_++;
    table_[path] = Slot{ino, fingerprint};
    return ino;
}

void InodeTable::retain(const std::function<bool(const std::string& path)>& keep) {
    for (auto it = table_.begin(); it != table_.end();) {
        it = keep(it->first) ? std::next(it) : table_.erase(it);
    }
}

namespace {
std::atomic<size_t> g_open_files{0};

/// A gguf::VirtualFile counted in FileSource::open_count().
struct CountedFile {
    void operator()(const gguf::VirtualFile* f) const noexcept {
        delete f;
        g_open_files.fetch_sub(1, std::memory_order_relaxed);
    }
};

std::shared_ptr<const gguf::VirtualFile> open_counted(gguf::VirtualLayout layout,
                                                      const std::vector<gguf::FilePart>& parts) {
    auto* f = new gguf::VirtualFile(gguf::VirtualFile::open(std::move(layout), parts));
    g_open_files.fetch_add(1, std::memory_order_relaxed);
    return std::shared_ptr<const gguf::VirtualFile>(f, CountedFile{});
}
}  // namespace

FileSource::FileSource(gguf::VirtualLayout layout, std::vector<gguf::FilePart> parts)
    : size_(layout.size()), parts_(std::move(parts)), layout_(std::move(layout)) {}

void FileSource::pin() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pinned_) return;
    auto held = open_.lock();
    pinned_ = held ? held : open_counted(std::move(layout_), parts_);
    layout_ = gguf::VirtualLayout();  // pinned_ holds the layout from now on
}

bool FileSource::pinned() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pinned_ != nullptr;
}

std::shared_ptr<const gguf::VirtualFile> FileSource::acquire() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pinned_) return pinned_;
    if (auto held = open_.lock()) return held;
    auto f = open_counted(layout_, parts_);
    open_ = f;
    return f;
}

bool FileSource::source_changed() const noexcept {
    for (const gguf::FilePart& p : parts_) {
        if (gguf::part_changed(p)) return true;
    }
    return false;
}

size_t FileSource::open_count() noexcept { return g_open_files.load(std::memory_order_relaxed); }

std::string entry_fingerprint(const gguf::CatalogEntry& entry) {
    std::string fp = gguf::entry_kind_name(entry.kind);
    fp += ':' + std::to_string(entry.size());
    if (!entry.identity.empty()) fp += '|' + entry.identity;
    fp += gguf::files_state(entry.members);
    // With KV edits the header depends on more than the parts (a sidecar, an @FILE): its digest
    // keeps an edit of the same length from reusing the inode and its cached header pages.
    if (!entry.header_digest.empty()) fp += "|header=" + entry.header_digest;
    return fp;
}

struct stat entry_stat(const gguf::CatalogEntry& entry, uint64_t ino) {
    struct stat st {};
    st.st_ino = static_cast<ino_t>(ino);
    st.st_mode = S_IFREG | (entry.attr.mode & 0444);
    st.st_nlink = 1;
    st.st_uid = entry.attr.uid;
    st.st_gid = entry.attr.gid;
    st.st_size = static_cast<off_t>(entry.size());
    st.st_blksize = kBlockSize;
    st.st_blocks = static_cast<blkcnt_t>((entry.size() + 511) / 512);
    st.st_mtim = entry.attr.mtime;
    st.st_atim = entry.attr.mtime;
    st.st_ctim = entry.attr.ctime;
    return st;
}

std::shared_ptr<const Snapshot> Snapshot::build(const gguf::Catalog& catalog, InodeTable& inodes,
                                                const Snapshot* previous, std::vector<std::string>* errors,
                                                size_t pin_budget, size_t* unpinned) {
    auto snap = std::make_shared<Snapshot>();
    std::vector<Node>& nodes = snap->nodes_;

    // Root first (a catalog always has it; a missing one gets an empty 0555 root).
    Node root;
    root.ino = kRootInode;
    root.directory = true;
    root.fingerprint = kDirectoryFingerprint;
    gguf::CatalogDirectory root_dir;
    root_dir.attr.mode = 0555;
    for (const auto& d : catalog.directories) {
        if (d.path.empty()) root_dir = d;
    }
    root.attr = directory_stat(root_dir, kRootInode);
    if (!root_dir.source.empty()) root.access_paths.push_back(root_dir.source);
    nodes.push_back(std::move(root));

    // Inode numbers are handed out in path order, directories and files together, so a fresh
    // mount of the same SOURCE numbers everything the same way.
    struct Item {
        const std::string* path;
        const gguf::CatalogDirectory* dir;
        const gguf::CatalogEntry* entry;
    };
    std::vector<Item> items;
    for (const auto& d : catalog.directories) {
        if (!d.path.empty()) items.push_back(Item{&d.path, &d, nullptr});
    }
    for (const auto& e : catalog.entries) items.push_back(Item{&e.path, nullptr, &e});
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return *a.path < *b.path; });

    size_t pinned = 0;           // descriptors of pinned files kept from `previous`, then new ones
    std::vector<size_t> to_pin;  // files not pinned yet (indices into nodes)

    for (const Item& item : items) {
        Node n;
        n.path = *item.path;
        n.name = last_component(n.path);
        if (item.dir) {
            n.directory = true;
            n.fingerprint = kDirectoryFingerprint;
            n.ino = inodes.assign(n.path, n.fingerprint);
            n.attr = directory_stat(*item.dir, n.ino);
            if (!item.dir->source.empty()) n.access_paths.push_back(item.dir->source);
        } else {
            const gguf::CatalogEntry& e = *item.entry;
            n.kind = e.kind;
            n.edited = !e.kv_edits.empty();
            n.fingerprint = entry_fingerprint(e);
            n.ino = inodes.assign(n.path, n.fingerprint);
            const Node* old = previous ? previous->find(n.path) : nullptr;
            if (old && !old->directory && old->ino == n.ino) {
                n.file = old->file;
            } else {
                n.file = std::make_shared<FileSource>(e.layout, e.parts());
            }
            if (n.file->pinned()) {
                pinned += n.file->pinned_descriptors();
            } else {
                to_pin.push_back(nodes.size());
            }
            n.attr = entry_stat(e, n.ino);
            n.access_paths = e.access_paths();
        }
        nodes.push_back(std::move(n));
    }

    // Merged sets and byte-split files are pinned while the budget allows: their shards stay
    // open (and so serve their old bytes if replaced), and an entry whose parts changed since
    // the catalog was built is found now and left out. Companions and shards: on demand.
    std::vector<bool> drop(nodes.size(), false);
    for (size_t i : to_pin) {
        Node& n = nodes[i];
        if (!planned_kind(n.kind)) continue;
        try {
            if (pinned + n.file->pinned_descriptors() <= pin_budget) {
                try {
                    n.file->pin();
                    pinned += n.file->pinned_descriptors();
                    continue;
                } catch (const gguf::Error& err) {
                    if (err.sys_errno() != EMFILE && err.sys_errno() != ENFILE) throw;
                }
            }
            // Past the budget: checked with one open now, then served on demand.
            (void)n.file->acquire();
            if (unpinned) ++*unpinned;
        } catch (const gguf::Error& err) {
            if (errors) errors->push_back(n.path + ": " + err.what());
            drop[i] = true;
        }
    }
    if (std::find(drop.begin(), drop.end(), true) != drop.end()) {
        std::vector<Node> kept;
        kept.reserve(nodes.size());
        for (size_t i = 0; i < nodes.size(); ++i) {
            if (!drop[i]) kept.push_back(std::move(nodes[i]));
        }
        nodes = std::move(kept);
    }

    for (size_t i = 0; i < nodes.size(); ++i) {
        snap->by_ino_[nodes[i].ino] = i;
        snap->by_path_[nodes[i].path] = i;
    }
    // Link children to parents; drop nodes whose parent is missing (not produced by a catalog).
    for (size_t i = 1; i < nodes.size(); ++i) {
        auto it = snap->by_path_.find(parent_path(nodes[i].path));
        if (it == snap->by_path_.end() || !nodes[it->second].directory) {
            if (errors) errors->push_back(nodes[i].path + ": no parent directory in the catalog");
            continue;
        }
        Node& parent = nodes[it->second];
        nodes[i].parent = parent.ino;
        parent.children.push_back(i);
        if (nodes[i].directory) ++parent.attr.st_nlink;
        if (!nodes[i].directory) {
            ++snap->file_count_;
            snap->total_bytes_ += nodes[i].file->size();
        }
    }
    for (Node& n : nodes) {
        std::sort(n.children.begin(), n.children.end(),
                  [&nodes](size_t a, size_t b) { return nodes[a].name < nodes[b].name; });
    }
    inodes.retain([&snap](const std::string& path) { return snap->by_path_.count(path) > 0; });
    return snap;
}

const Node* Snapshot::node(uint64_t ino) const noexcept {
    auto it = by_ino_.find(ino);
    return it == by_ino_.end() ? nullptr : &nodes_[it->second];
}

const Node* Snapshot::lookup(uint64_t parent, std::string_view name) const noexcept {
    const Node* dir = node(parent);
    if (!dir || !dir->directory) return nullptr;
    auto it = std::lower_bound(dir->children.begin(), dir->children.end(), name,
                               [this](size_t i, std::string_view n) { return std::string_view(nodes_[i].name) < n; });
    if (it == dir->children.end() || nodes_[*it].name != name) return nullptr;
    return &nodes_[*it];
}

const Node* Snapshot::find(const std::string& path) const noexcept {
    auto it = by_path_.find(path);
    return it == by_path_.end() ? nullptr : &nodes_[it->second];
}

SnapshotChanges diff_snapshots(const Snapshot& before, const Snapshot& after) {
    SnapshotChanges c;
    std::set<std::pair<uint64_t, std::string>> entries;
    for (const Node& b : before.nodes()) {
        if (b.path.empty()) {
            if (!same_attributes(b.attr, after.root().attr)) c.attributes.push_back(kRootInode);
            continue;
        }
        const Node* a = after.find(b.path);
        if (!a || a->ino != b.ino) {
            entries.insert({b.parent, b.name});
            if (a) entries.insert({a->parent, a->name});
            if (!b.directory) (a && !a->directory ? c.replaced : c.removed).push_back(b.path);
            if (a && a->directory == false && b.directory) c.added.push_back(a->path);
        } else if (!same_attributes(a->attr, b.attr)) {
            c.attributes.push_back(a->ino);
        }
    }
    for (const Node& a : after.nodes()) {
        if (a.path.empty() || before.find(a.path)) continue;
        entries.insert({a.parent, a.name});
        if (!a.directory) c.added.push_back(a.path);
    }
    for (const auto& [parent, name] : entries) c.entries.push_back(SnapshotChanges::Entry{parent, name});
    return c;
}

bool WarningLimiter::admit(Clock::time_point now, uint64_t* suppressed) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_ || now - window_start_ >= window_) {
        started_ = true;
        window_start_ = now;
        in_window_ = 0;
    }
    if (in_window_ >= burst_) {
        ++suppressed_;
        return false;
    }
    ++in_window_;
    *suppressed = suppressed_;
    suppressed_ = 0;
    return true;
}

uint64_t WarningLimiter::take_suppressed() {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t n = suppressed_;
    suppressed_ = 0;
    return n;
}

}  // namespace gguf_mount::fs
