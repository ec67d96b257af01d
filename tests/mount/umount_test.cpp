// `gguf-mount umount` (issue: "no way to unmount through the tool": `gguf-mount umount MNT`
// answered "did you mean 'mount'?"): unmounts a gguf-mount mount, says why it cannot (busy,
// nothing mounted, another file system), and detaches a busy one with --lazy.
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using mount_test::find_mount;

class Umount : public mount_test::MountFixture {};

TEST_F(Umount, UnmountsAGgufMountAndTheDaemonExits) {
    mount_test::copy_kvzoo(src_);
    ASSERT_TRUE(mount());
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "umount", mnt_});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_FALSE(find_mount(mnt_));
    EXPECT_EQ(daemon_.wait_exit(), std::optional<int>(0)) << log();
}

TEST_F(Umount, UnmountIsTheSameCommand) {
    mount_test::copy_kvzoo(src_);
    ASSERT_TRUE(mount());
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "unmount", mnt_});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(find_mount(mnt_));
}

TEST_F(Umount, ABusyMountIsNamedWithWhatToDoAndLazyDetachesIt) {
    mount_test::copy_kvzoo(src_);
    ASSERT_TRUE(mount());
    const std::string file = mnt_ + "/kvzoo.gguf";
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << file;
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "umount", mnt_});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("gguf-mount umount: " + mnt_ + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("busy"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("'gguf-mount umount --lazy " + mnt_ + "'"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(find_mount(mnt_));
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "umount", "--lazy", mnt_});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(find_mount(mnt_));
    char c = 0;
    EXPECT_EQ(::pread(fd, &c, 1, 0), 1);  // the open file still reads until it is closed
    EXPECT_EQ(c, 'G');
    ::close(fd);
    EXPECT_EQ(daemon_.wait_exit(), std::optional<int>(0)) << log();
}

TEST_F(Umount, NothingMountedOrAnotherFileSystemIsRefusedInOneLine) {
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "umount", mnt_});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount umount: " + mnt_ + ": nothing is mounted there\n");
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "umount", "/proc"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount umount: /proc: holds a proc mount, not gguf-mount's; not unmounted (use umount(8))\n");
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "umount"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.err, "gguf-mount umount: expected MOUNTPOINT (see 'gguf-mount umount --help')\n");
}

}  // namespace
