// libfuse low-level handlers: a thin translation from FUSE requests to Snapshot, LiveFilesystem
// and VirtualFile calls. No GGUF logic lives here.
//
// Rules followed (libfuse 3.14 fuse_lowlevel.h):
//  - every request gets exactly one reply (fuse_reply_*), on every path, exceptions included;
//  - reads go through VirtualFile::serve (one walk of the extent table; the byte sources pick
//    buffered, O_DIRECT or drop-behind reads) into a per-thread buffer allocated once and reply
//    with fuse_reply_buf: never
//    fuse_reply_data with fd buffers, whose non-splice fallback allocates and frees a buffer
//    per request (bench/README.md has the figure);
//  - open sets keep_cache (the page cache survives close/open) and never direct_io (which
//    breaks MAP_SHARED mmap, as llama.cpp uses); timeouts: see fs/ops.hpp;
//  - reads touch only the handle (fi->fh): no lock, no allocation, no snapshot;
//  - a model read through the mount is cached once, not twice: uncached shard bytes of random
//    and large requests are read with O_DIRECT, and shard pages behind other served reads are
//    dropped by their sources (gguf::CopyKept::ByReader(Direct), VirtualFile::kDirectStreamMin).
#include "fs/ops.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "fs/access.hpp"
#include "fs/deferred_reads.hpp"
#include "fs/errors.hpp"
#include "gguf/bytes/byte_source.hpp"
#include "gguf/bytes/client_direct.hpp"
#include "gguf/error.hpp"
#include "common/huge_pages.hpp"
#include "common/text.hpp"

