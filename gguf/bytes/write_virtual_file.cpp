// write_virtual_file: the copy engine of merge and split (kernel copies, holes, the buffered
// fallback, write-out pacing, resume points). Publishing the result is output.cpp's.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "gguf/bytes/file_io.hpp"
#include "gguf/bytes/output.hpp"
#include "gguf/error.hpp"

namespace gguf {

namespace {

/// pwrite all of `len` bytes at `offset`, retrying on EINTR and short writes. Returns 0 or errno.
int pwrite_all(int fd, const char* src, uint64_t len, uint64_t offset) {
    while (len > 0) {
        ssize_t n = ::pwrite(fd, src, static_cast<size_t>(len), static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EIO;
        src += n;
        len -= static_cast<uint64_t>(n);
        offset += static_cast<uint64_t>(n);
    }
    return 0;
}

/// The copy engine for one write: remembers which method works and owns the fallback buffer.
class Copier {
public:
    Copier(const VirtualFile& vf, OutputFile& out, const WriteOptions& o, WriteStats& stats)
        : vf_(vf), out_(out), opt_(o), stats_(stats), kernel_(!o.force_buffered), holes_(o.preserve_holes) {}

    void run() {
        const VirtualLayout& layout = vf_.layout();
        if (opt_.resume_from > vf_.size()) {
            throw Error(Code::BadArgument, out_.final_path() + ": resume offset " + std::to_string(opt_.resume_from) +
                                               " is past the end (" + std::to_string(vf_.size()) + " bytes)");
        }
        durable_at_ = opt_.resume_from;
        written_end_ = opt_.resume_from;
        try {
            copy_extents(layout);
        } catch (...) {
            keep_what_is_written();
            throw;
        }
        const int fd = out_.fd();
        if (::ftruncate(fd, static_cast<off_t>(vf_.size())) != 0) {
            throw_io(out_.final_path() + ": cannot set the file size", errno);
        }
        struct stat st {};
        if (::fstat(fd, &st) != 0) throw_io(out_.final_path() + ": cannot stat the written file", errno);
        if (static_cast<uint64_t>(st.st_size) != vf_.size()) {
            throw Error(Code::Io, out_.final_path() + ": wrote " + std::to_string(st.st_size) + " bytes, expected " +
                                      std::to_string(vf_.size()));
        }
    }

    /// Writes every extent of `layout` from resume_from on, in offset order.
    void copy_extents(const VirtualLayout& layout) {
        for (Extent e : layout.extents()) {
            check_cancel();
            if (opt_.resume_from > e.start) {  // already written by an earlier run
                const uint64_t skip = std::min(e.length, opt_.resume_from - e.start);
                report(skip);
                e.start += skip;
                e.source_offset += skip;
                e.length -= skip;
                if (e.length == 0) continue;
            }
            switch (e.kind) {
                case Extent::Kind::Header:
                    write_memory(layout.header().data() + e.source_offset, e.length, e.start);
                    stats_.header_bytes += e.length;
                    report(e.length);
                    break;
                case Extent::Kind::Zeros:
                    write_zeros(e.length, e.start);
                    break;
                case Extent::Kind::Source:
                    copy_source(e);
                    break;
            }
        }
    }

    /// On an interruption or error, with WriteOptions::durable set: the bytes written since the
    /// last resume point are synced and `durable(end)` is called for them (an exception from it
    /// is dropped), so a Ctrl-C in the first durable_step bytes keeps them too (`merge URL`
    /// resumes from there). Never throws: the error being unwound is the one to report.
    void keep_what_is_written() noexcept {
        if (!opt_.durable || written_end_ <= durable_at_) return;
        if (::fdatasync(out_.fd()) != 0) return;
        durable_at_ = written_end_;
        try {
            opt_.durable(written_end_);
        } catch (...) {
        }
    }

private:
    void check_cancel() const {
        if (opt_.cancel && *opt_.cancel) {
            throw Error(Code::Io, out_.final_path() + ": interrupted", EINTR);
        }
    }

    void report(uint64_t n) const {
        if (opt_.progress && n > 0) opt_.progress(n);
    }

    void write_memory(const char* src, uint64_t len, uint64_t at) {
        if (int e = pwrite_all(out_.fd(), src, len, at)) {
            throw_io(out_.final_path() + ": write failed at offset " + std::to_string(at), e);
        }
        written_up_to(at + len);
    }

    /// Starts the write-out of [kicked_, end) once it reaches kWritebackStep bytes (the output
    /// is written in offset order). Best effort: a failure here resurfaces at fsync. Makes a
    /// resume point every durable_step bytes (WriteOptions::durable).
    void written_up_to(uint64_t end) {
        if (end > written_end_) written_end_ = end;
        if (opt_.durable && opt_.durable_step > 0 && end > durable_at_ && end - durable_at_ >= opt_.durable_step) {
            if (::fdatasync(out_.fd()) != 0) throw_io(out_.final_path() + ": fdatasync failed", errno);
            durable_at_ = end;
            opt_.durable(end);
        }
        if (end <= kicked_ || end - kicked_ < kWritebackStep) return;
        ::sync_file_range(out_.fd(), static_cast<off64_t>(kicked_), static_cast<off64_t>(end - kicked_),
                          SYNC_FILE_RANGE_WRITE);
        kicked_ = end;
    }

    void write_zeros(uint64_t len, uint64_t at) {
        static const char zeros[64 * 1024] = {};
        while (len > 0) {
            uint64_t n = std::min<uint64_t>(len, sizeof zeros);
            write_memory(zeros, n, at);
            stats_.zero_bytes += n;
            report(n);
            len -= n;
            at += n;
        }
    }

    [[noreturn]] void truncated(const ByteSource& src, uint64_t at) const {
        const int64_t now = src.current_size();
        const std::string size = now >= 0 ? std::to_string(now) : std::string("?");
        throw Error(Code::Truncated, src.display_name() + ": file ends before offset " + std::to_string(at) +
                                         " (it has " + size + " bytes; truncated or changed while being copied)");
    }

    /// Copies Source extent `e`, skipping holes of the source when enabled.
    void copy_source(const Extent& e) {
        const ByteSource& src = *vf_.sources().at(e.source);
        uint64_t pos = e.source_offset;
        const uint64_t end = e.source_offset + e.length;
        const uint64_t out_base = e.start - e.source_offset;  // out offset = pos + out_base (mod 2^64)
        while (pos < end) {
            check_cancel();
            uint64_t data_end = end;
            if (holes_) {
                int64_t d = src.seek(pos, false);
                if (d == -ENXIO) {
                    // No data at or after pos: either a hole to the end of the file or past EOF.
                    const int64_t now = src.current_size();
                    if (now < 0) throw_io(src.display_name() + ": cannot stat", EIO);
                    if (static_cast<uint64_t>(now) < end) truncated(src, end);
                    d = static_cast<int64_t>(end);
                } else if (d < 0) {
                    holes_ = false;  // file system without SEEK_DATA: copy everything
                    continue;
                }
                uint64_t data = std::min<uint64_t>(static_cast<uint64_t>(d), end);
                if (data > pos) {
                    stats_.hole_bytes += data - pos;
                    report(data - pos);
                    pos = data;
                    continue;
                }
                const int64_t h = src.seek(pos, true);
                if (h < 0) {
                    holes_ = false;
                    continue;
                }
                data_end = std::min<uint64_t>(static_cast<uint64_t>(h), end);
                if (data_end <= pos) data_end = end;  // defensive: never stall
            }
            copy_data(src, pos, data_end - pos, pos + out_base);
            pos = data_end;
        }
    }

    /// Copies `len` bytes of data from `src` at `in_off` to the output at `out_off`: in the
    /// kernel (ByteSource::copy_to) while that works, else through one buffer of the source's
    /// copy_chunk().
    void copy_data(const ByteSource& src, uint64_t in_off, uint64_t len, uint64_t out_off) {
        const int out = out_.fd();
        while (len > 0) {
            check_cancel();
            if (kernel_) {
                const size_t want = static_cast<size_t>(std::min(len, kCopyChunk));
                const ssize_t n = src.copy_to(out, out_off, want, in_off);
                if (n < 0) {
                    const int e = static_cast<int>(-n);
                    if (e == EINTR) continue;
                    if (e == EXDEV || e == EINVAL || e == ENOSYS || e == EOPNOTSUPP || e == EBADF ||
                        e == EPERM) {
                        kernel_ = false;  // not supported between these files: use the buffer
                        continue;
                    }
                    if (e == ENOSPC || e == EDQUOT || e == EFBIG) {
                        throw_io(out_.final_path() + ": write failed at offset " + std::to_string(out_off), e);
                    }
                    throw_io(src.display_name() + " -> " + out_.final_path() + ": copy failed at source offset " +
                                 std::to_string(in_off),
                             e);
                }
                if (n == 0) {
                    // End of file, or a file system that cannot tell (procfs-like): ask pread.
                    char probe;
                    ssize_t p = src.pread(&probe, 1, in_off);
                    if (p == 0) truncated(src, in_off + 1);
                    kernel_ = false;
                    continue;
                }
                const auto done = static_cast<uint64_t>(n);
                stats_.kernel_bytes += done;
                report(done);
                in_off += done;
                out_off += done;
                len -= done;
                written_up_to(out_off);
            } else {
                const size_t chunk = src.copy_chunk();
                if (buffer_size_ < chunk) {
                    buffer_ = std::make_unique<char[]>(chunk);
                    buffer_size_ = chunk;
                }
                const uint64_t want = std::min<uint64_t>(len, chunk);
                ssize_t n = src.pread(buffer_.get(), static_cast<size_t>(want), in_off);
                if (n < 0) {
                    throw_io(src.display_name() + ": read failed at offset " + std::to_string(in_off),
                             static_cast<int>(-n));
                }
                if (static_cast<uint64_t>(n) < want) truncated(src, in_off + want);
                write_memory(buffer_.get(), want, out_off);
                stats_.buffered_bytes += want;
                report(want);
                in_off += want;
                out_off += want;
                len -= want;
            }
        }
    }

    const VirtualFile& vf_;
    OutputFile& out_;
    const WriteOptions& opt_;
    WriteStats& stats_;
    bool kernel_;
    bool holes_;
    std::unique_ptr<char[]> buffer_;
    size_t buffer_size_ = 0;
    uint64_t durable_at_ = 0;  // the last resume point made (or resumed from)
    uint64_t written_end_ = 0;  // output bytes [0, written_end_) are written (not yet synced)
    uint64_t kicked_ = 0;  // output bytes below this offset have had their write-out started
};

}  // namespace

WriteStats write_virtual_file(const VirtualFile& vf, OutputFile& out, const WriteOptions& options) {
    WriteStats stats;
    if (out.fd() < 0) throw Error(Code::BadArgument, out.final_path() + ": output is not open for writing");
    Copier(vf, out, options, stats).run();
    return stats;
}

}  // namespace gguf
