// Full disk: `split` and `merge` writing into a small tmpfs that cannot hold the output must
// fail with exit status 1 and one line on stderr naming the output and "No space left on
// device", and leave the tmpfs exactly as it was (no temporary file, no final file) and the
// inputs untouched; `merge --delete-splits` must delete nothing. Mounting a tmpfs needs root
// (CAP_SYS_ADMIN): skipped otherwise. The tmpfs is always unmounted in TearDown.
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "support/dense_model.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::TempDir;

std::vector<std::string> names_in(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

/// True when `path` is a mount point listed in /proc/self/mountinfo.
bool is_mounted(const std::string& path) {
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string id, parent, dev, root, mnt;
        if (ls >> id >> parent >> dev >> root >> mnt && mnt == path) return true;
    }
    return false;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) out.push_back(line);
    return out;
}

/// A temporary directory with a tmpfs of a chosen size mounted on "small/" inside it.
class FullDisk : public ::testing::Test {
protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root; full-disk tests skipped";
        std::unique_ptr<char, decltype(&std::free)> real(::realpath(tmp_.path().c_str(), nullptr), &std::free);
        ASSERT_TRUE(real);
        root_ = real.get();
        small_ = root_ + "/small";
        in_ = root_ + "/in";
        ASSERT_EQ(::mkdir(small_.c_str(), 0755), 0);
        ASSERT_EQ(::mkdir(in_.c_str(), 0755), 0);
    }

    void TearDown() override {
        if (!mounted_) return;
        if (::umount2(small_.c_str(), 0) != 0) {
            ADD_FAILURE() << "umount " << small_ << ": " << std::strerror(errno) << "; detaching it";
            ::umount2(small_.c_str(), MNT_DETACH);
        }
        mounted_ = false;
        EXPECT_FALSE(is_mounted(small_)) << "left a tmpfs mounted on " << small_;
    }

    /// Mounts a tmpfs with `options` (e.g. "size=8m") on small_. Skips the test when the kernel
    /// refuses (a container without CAP_SYS_ADMIN).
    void mount_tmpfs(const std::string& options) {
        if (::mount("gguf-mount-test", small_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    ("mode=0755," + options).c_str()) != 0) {
            const int e = errno;
            if (e == EPERM || e == EACCES) GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(e);
            FAIL() << "mount tmpfs on " << small_ << ": " << std::strerror(e);
        }
        mounted_ = true;
        struct statfs sfs {};
        ASSERT_EQ(::statfs(small_.c_str(), &sfs), 0);
        ASSERT_EQ(static_cast<unsigned long>(sfs.f_type), 0x01021994UL) << "not a tmpfs";  // TMPFS_MAGIC
    }

    /// sha256 of every file in `dir`, by name.
    std::map<std::string, std::string> snapshot(const std::string& dir) {
        std::map<std::string, std::string> out;
        for (const auto& n : names_in(dir)) out[n] = gguf_test::sha256_file(dir + "/" + n);
        return out;
    }

    /// Writes a dense model of about `mib` MiB as in_/model.gguf (three tensors) and splits it
    /// with one tensor per shard into `dir`/s-0000k-of-00003.gguf. Returns the first shard.
    std::string make_set(const std::string& dir, int mib) {
        const std::string model = in_ + "/model.gguf";
        gguf_test::write_dense_model(model, {{"head", 5000}, {"body", (int64_t{mib} << 18) - 6000}, {"tail", 1000}}, 7);
        auto r = gguf_test::run(
            {gguf_test::gguf_mount_binary(), "split", "-q", "--split-max-tensors", "1", model, dir + "/s"});
        EXPECT_EQ(r.exit_code, 0) << r.err;
        return dir + "/s-00001-of-00003.gguf";
    }

    /// Runs gguf-mount with `args` and checks the clean ENOSPC failure: exit 1, one line on
    /// stderr naming `output` and "No space left on device", and neither `small_` nor `in_`
    /// changed (every input byte-identical, no temporary or final file left).
    void expect_clean_enospc(const std::vector<std::string>& args, const std::string& output) {
        const auto small_before = snapshot(small_);
        const auto in_before = snapshot(in_);
        std::vector<std::string> argv = {gguf_test::gguf_mount_binary()};
        argv.insert(argv.end(), args.begin(), args.end());
        auto r = gguf_test::run(argv);
        EXPECT_EQ(r.exit_code, 1) << r.err;
        const auto lines = lines_of(r.err);
        ASSERT_EQ(lines.size(), 1u) << "stderr:\n" << r.err;
        EXPECT_EQ(lines[0].rfind("gguf-mount: ", 0), 0u) << lines[0];
        EXPECT_NE(lines[0].find(output), std::string::npos) << "does not name " << output << ": " << lines[0];
        EXPECT_NE(lines[0].find("No space left on device"), std::string::npos) << lines[0];
        EXPECT_EQ(snapshot(small_), small_before) << "the full file system changed: " << lines[0];
        EXPECT_EQ(snapshot(in_), in_before) << "the inputs changed";
        std::cout << "[ message  ] " << lines[0] << "\n";
    }

    TempDir tmp_;
    std::string root_, small_, in_;
    bool mounted_ = false;
};

