// Writing a virtual file (a planned merge or split shard) to disk, safely and without holding
// tensor data in memory. Used by `gguf-mount split` and `gguf-mount merge`; no FUSE.
//
// Safety protocol (what a crash, a signal or an error can leave behind):
//  1. the bytes go to a temporary file ".NAME.tmp-XXXXXX" created with mkstemp (O_EXCL) in the
//     directory of the final path NAME, so the final rename never crosses file systems;
//  2. after the last byte the file size is checked against the plan and the file is fsynced;
//  3. publish() renames it to NAME WITHOUT replacing anything (renameat2 RENAME_NOREPLACE, or
//     link()+unlink() where the file system lacks that flag) and fsyncs the directory;
//  4. an OutputFile that was not published removes its temporary file when destroyed (errors,
//     exceptions, and a cancellation requested through WriteOptions::cancel, e.g. by a
//     SIGINT/SIGTERM handler). A kill -9 can leave only a dot-named temporary file, never a
//     complete-looking file under the final name;
//  5. while it exists, an OutputFile holds an exclusive flock(2) on its temporary file (released
//     by the kernel when the process dies, even by SIGKILL). remove_stale_temporaries() deletes
//     the temporary files of earlier, killed runs for the same final name: only those nobody
//     holds a lock on, so a concurrent run writing the same name is never disturbed.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gguf/bytes/virtual_file.hpp"

namespace gguf {

/// How OutputFile::publish() puts a finished temporary file under its final name without
/// replacing anything, best first.
enum class PublishMethod {
    /// renameat2(RENAME_NOREPLACE): atomic, never replaces.
    RenameNoReplace,
    /// link() to the final name, then unlink the temporary: atomic, never replaces.
    Link,
    /// For file systems with neither (some FUSE and network file systems): the final name is
    /// created empty with O_CREAT|O_EXCL (fails if it exists), then the temporary is renamed
    /// over that placeholder. Remaining race: a process that deletes the placeholder and creates
    /// its own file there in between the two calls is overwritten; a kill -9 between them leaves
    /// an empty file under the final name.
    ExclusiveRename,
};

/// Finds out, before anything is written, which PublishMethod works in the directory of
/// `final_path`: creates two probe files named like OutputFile's temporaries of `final_path`
/// (so that remove_stale_temporaries() cleans up after a kill), tries renameat2(RENAME_NOREPLACE),
/// then link(), then rename() between them, and removes them. Throws gguf::Error(Code::Io)
/// naming the directory when files cannot be created there or not even rename() works.
PublishMethod probe_publish_method(const std::string& final_path);

/// A file being written under a temporary name next to its final path. Move-only.
class OutputFile {
public:
    /// Creates the temporary file ".BASENAME.tmp-XXXXXX" (mode 0666 & ~umask) in the directory
    /// of `final_path` and locks it (flock LOCK_EX; kept until publish() or discard(); on a file
    /// system without flock the file is simply not locked). Does not check whether `final_path`
    /// exists (see ensure_absent and publish). Throws gguf::Error(Code::Io) naming the directory
    /// when it cannot be created ("PATH: directory DIR does not exist; create it first (mkdir -p
    /// DIR)"; no permission, read-only file system, no space or inodes left, ...).
    /// `method` is how publish() starts (see probe_publish_method); it falls back to the next
    /// method when the file system refuses one as unsupported.
    static OutputFile create(const std::string& final_path,
                             PublishMethod method = PublishMethod::RenameNoReplace);

    OutputFile(OutputFile&& o) noexcept;
    OutputFile& operator=(OutputFile&& o) noexcept;
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;
    /// Removes the temporary file unless publish() succeeded. Never throws.
    ~OutputFile();

    /// Descriptor of the temporary file (read-write), or -1 after commit().
    int fd() const noexcept { return fd_.get(); }
    const std::string& final_path() const noexcept { return final_path_; }
    const std::string& temp_path() const noexcept { return temp_path_; }
    bool published() const noexcept { return published_; }

    /// fsyncs the file's data and metadata and closes the descriptor.
    /// Throws gguf::Error(Code::Io) naming the final path.
    void commit();

