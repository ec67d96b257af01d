// Shutdown under load: SIGTERM while a reader is in the middle of the merged file. The reader
// must see correct bytes and then an error or EOF (never wrong bytes or a hang), the daemon
// must exit 0, and the mount point must be clean.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;

class Lifecycle : public mount_test::MountFixture {};

TEST_F(Lifecycle, SigtermWhileAReaderIsMidFile) {
    mount_test::copy_kvzoo(src_);
    const std::string reference = gguf_test::read_file(fixture("kvzoo/merged-reference.gguf"));
    ASSERT_TRUE(mount());

    // O_DIRECT so that every read goes to the daemon rather than the page cache.
    mount_test::Fd fd{::open((mnt_ + "/kvzoo.gguf").c_str(), O_RDONLY | O_DIRECT)};
    ASSERT_GE(fd.fd, 0) << std::strerror(errno);
    std::atomic<uint64_t> good_reads{0};
    std::atomic<bool> wrong_bytes{false};
    std::atomic<int> final_errno{0};
    std::atomic<bool> saw_eof_or_error{false};
    std::thread reader([&] {
        mount_test::AlignedBuffer buf(65536);
        if (!buf.get()) return;
        for (;;) {  // sweep the file again and again until the mount goes away
            for (uint64_t off = 0; off < reference.size(); off += 65536) {
                ssize_t n = ::pread(fd.fd, buf.get(), 65536, static_cast<off_t>(off));
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
    ASSERT_EQ(::kill(daemon_.pid(), SIGTERM), 0);
    auto code = daemon_.wait_exit();
    reader.join();
    fd.close();

    EXPECT_FALSE(wrong_bytes) << "a read returned bytes that differ from the reference merge";
    EXPECT_TRUE(saw_eof_or_error);
    EXPECT_GE(good_reads.load(), 100u);
    if (final_errno != 0) {
        EXPECT_TRUE(final_errno == ENOTCONN || final_errno == ECONNABORTED || final_errno == EIO || final_errno == ENODEV)
            << std::strerror(final_errno);
    }
    ASSERT_TRUE(code) << "the daemon did not exit after SIGTERM";
    EXPECT_EQ(*code, 0);
    EXPECT_FALSE(mount_test::find_mount(mnt_)) << "mount left behind";  // TearDown unmounts it then
}

}  // namespace
