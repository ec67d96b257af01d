// The inode table of fs/filesystem.hpp, without a mount: inode numbering, lookup, attributes,
// directory listing, and the warning rate limiter.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

#include <gtest/gtest.h>

#include "fs/filesystem.hpp"
#include "gguf/split_set.hpp"
#include "gguf/virtual_file.hpp"
#include "support/support.hpp"

namespace {

using gguf_mount::fs::FileNode;
using gguf_mount::fs::Filesystem;
using gguf_mount::fs::kRootInode;
using gguf_mount::fs::ServedFile;
using gguf_mount::fs::WarningLimiter;

std::shared_ptr<const gguf::VirtualFile> merged(const std::string& first_shard) {
    return std::make_shared<const gguf::VirtualFile>(gguf::VirtualFile::merged(gguf::SplitSet::open(first_shard)));
}

struct stat dir_stat() {
    struct stat st {};
    st.st_uid = 1234;
    st.st_gid = 5678;
    st.st_mtim.tv_sec = 1;
    return st;
}

TEST(Filesystem, InodesFollowSortedNamesWhateverTheInputOrder) {
    auto kv = merged(gguf_test::fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf"));
    auto nt = merged(gguf_test::fixture("notensors/t7/notensors-00001-of-00001.gguf"));
    Filesystem a({{"zeta.gguf", kv}, {"alpha.gguf", nt}}, dir_stat());
    Filesystem b({{"alpha.gguf", nt}, {"zeta.gguf", kv}}, dir_stat());
    for (const Filesystem* fs : {&a, &b}) {
        ASSERT_EQ(fs->files().size(), 2u);
        EXPECT_EQ(fs->files()[0].name, "alpha.gguf");
        EXPECT_EQ(fs->files()[0].ino, 2u);
        EXPECT_EQ(fs->files()[1].name, "zeta.gguf");
        EXPECT_EQ(fs->files()[1].ino, 3u);
        EXPECT_EQ(fs->total_bytes(), kv->size() + nt->size());
    }
}

TEST(Filesystem, LookupAndFile) {
    auto kv = merged(gguf_test::fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf"));
    Filesystem fs({{"kvzoo.gguf", kv}}, dir_stat());
    const FileNode* n = fs.lookup(kRootInode, "kvzoo.gguf");
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->ino, 2u);
    EXPECT_EQ(fs.file(2), n);
    EXPECT_EQ(fs.lookup(kRootInode, "kvzoo"), nullptr);
    EXPECT_EQ(fs.lookup(kRootInode, "kvzoo.gguf2"), nullptr);
    EXPECT_EQ(fs.lookup(kRootInode, ""), nullptr);
    EXPECT_EQ(fs.lookup(2, "kvzoo.gguf"), nullptr);  // a file is no directory
    EXPECT_EQ(fs.lookup(99, "kvzoo.gguf"), nullptr);
    EXPECT_EQ(fs.file(kRootInode), nullptr);
    EXPECT_EQ(fs.file(0), nullptr);
    EXPECT_EQ(fs.file(3), nullptr);
    EXPECT_EQ(fs.file(UINT64_MAX), nullptr);
}

TEST(Filesystem, AttributesComeFromTheShards) {
    gguf_test::TempDir dir;
    for (int i = 1; i <= 7; ++i) {
        std::string n = "kvzoo-0000" + std::to_string(i) + "-of-00007.gguf";
        gguf_test::copy_file(gguf_test::fixture("kvzoo/t7/" + n), dir / n);
        ASSERT_EQ(::chmod((dir / n).c_str(), 0644), 0);
    }
    // One shard readable by its owner only: the merged file must not be more readable.
    ASSERT_EQ(::chmod((dir / "kvzoo-00004-of-00007.gguf").c_str(), 0640), 0);
    // One shard newer than the others: its mtime is the file's mtime.
    struct timespec times[2] = {{2000000000, 5}, {2000000000, 5}};
    ASSERT_EQ(::utimensat(AT_FDCWD, (dir / "kvzoo-00006-of-00007.gguf").c_str(), times, 0), 0);

    auto kv = merged(dir / "kvzoo-00001-of-00007.gguf");
    Filesystem fs({{"kvzoo.gguf", kv}}, dir_stat());
    struct stat st {};
    ASSERT_EQ(fs.getattr(2, &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0440u);  // read bits only, the AND over the shards
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), kv->size());
    EXPECT_EQ(static_cast<uint64_t>(st.st_blocks), (kv->size() + 511) / 512);
    EXPECT_EQ(st.st_nlink, 1u);
    EXPECT_EQ(st.st_ino, 2u);
    EXPECT_EQ(st.st_uid, ::getuid());
    EXPECT_EQ(st.st_mtim.tv_sec, 2000000000);
    EXPECT_EQ(st.st_mtim.tv_nsec, 5);

    struct stat root {};
    ASSERT_EQ(fs.getattr(kRootInode, &root), 0);
    EXPECT_TRUE(S_ISDIR(root.st_mode));
    EXPECT_EQ(root.st_mode & 07777, 0555u);
    EXPECT_EQ(root.st_uid, 1234u);
    EXPECT_EQ(root.st_gid, 5678u);
    EXPECT_EQ(root.st_mtim.tv_sec, 2000000000);  // newest served file
    EXPECT_EQ(fs.getattr(3, &root), -ENOENT);
}

TEST(Filesystem, WriteBitsAreNeverReported) {
    gguf_test::TempDir dir;
    gguf_test::copy_file(gguf_test::fixture("notensors/t7/notensors-00001-of-00001.gguf"),
                         dir / "notensors-00001-of-00001.gguf");
    ASSERT_EQ(::chmod((dir / "notensors-00001-of-00001.gguf").c_str(), 0777), 0);
    Filesystem fs({{"n.gguf", merged(dir / "notensors-00001-of-00001.gguf")}}, dir_stat());
    EXPECT_EQ(fs.files()[0].attr.st_mode & 07777, 0444u);
}

TEST(Filesystem, DirectoryEntries) {
    auto nt = merged(gguf_test::fixture("notensors/t7/notensors-00001-of-00001.gguf"));
    Filesystem fs({{"b.gguf", nt}, {"a.gguf", nt}}, dir_stat());
    ASSERT_EQ(fs.dir_size(), 4u);
    EXPECT_STREQ(fs.dir_entry(0).name, ".");
    EXPECT_EQ(fs.dir_entry(0).ino, kRootInode);
    EXPECT_EQ(fs.dir_entry(0).type, static_cast<mode_t>(S_IFDIR));
    EXPECT_STREQ(fs.dir_entry(1).name, "..");
    EXPECT_STREQ(fs.dir_entry(2).name, "a.gguf");
    EXPECT_EQ(fs.dir_entry(2).ino, 2u);
    EXPECT_EQ(fs.dir_entry(2).type, static_cast<mode_t>(S_IFREG));
    EXPECT_STREQ(fs.dir_entry(3).name, "b.gguf");
    EXPECT_EQ(fs.dir_entry(3).ino, 3u);
}

TEST(Filesystem, EmptyTableHasOnlyTheRoot) {
    struct stat d = dir_stat();
    Filesystem fs({}, d);
    EXPECT_EQ(fs.dir_size(), 2u);
    EXPECT_EQ(fs.root_attr().st_mtim.tv_sec, 1);
    EXPECT_EQ(fs.total_bytes(), 0u);
}

TEST(Filesystem, RejectsBadNames) {
    auto nt = merged(gguf_test::fixture("notensors/t7/notensors-00001-of-00001.gguf"));
    for (std::string bad : {"", ".", "..", "a/b.gguf"}) {
        EXPECT_THROW(Filesystem({{bad, nt}}, dir_stat()), std::invalid_argument) << bad;
    }
    EXPECT_THROW(Filesystem({{"x.gguf", nt}, {"x.gguf", nt}}, dir_stat()), std::invalid_argument);
    EXPECT_THROW(Filesystem({{"x.gguf", nullptr}}, dir_stat()), std::invalid_argument);
}

TEST(WarningLimiter, BurstThenSuppressedThenCountedInTheNextWindow) {
    using namespace std::chrono;
    WarningLimiter lim(3, seconds(10));
    auto t0 = WarningLimiter::Clock::time_point{} + hours(1);
    uint64_t suppressed = 99;
    for (int i = 0; i < 3; ++i) {
        EXPECT_TRUE(lim.admit(t0 + seconds(i), &suppressed));
        EXPECT_EQ(suppressed, 0u);
    }
    for (int i = 0; i < 7; ++i) EXPECT_FALSE(lim.admit(t0 + seconds(5), &suppressed));
    EXPECT_TRUE(lim.admit(t0 + seconds(10), &suppressed));  // new window
    EXPECT_EQ(suppressed, 7u);
    EXPECT_TRUE(lim.admit(t0 + seconds(11), &suppressed));
    EXPECT_EQ(suppressed, 0u);
    EXPECT_TRUE(lim.admit(t0 + seconds(12), &suppressed));
    EXPECT_FALSE(lim.admit(t0 + seconds(13), &suppressed));
    EXPECT_FALSE(lim.admit(t0 + seconds(14), &suppressed));
    EXPECT_EQ(lim.take_suppressed(), 2u);
    EXPECT_EQ(lim.take_suppressed(), 0u);
}

}  // namespace