TEST_F(FullDisk, MergeIntoASmallerFileSystem) {
    const std::string first = make_set(in_, 12);
    mount_tmpfs("size=8m");
    // Across file systems: copy_file_range gives EXDEV, the buffered copy hits ENOSPC.
    expect_clean_enospc({"merge", first, small_ + "/merged.gguf"}, small_ + "/merged.gguf");
    expect_clean_enospc({"merge", "-q", first, small_ + "/merged.gguf"}, small_ + "/merged.gguf");
}

TEST_F(FullDisk, MergeDeleteSplitsDeletesNothingWhenTheOutputDoesNotFit) {
    const std::string first = make_set(in_, 12);
    mount_tmpfs("size=8m");
    expect_clean_enospc({"merge", "--delete-splits", first, small_ + "/merged.gguf"}, small_ + "/merged.gguf");
    for (int k = 1; k <= 3; ++k) {
        EXPECT_EQ(::access((in_ + "/s-0000" + std::to_string(k) + "-of-00003.gguf").c_str(), F_OK), 0) << k;
    }
}

TEST_F(FullDisk, MergeWithinTheSameFullFileSystemUsesTheKernelCopy) {
    // Shards and output on the same tmpfs: copy_file_range itself fails with ENOSPC.
    mount_tmpfs("size=20m");
    const std::string first = make_set(small_, 12);
    ::unlink((in_ + "/model.gguf").c_str());
    expect_clean_enospc({"merge", first, small_ + "/merged.gguf"}, small_ + "/merged.gguf");
    expect_clean_enospc({"merge", "--delete-splits", first, small_ + "/merged.gguf"}, small_ + "/merged.gguf");
    // Forcing the buffered copy fails the same way.
    ASSERT_EQ(::setenv("GGUF_MOUNT_COPY", "buffered", 1), 0);
    expect_clean_enospc({"merge", first, small_ + "/merged.gguf"}, small_ + "/merged.gguf");
    ::unsetenv("GGUF_MOUNT_COPY");
}

TEST_F(FullDisk, SplitIntoASmallerFileSystemRemovesTheShardsAlreadyWritten) {
    const std::string model = in_ + "/model.gguf";
    gguf_test::write_dense_model(model, {{"head", 1 << 18}, {"body", 3 << 20}, {"tail", 1000}}, 11);
    // Shard 1 (1 MiB) is written and fsynced before shard 2 (12 MiB) runs out of space: both
    // temporary files must go.
    mount_tmpfs("size=8m");
    expect_clean_enospc({"split", "--split-max-tensors", "1", model, small_ + "/s"}, small_ + "/s-00002-of-00003.gguf");
    expect_clean_enospc({"split", "-q", "--split-max-size", "5M", model, small_ + "/s"},
                        small_ + "/s-00002-of-00003.gguf");
}

TEST_F(FullDisk, AlreadyFullFileSystem) {
    const std::string first = make_set(in_, 4);
    mount_tmpfs("size=1m");
    {
        // Fill it completely.
        std::ofstream fill(small_ + "/filler", std::ios::binary);
        std::string block(64 * 1024, 'x');
        while (fill.write(block.data(), static_cast<std::streamsize>(block.size()))) {
        }
    }
    struct statfs sfs {};
    ASSERT_EQ(::statfs(small_.c_str(), &sfs), 0);
    ASSERT_EQ(sfs.f_bavail, 0u);
    // The header itself cannot be written.
    expect_clean_enospc({"merge", first, small_ + "/merged.gguf"}, small_ + "/merged.gguf");
    expect_clean_enospc({"split", "--split-max-tensors", "1", in_ + "/model.gguf", small_ + "/s"},
                        small_ + "/s-00001-of-00003.gguf");
}

TEST_F(FullDisk, NoInodeLeftForTheTemporaryFile) {
    const std::string first = make_set(in_, 1);
    mount_tmpfs("size=8m,nr_inodes=2");  // the root directory and one file
    gguf_test::write_file(small_ + "/only-file", "x");
    expect_clean_enospc({"merge", first, small_ + "/merged.gguf"}, small_ + "/merged.gguf");
    expect_clean_enospc({"split", "--split-max-tensors", "1", in_ + "/model.gguf", small_ + "/s"},
                        small_ + "/s-00001-of-00003.gguf");
}

}  // namespace
