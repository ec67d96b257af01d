// Who may do what through a real mount of the gguf-mount binary:
//  - the mount is read-only for everyone, root included (EROFS for every modification), and
//    /proc/self/mountinfo shows ro and default_permissions;
//  - without -o allow_other no other user can even stat the mount (EACCES from FUSE);
//  - with -o allow_other another user reads exactly what the shards let them read: a merged
//    file carries the owner and group of its first shard and the most restrictive permission
//    bits of all its shards, without write or execute bits, narrowed by every directory on the
//    way to each shard (links followed, from / down), and the kernel enforces them
//    (default_permissions); the root daemon also checks each open, opendir and lookup on the
//    caller's own credentials (issue 14.1: links into 0700 directories, nested 0700 folders,
//    directory links out of SOURCE, HF-cache blobs, one closed shard, POSIX ACLs);
//  - nothing but the merged files is reachable through the mount ("..", shard names, other files
//    of SOURCE, names below a file).
// The other user is uid/gid 65534 (nobody/nogroup), in a forked child that drops privileges.
// Needs root (to switch users and to chown shards) and FUSE; skipped otherwise.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/bytes/file_io.hpp"
#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using mount_test::find_mount;
using mount_test::list_dir;

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;
using mount_test::as_user;
using mount_test::kDropFailed;
using mount_test::kTimedOut;
constexpr int kWrongBytes = -1002;

/// 0 if `path` stats, else errno.
int stat_errno(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? 0 : errno;
}

/// 0 if `path` opens with `flags` (closed again), else errno.
int open_errno(const std::string& path, int flags) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    ::close(fd);
    return 0;
}

/// Reads all of `path` and compares it with `want`: 0 when equal, kWrongBytes when not, errno
/// when open or read fails.
int read_equals(const std::string& path, const std::string& want) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    char buf[65536];
    size_t pos = 0;
    int r = 0;
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            r = errno;
            break;
        }
        if (n == 0) {
            if (pos != want.size()) r = kWrongBytes;
            break;
        }
        if (pos + static_cast<size_t>(n) > want.size() || std::memcmp(buf, want.data() + pos, static_cast<size_t>(n)) != 0) {
            r = kWrongBytes;
            break;
        }
        pos += static_cast<size_t>(n);
    }
    ::close(fd);
    return r;
}

/// Maps all of `path` (MAP_SHARED, as llama.cpp does) and compares it with `want`: 0 when equal,
/// kWrongBytes when not, errno when open, fstat or mmap fails.
int mmap_equals(const std::string& path, const std::string& want) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    struct stat st {};
    int r = 0;
    if (::fstat(fd, &st) != 0) {
        r = errno;
    } else if (static_cast<size_t>(st.st_size) != want.size() || want.empty()) {
        r = kWrongBytes;
    } else {
        void* p = ::mmap(nullptr, want.size(), PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            r = errno;
        } else {
            r = std::memcmp(p, want.data(), want.size()) == 0 ? 0 : kWrongBytes;
            ::munmap(p, want.size());
        }
    }
    ::close(fd);
    return r;
}

/// The permission bits `path` stats with, or -1.
int mode_of(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -1;
}

std::string errno_name(int e) {
    if (e == 0) return "success";
    if (e == kDropFailed) return "could not switch user";
    if (e == kTimedOut) return "timed out";
    if (e == kWrongBytes) return "wrong bytes";
    return std::strerror(e);
}

/// Comma-separated `options` contains `opt` as a whole item.
bool has_option(const std::string& options, const std::string& opt) {
    std::stringstream ss(options);
    std::string o;
    while (std::getline(ss, o, ',')) {
        if (o == opt) return true;
    }
    return false;
}

