#include "fs/filesystem.hpp"

#include <algorithm>
#include <cerrno>
#include <stdexcept>

namespace gguf_mount::fs {

namespace {

constexpr blksize_t kBlockSize = 4096;

bool later(const timespec& a, const timespec& b) {
    return a.tv_sec != b.tv_sec ? a.tv_sec > b.tv_sec : a.tv_nsec > b.tv_nsec;
}

}  // namespace

struct stat file_attributes(const gguf::VirtualFile& file, uint64_t ino) {
    struct stat st {};
    st.st_ino = static_cast<ino_t>(ino);
    st.st_nlink = 1;
    mode_t perms = 0444;
    const auto& sources = file.sources();
    if (!sources.empty()) {
        st.st_uid = sources.front().st.st_uid;
        st.st_gid = sources.front().st.st_gid;
        st.st_mtim = sources.front().st.st_mtim;
        st.st_ctim = sources.front().st.st_ctim;
    }
    for (const auto& src : sources) {
        perms &= src.st.st_mode;
        if (later(src.st.st_mtim, st.st_mtim)) st.st_mtim = src.st.st_mtim;
        if (later(src.st.st_ctim, st.st_ctim)) st.st_ctim = src.st.st_ctim;
    }
    st.st_atim = st.st_mtim;
    st.st_mode = S_IFREG | (perms & 0444);
    st.st_size = static_cast<off_t>(file.size());
    st.st_blksize = kBlockSize;
    st.st_blocks = static_cast<blkcnt_t>((file.size() + 511) / 512);
    return st;
}

Filesystem::Filesystem(std::vector<ServedFile> files, const struct stat& source_dir) {
    std::sort(files.begin(), files.end(), [](const ServedFile& a, const ServedFile& b) { return a.name < b.name; });
    files_.reserve(files.size());
    uint64_t ino = kRootInode + 1;
    for (auto& f : files) {
        if (f.name.empty() || f.name == "." || f.name == ".." || f.name.find('/') != std::string::npos) {
            throw std::invalid_argument("invalid file name '" + f.name + "' for the mount root");
        }
        if (!f.file) throw std::invalid_argument(f.name + ": no virtual file");
        if (!files_.empty() && files_.back().name == f.name) {
            throw std::invalid_argument(f.name + ": served twice");
        }
        FileNode node;
        node.ino = ino++;
        node.name = std::move(f.name);
        node.attr = file_attributes(*f.file, node.ino);
        node.file = std::move(f.file);
        total_bytes_ += node.file->size();
        files_.push_back(std::move(node));
    }

    root_attr_.st_ino = static_cast<ino_t>(kRootInode);
    root_attr_.st_mode = S_IFDIR | 0555;
    root_attr_.st_nlink = 2;
    root_attr_.st_uid = source_dir.st_uid;
    root_attr_.st_gid = source_dir.st_gid;
    root_attr_.st_size = 0;
    root_attr_.st_blksize = kBlockSize;
    root_attr_.st_mtim = source_dir.st_mtim;
    root_attr_.st_ctim = source_dir.st_ctim;
    if (!files_.empty()) {
        root_attr_.st_mtim = files_.front().attr.st_mtim;
        root_attr_.st_ctim = files_.front().attr.st_ctim;
        for (const auto& f : files_) {
            if (later(f.attr.st_mtim, root_attr_.st_mtim)) root_attr_.st_mtim = f.attr.st_mtim;
            if (later(f.attr.st_ctim, root_attr_.st_ctim)) root_attr_.st_ctim = f.attr.st_ctim;
        }
    }
    root_attr_.st_atim = root_attr_.st_mtim;
}

const FileNode* Filesystem::lookup(uint64_t parent, std::string_view name) const noexcept {
    if (parent != kRootInode) return nullptr;
    auto it = std::lower_bound(files_.begin(), files_.end(), name,
                               [](const FileNode& f, std::string_view n) { return std::string_view(f.name) < n; });
    if (it == files_.end() || it->name != name) return nullptr;
    return &*it;
}

const FileNode* Filesystem::file(uint64_t ino) const noexcept {
    if (ino <= kRootInode || ino - (kRootInode + 1) >= files_.size()) return nullptr;
    return &files_[static_cast<size_t>(ino - (kRootInode + 1))];
}

int Filesystem::getattr(uint64_t ino, struct stat* out) const noexcept {
    if (ino == kRootInode) {
        *out = root_attr_;
        return 0;
    }
    const FileNode* f = file(ino);
    if (!f) return -ENOENT;
    *out = f->attr;
    return 0;
}

DirEntry Filesystem::dir_entry(size_t index) const noexcept {
    if (index == 0) return DirEntry{".", kRootInode, S_IFDIR};
    // The parent of the mount root is outside the file system; FUSE file systems list it with
    // the root's own inode (the kernel ignores d_ino of "..").
    if (index == 1) return DirEntry{"..", kRootInode, S_IFDIR};
    const FileNode& f = files_[index - 2];
    return DirEntry{f.name.c_str(), f.ino, S_IFREG};
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
