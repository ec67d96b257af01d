// Real mounts: a gguf-split set joined with cat is served merged under its own name (issue 13.1),
// and the daemon log escapes names (issue 14.12) and reports paths longer than PATH_MAX (14.8).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using mount_test::list_dir;

constexpr const char* kTinyLlamaMerged = "3a7d0b4b3ba2417ad2b31050616fb5caef8221715a369463fb6b3cf668a56914";

class NamesMountTest : public mount_test::MountFixture {
protected:
    /// The shards of manifest case `id` joined with cat into SOURCE/`name`.
    void cat_case(const std::string& id, const std::string& name) {
        auto c = mount_test::manifest_case(id);
        ASSERT_TRUE(c) << id;
        std::string all;
        for (const auto& s : c->shards) all += gguf_test::read_file(fixture(s));
        gguf_test::write_file(src_ + "/" + name, all);
    }
};

TEST_F(NamesMountTest, CatJoinedSetsAreServedMergedAndBadOnesAreLoggedNotPassedThrough) {
    cat_case("kvzoo/t7", "t7.gguf");
    cat_case("kvzoo/t7-ntfs", "t7-ntfs.gguf");
    const std::string work = root_ + "/work";
    ASSERT_EQ(::mkdir(work.c_str(), 0755), 0);
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "split", "--split-max-tensors", "10", "-q",
                             fixture("tiny-llama/tiny-llama.gguf"), work + "/tiny"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string tiny;
    for (int i = 1; i <= 3; ++i) tiny += gguf_test::read_file(work + "/tiny-0000" + std::to_string(i) + "-of-00003.gguf");
    gguf_test::write_file(src_ + "/tiny-llama.gguf", tiny);
    gguf_test::copy_file(fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf"), src_ + "/lone.gguf");

    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_), (std::vector<std::string>{"t7-ntfs.gguf", "t7.gguf", "tiny-llama.gguf"}));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/t7.gguf"), mount_test::kKvzooMergedSha256);
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/t7-ntfs.gguf"), mount_test::kKvzooMergedSha256);
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/tiny-llama.gguf"), kTinyLlamaMerged);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(mount_test::lines_with(log(), src_ + "/lone.gguf: holds 1 of the 7 shards").size(), 1u) << log();
}

TEST_F(NamesMountTest, DaemonLogEscapesNamesAndReportsPathsLongerThanPathMax) {
    const std::string evil = "e\n\x1b[31mvil";
    gguf_test::copy_file(fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf"), src_ + "/" + evil + "-00001-of-00007.gguf");
    gguf_test::write_file(src_ + "/" + evil + ".txt", "x");
    // 17 nested directories of 250-byte names: the file at the bottom is beyond PATH_MAX.
    const std::string dname(250, 'd');
    int fd = ::open(src_.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(fd, 0);
    for (int i = 0; i < 17; ++i) {
        ASSERT_EQ(::mkdirat(fd, dname.c_str(), 0755), 0);
        int next = ::openat(fd, dname.c_str(), O_RDONLY | O_DIRECTORY);
        ::close(fd);
        ASSERT_GE(next, 0);
        fd = next;
    }
    ::close(::openat(fd, "deep.txt", O_WRONLY | O_CREAT, 0644));
    ::close(fd);

    ASSERT_TRUE(mount());
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    const std::string text = gguf_test::without_timestamps(log());
    for (size_t i = 0; i < text.size(); ++i) {
        auto u = static_cast<unsigned char>(text[i]);
        ASSERT_FALSE((u < 0x20 && u != '\n') || u == 0x7f) << "control byte " << int(u) << " in the log:\n" << text;
    }
    // Every line is one whole log line: a name cannot start a forged one.
    for (const std::string& line : mount_test::lines_with(text, "vil")) {
        EXPECT_EQ(line.rfind("gguf-mount: ", 0), 0u) << line;
    }
    EXPECT_EQ(mount_test::lines_with(text, "serving 'e\\x0a\\x1b[31mvil.txt': companion").size(), 1u) << text;
    EXPECT_EQ(mount_test::lines_with(text, "e\\x0a\\x1b[31mvil-00002-of-00007.gguf: missing shard 2 of 7").size(), 1u)
        << text;
    EXPECT_EQ(mount_test::lines_with(text, "File name too long, the path is").size(), 1u) << text;
    EXPECT_EQ(std::system(("rm -rf '" + src_ + "'/d*").c_str()), 0);
}

}  // namespace