namespace gguf_mount::fs {

namespace {

Context& ctx(fuse_req_t req) { return *static_cast<Context*>(fuse_req_userdata(req)); }

/// Runs handler body `fn` for `req`; an exception escaping it is answered with the errno map
/// (reply_errno, fs/errors.hpp). `fn` replies on every path it returns by.
template <typename Fn>
void guarded(fuse_req_t req, Fn&& fn) noexcept {
    try {
        fn();
    } catch (...) {
        fuse_reply_err(req, reply_errno(std::current_exception()));
    }
}

/// What an open file's fi->fh points to: the file as it was when opened (one allocation per
/// open, none per read).
/// Holding `file` keeps its descriptors open (FileSource::acquire); the last release closes
/// them unless the file is pinned.
struct OpenFile {
    std::shared_ptr<const gguf::VirtualFile> file;
    std::string path;     // its path in the mount, for log messages
    bool direct_reads;    // uncached random and large reads may use O_DIRECT (merged sets, byte-split files)
};

/// What an open directory's fi->fh points to: its listing when it was opened (names, inode
/// numbers and types only: holding no snapshot, it keeps no deleted shard's disk space).
struct OpenDir {
    struct Child {
        std::string name;
        uint64_t ino;
        bool directory;
    };
    uint64_t ino;
    uint64_t parent;
    std::vector<Child> children;  // in name order
};

OpenFile* open_file(const fuse_file_info* fi) { return reinterpret_cast<OpenFile*>(static_cast<uintptr_t>(fi->fh)); }
OpenDir* open_dir(const fuse_file_info* fi) { return reinterpret_cast<OpenDir*>(static_cast<uintptr_t>(fi->fh)); }

/// The read buffer of the calling worker thread, aligned for O_DIRECT and with room for
/// VirtualFile::serve() to widen a request to alignment boundaries: mapped (and touched) on
/// the thread's first read, reused for every later read. It is whole huge pages advised
/// MADV_HUGEPAGE: the kernel pins the reply's pages to copy them into the page cache
/// (fuse_copy_fill) and an O_DIRECT source read pins them too, cheaper for one 2 MiB page
/// than for 257 small ones (where THP is off it works with small pages). Grows only if the
/// kernel ever sends a request larger than kMaxRead, which max_read forbids.
char* thread_read_buffer(size_t len) {
    struct Unmap {
        size_t size = 0;
        void operator()(char* p) const noexcept { ::munmap(p, size); }
    };
    thread_local std::unique_ptr<char, Unmap> buf;
    thread_local size_t cap = 0;
    if (len > cap) {
        const size_t want = (len > kMaxRead ? len : kMaxRead) + gguf::VirtualFile::kServeSlack;
        const size_t size = (want + gguf::kHugePage - 1) / gguf::kHugePage * gguf::kHugePage;
        char* p = gguf::map_huge_aligned(size);
        std::memset(p, 0, size);  // fault the pages in once, not on the first requests
        buf = std::unique_ptr<char, Unmap>(p, Unmap{size});
        cap = size - gguf::VirtualFile::kServeSlack;
    }
    return buf.get();
}

/// Logs (rate-limited) one warning naming the shard and the byte range that failed (`s`, as
/// VirtualFile::serve returned it).
void warn_read_failure(Context& c, const OpenFile& of, uint64_t offset, const gguf::Served& s) {
    uint64_t suppressed = 0;
    if (!c.read_warnings.admit(WarningLimiter::Clock::now(), &suppressed)) return;

    const gguf::VirtualFile& vf = *of.file;
    const bool known = s.failed_source < vf.sources().size();
    const std::string shard = known ? vf.sources()[s.failed_source]->display_name() : "?";
    std::string why = std::strerror(static_cast<int>(-s.result));
    if (known) {
        std::string reason = vf.sources()[s.failed_source]->failure_reason();
        if (!reason.empty()) why = std::move(reason);
    }
    std::string tail = suppressed ? " (" + std::to_string(suppressed) + " similar warnings suppressed)" : "";
    spdlog::warn("{}: read of {} bytes at offset {} failed: {}; replying EIO to a read of {} at offset {}{}",
                 gguf::quote_name(shard), s.failed_length, s.failed_offset, why, gguf::quote_name(of.path), offset,
                 tail);
}

/// 0 when the caller of `req` may access `node`'s source paths with `mode` as a direct open
/// would (fs/access.hpp), else the errno to reply. Always 0 unless c.check_callers. A caller
/// whose supplementary groups cannot be read (it exited) is refused (thread_groups).
int caller_access(fuse_req_t req, const Context& c, const Node& node, int mode) {
    if (!c.check_callers) return 0;
    const fuse_ctx* who = fuse_req_ctx(req);
    if (who->uid == 0) return 0;  // access_as() answers uid 0 without a check
    std::vector<gid_t> groups;
    if (!thread_groups(static_cast<pid_t>(who->pid), &groups)) return EACCES;
    return access_as(who->uid, who->gid, groups, node.access_paths, mode);
}

void reply_entry(fuse_req_t req, Context& c, const Node& node) {
    fuse_entry_param e{};
    e.ino = node.ino;
    e.generation = 1;  // inode numbers are never reused within a mount
    e.attr = node.attr;
    e.attr_timeout = node.directory ? kEntryTimeoutSeconds : kFileAttrTimeoutSeconds;
    e.entry_timeout = kEntryTimeoutSeconds;
    // Counted before the reply: a FORGET for it may arrive as soon as the kernel has it.
    c.live->remember_lookup(node.ino, node.attr);
    if (fuse_reply_entry(req, &e) != 0) c.live->forget(node.ino, 1);
}

// ---- handlers -----------------------------------------------------------------------------

void op_init(void* userdata, fuse_conn_info* conn) noexcept {
    (void)userdata;
    // Must equal the -o max_read= given to fuse_session_new (libfuse 3.14 do_init checks).
    conn->max_read = static_cast<unsigned>(kMaxRead);
    // max_readahead: libfuse already set it to what the kernel offered, and the kernel only
    // accepts lowering it, so it stays at the maximum. The real window is raised after mount
    // through /sys/class/bdi (fs/session.cpp).
    // Replies come from memory (fuse_reply_buf); splice buys nothing here and its fd fallback
    // allocates a buffer per request, so keep every splice capability off.
    conn->want &= ~static_cast<unsigned>(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
    conn->want &= ~static_cast<unsigned>(FUSE_CAP_WRITEBACK_CACHE);
    conn->max_background = kMaxBackground;
    conn->congestion_threshold = kCongestionThreshold;
    spdlog::debug("FUSE init: protocol {}.{}, max_read {}, max_readahead {}, max_write {}, max_background {}, "
                  "congestion_threshold {}", conn->proto_major, conn->proto_minor, conn->max_read,
                  conn->max_readahead, conn->max_write, conn->max_background, conn->congestion_threshold);
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) noexcept {
    guarded(req, [&] {
        Context& c = ctx(req);
        std::shared_ptr<const Snapshot> snap = c.live->current();
        const Node* dir = snap->node(parent);
        if (dir && !dir->directory) {
            fuse_reply_err(req, ENOTDIR);
            return;
        }
        if (int e = dir ? caller_access(req, c, *dir, X_OK) : 0) {
            fuse_reply_err(req, e);
            return;
        }
        if (const Node* node = dir ? snap->lookup(parent, name) : nullptr) {
            reply_entry(req, c, *node);
            return;
        }
        // Negative entry, cached by the kernel for kEntryTimeoutSeconds (and invalidated by the
        // watcher as soon as the name appears).
        fuse_entry_param e{};
        e.ino = 0;
        e.entry_timeout = kEntryTimeoutSeconds;
        fuse_reply_entry(req, &e);
    });
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) noexcept {
    try {
        ctx(req).live->forget(ino, nlookup);
    } catch (...) {
    }
    fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) noexcept {
    try {
        for (size_t i = 0; i < count; ++i) ctx(req).live->forget(forgets[i].ino, forgets[i].nlookup);
    } catch (...) {
    }
    fuse_reply_none(req);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) noexcept {
    guarded(req, [&] {
        Context& c = ctx(req);
        std::shared_ptr<const Snapshot> snap = c.live->current();
        if (const Node* node = snap->node(ino)) {
            fuse_reply_attr(req, &node->attr, node->directory ? kEntryTimeoutSeconds : kFileAttrTimeoutSeconds);
            return;
        }
        // An inode the kernel still holds although SOURCE no longer has it (e.g. open while its
        // set was removed): its attributes as last served.
        struct stat st {};
        if (c.live->known_attributes(ino, &st)) {
            fuse_reply_attr(req, &st, S_ISDIR(st.st_mode) ? kEntryTimeoutSeconds : kFileAttrTimeoutSeconds);
            return;
        }
        fuse_reply_err(req, ENOENT);
    });
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) noexcept {
    guarded(req, [&] {
        Context& c = ctx(req);
        std::shared_ptr<const Snapshot> snap = c.live->current();
        const Node* node = snap->node(ino);
        if (!node) {
            // A name the kernel resolved from a stale entry: ESTALE makes the VFS look the
            // path up again (LOOKUP_REVAL) and open what SOURCE holds now.
            fuse_reply_err(req, ESTALE);
            return;
        }
        if (node->directory) {
            fuse_reply_err(req, EISDIR);
            return;
        }
        if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
            fuse_reply_err(req, EROFS);
            return;
        }
        if (int e = caller_access(req, c, *node, R_OK)) {
            fuse_reply_err(req, e);
            return;
        }
        std::shared_ptr<const gguf::VirtualFile> file;
        try {
            file = node->file->acquire();
        } catch (const gguf::Error& err) {
            // Out of descriptors: the one file fails, the mount serves on. A file that changed or
            // vanished since it was scanned: ESTALE, the watcher's rescan brings its new state.
            const int e = reply_errno(std::current_exception(), ESTALE);
            const bool no_fds = e == EMFILE || e == ENFILE;
            uint64_t suppressed = 0;
            if (c.read_warnings.admit(WarningLimiter::Clock::now(), &suppressed)) {
                spdlog::warn("{}: cannot open: {}{}{}", gguf::quote_name(node->path), err.what(),
                             no_fds ? " (too many open files: raise the descriptor limit, LimitNOFILE=)" : "",
                             suppressed ? " (" + std::to_string(suppressed) + " similar warnings suppressed)" : "");
            }
            fuse_reply_err(req, e);
            return;
        }
        const bool direct_reads = planned_kind(node->kind);
        auto of = std::make_unique<OpenFile>(OpenFile{std::move(file), node->path, direct_reads});
        fi->fh = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(of.get()));
        {
            std::lock_guard<std::mutex> lock(c.handles_mutex);
            c.open_files.insert(fi->fh);
        }
        // O_DIRECT opens are served like any other (no direct_io): the kernel then sends reads
        // straight to op_read, bypassing the page cache for this descriptor, and splits a large
        // read into max_read requests sent at once (async direct I/O); with direct_io it would
        // send them one after another for a synchronous read() (fs/fuse/file.c
        // fuse_direct_read_iter). keep_cache is safe: an inode number always means the same bytes.
        fi->keep_cache = 1;
        fi->direct_io = 0;
        fi->noflush = 1;  // nothing to flush: spare the FLUSH request on every close
        if (fuse_reply_open(req, fi) == 0) {
            of.release();
        } else {  // the open was interrupted: no RELEASE will come
            std::lock_guard<std::mutex> lock(c.handles_mutex);
            c.open_files.erase(fi->fh);
        }
    });
}

/// The page-cache policy of one read (gguf::CopyKept), from who keeps a copy: an O_DIRECT
/// reader bypasses the served file's page cache, so the sources' cache is its only one (and,
/// inside a gguf::ClientDirectScope, uncached source bytes are read with O_DIRECT: see
/// serve_read); every other read fills the served file's page cache, so the sources avoid a
/// second copy (O_DIRECT for uncached random and large requests of merged sets and byte-split
/// files, whose descriptors are pinned; drop-behind of the rest).
gguf::CopyKept copy_kept(const OpenFile& of, bool client_direct) noexcept {
    return client_direct     ? gguf::CopyKept::None
           : of.direct_reads ? gguf::CopyKept::ByReaderDirect
                             : gguf::CopyKept::ByReader;
}

/// VirtualFile::serve for a read of `of` by a client that opened it with O_DIRECT
/// (`client_direct`) or not. An O_DIRECT client of a merged set or byte-split file (pinned
/// descriptors: the O_DIRECT descriptor of a shard is opened once) gets its uncached shard
/// bytes read with O_DIRECT as well (gguf::ClientDirectScope): nothing is cached for it, as
/// from a local file.
gguf::Served serve_read(const OpenFile& of, uint64_t off, size_t size, char* buf, bool client_direct) noexcept {
    const gguf::CopyKept kept = copy_kept(of, client_direct);
    if (client_direct && of.direct_reads) {
        gguf::ClientDirectScope direct;
        return of.file->serve(off, size, buf, kept);
    }
    return of.file->serve(off, size, buf, kept);
}

/// Replies to a read with what VirtualFile::serve gave (EIO, logged rate-limited, for an error).
void reply_read(fuse_req_t req, Context& c, const OpenFile& of, off_t off, const gguf::Served& s) noexcept {
    if (s.result < 0) {
        warn_read_failure(c, of, static_cast<uint64_t>(off), s);
        fuse_reply_err(req, EIO);
        return;
    }
    fuse_reply_buf(req, s.data, static_cast<size_t>(s.result));
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) noexcept {
    guarded(req, [&] {
        Context& c = ctx(req);
        OpenFile* of = fi ? open_file(fi) : nullptr;
        if (!of) {
            fuse_reply_err(req, ino == kRootInode ? EISDIR : EBADF);
            return;
        }
        if (off < 0) {
            fuse_reply_err(req, EINVAL);
            return;
        }
        char* buf = thread_read_buffer(size);
        const bool client_direct = fi->flags & O_DIRECT;
        const uint64_t at = static_cast<uint64_t>(off);
        gguf::Served s;
        if (c.deferred) {
            // A read that would wait for a remote server goes to a thread of c.deferred: the
            // workers stay free for metadata and cached reads.
            {
                gguf::NoNetworkWaitScope no_wait;
                s = serve_read(*of, at, size, buf, client_direct);
            }
            if (s.result == -EWOULDBLOCK) {
                // A copy: the job must not depend on fi (the kernel keeps the file open until
                // the reply, but the copy costs one allocation per network read only).
                auto job_of = std::make_shared<OpenFile>(*of);
                if (c.deferred->submit(
                        [req, &c, job_of, off, at, size, client_direct] {
                            char* b = thread_read_buffer(size);
                            reply_read(req, c, *job_of, off, serve_read(*job_of, at, size, b, client_direct));
                        },
                        [req] { fuse_reply_err(req, EIO); })) {
                    return;
                }
                s = serve_read(*of, at, size, buf, client_direct);  // no pool: wait here
            }
        } else {
            s = serve_read(*of, at, size, buf, client_direct);
        }
        reply_read(req, c, *of, off, s);
    });
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) noexcept {
    Context& c = ctx(req);
    {
        std::lock_guard<std::mutex> lock(c.handles_mutex);
        c.open_files.erase(fi->fh);
    }
    delete open_file(fi);
    fuse_reply_err(req, 0);
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) noexcept {
    guarded(req, [&] {
        Context& c = ctx(req);
        std::shared_ptr<const Snapshot> snap = c.live->current();
        const Node* node = snap->node(ino);
        if (!node) {
            fuse_reply_err(req, ESTALE);
            return;
        }
        if (!node->directory) {
            fuse_reply_err(req, ENOTDIR);
            return;
        }
        if (int e = caller_access(req, c, *node, R_OK)) {
            fuse_reply_err(req, e);
            return;
        }
        auto od = std::make_unique<OpenDir>();
        od->ino = node->ino;
        od->parent = node->parent;
        od->children.reserve(node->children.size());
        for (size_t i : node->children) {
            const Node& child = snap->nodes()[i];
            od->children.push_back(OpenDir::Child{child.name, child.ino, child.directory});
        }
        fi->fh = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(od.get()));
        // Listings change while mounted: no kernel readdir cache (cache_readdir/keep_cache 0).
        fi->cache_readdir = 0;
        fi->keep_cache = 0;
        {
            std::lock_guard<std::mutex> lock(c.handles_mutex);
            c.open_dirs.insert(fi->fh);
        }
        if (fuse_reply_open(req, fi) == 0) {
            od.release();
        } else {
            std::lock_guard<std::mutex> lock(c.handles_mutex);
            c.open_dirs.erase(fi->fh);
        }
    });
}

