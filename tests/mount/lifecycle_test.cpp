// Shutdown under load: SIGTERM while a reader is in the middle of the merged file. The reader
// must see correct bytes and then an error or EOF (never wrong bytes or a hang), the daemon
// must exit 0, and the mount point must be clean.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "mount/mount_harness.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;

TEST(Lifecycle, SigtermWhileAReaderIsMidFile) {
    std::string why;
    if (!mount_test::fuse_available(&why)) GTEST_SKIP() << why;
    gguf_test::TempDir tmp;
    std::unique_ptr<char, decltype(&std::free)> real(::realpath(tmp.path().c_str(), nullptr), &std::free);
    ASSERT_TRUE(real);
    const std::string root = real.get(), src = root + "/src", mnt = root + "/mnt";
    ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(mnt.c_str(), 0755), 0);
    for (int i = 1; i <= 7; ++i) {
        std::string name = "kvzoo-0000" + std::to_string(i) + "-of-00007.gguf";
        gguf_test::copy_file(fixture("kvzoo/t7/" + name), src + "/" + name);
    }
    const std::string reference = gguf_test::read_file(fixture("kvzoo/merged-reference.gguf"));

    mount_test::Daemon daemon;
    ASSERT_TRUE(daemon.start({gguf_test::gguf_mount_binary(), src, mnt, "-f"}, root + "/daemon.log"));
    ASSERT_TRUE(daemon.wait_mounted(mnt));

    // O_DIRECT so that every read goes to the daemon rather than the page cache.
    int fd = ::open((mnt + "/kvzoo.gguf").c_str(), O_RDONLY | O_DIRECT);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    std::atomic<uint64_t> good_reads{0};
    std::atomic<bool> wrong_bytes{false};
    std::atomic<int> final_errno{0};
    std::atomic<bool> saw_eof_or_error{false};
    std::thread reader([&] {
        void* raw = nullptr;
        if (::posix_memalign(&raw, 4096, 65536) != 0) return;
        std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(raw), &std::free);
        for (;;) {  // sweep the file again and again until the mount goes away
            for (uint64_t off = 0; off < reference.size(); off += 65536) {
                ssize_t n = ::pread(fd, buf.get(), 65536, static_cast<off_t>(off));
                if (n <= 0) {
                    final_errno = n < 0 ? errno : 0;
                    saw_eof_or_error = true;
                    return;
                }
                if (std::memcmp(buf.get(), reference.data() + off, static_cast<size_t>(n)) != 0) {
                    wrong_bytes = true;
                    return;
                }
                ++good_reads;
            }
        }
    });
    while (good_reads < 100 && !saw_eof_or_error && !wrong_bytes) std::this_thread::yield();
    ASSERT_EQ(::kill(daemon.pid(), SIGTERM), 0);
    auto code = daemon.wait_exit();
    reader.join();
    ::close(fd);

    EXPECT_FALSE(wrong_bytes) << "a read returned bytes that differ from the reference merge";
    EXPECT_TRUE(saw_eof_or_error);
    EXPECT_GE(good_reads.load(), 100u);
    if (final_errno != 0) {
        EXPECT_TRUE(final_errno == ENOTCONN || final_errno == ECONNABORTED || final_errno == EIO || final_errno == ENODEV)
            << std::strerror(final_errno);
    }
    ASSERT_TRUE(code) << "the daemon did not exit after SIGTERM";
    EXPECT_EQ(*code, 0);
    EXPECT_FALSE(mount_test::find_mount(mnt)) << "mount left behind";
    if (mount_test::find_mount(mnt)) mount_test::unmount(mnt);
}

}  // namespace
