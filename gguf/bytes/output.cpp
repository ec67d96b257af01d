#include "gguf/bytes/output.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "gguf/bytes/file_io.hpp"
#include "gguf/error.hpp"

namespace gguf {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

mode_t current_umask() {
    // umask(2) can only be read by setting it; the CLI is single-threaded when it creates outputs.
    mode_t m = ::umask(022);
    ::umask(m);
    return m;
}

/// "DIR/.BASENAME.tmp-" for `final_path` (BASENAME cut to 200 bytes to stay within NAME_MAX),
/// the prefix of every temporary file of that output; "DIR/" is empty for "/".
std::string temp_prefix(const std::string& final_path) {
    std::string dir = dir_name(final_path);
    std::string base = base_name(final_path);
    if (base.size() > 200) base.resize(200);  // keep ".BASE.tmp-XXXXXX" within NAME_MAX
    return (dir == "/" ? std::string() : dir) + "/." + base + ".tmp-";
}

/// Number of random characters mkstemp puts at the end of the template.
constexpr size_t kTempSuffix = 6;

}  // namespace

namespace {

bool rename_flags_unsupported(int e) { return e == EINVAL || e == ENOSYS || e == EOPNOTSUPP; }
bool links_unsupported(int e) { return e == EPERM || e == ENOSYS || e == EOPNOTSUPP; }

/// PublishMethod::ExclusiveRename: reserves `to` with an empty O_EXCL file, then renames `from`
/// over it. Returns 0, or -1 with errno set (EEXIST when `to` exists); on failure a placeholder
/// it created is removed again.
int exclusive_rename(const std::string& from, const std::string& to) {
    int fd = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    struct stat placeholder {};
    const bool known = ::fstat(fd, &placeholder) == 0;
    ::close(fd);
    if (::rename(from.c_str(), to.c_str()) == 0) return 0;
    const int e = errno;
    struct stat now {};
    if (known && ::lstat(to.c_str(), &now) == 0 && now.st_dev == placeholder.st_dev &&
        now.st_ino == placeholder.st_ino) {
        ::unlink(to.c_str());
    }
    errno = e;
    return -1;
}

/// A fresh mkstemp file "PREFIX" + XXXXXX; returns its path, "" with errno set on failure.
std::string make_probe(const std::string& prefix) {
    std::vector<char> buf(prefix.begin(), prefix.end());
    buf.insert(buf.end(), {'X', 'X', 'X', 'X', 'X', 'X', '\0'});
    int fd = ::mkostemp(buf.data(), O_CLOEXEC);
    if (fd < 0) return {};
    ::close(fd);
    return buf.data();
}

}  // namespace

/// Throws the error for a file that cannot be created in `dir` (errno `e`) on the way to
/// `final_path`: a missing directory says how to create it.
[[noreturn]] static void throw_cannot_create(const std::string& final_path, const std::string& dir, int e) {
    if (e == ENOENT) {
        throw Error(Code::Io, final_path + ": directory " + dir + " does not exist; create it first (mkdir -p " + dir + ")",
                    e);
    }
    throw_io("cannot create a file in directory " + dir + " for " + final_path, e);
}

PublishMethod probe_publish_method(const std::string& final_path) {
    const std::string dir = dir_name(final_path);
    const std::string prefix = temp_prefix(final_path);
    const std::string a = make_probe(prefix);
    if (a.empty()) throw_cannot_create(final_path, dir, errno);
    std::string b = make_probe(prefix);
    if (b.empty() || ::unlink(b.c_str()) != 0) {
        const int e = errno;
        ::unlink(a.c_str());
        throw_cannot_create(final_path, dir, e);
    }
    PublishMethod method = PublishMethod::RenameNoReplace;
    int rc = ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && rename_flags_unsupported(errno)) {
        method = PublishMethod::Link;
        rc = ::link(a.c_str(), b.c_str());
        if (rc != 0 && links_unsupported(errno)) {
            method = PublishMethod::ExclusiveRename;
            rc = ::rename(a.c_str(), b.c_str());
        }
    }
    const int e = errno;
    ::unlink(a.c_str());
    ::unlink(b.c_str());
    if (rc != 0) throw_io("cannot rename files in directory " + dir + " (needed to publish " + final_path + ")", e);
    return method;
}