/// SOURCE is ROOT/data/src, so that the parent of SOURCE is no parent of the mount point.
class Permissions : public mount_test::MountFixture {
protected:
    Permissions() : MountFixture("data/src") {}

    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "switching to another user and chown need root";
        MountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        data_ = root_ + "/data";
        // Other users must be able to walk to the mount point: the EACCES we test must come from
        // FUSE, not from a 0700 parent directory.
        ASSERT_EQ(::chmod(root_.c_str(), 0755), 0);
        ASSERT_EQ(as_user(kNobody, kNogroup, [&] { return stat_errno(root_); }), 0)
            << "uid " << kNobody << " cannot reach " << root_;
    }

    /// Copies the shards of the manifest case `case_id` into src_, renamed to PREFIX-0000k-...,
    /// with owner `uid`:`gid` and mode `mode` (`mode_of_first` for the first shard if non-zero).
    void add_set(const std::string& case_id, const std::string& prefix, uid_t uid, gid_t gid, mode_t mode,
                 mode_t mode_of_first = 0, uid_t uid_of_first = static_cast<uid_t>(-1)) {
        auto c = mount_test::manifest_case(case_id);
        ASSERT_TRUE(c) << "no manifest case " << case_id;
        for (size_t i = 0; i < c->shards.size(); ++i) {
            const std::string base = gguf::base_name(c->shards[i]);
            const std::string to = src_ + "/" + prefix + base.substr(base.find('-'));
            gguf_test::copy_file(fixture(c->shards[i]), to);
            const bool first = i == 0;
            ASSERT_EQ(::chown(to.c_str(), first && uid_of_first != static_cast<uid_t>(-1) ? uid_of_first : uid, gid), 0);
            ASSERT_EQ(::chmod(to.c_str(), first && mode_of_first ? mode_of_first : mode), 0);
        }
    }

    /// Copies the kvzoo/t7 shards into `dir` (0644) and links each as src_/LINKDIR/PREFIX-0000k...
    /// with `target_prefix` + shard name as the link text (relative to the link's directory).
    void link_kvzoo(const std::string& dir, const std::string& link_dir, const std::string& target_prefix) {
        for (int i = 1; i <= 7; ++i) {
            const std::string shard = mount_test::kvzoo_shard(i);
            gguf_test::copy_file(fixture("kvzoo/t7/" + shard), dir + "/" + shard);
            ASSERT_EQ(::chmod((dir + "/" + shard).c_str(), 0644), 0);
            ASSERT_EQ(::symlink((target_prefix + shard).c_str(), (link_dir + "/" + shard).c_str()), 0);
        }
    }

    /// Asserts that uid 65534 cannot open `path` directly (so the mount must refuse it too).
    void expect_nobody_cannot_read_directly(const std::string& path) {
        EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return open_errno(path, O_RDONLY); }), EACCES)
            << path << ": the test's premise fails: uid " << kNobody << " can open it directly";
    }

    std::string data_;  // the parent of SOURCE
};

std::string kvzoo_reference() { return gguf_test::read_file(fixture("kvzoo/merged-reference.gguf")); }

