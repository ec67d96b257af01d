#include "gguf/virtual_file.hpp"

#include <cerrno>
#include <cstring>

#include "gguf/error.hpp"

namespace gguf {

VirtualFile::VirtualFile(VirtualLayout layout, std::vector<SourceFile> sources)
    : layout_(std::move(layout)), sources_(std::move(sources)) {}

VirtualFile VirtualFile::merged(const SplitSet& set) {
    std::vector<SourceFile> sources;
    sources.reserve(set.shards().size());
    for (const Shard& s : set.shards()) {
        SourceFile f;
        f.path = s.path;
        f.fd = open_read_only(s.path);
        if (::fstat(f.fd.get(), &f.st) != 0) {
            int e = errno;
            throw Error(Code::Io, s.path + ": cannot stat: " + std::strerror(e), e);
        }
        if (f.st.st_ino != s.st.st_ino || f.st.st_dev != s.st.st_dev || f.st.st_size != s.st.st_size ||
            f.st.st_mtim.tv_sec != s.st.st_mtim.tv_sec || f.st.st_mtim.tv_nsec != s.st.st_mtim.tv_nsec) {
            throw Error(Code::BadSplit, s.path + ": changed while it was being validated");
        }
        sources.push_back(std::move(f));
    }
    return VirtualFile(plan_merge(set), std::move(sources));
}

ssize_t VirtualFile::read(uint64_t offset, size_t len, char* dst, uint32_t* failed_source) const noexcept {
    ssize_t result = 0;
    bool failed = false;
    layout_.for_each_piece(offset, len, [&](const Piece& p) {
        if (failed) return;
        char* out = dst + result;
        switch (p.extent->kind) {
            case Extent::Kind::Header:
                std::memcpy(out, layout_.header().data() + p.extent->source_offset + p.skip, p.length);
                break;
            case Extent::Kind::Zeros:
                std::memset(out, 0, p.length);
                break;
            case Extent::Kind::Source: {
                const SourceFile& src = sources_[p.extent->source];
                ssize_t n = pread_full(src.fd.get(), out, p.length, p.extent->source_offset + p.skip);
                if (n != static_cast<ssize_t>(p.length)) {
                    failed = true;
                    result = n < 0 ? n : -EIO;
                    if (failed_source) *failed_source = p.extent->source;
                    return;
                }
                break;
            }
        }
        result += static_cast<ssize_t>(p.length);
    });
    return result;
}

}  // namespace gguf
