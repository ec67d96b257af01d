#include "gguf/bytes/logical_file.hpp"

#include <cerrno>
#include <cstring>

#include "gguf/error.hpp"

namespace gguf {

uint64_t LogicalFile::size() const noexcept {
    uint64_t total = 0;
    for (const auto& p : parts) total += p.size;
    return total;
}

LogicalFile LogicalFile::single(const std::string& path) {
    FilePart part;
    part.path = path;
    if (::stat(path.c_str(), &part.st) != 0) {
        int e = errno;
        throw Error(Code::Io, path + ": cannot stat: " + std::strerror(e), e);
    }
    if (!S_ISREG(part.st.st_mode)) throw Error(Code::Io, path + ": not a regular file");
    part.size = static_cast<uint64_t>(part.st.st_size);
    LogicalFile f;
    f.path = path;
    f.parts.push_back(std::move(part));
    return f;
}

bool same_file_state(const struct stat& a, const struct stat& b) noexcept {
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
           a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

OpenLogicalFile OpenLogicalFile::open(const LogicalFile& file) {
    OpenLogicalFile out;
    out.file_ = file;
    out.sources_.reserve(file.parts.size());
    for (FilePart& part : out.file_.parts) {
        std::shared_ptr<const ByteSource> src = open_part(part);
        const bool unknown = part.st.st_ino == 0;
        src->update_stat(&part.st);
        const uint64_t file_size = src->size();
        if (unknown && part.offset == 0) part.size = file_size;
        if (part.offset > file_size || part.size > file_size - part.offset) {
            throw Error(Code::Truncated, part.path + ": bytes [" + std::to_string(part.offset) + ", " +
                                             std::to_string(part.offset + part.size) + ") run past its " +
                                             std::to_string(file_size) + " bytes");
        }
        out.size_ += part.size;
        out.sources_.push_back(std::move(src));
    }
    return out;
}

ssize_t OpenLogicalFile::pread(void* dst, size_t len, uint64_t offset) const noexcept {
    auto* out = static_cast<char*>(dst);
    ssize_t done = 0;
    bool stop = false;
    file_.for_each_part_range(offset, len, [&](size_t i, uint64_t part_offset, uint64_t n) {
        if (stop) return;
        const FilePart& part = file_.parts[i];
        const ssize_t got = sources_[i]->pread(out + done, static_cast<size_t>(n), part.offset + part_offset);
        if (got < 0) {
            done = got;
            stop = true;
            return;
        }
        done += got;
        // A part shorter than recorded: the bytes after it would land at the wrong offset.
        if (static_cast<uint64_t>(got) != n) stop = true;
    });
    return done;
}

VirtualLayout flatten_sources(VirtualLayout layout, const std::vector<LogicalFile>& files) {
    std::vector<uint32_t> first_index(files.size());
    uint64_t next = 0;
    for (size_t f = 0; f < files.size(); ++f) {
        first_index[f] = static_cast<uint32_t>(next);
        next += files[f].parts.size();
    }
    if (next > UINT32_MAX) throw Error(Code::TooLarge, "more than 2^32 - 1 physical parts");

    VirtualLayout out;
    out.set_header(layout.take_header());
    for (const Extent& e : layout.extents()) {
        switch (e.kind) {
            case Extent::Kind::Header:
                out.append_header_range(e.source_offset, e.length);
                break;
            case Extent::Kind::Zeros:
                out.append_zeros(e.length);
                break;
            case Extent::Kind::Source: {
                if (e.source >= files.size()) {
                    throw Error(Code::BadArgument, "extent at " + std::to_string(e.start) + " names source " +
                                                       std::to_string(e.source) + " of " +
                                                       std::to_string(files.size()));
                }
                const LogicalFile& f = files[e.source];
                if (e.source_offset > f.size() || e.length > f.size() - e.source_offset) {
                    throw Error(Code::BadArgument, f.path + ": extent [" + std::to_string(e.source_offset) + ", +" +
                                                       std::to_string(e.length) + ") runs past its " +
                                                       std::to_string(f.size()) + " bytes");
                }
                f.for_each_part_range(e.source_offset, e.length, [&](size_t part, uint64_t off, uint64_t n) {
                    out.append_source(first_index[e.source] + static_cast<uint32_t>(part), f.parts[part].offset + off, n);
                });
                break;
            }
        }
    }
    return out;
}

VirtualLayout concatenation_layout(const LogicalFile& file) {
    VirtualLayout layout;
    for (uint32_t i = 0; i < file.parts.size(); ++i) layout.append_source(i, file.parts[i].offset, file.parts[i].size);
    return layout;
}

std::vector<FilePart> flattened_parts(const std::vector<LogicalFile>& files) {
    std::vector<FilePart> out;
    for (const auto& f : files) out.insert(out.end(), f.parts.begin(), f.parts.end());
    return out;
}

std::string files_state(const std::vector<LogicalFile>& files) {
    std::string out;
    for (const auto& m : files) {
        for (const auto& p : m.parts) {
            out += '|' + p.path + ':' + std::to_string(p.st.st_dev) + ':' + std::to_string(p.st.st_ino) + ':' +
                   std::to_string(p.st.st_size) + ':' + std::to_string(p.st.st_mtim.tv_sec) + '.' +
                   std::to_string(p.st.st_mtim.tv_nsec);
            if (!p.validator.empty()) out += ":v=" + p.validator;
        }
    }
    return out;
}

}  // namespace gguf