TEST_F(Permissions, ReadOnlyForRootTooAndMountinfoShowsRoAndDefaultPermissions) {
    add_set("kvzoo/t7", "kvzoo", 0, 0, 0644);
    ASSERT_TRUE(mount());
    auto entry = find_mount(mnt_);
    ASSERT_TRUE(entry);
    EXPECT_TRUE(has_option(entry->mount_options, "ro")) << entry->mount_options;
    EXPECT_TRUE(has_option(entry->super_options, "ro")) << entry->super_options;
    EXPECT_TRUE(has_option(entry->super_options, "default_permissions")) << entry->super_options;
    EXPECT_FALSE(has_option(entry->super_options, "allow_other")) << entry->super_options;

    const std::string f = mnt_ + "/kvzoo.gguf";
    ASSERT_EQ(read_equals(f, kvzoo_reference()), 0);
    // Root: capabilities do not matter on a read-only mount.
    struct Case {
        const char* what;
        std::function<int()> op;
    };
    const std::string other = mnt_ + "/other.gguf";
    const Case cases[] = {
        {"open O_WRONLY", [&] { return open_errno(f, O_WRONLY); }},
        {"open O_RDWR", [&] { return open_errno(f, O_RDWR); }},
        {"open O_RDONLY|O_TRUNC", [&] { return open_errno(f, O_RDONLY | O_TRUNC); }},
        {"open O_CREAT new", [&] { return open_errno(other, O_WRONLY | O_CREAT); }},
        {"truncate", [&] { return ::truncate(f.c_str(), 0) == 0 ? 0 : errno; }},
        {"unlink", [&] { return ::unlink(f.c_str()) == 0 ? 0 : errno; }},
        {"rename", [&] { return ::rename(f.c_str(), other.c_str()) == 0 ? 0 : errno; }},
        {"link", [&] { return ::link(f.c_str(), other.c_str()) == 0 ? 0 : errno; }},
        {"symlink", [&] { return ::symlink("kvzoo.gguf", other.c_str()) == 0 ? 0 : errno; }},
        {"mkdir", [&] { return ::mkdir((mnt_ + "/d").c_str(), 0755) == 0 ? 0 : errno; }},
        {"mknod fifo", [&] { return ::mknod(other.c_str(), S_IFIFO | 0644, 0) == 0 ? 0 : errno; }},
        {"chmod", [&] { return ::chmod(f.c_str(), 0644) == 0 ? 0 : errno; }},
        {"chmod root", [&] { return ::chmod(mnt_.c_str(), 0777) == 0 ? 0 : errno; }},
        {"chown", [&] { return ::chown(f.c_str(), 1, 1) == 0 ? 0 : errno; }},
        {"utimes", [&] { return ::utimensat(AT_FDCWD, f.c_str(), nullptr, 0) == 0 ? 0 : errno; }},
        {"setxattr", [&] { return ::setxattr(f.c_str(), "user.x", "1", 1, 0) == 0 ? 0 : errno; }},
        {"access W_OK", [&] { return ::access(f.c_str(), W_OK) == 0 ? 0 : errno; }},
    };
    for (const auto& c : cases) {
        int e = c.op();
        EXPECT_EQ(e, EROFS) << "root: " << c.what << ": " << errno_name(e);
    }
    // Nothing changed.
    EXPECT_EQ(list_dir(mnt_), std::vector<std::string>{"kvzoo.gguf"});
    EXPECT_EQ(read_equals(f, kvzoo_reference()), 0);
    struct stat st {};
    ASSERT_EQ(::stat(f.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0444u);
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

TEST_F(Permissions, WithoutAllowOtherAnotherUserCannotEvenStat) {
    add_set("kvzoo/t7", "kvzoo", 0, 0, 0644);  // world-readable shards: only FUSE can refuse
    ASSERT_TRUE(mount());
    const std::string f = mnt_ + "/kvzoo.gguf";
    EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return stat_errno(mnt_); }), EACCES);
    EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return stat_errno(f); }), EACCES);
    EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return open_errno(f, O_RDONLY); }), EACCES);
    EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return open_errno(mnt_, O_RDONLY | O_DIRECTORY); }), EACCES);
    // The shards themselves are readable by that user: the mount does not widen, it narrows.
    EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return open_errno(src_ + "/kvzoo-00001-of-00007.gguf", O_RDONLY); }), 0);
    // The mounting user (root) reads it.
    EXPECT_EQ(read_equals(f, kvzoo_reference()), 0);
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

