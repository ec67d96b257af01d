#include "gguf/bytes/virtual_file.hpp"

#include <cerrno>
#include <cstring>

#include "gguf/error.hpp"

namespace gguf {

namespace {

/// Size and mtime unchanged (the descriptor is the same file by construction).
bool same_content_state(const struct stat& a, const struct stat& b) noexcept {
    return a.st_size == b.st_size && a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

/// Checked after every source read: true when `src` no longer has the size and mtime it had
/// when opened (or cannot be fstat()ed). A rewrite that raced with the read has already moved
/// the mtime (file systems update it before copying the new data in).
bool changed_since_open(const SourceFile& src) noexcept {
    if (src.remote) return src.remote->changed();
    struct stat now {};
    return ::fstat(src.fd.get(), &now) != 0 || !same_content_state(now, src.st);
}

}  // namespace

VirtualFile::VirtualFile(VirtualLayout layout, std::vector<SourceFile> sources)
    : layout_(std::move(layout)), sources_(std::move(sources)) {
    for (SourceFile& s : sources_) {
        if (s.st.st_ino == 0 && s.fd && !s.remote) ::fstat(s.fd.get(), &s.st);
    }
}

VirtualFile VirtualFile::open(VirtualLayout layout, const std::vector<FilePart>& parts) {
    std::vector<SourceFile> sources;
    sources.reserve(parts.size());
    for (const FilePart& p : parts) {
        SourceFile f;
        f.path = p.path;
        if (p.source) {
            f.remote = p.source;
            f.st = p.st;
            sources.push_back(std::move(f));
            continue;
        }
        f.fd = open_read_only(p.path);
        if (::fstat(f.fd.get(), &f.st) != 0) {
            int e = errno;
            throw Error(Code::Io, p.path + ": cannot stat: " + std::strerror(e), e);
        }
        if (p.st.st_ino != 0 && !same_file_state(p.st, f.st)) {
            throw Error(Code::BadSplit, p.path + ": changed while it was being read");
        }
        sources.push_back(std::move(f));
    }
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
    if (index >= sources_.size()) return false;
    if (sources_[index].remote) return sources_[index].remote->changed();
    struct stat now {};
    if (::fstat(sources_[index].fd.get(), &now) != 0) return false;
    return !same_content_state(now, sources_[index].st);
}

void VirtualFile::ensure_sources_unchanged(const std::string& action) const {
    for (uint32_t i = 0; i < sources_.size(); ++i) {
        if (source_changed(i)) {
            throw Error(Code::BadSplit, sources_[i].path + ": changed while it was being " + action +
                                            " (size or modification time differs); nothing was written");
        }
    }
}

Served VirtualFile::read_direct(uint32_t index, uint64_t source_offset, size_t len, char* buf) const noexcept {
    Served out;
    out.result = -EAGAIN;
    const SourceFile& src = sources_[index];
    const int fd = src.direct.get(src.fd.get());
    if (fd < 0) return out;
    constexpr uint64_t a = kServeAlign;
    const uint64_t from = source_offset / a * a;
    const uint64_t to = (source_offset + len + a - 1) / a * a;
    const ssize_t n = pread_full(fd, buf, static_cast<size_t>(to - from), from, a);
    if (n == -EINVAL) {  // the file system refused this O_DIRECT read: never try again
        src.direct.disable();
        return out;
    }
    const uint64_t need = source_offset + len - from;
    if (n < 0 || static_cast<uint64_t>(n) < need || changed_since_open(src)) {
        out.result = n < 0 ? n : -EIO;
        return out;
    }
    out.result = static_cast<ssize_t>(len);
    out.data = buf + (source_offset - from);
    out.direct = true;
    return out;
}

Served VirtualFile::serve(uint64_t offset, size_t len, char* buf, uint32_t* failed_source) const noexcept {
    const bool stream = streams_.continues_stream(offset);
    streams_.record(offset + len);
    if (!stream && offset < size()) {
        const Piece* only = nullptr;
        Piece piece{};
        size_t pieces = 0;
        layout_.for_each_piece(offset, len, [&](const Piece& p) {
            if (++pieces == 1) piece = p;
        });
        if (pieces == 1 && piece.extent->kind == Extent::Kind::Source && !sources_[piece.extent->source].remote) {
            only = &piece;
        }
        if (only) {
            const uint32_t index = only->extent->source;
            const uint64_t source_offset = only->extent->source_offset + only->skip;
            const Residency r = page_cache_residency(sources_[index].fd.get(), source_offset, only->length);
            if (r == Residency::None || r == Residency::Partial) {
                Served s = read_direct(index, source_offset, static_cast<size_t>(only->length), buf);
                if (s.result != -EAGAIN) {
                    if (s.result < 0 && failed_source) *failed_source = index;
                    return s;
                }
            }
        }
    }
    Served s;
    s.result = read(offset, len, buf, failed_source);
    s.data = buf;
    return s;
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
                const uint64_t at = p.extent->source_offset + p.skip;
                ssize_t n = src.remote ? src.remote->pread(out, p.length, at) : pread_full(src.fd.get(), out, p.length, at);
                if (n != static_cast<ssize_t>(p.length) || changed_since_open(src)) {
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
