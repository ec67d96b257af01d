#include "gguf/bytes/virtual_file.hpp"

#include <algorithm>
#include <cstring>

#include "gguf/error.hpp"

namespace gguf {

VirtualFile::VirtualFile(VirtualLayout layout, std::vector<std::shared_ptr<const ByteSource>> sources)
    : layout_(std::move(layout)), sources_(std::move(sources)) {}

VirtualFile VirtualFile::open(VirtualLayout layout, const std::vector<FilePart>& parts) {
    std::vector<std::shared_ptr<const ByteSource>> sources;
    sources.reserve(parts.size());
    for (const FilePart& p : parts) sources.push_back(open_part(p));
    for (const Extent& e : layout.extents()) {
        if (e.kind == Extent::Kind::Source && e.source >= sources.size()) {
            throw Error(Code::BadArgument, "extent at " + std::to_string(e.start) + " names source " +
                                               std::to_string(e.source) + " of " + std::to_string(sources.size()));
        }
    }
    return VirtualFile(std::move(layout), std::move(sources));
}

VirtualFile VirtualFile::concatenation(const LogicalFile& file) {
    return open(concatenation_layout(file), file.parts);
}

bool VirtualFile::source_changed(uint32_t index) const noexcept {
    return index < sources_.size() && sources_[index]->changed();
}

void VirtualFile::ensure_sources_unchanged(const std::string& action) const {
    for (uint32_t i = 0; i < sources_.size(); ++i) {
        if (source_changed(i)) {
            throw Error(Code::BadSplit, sources_[i]->display_name() + ": changed while it was being " + action +
                                            " (size or modification time differs); nothing was written");
        }
    }
}

Served VirtualFile::serve(uint64_t offset, size_t len, char* buf, CopyKept kept) const noexcept {
    if (kept == CopyKept::ByReaderDirect) {
        // Only a stream of small requests stays buffered (kDirectStreamMin). Streams are the
        // reader's, over this file: tracked per source instead (each shard remembering its own
        // last requests), random requests over many shards were taken for streams far more
        // often (bench/README.md).
        if (len < kDirectStreamMin && streams_.continues_stream(offset)) kept = CopyKept::ByReader;
        streams_.record(offset + len);
    }
    Served out;
    out.data = buf;
    const uint64_t total = offset < size() ? std::min<uint64_t>(len, size() - offset) : 0;
    bool failed = false;
    layout_.for_each_piece(offset, len, [&](const Piece& p) {
        if (failed) return;
        char* dst = buf + out.result;
        switch (p.extent->kind) {
            case Extent::Kind::Header:
                std::memcpy(dst, layout_.header().data() + p.extent->source_offset + p.skip, p.length);
                break;
            case Extent::Kind::Zeros:
                std::memset(dst, 0, p.length);
                break;
            case Extent::Kind::Source: {
                const ByteSource& src = *sources_[p.extent->source];
                const uint64_t at = p.extent->source_offset + p.skip;
                // The only piece: the source may widen it into the aligned buffer (O_DIRECT).
                const bool whole = p.length == total;
                Served s = src.read_served(dst, static_cast<size_t>(p.length), at, kept, whole);
                if (s.result != static_cast<ssize_t>(p.length) || src.changed()) {
                    failed = true;
                    out.result = s.result < 0 ? s.result : -EIO;
                    out.failed_source = p.extent->source;
                    out.failed_offset = at;
                    out.failed_length = p.length;
                    return;
                }
                if (whole) {
                    out.data = s.data;
                    out.direct = s.direct;
                    out.hold = std::move(s.hold);
                }
                break;
            }
        }
        out.result += static_cast<ssize_t>(p.length);
    });
    return out;
}

ssize_t VirtualFile::read(uint64_t offset, size_t len, char* dst, uint32_t* failed_source) const noexcept {
    Served s = serve(offset, len, dst, CopyKept::None);
    if (s.result < 0 && failed_source) *failed_source = s.failed_source;
    // A whole request may have been answered elsewhere (widened, or from a source's memory).
    if (s.result > 0 && s.data != dst) std::memmove(dst, s.data, static_cast<size_t>(s.result));
    return s.result;
}

}  // namespace gguf