void op_readdir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) noexcept {
    guarded(req, [&] {
        OpenDir* od = fi ? open_dir(fi) : nullptr;
        if (!od) {
            fuse_reply_err(req, EBADF);
            return;
        }
        if (off < 0) {
            fuse_reply_err(req, EINVAL);
            return;
        }
        const size_t count = od->children.size() + 2;
        std::vector<char> buf(size);
        size_t used = 0;
        // Offsets: 0 ".", 1 "..", then the children in name order; an entry's offset is the
        // index of the next one.
        for (size_t i = static_cast<size_t>(off); i < count; ++i) {
            const char* name;
            struct stat st {};
            if (i == 0) {
                name = ".";
                st.st_ino = static_cast<ino_t>(od->ino);
                st.st_mode = S_IFDIR;
            } else if (i == 1) {
                // The kernel ignores d_ino of ".."; the root lists itself as its parent.
                name = "..";
                st.st_ino = static_cast<ino_t>(od->parent);
                st.st_mode = S_IFDIR;
            } else {
                const OpenDir::Child& child = od->children[i - 2];
                name = child.name.c_str();
                st.st_ino = static_cast<ino_t>(child.ino);
                st.st_mode = child.directory ? S_IFDIR : S_IFREG;
            }
            size_t need = fuse_add_direntry(req, buf.data() + used, size - used, name, &st, static_cast<off_t>(i + 1));
            if (need > size - used) break;  // entry did not fit: the kernel asks again from i
            used += need;
        }
        fuse_reply_buf(req, buf.data(), used);
    });
}

