// Issue 14.9: `split` and `merge` on a file system without renameat2(RENAME_NOREPLACE) or hard
// links (some FUSE and network file systems). They used to write and fsync the whole output and
// then fail to publish it ("cannot move ... into place: Operation not permitted"). They now find
// out before writing which way of publishing works there, and publish with O_EXCL + rename.
// The file system is tests/support/plainfs.c, a passthrough that refuses both.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using gguf_test::TempDir;

bool mounted(const std::string& mountpoint) {
    std::ifstream in("/proc/self/mounts");
    for (std::string dev, dir, rest; in >> dev >> dir && std::getline(in, rest);) {
        if (dir == mountpoint) return true;
    }
    return false;
}

/// ROOT served by plainfs at MOUNTPOINT for the lifetime of the object; unmounted (and the
/// plainfs process reaped) on destruction, also when a test fails.
class PlainFs {
public:
    PlainFs(const std::string& root, const std::string& mountpoint) : mountpoint_(mountpoint) {
#ifdef GGUF_PLAINFS_BINARY
        if (::access("/dev/fuse", R_OK | W_OK) != 0) return;
        std::vector<std::string> args = {GGUF_PLAINFS_BINARY, root, mountpoint};
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        if (::posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) pid_ = -1;
        for (int i = 0; i < 500 && pid_ > 0 && !mounted(mountpoint); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
#else
        (void)root;
#endif
    }
    ~PlainFs() {
        if (pid_ <= 0) return;
        if (mounted(mountpoint_)) gguf_test::run({"/usr/bin/fusermount3", "-u", mountpoint_});
        if (mounted(mountpoint_)) gguf_test::run({"/bin/umount", "-l", mountpoint_});
        int status = 0;
        for (int i = 0; i < 300 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        if (::waitpid(pid_, &status, WNOHANG) == 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, &status, 0);
        }
    }
    bool ok() const { return pid_ > 0 && mounted(mountpoint_); }

private:
    std::string mountpoint_;
    pid_t pid_ = -1;
};

std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

gguf_test::RunResult gm(std::vector<std::string> args) {
    args.insert(args.begin(), gguf_test::gguf_mount_binary());
    return gguf_test::run(args);
}

const gguf_test::ManifestCase& kvzoo_t7() {
    static const auto cases = gguf_test::manifest_cases();
    for (const auto& c : cases) {
        if (c.id == "kvzoo/t7") return c;
    }
    throw std::runtime_error("kvzoo/t7 missing from MANIFEST.json");
}

TEST(PublishWithoutRenameFlagsOrLinks, MergeAndSplitPublishExactBytesAndNeverReplace) {
    TempDir root, mnt;
    PlainFs fs(root.path(), mnt.path());
    if (!fs.ok()) GTEST_SKIP() << "plainfs could not be mounted (no FUSE here)";
    // The file system really lacks both.
    gguf_test::write_file(mnt / "probe", "x");
    EXPECT_NE(::renameat2(AT_FDCWD, (mnt / "probe").c_str(), AT_FDCWD, (mnt / "other").c_str(), RENAME_NOREPLACE), 0);
    EXPECT_NE(::link((mnt / "probe").c_str(), (mnt / "other").c_str()), 0);
    ASSERT_EQ(::unlink((mnt / "probe").c_str()), 0);

    const auto& c = kvzoo_t7();
    auto r = gm({"merge", "-q", fixture(c.shards[0]), mnt / "merged.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(root / "merged.gguf"), c.merged_sha256);
    EXPECT_EQ(list_dir(root.path()), (std::vector<std::string>{"merged.gguf"}));  // no temporary left

    // An existing output is still refused, and left as it was.
    gguf_test::write_file(root / "taken.gguf", "mine");
    r = gm({"merge", "-q", fixture(c.shards[0]), mnt / "taken.gguf"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("taken.gguf already exists"), std::string::npos) << r.err;
    EXPECT_EQ(gguf_test::read_file(root / "taken.gguf"), "mine");

    r = gm({"split", "-q", "--split-max-tensors", "7", fixture(c.original), mnt / "kvzoo"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (size_t i = 0; i < c.shards.size(); ++i) {
        const std::string name = std::filesystem::path(c.shards[i]).filename().string();
        EXPECT_EQ(gguf_test::sha256_file(root / name), c.shard_sha256[i]) << name;
    }
    EXPECT_EQ(list_dir(root.path()).size(), 2 + c.shards.size());  // merged, taken, the shards
}

}  // namespace