OutputFile OutputFile::create(const std::string& final_path, PublishMethod method) {
    std::string dir = dir_name(final_path);
    if (base_name(final_path).empty()) {
        throw Error(Code::BadArgument, "'" + final_path + "' names a directory, not a file");
    }
    const std::string tmpl = temp_prefix(final_path) + std::string(kTempSuffix, 'X');
    // A concurrent remove_stale_temporaries() may take the lock of a file we just created before
    // we do, and delete it: then we create another one. It cannot happen twice in a row unless
    // something deletes our files on purpose; give up after a few attempts.
    for (int attempt = 0;; ++attempt) {
        OutputFile f;
        f.final_path_ = final_path;
        f.method_ = method;
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        int fd = ::mkostemp(buf.data(), O_CLOEXEC);
        if (fd < 0) {
            throw_cannot_create(final_path, dir, errno);
        }
        f.fd_ = UniqueFd(fd);
        f.temp_path_ = buf.data();
        if (::fchmod(fd, 0666 & ~current_umask()) != 0) {
            int e = errno;
            f.discard();
            throw_io(f.temp_path_ + ": cannot set permissions", e);
        }
        bool ours = true;
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            if (errno != EWOULDBLOCK && errno != EINTR) return f;  // no flock here (ENOLCK, EINVAL ...)
            ours = false;  // somebody's stale-file cleanup holds it and is about to delete it
        } else {
            // Locked. Still ours? A cleanup may have locked, unlinked and released it first.
            struct stat by_fd {}, by_path {};
            ours = ::fstat(fd, &by_fd) == 0 && by_fd.st_nlink > 0 && ::lstat(f.temp_path_.c_str(), &by_path) == 0 &&
                   by_path.st_dev == by_fd.st_dev && by_path.st_ino == by_fd.st_ino;
        }
        if (ours) {
            // The lock belongs to the open file description: a duplicate keeps it after commit()
            // closes fd_. Without a descriptor to spare (EMFILE) it ends at commit().
            int lock_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
            if (lock_fd >= 0) f.lock_ = UniqueFd(lock_fd);
            return f;
        }
        f.fd_ = UniqueFd();
        f.lock_ = UniqueFd();
        f.temp_path_.clear();  // not ours any more: do not unlink whatever is at that name now
        if (attempt >= 8) {
            throw Error(Code::Io, "cannot create a file in directory " + dir + " for " + final_path +
                                      ": temporary files keep disappearing");
        }
    }
}

OutputFile OutputFile::resume(const std::string& final_path, const std::string& temp_path, PublishMethod method) {
    const std::string prefix = temp_prefix(final_path);
    if (temp_path.size() != prefix.size() + kTempSuffix || temp_path.compare(0, prefix.size(), prefix) != 0) {
        throw Error(Code::Io, temp_path + ": not a temporary file of " + final_path);
    }
    int fd = ::open(temp_path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) throw_io(temp_path + ": cannot reopen the unfinished output", errno);
    OutputFile f;
    f.fd_ = UniqueFd(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
        f.fd_ = UniqueFd();
        throw Error(Code::Io, temp_path + ": not a regular file of this user; not resumed");
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno != ENOLCK && errno != EINVAL) {
        f.fd_ = UniqueFd();
        throw Error(Code::Io, temp_path + ": being written by another process");
    }
    f.final_path_ = final_path;
    f.temp_path_ = temp_path;
    f.method_ = method;
    int lock_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (lock_fd >= 0) f.lock_ = UniqueFd(lock_fd);
    return f;
}

void OutputFile::keep() noexcept {
    if (published_) return;
    fd_ = UniqueFd();
    temp_path_.clear();
    lock_ = UniqueFd();
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : final_path_(std::move(o.final_path_)),
      temp_path_(std::move(o.temp_path_)),
      fd_(std::move(o.fd_)),
      lock_(std::move(o.lock_)),
      method_(o.method_),
      published_(o.published_) {
    o.temp_path_.clear();
    o.published_ = false;
}

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
    if (this != &o) {
        discard();
        final_path_ = std::move(o.final_path_);
        temp_path_ = std::move(o.temp_path_);
        fd_ = std::move(o.fd_);
        lock_ = std::move(o.lock_);
        method_ = o.method_;
        published_ = o.published_;
        o.temp_path_.clear();
        o.published_ = false;
    }
    return *this;
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::discard() noexcept {
    fd_ = UniqueFd();
    if (!published_ && !temp_path_.empty()) {
        ::unlink(temp_path_.c_str());  // still locked: no cleanup can race with us
        temp_path_.clear();
    }
    lock_ = UniqueFd();
}

void OutputFile::commit() {
    if (!fd_) return;
    if (::fsync(fd_.get()) != 0) throw_io(final_path_ + ": fsync failed", errno);
    int fd = fd_.release();
    if (::close(fd) != 0 && errno != EINTR) throw_io(final_path_ + ": close failed", errno);
}

void OutputFile::publish(bool sync_dir) {
    if (published_) return;
    if (fd_) commit();
    int rc = -1;
    errno = 0;
    if (method_ == PublishMethod::RenameNoReplace) {
        rc = ::renameat2(AT_FDCWD, temp_path_.c_str(), AT_FDCWD, final_path_.c_str(), RENAME_NOREPLACE);
        if (rc != 0 && rename_flags_unsupported(errno)) method_ = PublishMethod::Link;
    }
    if (method_ == PublishMethod::Link) {
        // link() refuses an existing target as well.
        rc = ::link(temp_path_.c_str(), final_path_.c_str());
        if (rc == 0) ::unlink(temp_path_.c_str());
        if (rc != 0 && links_unsupported(errno)) method_ = PublishMethod::ExclusiveRename;
    }
    if (method_ == PublishMethod::ExclusiveRename) rc = exclusive_rename(temp_path_, final_path_);
    if (rc != 0) {
        int e = errno;
        if (e == EEXIST) throw Error(Code::Exists, "output file " + final_path_ + " already exists");
        throw_io(final_path_ + ": cannot move " + base_name(temp_path_) + " into place", e);
    }
    published_ = true;
    temp_path_.clear();
    lock_ = UniqueFd();
    if (sync_dir) sync_directory(dir_name(final_path_));
}

void ensure_absent(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            throw Error(Code::Exists, path + ": is a directory; give the output file's name, e.g. " +
                                          (path.back() == '/' ? path : path + "/") + "model.gguf");
        }
        throw Error(Code::Exists, "output file " + path + " already exists; remove it or choose another name");
    }
    int e = errno;
    if (e != ENOENT) throw_io(path + ": cannot check whether it exists", e);
}