void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) noexcept {
    Context& c = ctx(req);
    {
        std::lock_guard<std::mutex> lock(c.handles_mutex);
        c.open_dirs.erase(fi->fh);
    }
    delete open_dir(fi);
    fuse_reply_err(req, 0);
}

void op_statfs(fuse_req_t req, fuse_ino_t) noexcept {
    guarded(req, [&] {
        std::shared_ptr<const Snapshot> snap = ctx(req).live->current();
        struct statvfs sv {};
        sv.f_bsize = 4096;
        sv.f_frsize = 4096;
        sv.f_blocks = static_cast<fsblkcnt_t>((snap->total_bytes() + 4095) / 4096);
        sv.f_bfree = 0;
        sv.f_bavail = 0;
        sv.f_files = static_cast<fsfilcnt_t>(snap->nodes().size());
        sv.f_ffree = 0;
        sv.f_favail = 0;
        sv.f_namemax = 255;
        fuse_reply_statfs(req, &sv);
    });
}

// ---- everything that would modify the file system: read-only ------------------------------

void op_setattr(fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) noexcept {
    fuse_reply_err(req, EROFS);
}
void op_mknod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) noexcept { fuse_reply_err(req, EROFS); }
void op_mkdir(fuse_req_t req, fuse_ino_t, const char*, mode_t) noexcept { fuse_reply_err(req, EROFS); }
void op_unlink(fuse_req_t req, fuse_ino_t, const char*) noexcept { fuse_reply_err(req, EROFS); }
void op_rmdir(fuse_req_t req, fuse_ino_t, const char*) noexcept { fuse_reply_err(req, EROFS); }
void op_symlink(fuse_req_t req, const char*, fuse_ino_t, const char*) noexcept { fuse_reply_err(req, EROFS); }
void op_rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned int) noexcept {
    fuse_reply_err(req, EROFS);
}
void op_link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) noexcept { fuse_reply_err(req, EROFS); }
void op_write(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) noexcept {
    fuse_reply_err(req, EROFS);
}
void op_create(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) noexcept {
    fuse_reply_err(req, EROFS);
}
void op_setxattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) noexcept {
    fuse_reply_err(req, EROFS);
}
void op_removexattr(fuse_req_t req, fuse_ino_t, const char*) noexcept { fuse_reply_err(req, EROFS); }
void op_fallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) noexcept {
    fuse_reply_err(req, EROFS);
}
void op_copy_file_range(fuse_req_t req, fuse_ino_t, off_t, fuse_file_info*, fuse_ino_t, off_t, fuse_file_info*,
                        size_t, int) noexcept {
    fuse_reply_err(req, EROFS);
}

