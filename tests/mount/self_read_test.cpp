// fs/self_read.hpp without a mount: the start-up reader is a child process that reports per
// file, keeps no descriptor but its report pipe (and 0-2), and is killed when asked to stop.
// A FIFO among the files holds the child in its open() until the test opens the other end.
#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fs/self_read.hpp"
#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using gguf_mount::fs::SelfReader;
using gguf_mount::fs::SelfReadReport;

/// Descriptor numbers open in process `pid` (/proc/PID/fd), sorted.
std::vector<int> open_fds(pid_t pid) {
    std::vector<int> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
        out.push_back(std::stoi(e.path().filename().string()));
    }
    std::sort(out.begin(), out.end());
    return out;
}

TEST(SelfReader, ReportsTheRootEachFailedFileWithItsErrnoThenDone) {
    gguf_test::TempDir tmp;
    gguf_test::write_file(tmp / "a.txt", "a");
    gguf_test::write_file(tmp / "empty.txt", "");
    gguf_test::write_file(tmp / "short.txt", "");  // served as non-empty: a read of 0 bytes
    ASSERT_EQ(::mkdir((tmp / "dir").c_str(), 0755), 0);
    SelfReader reader(tmp.path(), {tmp / "a.txt", tmp / "missing.txt", tmp / "empty.txt", tmp / "dir", tmp / "short.txt"},
                      {false, false, true, false, false});
    ASSERT_TRUE(reader.start(-1)) << std::strerror(errno);
    EXPECT_GT(reader.pid(), 0);
    EXPECT_NE(reader.pid(), ::getpid());

    std::vector<SelfReadReport> got;
    SelfReadReport r;
    while (reader.next(&r, -1)) got.push_back(r);
    const int status = reader.finish();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

    struct stat st {};
    struct statfs sfs {};
    ASSERT_EQ(::stat(tmp.path().c_str(), &st), 0);
    ASSERT_EQ(::statfs(tmp.path().c_str(), &sfs), 0);
    ASSERT_EQ(got.size(), 5u);
    EXPECT_EQ(got[0].kind, SelfReadReport::kRoot);
    EXPECT_EQ(got[0].value, static_cast<uint64_t>(st.st_dev));
    EXPECT_EQ(got[0].fs_type, static_cast<uint64_t>(sfs.f_type));
    EXPECT_EQ(got[1].kind, SelfReadReport::kFileFailed);
    EXPECT_EQ(got[1].value, 1u);
    EXPECT_EQ(got[1].error, ENOENT);
    EXPECT_EQ(got[2].kind, SelfReadReport::kFileFailed);
    EXPECT_EQ(got[2].value, 3u);
    EXPECT_EQ(got[2].error, EISDIR);
    EXPECT_EQ(got[3].kind, SelfReadReport::kFileFailed);
    EXPECT_EQ(got[3].value, 4u);
    EXPECT_EQ(got[3].error, EIO);
    EXPECT_EQ(got[4].kind, SelfReadReport::kDone);
    EXPECT_EQ(got[4].value, 5u);
}

TEST(SelfReader, TheChildHoldsOnlyItsReportPipeAndTheStandardDescriptors) {
    gguf_test::TempDir tmp;
    const std::string fifo = tmp / "fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    // Stand-ins for /dev/fuse and any other descriptor of the daemon (a shard, a socket).
    mount_test::Fd fuse{::open("/dev/null", O_RDWR)};
    mount_test::Fd other{::open(tmp.path().c_str(), O_RDONLY | O_DIRECTORY)};
    ASSERT_GE(fuse.fd, 0);
    ASSERT_GE(other.fd, 0);
    SelfReader reader(tmp.path(), {fifo}, {false});
    ASSERT_TRUE(reader.start(fuse.fd)) << std::strerror(errno);
    // The child opens the FIFO for reading and waits there for a writer.
    SelfReadReport r;
    ASSERT_TRUE(reader.next(&r, -1));
    EXPECT_EQ(r.kind, SelfReadReport::kRoot);
    ASSERT_TRUE(mount_test::time_until([&] {
        const std::string wchan = gguf_test::read_file("/proc/" + std::to_string(reader.pid()) + "/wchan");
        return wchan.find("fifo") != std::string::npos || wchan.find("partner") != std::string::npos;
    })) << "the child never waited in the FIFO's open";
    EXPECT_EQ(open_fds(reader.pid()), (std::vector<int>{0, 1, 2, 3}));

    mount_test::Fd writer{::open(fifo.c_str(), O_WRONLY)};
    ASSERT_GE(writer.fd, 0);
    writer.close();  // the child's pread of a FIFO fails with ESPIPE
    ASSERT_TRUE(reader.next(&r, -1));
    EXPECT_EQ(r.kind, SelfReadReport::kFileFailed);
    EXPECT_EQ(r.error, ESPIPE);
    ASSERT_TRUE(reader.next(&r, -1));
    EXPECT_EQ(r.kind, SelfReadReport::kDone);
    EXPECT_FALSE(reader.next(&r, -1));
    EXPECT_EQ(reader.finish(), 0);
}

TEST(SelfReader, AReadableStopDescriptorKillsTheChild) {
    gguf_test::TempDir tmp;
    const std::string fifo = tmp / "fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    mount_test::Fd stop{::eventfd(0, EFD_CLOEXEC)};
    ASSERT_GE(stop.fd, 0);
    SelfReader reader(tmp.path(), {fifo}, {false});
    ASSERT_TRUE(reader.start(-1)) << std::strerror(errno);
    SelfReadReport r;
    ASSERT_TRUE(reader.next(&r, stop.fd));
    EXPECT_EQ(r.kind, SelfReadReport::kRoot);
    ASSERT_EQ(::eventfd_write(stop.fd, 1), 0);
    EXPECT_FALSE(reader.next(&r, stop.fd)) << "a report after the stop: kind " << r.kind;
    const int status = reader.finish();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    EXPECT_EQ(reader.pid(), -1);
}

}  // namespace