namespace {
/// The FS_IOC_GETFLAGS flags of `path` (not following a final symlink), 0 when unknown.
int inode_flags(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return 0;
    UniqueFd guard(fd);
    int flags = 0;
    return ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 ? flags : 0;
}

const char* flag_obstacle(int flags) {
    if (flags & FS_IMMUTABLE_FL) return "is immutable (chattr +i)";
    if (flags & FS_APPEND_FL) return "is append-only (chattr +a)";
    return nullptr;
}
}  // namespace

std::string deletion_obstacle(const std::string& path) {
    struct stat st {}, dst {};
    if (::lstat(path.c_str(), &st) != 0) return "cannot stat it: " + errno_text(errno);
    const std::string dir = dir_name(path);
    if (::stat(dir.c_str(), &dst) != 0) return "cannot stat its directory " + dir + ": " + errno_text(errno);
    if (::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
        return "its directory " + dir + " is not writable: " + errno_text(errno);
    }
    const uid_t me = ::geteuid();
    if ((dst.st_mode & S_ISVTX) && me != 0 && me != st.st_uid && me != dst.st_uid) {
        return "its directory " + dir + " has the sticky bit and the file belongs to uid " +
               std::to_string(st.st_uid);
    }
    if (const char* why = flag_obstacle(inode_flags(dir))) return "its directory " + dir + " " + why;
    if (!S_ISLNK(st.st_mode)) {
        if (const char* why = flag_obstacle(inode_flags(path))) return std::string("it ") + why;
    }
    return {};
}

void sync_directory(const std::string& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw_io(dir + ": cannot open directory to sync it", errno);
    UniqueFd guard(fd);
    if (::fsync(fd) != 0 && errno != EINVAL) throw_io(dir + ": fsync of the directory failed", errno);
}

std::vector<std::string> remove_stale_temporaries(const std::string& final_path, const std::string& keep) {
    std::vector<std::string> removed;
    if (base_name(final_path).empty()) return removed;
    const std::string dir = dir_name(final_path);
    const std::string prefix = base_name(temp_prefix(final_path));  // ".BASENAME.tmp-"
    std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), &::closedir);
    if (!d) return removed;
    const int dfd = ::dirfd(d.get());
    const uid_t me = ::geteuid();
    while (const dirent* e = ::readdir(d.get())) {
        const std::string name = e->d_name;
        if (name.size() != prefix.size() + kTempSuffix || name.compare(0, prefix.size(), prefix) != 0) continue;
        bool pattern = true;
        for (size_t i = prefix.size(); i < name.size(); ++i) {
            const char c = name[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) pattern = false;
        }
        if (!pattern) continue;
        if (!keep.empty() && base_name(keep) == name) continue;
        const int fd = ::openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) continue;
        UniqueFd guard(fd);
        struct stat by_fd {}, by_name {};
        if (::fstat(fd, &by_fd) != 0 || !S_ISREG(by_fd.st_mode) || by_fd.st_uid != me) continue;
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) continue;  // a live writer, or no flock here
        // Unlink only the file we locked (the name might have been reused meanwhile).
        if (::fstatat(dfd, name.c_str(), &by_name, AT_SYMLINK_NOFOLLOW) != 0 || by_name.st_dev != by_fd.st_dev ||
            by_name.st_ino != by_fd.st_ino) {
            continue;
        }
        if (::unlinkat(dfd, name.c_str(), 0) == 0) removed.push_back((dir == "/" ? std::string() : dir) + "/" + name);
    }
    return removed;
}

}  // namespace gguf