fuse_lowlevel_ops make_ops() noexcept {
    fuse_lowlevel_ops ops{};
    ops.init = op_init;
    ops.lookup = op_lookup;
    ops.forget = op_forget;
    ops.forget_multi = op_forget_multi;
    ops.getattr = op_getattr;
    ops.open = op_open;
    ops.read = op_read;
    ops.release = op_release;
    ops.opendir = op_opendir;
    ops.readdir = op_readdir;
    ops.releasedir = op_releasedir;
    ops.statfs = op_statfs;
    ops.setattr = op_setattr;
    ops.mknod = op_mknod;
    ops.mkdir = op_mkdir;
    ops.unlink = op_unlink;
    ops.rmdir = op_rmdir;
    ops.symlink = op_symlink;
    ops.rename = op_rename;
    ops.link = op_link;
    ops.write = op_write;
    ops.create = op_create;
    ops.setxattr = op_setxattr;
    ops.removexattr = op_removexattr;
    ops.fallocate = op_fallocate;
    ops.copy_file_range = op_copy_file_range;
    return ops;
}

}  // namespace

void free_open_handles(Context& c) noexcept {
    std::lock_guard<std::mutex> lock(c.handles_mutex);
    for (uint64_t fh : c.open_files) delete reinterpret_cast<OpenFile*>(static_cast<uintptr_t>(fh));
    for (uint64_t fh : c.open_dirs) delete reinterpret_cast<OpenDir*>(static_cast<uintptr_t>(fh));
    c.open_files.clear();
    c.open_dirs.clear();
}

const fuse_lowlevel_ops& lowlevel_ops() noexcept {
    static const fuse_lowlevel_ops ops = make_ops();
    return ops;
}

}  // namespace gguf_mount::fs
