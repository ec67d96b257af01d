// A virtual file ready to serve: an extent table plus open descriptors for its sources.
// This is the whole contract the FUSE adapter and the offline merge use: size() and read().
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/file_io.hpp"
#include "gguf/layout.hpp"
#include "gguf/split_set.hpp"

namespace gguf {

/// One source file of a virtual file, opened once.
struct SourceFile {
    std::string path;
    UniqueFd fd;
    struct stat st {};  // as seen when the layout was planned
};

class VirtualFile {
public:
    /// Takes ownership of `sources`; every Source extent of `layout` must index into it.
    VirtualFile(VirtualLayout layout, std::vector<SourceFile> sources);

    /// The merged file of a validated split set: plan_merge(set) with each shard opened
    /// read-only once. Throws gguf::Error(Io) when a shard cannot be opened, or
    /// Code::BadSplit when a shard changed (size, mtime or inode) since it was validated.
    static VirtualFile merged(const SplitSet& set);

    uint64_t size() const { return layout_.size(); }
    const VirtualLayout& layout() const { return layout_; }
    const std::vector<SourceFile>& sources() const { return sources_; }

    /// Copies bytes [offset, offset + len) of the virtual file into `dst` (clipped at size()).
    /// Returns the number of bytes copied, or -errno: -EIO when a source returns fewer bytes
    /// than its extent promises (a truncated shard), the pread errno otherwise; on error
    /// `*failed_source` (if given) receives the index of the source that failed.
    /// Thread-safe, never allocates, never throws.
    ssize_t read(uint64_t offset, size_t len, char* dst, uint32_t* failed_source = nullptr) const noexcept;

private:
    VirtualLayout layout_;
    std::vector<SourceFile> sources_;
};

}  // namespace gguf