TEST_F(Permissions, WithAllowOtherAnotherUserReadsExactlyWhatTheShardsAllow) {
    const std::string kvzoo = kvzoo_reference();
    const std::string notensors = gguf_test::read_file(fixture("notensors/merged-reference.gguf"));
    add_set("kvzoo/t7", "open", 0, 0, 0644);                         // world-readable
    add_set("kvzoo/t7", "closed", 0, 0, 0640);                       // root:root 0640
    add_set("kvzoo/t7", "onetight", 0, 0, 0644, 0600);               // one shard 0600 spoils it
    add_set("notensors/t7", "grouped", 0, kNogroup, 0640);           // readable through the group
    add_set("kvzoo/t7", "exec", 0, 0, 0755);                         // no exec bit, no write bit
    ASSERT_TRUE(mount({"-o", "allow_other"}));
    auto entry = find_mount(mnt_);
    ASSERT_TRUE(entry);
    EXPECT_TRUE(has_option(entry->super_options, "allow_other")) << entry->super_options;
    EXPECT_TRUE(has_option(entry->super_options, "default_permissions")) << entry->super_options;
    EXPECT_TRUE(has_option(entry->mount_options, "ro")) << entry->mount_options;
    EXPECT_EQ(list_dir(mnt_),
              (std::vector<std::string>{"closed.gguf", "exec.gguf", "grouped.gguf", "onetight.gguf", "open.gguf"}));

    struct Want {
        const char* name;
        mode_t mode;
        gid_t gid;
        int nobody_read;  // 0 or errno
        const std::string* bytes;
    };
    const Want wants[] = {
        {"open.gguf", 0444, 0, 0, &kvzoo},
        {"closed.gguf", 0440, 0, EACCES, &kvzoo},
        {"onetight.gguf", 0400, 0, EACCES, &kvzoo},
        {"grouped.gguf", 0440, kNogroup, 0, &notensors},
        {"exec.gguf", 0444, 0, 0, &kvzoo},
    };
    for (const auto& w : wants) {
        const std::string path = mnt_ + "/" + w.name;
        struct stat st {};
        ASSERT_EQ(::stat(path.c_str(), &st), 0) << w.name;
        EXPECT_EQ(st.st_mode & 07777, w.mode) << w.name;
        EXPECT_EQ(st.st_uid, 0u) << w.name;
        EXPECT_EQ(st.st_gid, w.gid) << w.name;
        // Root reads everything (CAP_DAC_OVERRIDE), byte-exact.
        EXPECT_EQ(read_equals(path, *w.bytes), 0) << w.name;
        // The other user: stat works (the directory is 0555), reading is what the modes say,
        // writing never.
        EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return stat_errno(path); }), 0) << w.name;
        const std::string& bytes = *w.bytes;
        int r = as_user(kNobody, kNogroup, [&] { return read_equals(path, bytes); });
        EXPECT_EQ(r, w.nobody_read) << w.name << ": " << errno_name(r);
        r = as_user(kNobody, kNogroup, [&] { return open_errno(path, O_WRONLY); });
        EXPECT_TRUE(r == EROFS || r == EACCES) << w.name << ": " << errno_name(r);
        r = as_user(kNobody, kNogroup, [&] { return ::access(path.c_str(), X_OK) == 0 ? 0 : errno; });
        EXPECT_EQ(r, EACCES) << w.name << ": executable";
    }
    // And the direct way agrees: the user can read a shard of "open" but not one of "closed".
    EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return open_errno(src_ + "/open-00003-of-00007.gguf", O_RDONLY); }), 0);
    EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return open_errno(src_ + "/closed-00003-of-00007.gguf", O_RDONLY); }),
              EACCES);
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

