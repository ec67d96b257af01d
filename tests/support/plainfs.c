// plainfs: a test-only libfuse3 passthrough of one directory that lacks what some FUSE and
// network file systems lack: renameat2 flags (RENAME_NOREPLACE, RENAME_EXCHANGE) fail with
// EINVAL and link() fails with EPERM. Plain rename, O_EXCL create, read, write, fsync, unlink,
// chmod, truncate and readdir work. Used by the publish tests of `split` and `merge` (issue 14.9).
//
//   plainfs ROOT MOUNTPOINT        (runs in the foreground, single-threaded, until unmounted)
//
// With PLAINFS_STOP_AT_OPEN=N in its environment, plainfs stops itself (SIGSTOP) when its Nth
// open request arrives, before answering it, until someone sends it SIGCONT: that open then
// waits on a file system that has taken its request and does not answer.
#define FUSE_USE_VERSION 35
#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse3/fuse.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static const char* g_root;

// ROOT + path into `out`; paths from FUSE start with '/'.
static int real(const char* path, char out[PATH_MAX]) {
    int n = snprintf(out, PATH_MAX, "%s%s", g_root, path);
    return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

#define REAL(p, buf)                  \
    char buf[PATH_MAX];               \
    do {                              \
        int rc_ = real(p, buf);       \
        if (rc_ != 0) return rc_;     \
    } while (0)

static int ret(int rc) { return rc < 0 ? -errno : rc; }

static int pf_getattr(const char* path, struct stat* st, struct fuse_file_info* fi) {
    if (fi) return ret(fstat((int)fi->fh, st));
    REAL(path, p);
    return ret(lstat(p, st));
}

static int pf_readdir(const char* path, void* buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info* fi,
                      enum fuse_readdir_flags flags) {
    (void)off, (void)fi, (void)flags;
    REAL(path, p);
    DIR* d = opendir(p);
    if (!d) return -errno;
    for (struct dirent* e; (e = readdir(d));) {
        struct stat st = {0};
        st.st_ino = e->d_ino;
        st.st_mode = (mode_t)(DTTOIF(e->d_type));
        if (fill(buf, e->d_name, &st, 0, 0)) break;
    }
    closedir(d);
    return 0;
}

static int pf_open(const char* path, struct fuse_file_info* fi) {
    static long opens;
    const char* stop_at = getenv("PLAINFS_STOP_AT_OPEN");
    if (stop_at && ++opens == strtol(stop_at, NULL, 10)) raise(SIGSTOP);
    REAL(path, p);
    int fd = open(p, fi->flags & ~O_NOFOLLOW);
    if (fd < 0) return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

static int pf_create(const char* path, mode_t mode, struct fuse_file_info* fi) {
    REAL(path, p);
    int fd = open(p, fi->flags, mode);
    if (fd < 0) return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

static int pf_read(const char* path, char* buf, size_t n, off_t off, struct fuse_file_info* fi) {
    (void)path;
    return ret((int)pread((int)fi->fh, buf, n, off));
}

static int pf_write(const char* path, const char* buf, size_t n, off_t off, struct fuse_file_info* fi) {
    (void)path;
    return ret((int)pwrite((int)fi->fh, buf, n, off));
}

static int pf_release(const char* path, struct fuse_file_info* fi) {
    (void)path;
    close((int)fi->fh);
    return 0;
}

static int pf_fsync(const char* path, int datasync, struct fuse_file_info* fi) {
    (void)path;
    return ret(datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh));
}

static int pf_unlink(const char* path) {
    REAL(path, p);
    return ret(unlink(p));
}

static int pf_rename(const char* from, const char* to, unsigned int flags) {
    if (flags) return -EINVAL;  // like file systems without renameat2 flags
    REAL(from, a);
    REAL(to, b);
    return ret(rename(a, b));
}

static int pf_link(const char* from, const char* to) {
    (void)from, (void)to;
    return -EPERM;  // like file systems without hard links
}

static int pf_truncate(const char* path, off_t size, struct fuse_file_info* fi) {
    if (fi) return ret(ftruncate((int)fi->fh, size));
    REAL(path, p);
    return ret(truncate(p, size));
}

static int pf_chmod(const char* path, mode_t mode, struct fuse_file_info* fi) {
    if (fi) return ret(fchmod((int)fi->fh, mode));
    REAL(path, p);
    return ret(chmod(p, mode));
}

static int pf_utimens(const char* path, const struct timespec tv[2], struct fuse_file_info* fi) {
    if (fi) return ret(futimens((int)fi->fh, tv));
    REAL(path, p);
    return ret(utimensat(AT_FDCWD, p, tv, AT_SYMLINK_NOFOLLOW));
}

static int pf_statfs(const char* path, struct statvfs* st) {
    REAL(path, p);
    return ret(statvfs(p, st));
}

static const struct fuse_operations kOps = {
    .getattr = pf_getattr,
    .unlink = pf_unlink,
    .rename = pf_rename,
    .link = pf_link,
    .chmod = pf_chmod,
    .truncate = pf_truncate,
    .open = pf_open,
    .read = pf_read,
    .write = pf_write,
    .statfs = pf_statfs,
    .release = pf_release,
    .fsync = pf_fsync,
    .readdir = pf_readdir,
    .create = pf_create,
    .utimens = pf_utimens,
};

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: plainfs ROOT MOUNTPOINT\n");
        return 2;
    }
    g_root = argv[1];
    char* args[] = {argv[0], "-f", "-s", "-o", "default_permissions", argv[2], NULL};
    return fuse_main(6, args, &kOps, NULL);
}