    /// Moves the committed temporary file to final_path() without overwriting an existing file:
    /// with the PublishMethod given to create(), falling back from renameat2(RENAME_NOREPLACE)
    /// to link()+unlink() to ExclusiveRename as the file system refuses each (EINVAL, ENOSYS,
    /// EOPNOTSUPP; EPERM for link). Then fsyncs the directory unless `sync_dir` is false (callers that
    /// publish many files in one directory sync it once with sync_directory()).
    /// Throws gguf::Error(Code::Exists) "output file X already exists" when final_path() exists,
    /// Code::Io for other failures; the temporary file is kept for the destructor to remove.
    void publish(bool sync_dir = true);

    /// Removes the temporary file now (no-op once published). Never throws.
    void discard() noexcept;

    /// Reopens the temporary file `temp_path` of an earlier, interrupted write to `final_path`
    /// (a resumable `merge URL`) and locks it like create(). `temp_path` must be named as
    /// create() names temporaries of `final_path`, be a regular file (not followed if a link)
    /// owned by the effective user, and not be locked by a live process. Throws
    /// gguf::Error(Code::Io) naming it otherwise.
    static OutputFile resume(const std::string& final_path, const std::string& temp_path,
                             PublishMethod method = PublishMethod::RenameNoReplace);

    /// Closes the file and forgets it WITHOUT removing it (its lock ends): an interrupted
    /// resumable write keeps its bytes for resume(). No-op once published. Never throws.
    void keep() noexcept;

private:
    OutputFile() = default;
    std::string final_path_;
    std::string temp_path_;
    UniqueFd fd_;
    UniqueFd lock_;  // a second descriptor of the temporary file: keeps the flock after commit()
    PublishMethod method_ = PublishMethod::RenameNoReplace;
    bool published_ = false;
};

/// Removes the temporary files that earlier runs killed before publishing (kill -9, power loss)
/// left for `final_path`. A file is removed only when all of these hold:
///  - it is in the directory of `final_path` and its name is exactly ".BASENAME.tmp-XXXXXX",
///    where BASENAME is the base name of `final_path` as OutputFile::create forms it and
///    XXXXXX six letters or digits (mkstemp's pattern); nothing else is ever touched;
///  - it is a regular file (not a symlink: never followed) owned by the effective user;
///  - its flock can be taken without waiting: no live OutputFile, in this or another process,
///    is writing it (a file system without flock keeps every such file: nothing is removed);
///  - its name is not the base name of `keep` ("" keeps nothing): the partial output of an
///    interrupted merge that is about to be continued (OutputFile::resume).
/// Call it before anything else creates a file of that pattern (probe_publish_method does):
/// a kill after the first file of this run exists then never leaves an earlier run's behind.
/// Never throws gguf::Error: files that cannot be checked or removed are skipped. Returns the
/// paths removed.
std::vector<std::string> remove_stale_temporaries(const std::string& final_path, const std::string& keep = {});

/// Called after each chunk with the number of bytes just produced (written, or skipped as a
/// hole). The sum over a write equals the virtual file's size.
using ProgressFn = std::function<void(uint64_t bytes)>;

/// How write_virtual_file copies.
struct WriteOptions {
    /// Polled between chunks (at most kCopyChunk bytes apart) and after interrupted system
    /// calls; once it reads non-zero the write stops with gguf::Error(Code::Io, ..., EINTR).
    /// Point it at a flag set by a signal handler.
    const volatile std::sig_atomic_t* cancel = nullptr;
    /// Keep holes of sparse sources as holes (found with lseek SEEK_DATA/SEEK_HOLE) instead of
    /// writing zeros; the final size is always set and verified. Like cp --sparse=auto.
    bool preserve_holes = true;
    /// Never use copy_file_range; copy through the fixed buffer with pread/pwrite.
    bool force_buffered = false;
    /// Optional progress callback.
    ProgressFn progress;
    /// Bytes [0, resume_from) of the output are already written (an interrupted earlier write
    /// to the same temporary file): they are not written or read again, only reported as
    /// progress. Must not exceed the virtual file's size.
    uint64_t resume_from = 0;
    /// When set, every durable_step output bytes the file's data is fdatasync()ed and then
    /// `durable(end)` is called: bytes [0, end) are on disk (a resume point).
    uint64_t durable_step = 0;
    std::function<void(uint64_t end)> durable;
};

/// Bytes per copy_file_range call (the kernel copies; nothing is buffered in user space).
inline constexpr uint64_t kCopyChunk = uint64_t{64} << 20;
/// Every kWritebackStep bytes written, the writer starts the write-out of what it wrote
/// (sync_file_range SYNC_FILE_RANGE_WRITE, no waiting), so the disk writes while the copy goes
/// on and the final fsync only waits for the tail. Without it the data sat dirty until each
/// output's fsync, and split, which fsyncs its shards one after the other, waited for every
/// one of them (before/after figures: bench/README.md).
inline constexpr uint64_t kWritebackStep = uint64_t{16} << 20;

/// What a write did, in bytes. kernel_bytes + buffered_bytes + hole_bytes is the sum of the
/// Source extents; header_bytes and zero_bytes were written from memory.
struct WriteStats {
    uint64_t header_bytes = 0;
    uint64_t zero_bytes = 0;
    uint64_t kernel_bytes = 0;    // copied with copy_file_range
    uint64_t buffered_bytes = 0;  // copied with pread/pwrite
    uint64_t hole_bytes = 0;      // source holes left as holes
};

/// Writes every byte of `vf` (vf.size() bytes, extent by extent in offset order) to the
/// temporary file of `out`, starting at offset 0:
///  - Header extents from memory, Zeros extents from a small static zero buffer;
///  - Source extents in the kernel (ByteSource::copy_to: copy_file_range(2) for a local file)
///    in chunks of kCopyChunk, looping on partial copies; on EXDEV, EINVAL, ENOSYS, EOPNOTSUPP
///    (a source without kernel copies, such as a remote shard, or a copy that reports end of
///    file while the source still has data) it switches for the rest of the write to
///    pread/pwrite through one buffer of the source's copy_chunk() (128 KiB for a local file,
///    1 MiB for other sources). Holes of a source (ByteSource::seek) stay holes when enabled.
///    Peak memory does not depend on the size of any tensor.
/// Write-out to disk is started every kWritebackStep bytes (sync_file_range, not waited for).
/// Then it sets and checks the final size (fstat == vf.size()). Does not fsync: call
/// out.commit(). Throws gguf::Error: Code::Truncated naming the source when a source file ends
/// before an extent it must supply (a shard truncated or shrunk after validation), Code::Io
/// naming the file for read/write errors (ENOSPC, EIO, ...) and for cancellation (errno EINTR).
WriteStats write_virtual_file(const VirtualFile& vf, OutputFile& out, const WriteOptions& options = {});

/// Throws gguf::Error(Code::Exists) when anything exists at `path` (lstat, so a dangling symlink
/// counts too): "PATH: is a directory; give the output file's name, e.g. PATH/model.gguf" for a
/// directory, else "output file PATH already exists; remove it or choose another name";
/// Code::Io when it cannot be checked.
void ensure_absent(const std::string& path);

/// Why unlink(`path`) would fail for this process, as far as can be told without trying; empty
/// when nothing stands in the way. Checks (rules of unlink(2)): the name exists (lstat; a
/// symbolic link is the link itself); its directory is writable and searchable for the
/// effective user (faccessat AT_EACCESS, which also reports a read-only file system); a sticky
/// directory lets a user other than root delete only names that user or the directory's owner
/// owns; an immutable or append-only file or directory (FS_IOC_GETFLAGS, where the file system
/// has it) refuses unlink even to root. Example: "directory /d has the sticky bit and the file
/// belongs to uid 0". Never throws.
std::string deletion_obstacle(const std::string& path);

/// fsyncs directory `dir` so that renames and unlinks in it are durable.
/// Throws gguf::Error(Code::Io) naming the directory.
void sync_directory(const std::string& dir);

}  // namespace gguf