// Shard 1 belongs to user U and a later shard to someone else with mode 0600: U must not read
// the merged file (catalog rule 8: the owner class passes another owner's shard only through
// its group and other bits).
TEST_F(Permissions, MixedOwnersNeverWidenAccess) {
    add_set("kvzoo/t7", "mixed", 0, 0, 0600, 0600, kNobody);  // shard 1 nobody's, the rest root's 0600
    ASSERT_EQ(as_user(kNobody, kNogroup, [&] { return open_errno(src_ + "/mixed-00002-of-00007.gguf", O_RDONLY); }),
              EACCES);
    ASSERT_TRUE(mount({"-o", "allow_other"}));
    int r = as_user(kNobody, kNogroup, [&] { return open_errno(mnt_ + "/mixed.gguf", O_RDONLY); });
    EXPECT_EQ(r, EACCES) << "uid " << kNobody << " reads, through the mount, shards it cannot read directly";
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

// Issue 14.1: a link in SOURCE to a world-readable file inside a directory only its owner may
// enter (0700) was served 0444 and read by another user. Now it is served owner-only and the
// daemon refuses the open on the caller's credentials; what the user may read still reads.
TEST_F(Permissions, LinkIntoAnOwnerOnlyDirectoryIsNotReadThroughTheMount) {
    const std::string priv = data_ + "/private";
    ASSERT_EQ(::mkdir(priv.c_str(), 0755), 0);
    gguf_test::write_file(priv + "/secret.txt", "top secret");
    ASSERT_EQ(::chmod((priv + "/secret.txt").c_str(), 0644), 0);
    ASSERT_EQ(::symlink("../private/secret.txt", (src_ + "/secret.txt").c_str()), 0);
    link_kvzoo(priv, src_, "../private/");
    add_set("kvzoo/t7", "open", 0, 0, 0644);
    ASSERT_EQ(::chmod(priv.c_str(), 0700), 0);
    expect_nobody_cannot_read_directly(src_ + "/secret.txt");
    expect_nobody_cannot_read_directly(src_ + "/" + mount_test::kvzoo_shard(1));
    ASSERT_TRUE(mount({"-o", "allow_other"}));

    EXPECT_EQ(mode_of(mnt_ + "/secret.txt"), 0400);
    EXPECT_EQ(mode_of(mnt_ + "/kvzoo.gguf"), 0400);
    EXPECT_EQ(mode_of(mnt_ + "/open.gguf"), 0444);
    for (const char* name : {"secret.txt", "kvzoo.gguf"}) {
        const std::string path = mnt_ + "/" + name;
        int r = as_user(kNobody, kNogroup, [&] { return open_errno(path, O_RDONLY); });
        EXPECT_EQ(r, EACCES) << name << ": " << errno_name(r);
    }
    // Positive: the owner (root) reads it, the other user still reads (and maps) what it may.
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/secret.txt"), "top secret");
    EXPECT_EQ(read_equals(mnt_ + "/kvzoo.gguf", kvzoo_reference()), 0);
    const std::string kvzoo = kvzoo_reference();
    int r = as_user(kNobody, kNogroup, [&] { return mmap_equals(mnt_ + "/open.gguf", kvzoo); });
    EXPECT_EQ(r, 0) << errno_name(r);
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

TEST_F(Permissions, NestedOwnerOnlyFolderInsideSourceIsNotReadThroughTheMount) {
    const std::string priv = src_ + "/private";
    ASSERT_EQ(::mkdir(priv.c_str(), 0755), 0);
    mount_test::copy_kvzoo(priv);
    gguf_test::write_file(priv + "/notes.txt", "private notes");
    for (const auto& n : list_dir(priv)) ASSERT_EQ(::chmod((priv + "/" + n).c_str(), 0644), 0);
    ASSERT_EQ(::chmod(priv.c_str(), 0700), 0);
    expect_nobody_cannot_read_directly(priv + "/notes.txt");
    ASSERT_TRUE(mount({"-o", "allow_other"}));

    EXPECT_EQ(mode_of(mnt_ + "/private"), 0500);
    EXPECT_EQ(mode_of(mnt_ + "/private/kvzoo.gguf"), 0400);
    EXPECT_EQ(mode_of(mnt_ + "/private/notes.txt"), 0400);
    for (const char* name : {"private/kvzoo.gguf", "private/notes.txt"}) {
        int r = as_user(kNobody, kNogroup, [&] { return open_errno(mnt_ + "/" + name, O_RDONLY); });
        EXPECT_EQ(r, EACCES) << name << ": " << errno_name(r);
    }
    int r = as_user(kNobody, kNogroup, [&] { return open_errno(mnt_ + "/private", O_RDONLY | O_DIRECTORY); });
    EXPECT_EQ(r, EACCES) << errno_name(r);
    EXPECT_EQ(read_equals(mnt_ + "/private/kvzoo.gguf", kvzoo_reference()), 0);
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

TEST_F(Permissions, DirectoryLinkOutOfSourceThroughAClosedDirectoryIsNotReadable) {
    const std::string closed = data_ + "/closed";
    ASSERT_EQ(::mkdir(closed.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((closed + "/models").c_str(), 0755), 0);
    mount_test::copy_kvzoo(closed + "/models");
    for (const auto& n : list_dir(closed + "/models")) ASSERT_EQ(::chmod((closed + "/models/" + n).c_str(), 0644), 0);
    ASSERT_EQ(::symlink("../closed/models", (src_ + "/models").c_str()), 0);
    ASSERT_EQ(::chmod(closed.c_str(), 0700), 0);
    expect_nobody_cannot_read_directly(src_ + "/models/" + mount_test::kvzoo_shard(1));
    ASSERT_TRUE(mount({"-o", "allow_other"}));

    EXPECT_EQ(mode_of(mnt_ + "/models"), 0500);
    EXPECT_EQ(mode_of(mnt_ + "/models/kvzoo.gguf"), 0400);
    int r = as_user(kNobody, kNogroup, [&] { return open_errno(mnt_ + "/models/kvzoo.gguf", O_RDONLY); });
    EXPECT_EQ(r, EACCES) << errno_name(r);
    r = as_user(kNobody, kNogroup, [&] { return open_errno(mnt_ + "/models", O_RDONLY | O_DIRECTORY); });
    EXPECT_EQ(r, EACCES) << errno_name(r);
    EXPECT_EQ(read_equals(mnt_ + "/models/kvzoo.gguf", kvzoo_reference()), 0);
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

TEST_F(Permissions, HuggingFaceCacheWithAClosedBlobsDirectoryIsNotReadable) {
    // Two repos of the HF cache layout: snapshots/<rev>/x-0000k-of-00007.gguf -> ../../blobs/<sha>.
    for (const char* repo : {"models--closed", "models--open"}) {
        const std::string r = src_ + "/" + repo;
        for (const char* d : {"", "/blobs", "/snapshots", "/snapshots/rev"}) {
            ASSERT_EQ(::mkdir((r + d).c_str(), 0755), 0);
        }
        link_kvzoo(r + "/blobs", r + "/snapshots/rev", "../../blobs/");
    }
    ASSERT_EQ(::chmod((src_ + "/models--closed/blobs").c_str(), 0700), 0);
    expect_nobody_cannot_read_directly(src_ + "/models--closed/snapshots/rev/" + mount_test::kvzoo_shard(2));
    ASSERT_TRUE(mount({"-o", "allow_other"}));

    const std::string closed = mnt_ + "/models--closed/snapshots/rev/kvzoo.gguf";
    const std::string open = mnt_ + "/models--open/snapshots/rev/kvzoo.gguf";
    EXPECT_EQ(mode_of(closed), 0400);
    EXPECT_EQ(mode_of(open), 0444);
    int r = as_user(kNobody, kNogroup, [&] { return open_errno(closed, O_RDONLY); });
    EXPECT_EQ(r, EACCES) << errno_name(r);
    const std::string kvzoo = kvzoo_reference();
    r = as_user(kNobody, kNogroup, [&] { return read_equals(open, kvzoo); });
    EXPECT_EQ(r, 0) << errno_name(r);
    r = as_user(kNobody, kNogroup, [&] { return mmap_equals(open, kvzoo); });
    EXPECT_EQ(r, 0) << errno_name(r);
    EXPECT_EQ(read_equals(closed, kvzoo), 0);
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

TEST_F(Permissions, MergedSetWithOneShardBehindAClosedDirectoryIsNotReadable) {
    const std::string closed = data_ + "/closed";
    ASSERT_EQ(::mkdir(closed.c_str(), 0755), 0);
    add_set("kvzoo/t7", "kvzoo", 0, 0, 0644);
    const std::string last = mount_test::kvzoo_shard(7);
    ASSERT_EQ(::rename((src_ + "/" + last).c_str(), (closed + "/" + last).c_str()), 0);
    ASSERT_EQ(::symlink(("../closed/" + last).c_str(), (src_ + "/" + last).c_str()), 0);
    ASSERT_EQ(::chmod(closed.c_str(), 0700), 0);
    expect_nobody_cannot_read_directly(src_ + "/" + last);
    ASSERT_EQ(as_user(kNobody, kNogroup, [&] { return open_errno(src_ + "/" + mount_test::kvzoo_shard(6), O_RDONLY); }),
              0);
    ASSERT_TRUE(mount({"-o", "allow_other"}));

    EXPECT_EQ(mode_of(mnt_ + "/kvzoo.gguf"), 0400);
    int r = as_user(kNobody, kNogroup, [&] { return open_errno(mnt_ + "/kvzoo.gguf", O_RDONLY); });
    EXPECT_EQ(r, EACCES) << errno_name(r);
    EXPECT_EQ(read_equals(mnt_ + "/kvzoo.gguf", kvzoo_reference()), 0);
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

TEST_F(Permissions, PosixAclDenyingAUserIsHonoured) {
    add_set("kvzoo/t7", "kvzoo", 0, 0, 0644);
    auto r = gguf_test::run({"/bin/sh", "-c", "command -v setfacl >/dev/null && setfacl -m u:" + std::to_string(kNobody) +
                                                  ":--- '" + src_ + "/" + mount_test::kvzoo_shard(3) + "'"});
    if (r.exit_code != 0) GTEST_SKIP() << "setfacl (apt package acl) missing or ACLs unsupported: " << r.out << r.err;
    expect_nobody_cannot_read_directly(src_ + "/" + mount_test::kvzoo_shard(3));
    ASSERT_TRUE(mount({"-o", "allow_other"}));

    EXPECT_EQ(mode_of(mnt_ + "/kvzoo.gguf"), 0400);
    int e = as_user(kNobody, kNogroup, [&] { return open_errno(mnt_ + "/kvzoo.gguf", O_RDONLY); });
    EXPECT_EQ(e, EACCES) << errno_name(e);
    EXPECT_EQ(read_equals(mnt_ + "/kvzoo.gguf", kvzoo_reference()), 0);
    EXPECT_EQ(mount_test::lines_with(log(), "has a POSIX ACL").size(), 1u) << log();
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

// What the served modes cannot know (a directory above SOURCE closed after mounting: nothing
// watches it) the root daemon still refuses, because it asks on the caller's credentials.
TEST_F(Permissions, OpenIsCheckedOnTheCallersCredentials) {
    add_set("kvzoo/t7", "kvzoo", 0, 0, 0644);
    ASSERT_TRUE(mount({"-o", "allow_other"}));
    const std::string f = mnt_ + "/kvzoo.gguf";
    const std::string kvzoo = kvzoo_reference();
    ASSERT_EQ(as_user(kNobody, kNogroup, [&] { return read_equals(f, kvzoo); }), 0);
    ASSERT_EQ(::chmod(data_.c_str(), 0700), 0);
    expect_nobody_cannot_read_directly(src_ + "/" + mount_test::kvzoo_shard(1));
    EXPECT_EQ(mode_of(f), 0444);  // stale: nothing told the mount
    int r = as_user(kNobody, kNogroup, [&] { return open_errno(f, O_RDONLY); });
    EXPECT_EQ(r, EACCES) << errno_name(r);
    r = as_user(kNobody, kNogroup, [&] { return open_errno(mnt_, O_RDONLY | O_DIRECTORY); });
    EXPECT_EQ(r, EACCES) << errno_name(r);
    ASSERT_EQ(::chmod(data_.c_str(), 0755), 0);
    EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return read_equals(f, kvzoo); }), 0);
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

// Positive: a user allowed only through a group (its primary group, or a supplementary one)
// still reads byte-exact: the daemon checks with the caller's fsgid and groups, not with none.
TEST_F(Permissions, GroupMembersStillReadThroughPrimaryAndSupplementaryGroups) {
    const std::string team = src_ + "/team";
    ASSERT_EQ(::mkdir(team.c_str(), 0755), 0);
    mount_test::copy_kvzoo(team);
    for (const auto& n : list_dir(team)) {
        ASSERT_EQ(::chown((team + "/" + n).c_str(), 0, kNogroup), 0);
        ASSERT_EQ(::chmod((team + "/" + n).c_str(), 0640), 0);
    }
    ASSERT_EQ(::chown(team.c_str(), 0, kNogroup), 0);
    ASSERT_EQ(::chmod(team.c_str(), 0750), 0);
    constexpr uid_t kOther = 4321;
    constexpr gid_t kOtherGroup = 4321;
    ASSERT_EQ(as_user(kOther, kOtherGroup, [&] { return open_errno(team + "/" + mount_test::kvzoo_shard(1), O_RDONLY); },
                      {kNogroup}),
              0);
    ASSERT_TRUE(mount({"-o", "allow_other"}));

    const std::string f = mnt_ + "/team/kvzoo.gguf";
    EXPECT_EQ(mode_of(mnt_ + "/team"), 0550);
    EXPECT_EQ(mode_of(f), 0440);
    const std::string kvzoo = kvzoo_reference();
    int r = as_user(kNobody, kNogroup, [&] { return mmap_equals(f, kvzoo); });
    EXPECT_EQ(r, 0) << "primary group: " << errno_name(r);
    r = as_user(kOther, kOtherGroup, [&] { return read_equals(f, kvzoo); }, {kNogroup});
    EXPECT_EQ(r, 0) << "supplementary group: " << errno_name(r);
    r = as_user(kOther, kOtherGroup, [&] { return open_errno(f, O_RDONLY); });
    EXPECT_EQ(r, EACCES) << "no group: " << errno_name(r);
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

TEST_F(Permissions, NothingOutsideTheMergedFilesIsReachable) {
    add_set("kvzoo/t7", "kvzoo", 0, 0, 0644);
    gguf_test::write_file(src_ + "/secret.txt", "in SOURCE, not a shard");
    gguf_test::write_file(data_ + "/secret.txt", "next to SOURCE");
    ASSERT_EQ(::mkdir((src_ + "/sub").c_str(), 0755), 0);
    ASSERT_TRUE(mount({"-o", "allow_other"}));

    // SOURCE's own companion files and folders pass through (model directories); nothing else.
    EXPECT_EQ(list_dir(mnt_), (std::vector<std::string>{"kvzoo.gguf", "secret.txt", "sub"}));
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/secret.txt"), "in SOURCE, not a shard");
    // ".." of the mount root is the mount point's parent (the kernel resolves it above the
    // mount), never SOURCE or SOURCE's parent.
    struct stat dotdot {}, parent {}, data {}, src {};
    ASSERT_EQ(::stat((mnt_ + "/..").c_str(), &dotdot), 0);
    ASSERT_EQ(::stat(root_.c_str(), &parent), 0);
    ASSERT_EQ(::stat(data_.c_str(), &data), 0);
    ASSERT_EQ(::stat(src_.c_str(), &src), 0);
    EXPECT_TRUE(dotdot.st_dev == parent.st_dev && dotdot.st_ino == parent.st_ino);
    EXPECT_FALSE(dotdot.st_dev == data.st_dev && dotdot.st_ino == data.st_ino);
    EXPECT_FALSE(dotdot.st_dev == src.st_dev && dotdot.st_ino == src.st_ino);
    {
        int dfd = ::open(mnt_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(dfd, 0);
        struct stat via_fd {};
        EXPECT_EQ(::fstatat(dfd, "..", &via_fd, 0), 0);
        EXPECT_TRUE(via_fd.st_dev == parent.st_dev && via_fd.st_ino == parent.st_ino);
        // Going up and down again is the ordinary path outside the mount, not something served.
        struct stat mnt_st {};
        ASSERT_EQ(::fstat(dfd, &mnt_st), 0);
        EXPECT_EQ(::fstatat(dfd, "../data/src/secret.txt", &via_fd, 0), 0);
        EXPECT_NE(via_fd.st_dev, mnt_st.st_dev);
        ::close(dfd);
    }
    // Every other name is absent: hidden shard names, names of SOURCE's parent, hidden and odd
    // names. Names below the file are not directories.
    for (const char* name : {"kvzoo-00001-of-00007.gguf", "src", "data", ".", "...", ".kvzoo.gguf",
                             "kvzoo", "KVZOO.GGUF", "kvzoo.gguf.", " kvzoo.gguf"}) {
        if (std::string(name) == ".") continue;
        EXPECT_EQ(stat_errno(mnt_ + "/" + name), ENOENT) << name;
        EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return stat_errno(mnt_ + "/" + name); }), ENOENT) << name;
    }
    for (const char* below : {"/kvzoo.gguf/", "/kvzoo.gguf/..", "/kvzoo.gguf/x", "/kvzoo.gguf/../kvzoo.gguf"}) {
        EXPECT_EQ(stat_errno(mnt_ + below), ENOTDIR) << below;
    }
    // The mount root and the file are what they claim, for root and for the other user.
    struct stat root_st {};
    ASSERT_EQ(::stat(mnt_.c_str(), &root_st), 0);
    EXPECT_EQ(root_st.st_mode & 07777, 0555u);
    EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return read_equals(mnt_ + "/kvzoo.gguf", kvzoo_reference()); }), 0);
    EXPECT_EQ(daemon_.stop(mnt_), 0);
}

}  // namespace
