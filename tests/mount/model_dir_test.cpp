// Model directories through a real mount (gguf/model/catalog.hpp rules, fs/ live updates): nested
// folders, companions, hidden shards, byte-split files and shards, Hugging Face cache links,
// link loops, name clashes, and SOURCE changing while mounted (a download completing, a set
// removed or a shard replaced under an open reader, SIGHUP). Every test mounts its own
// temporary directory; TearDown always unmounts and reaps the daemon.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>

#include <gtest/gtest.h>

#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using gguf_test::TempDir;
using mount_test::AlignedBuffer;
using mount_test::ChunkTally;
using mount_test::copy_kvzoo;
using mount_test::exists;
using mount_test::Fd;
using mount_test::find_mount;
using mount_test::kLiveUpdateLimit;
using mount_test::kvzoo_shard;
using mount_test::lines_with;
using mount_test::list_dir;
using mount_test::read_in_chunks;
using mount_test::time_until;

constexpr const char* kKvzooMerged = mount_test::kKvzooMergedSha256;
constexpr const char* kTinyLlama = "ea9f0d0bcebbc5cc8b4d9cb7f219503d31bd31f873af199d14c2b1c0a2ea4c27";
constexpr const char* kTinyLlamaMerged = "3a7d0b4b3ba2417ad2b31050616fb5caef8221715a369463fb6b3cf668a56914";

/// Real mounts of a model directory ROOT/src on ROOT/mnt (mount_fixture.hpp).
class ModelDirTest : public mount_test::MountFixture {
protected:
    void mkdir_p(const std::string& rel) { ASSERT_EQ(::mkdir((src_ + "/" + rel).c_str(), 0755), 0) << rel; }

    /// Splits tiny-llama with our own `gguf-mount split --split-max-tensors 10` into `prefix`.
    void split_tiny_llama(const std::string& prefix) {
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "split", "--split-max-tensors", "10", "-q",
                                 fixture("tiny-llama/tiny-llama.gguf"), prefix});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }
};

// ---- directory rules ---------------------------------------------------------------------------

// Issue 14.3: 16 levels of two links each to the next level (2^16 paths) used to keep the
// daemon walking for seconds and end in EMFILE; each directory is now walked once.
TEST_F(ModelDirTest, SymlinkFanOutWalksEachDirectoryOnce) {
    const std::string src = gguf_test::make_link_fan_out(root_, 16);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(mount({}, src));
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "[ measured ] 16-level link fan-out mounted in " << ms << " ms\n";
    // A loose bound, several times what a sanitizer build on a busy 2-core machine takes
    // (bench/README.md): the walk of each directory once is checked by the 16 "again" lines below.
    EXPECT_LT(ms, 5000);
    std::string leaf = mnt_;
    for (int i = 0; i < 16; ++i) leaf += "/a";
    EXPECT_EQ(gguf_test::read_file(leaf + "/leaf.txt"), "leaf");
    EXPECT_FALSE(exists(mnt_ + "/b"));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(lines_with(log(), "again (another link to it)").size(), 16u) << log();
}

// Issue 14.7: inotify watches followed the directory that was moved away, not the path: after
// `mv SOURCE/sub away; mv new SOURCE/sub` new files in SOURCE/sub waited for the 1 s poll, and
// writes in `away` still caused rescans. Watches are now dropped when their directory moves and
// re-armed by path.
TEST_F(ModelDirTest, DirectorySwappedUnderItsPathIsWatchedAtItsNewInode) {
    ASSERT_EQ(::mkdir((src_ + "/sub").c_str(), 0755), 0);
    gguf_test::write_file(src_ + "/sub/old.txt", "old");
    ASSERT_TRUE(mount({"-v"}));
    const std::string away = root_ + "/away", fresh = root_ + "/new";
    ASSERT_EQ(::rename((src_ + "/sub").c_str(), away.c_str()), 0);
    ASSERT_EQ(::mkdir(fresh.c_str(), 0755), 0);
    ASSERT_EQ(::rename(fresh.c_str(), (src_ + "/sub").c_str()), 0);
    ASSERT_TRUE(time_until([&] { return !exists(mnt_ + "/sub/old.txt"); }, kLiveUpdateLimit));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the swap's rescan is done

    // Three new files, each seen within 0.3 s (the poll alone takes up to 1 s: three lucky
    // polls in a row would be needed to pass without the watch).
    for (int i = 0; i < 3; ++i) {
        const std::string name = "new" + std::to_string(i) + ".txt";
        gguf_test::write_file(src_ + "/sub/" + name, "new");
        auto seen = time_until([&] { return exists(mnt_ + "/sub/" + name); }, std::chrono::milliseconds(2000));
        ASSERT_TRUE(seen) << log();
        std::cout << "[ measured ] " << name << " in the swapped-in SOURCE/sub seen after " << seen->count()
                  << " ms\n";
        EXPECT_LT(seen->count(), 300) << name;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    // Writes in the directory that left SOURCE trigger no rescan.
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    const size_t rescans = lines_with(log(), "rescanned (").size();
    for (int i = 0; i < 5; ++i) {
        gguf_test::write_file(away + "/gone" + std::to_string(i) + ".txt", "x");
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    EXPECT_EQ(lines_with(log(), "rescanned (").size(), rescans) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

// Issue 14.4: an open directory handle pinned the whole snapshot it was opened in, so shards
// deleted from SOURCE kept their disk space (open descriptors in the daemon) until it closed.
TEST_F(ModelDirTest, OpenDirectoryHandleDoesNotKeepDeletedShardsOpen) {
    copy_kvzoo(src_);
    ASSERT_TRUE(mount());
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), kKvzooMerged);
    DIR* dir = ::opendir(mnt_.c_str());
    ASSERT_NE(dir, nullptr);
    ASSERT_NE(::readdir(dir), nullptr);  // the handle is open and in use
    for (int i = 1; i <= 7; ++i) ASSERT_EQ(::unlink((src_ + "/" + kvzoo_shard(i)).c_str()), 0);
    ASSERT_TRUE(time_until([&] { return !exists(mnt_ + "/kvzoo.gguf"); }, kLiveUpdateLimit));
    auto deleted = [&] {
        int n = 0;
        const std::string fds = "/proc/" + std::to_string(daemon_.pid()) + "/fd";
        for (const std::string& fd : list_dir(fds)) {
            char target[4096];
            ssize_t len = ::readlink((fds + "/" + fd).c_str(), target, sizeof target - 1);
            if (len > 0 && std::string(target, static_cast<size_t>(len)).find("(deleted)") != std::string::npos) ++n;
        }
        return n;
    };
    auto none = time_until([&] { return deleted() == 0; }, std::chrono::milliseconds(1000));
    EXPECT_TRUE(none) << deleted() << " deleted shard(s) still open in the daemon while a directory handle is open";
    // The handle still lists what it was opened with.
    std::vector<std::string> names;
    while (dirent* e = ::readdir(dir)) names.push_back(e->d_name);
    ::closedir(dir);
    EXPECT_NE(std::find(names.begin(), names.end(), "kvzoo.gguf"), names.end());
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(ModelDirTest, NestedFoldersMirrorTheSourceTree) {
    mkdir_p("Q4_K_M");
    mkdir_p("Q8_0");
    mkdir_p("Q8_0/deeper");
    copy_kvzoo(src_ + "/Q4_K_M");
    split_tiny_llama(src_ + "/Q8_0/tiny-llama");
    copy_kvzoo(src_ + "/Q8_0/deeper");
    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_), (std::vector<std::string>{"Q4_K_M", "Q8_0"}));
    EXPECT_EQ(list_dir(mnt_ + "/Q4_K_M"), std::vector<std::string>{"kvzoo.gguf"});
    EXPECT_EQ(list_dir(mnt_ + "/Q8_0"), (std::vector<std::string>{"deeper", "tiny-llama.gguf"}));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/Q4_K_M/kvzoo.gguf"), kKvzooMerged);
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/Q8_0/tiny-llama.gguf"), kTinyLlamaMerged);
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/Q8_0/deeper/kvzoo.gguf"), kKvzooMerged);
    struct stat st {};
    ASSERT_EQ(::stat((mnt_ + "/Q8_0").c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0555u);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(ModelDirTest, CompanionFilesPassThroughReadOnlyWithTheirBytesAndModes) {
    copy_kvzoo(src_);
    gguf_test::write_file(src_ + "/README.md", "# kvzoo\nA model card.\n");
    gguf_test::write_file(src_ + "/config.json", "{\"architectures\": [\"Kvzoo\"]}\n");
    gguf_test::write_file(src_ + "/LICENSE", "Apache-2.0\n");
    gguf_test::write_file(src_ + "/empty.txt", "");
    gguf_test::copy_file(fixture("tiny-llama/tiny-llama.gguf"), src_ + "/mmproj-tiny-f32.gguf");
    gguf_test::copy_file(fixture("tiny-llama/tiny-llama.gguf"), src_ + "/unsplit.gguf");
    ASSERT_EQ(::chmod((src_ + "/LICENSE").c_str(), 0640), 0);
    ASSERT_EQ(::chmod((src_ + "/config.json").c_str(), 0777), 0);
    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_), (std::vector<std::string>{"LICENSE", "README.md", "config.json", "empty.txt",
                                                        "kvzoo.gguf", "mmproj-tiny-f32.gguf", "unsplit.gguf"}));
    for (const char* name : {"README.md", "config.json", "LICENSE", "empty.txt", "mmproj-tiny-f32.gguf", "unsplit.gguf"}) {
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + name), gguf_test::sha256_file(src_ + "/" + name)) << name;
    }
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/unsplit.gguf"), kTinyLlama);
    struct stat st {};
    ASSERT_EQ(::stat((mnt_ + "/LICENSE").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0440u);  // the source's read bits only
    ASSERT_EQ(::stat((mnt_ + "/config.json").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0444u);  // never write or execute bits
    EXPECT_EQ(st.st_size, 29);
    errno = 0;
    EXPECT_EQ(::open((mnt_ + "/README.md").c_str(), O_WRONLY), -1);
    EXPECT_EQ(errno, EROFS);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(ModelDirTest, ShardsAreHiddenUnlessShowShards) {
    copy_kvzoo(src_);
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"), {src_ + "/t.gguf.part1of2", src_ + "/t.gguf.part2of2"});
    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_), (std::vector<std::string>{"kvzoo.gguf", "t.gguf"}));
    EXPECT_FALSE(exists(mnt_ + "/" + kvzoo_shard(1)));
    EXPECT_EQ(unmount_and_wait(), 0) << log();

    ASSERT_TRUE(mount({"--show-shards"}));
    auto names = list_dir(mnt_);
    EXPECT_EQ(names.size(), 11u);
    for (int i = 1; i <= 7; ++i) {
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + kvzoo_shard(i)), gguf_test::sha256_file(src_ + "/" + kvzoo_shard(i)));
    }
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/t.gguf.part2of2"), gguf_test::sha256_file(src_ + "/t.gguf.part2of2"));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), kKvzooMerged);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(ModelDirTest, ByteSplitPartsInBothNamingStylesServeTheOriginal) {
    // Plain byte cuts of the fixture, as `split -n` or a web uploader would make them.
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"),
                        {src_ + "/letters.gguf-split-a", src_ + "/letters.gguf-split-b", src_ + "/letters.gguf-split-c"});
    std::vector<std::string> parts;
    for (int i = 1; i <= 12; ++i) parts.push_back(src_ + "/numbered.gguf.part" + std::to_string(i) + "of12");
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"), parts);
    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_), (std::vector<std::string>{"letters.gguf", "numbered.gguf"}));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/letters.gguf"), kTinyLlama);
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/numbered.gguf"), kTinyLlama);
    // Reads straddling piece boundaries, through the daemon (O_DIRECT).
    const std::string whole = gguf_test::read_file(fixture("tiny-llama/tiny-llama.gguf"));
    Fd fd{::open((mnt_ + "/numbered.gguf").c_str(), O_RDONLY | O_DIRECT)};
    ASSERT_GE(fd.fd, 0) << std::strerror(errno);
    AlignedBuffer buf(3 * 4096);
    const size_t piece = whole.size() / 12;
    for (size_t k = 1; k < 12; ++k) {
        off_t off = static_cast<off_t>((k * piece) & ~size_t{4095});
        ssize_t n = ::pread(fd.fd, buf.get(), 3 * 4096, off);
        ASSERT_GT(n, 0) << std::strerror(errno);
        ASSERT_EQ(std::memcmp(buf.get(), whole.data() + off, static_cast<size_t>(n)), 0) << "offset " << off;
    }
    fd.close();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(ModelDirTest, ByteSplitShardsOfASplitSetAreMerged) {
    TempDir shards;
    split_tiny_llama(shards / "m");
    // Shard 1 in two part-of pieces, shard 2 plain, shard 3 in letter pieces.
    gguf_test::cut_file(shards / "m-00001-of-00003.gguf",
                        {src_ + "/m-00001-of-00003.gguf.part1of2", src_ + "/m-00001-of-00003.gguf.part2of2"});
    gguf_test::copy_file(shards / "m-00002-of-00003.gguf", src_ + "/m-00002-of-00003.gguf");
    gguf_test::cut_file(shards / "m-00003-of-00003.gguf",
                        {src_ + "/m-00003-of-00003.gguf-split-a", src_ + "/m-00003-of-00003.gguf-split-b"});
    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_), std::vector<std::string>{"m.gguf"});
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/m.gguf"), kTinyLlamaMerged);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

// Hugging Face cache layout, mounted at the snapshot folder: every name is a link that points
// outside SOURCE, to a content-addressed blob.
TEST_F(ModelDirTest, HuggingFaceCacheSnapshotFolderAsSource) {
    const std::string repo = root_ + "/models--org--kvzoo";
    const std::string snap = repo + "/snapshots/0123abcd";
    for (const std::string& d : {repo, repo + "/blobs", repo + "/refs", repo + "/snapshots", snap, snap + "/Q4_K_M"}) {
        ASSERT_EQ(::mkdir(d.c_str(), 0755), 0) << d;
    }
    for (int i = 1; i <= 7; ++i) {
        const std::string blob = gguf_test::sha256_file(fixture("kvzoo/t7/" + kvzoo_shard(i)));
        gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(i)), repo + "/blobs/" + blob);
        ASSERT_EQ(::symlink(("../../../blobs/" + blob).c_str(), (snap + "/Q4_K_M/" + kvzoo_shard(i)).c_str()), 0);
        ASSERT_EQ(::chmod((repo + "/blobs/" + blob).c_str(), i == 3 ? 0640 : 0644), 0);
    }
    gguf_test::write_file(repo + "/blobs/aaaa", "model card");
    ASSERT_EQ(::symlink("../../blobs/aaaa", (snap + "/README.md").c_str()), 0);
    gguf_test::write_file(repo + "/refs/main", "0123abcd");

    ASSERT_TRUE(mount({}, snap));
    EXPECT_EQ(list_dir(mnt_), (std::vector<std::string>{"Q4_K_M", "README.md"}));
    EXPECT_EQ(list_dir(mnt_ + "/Q4_K_M"), std::vector<std::string>{"kvzoo.gguf"});
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/Q4_K_M/kvzoo.gguf"), kKvzooMerged);
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/README.md"), "model card");
    struct stat st {};
    ASSERT_EQ(::stat((mnt_ + "/Q4_K_M/kvzoo.gguf").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0440u);  // the blob of shard 3 is 0640: never more readable
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_TRUE(lines_with(log(), "error").empty()) << log();
}

// Nothing changes inside SOURCE when a link target outside it appears or grows (no inotify
// event there): the 1 s stat poll of every path the scan looked at must notice it.
TEST_F(ModelDirTest, LinkTargetArrivingOutsideSourceIsNoticedByThePoll) {
    const std::string blobs = root_ + "/blobs";
    ASSERT_EQ(::mkdir(blobs.c_str(), 0755), 0);
    for (int i = 1; i <= 7; ++i) {
        if (i != 7) gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(i)), blobs + "/b" + std::to_string(i));
        ASSERT_EQ(::symlink((blobs + "/b" + std::to_string(i)).c_str(), (src_ + "/" + kvzoo_shard(i)).c_str()), 0);
    }
    ASSERT_TRUE(mount());
    EXPECT_TRUE(list_dir(mnt_).empty());
    // The blob arrives complete under a temporary name and is renamed (as Hugging Face's
    // downloader does), outside SOURCE.
    gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(7)), blobs + "/b7.incomplete");
    ASSERT_EQ(::rename((blobs + "/b7.incomplete").c_str(), (blobs + "/b7").c_str()), 0);
    auto took = time_until([&] { return exists(mnt_ + "/kvzoo.gguf"); });
    ASSERT_TRUE(took) << log();
    std::cout << "[ measured ] set completed outside SOURCE (poll only) appeared after " << took->count() << " ms\n";
    EXPECT_LE(*took, kLiveUpdateLimit);
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), kKvzooMerged);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(ModelDirTest, LinkLoopIsReportedOnceAndNotFollowed) {
    mkdir_p("a");
    mkdir_p("a/b");
    copy_kvzoo(src_ + "/a/b");
    ASSERT_EQ(::symlink("../..", (src_ + "/a/b/up").c_str()), 0);          // back to SOURCE
    ASSERT_EQ(::symlink("loop2", (src_ + "/loop1").c_str()), 0);         // a chain that never ends
    ASSERT_EQ(::symlink("loop1", (src_ + "/loop2").c_str()), 0);
    ASSERT_EQ(::symlink("/nonexistent/blob", (src_ + "/dangling.gguf").c_str()), 0);
    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_), std::vector<std::string>{"a"});
    EXPECT_EQ(list_dir(mnt_ + "/a/b"), std::vector<std::string>{"kvzoo.gguf"});
    EXPECT_FALSE(exists(mnt_ + "/a/b/up"));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/a/b/kvzoo.gguf"), kKvzooMerged);
    // Several poll periods: each problem is still logged only once.
    std::this_thread::sleep_for(std::chrono::milliseconds(2200));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    auto loop = lines_with(log(), "a/b/up: symlink loop");
    EXPECT_EQ(loop.size(), 1u) << log();
    EXPECT_EQ(lines_with(log(), "loop1: symlink loop").size(), 1u) << log();
    EXPECT_EQ(lines_with(log(), "dangling.gguf: dangling symlink").size(), 1u) << log();
}

TEST_F(ModelDirTest, NameClashRealFileWinsAndTheRuleIsLogged) {
    copy_kvzoo(src_);
    gguf_test::write_file(src_ + "/kvzoo.gguf", "a real kvzoo.gguf");
    mkdir_p("two");
    copy_kvzoo(src_ + "/two");
    for (int i = 1; i <= 8; ++i) {
        gguf_test::copy_file(fixture("kvzoo/t7-ntfs/" + kvzoo_shard(i, 8)), src_ + "/two/" + kvzoo_shard(i, 8));
    }
    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_), (std::vector<std::string>{"kvzoo.gguf", "two"}));
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/kvzoo.gguf"), "a real kvzoo.gguf");
    EXPECT_EQ(list_dir(mnt_ + "/two"), std::vector<std::string>{"kvzoo.gguf"});
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/two/kvzoo.gguf"), kKvzooMerged);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    auto real = lines_with(log(), "name clash: a real file kvzoo.gguf exists");
    ASSERT_EQ(real.size(), 1u) << log();
    EXPECT_NE(real[0].find(src_ + "/" + kvzoo_shard(1)), std::string::npos) << real[0];
    auto two = lines_with(log(), "two/" + kvzoo_shard(1, 8) + ": name clash: kvzoo.gguf is already served from " +
                                     src_ + "/two/" + kvzoo_shard(1));
    EXPECT_EQ(two.size(), 1u) << log();
}

// ---- live updates ------------------------------------------------------------------------------

TEST_F(ModelDirTest, DownloadThatCompletesWhileMountedAppearsWithinTwoSeconds) {
    mkdir_p("Q4_K_M");
    copy_kvzoo(src_ + "/Q4_K_M", /*skip=*/7);
    gguf_test::write_file(src_ + "/README.md", "card");
    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_ + "/Q4_K_M"), std::vector<std::string>{});
    // A negative lookup now: the kernel caches the absence, the mount must still show the file.
    EXPECT_FALSE(exists(mnt_ + "/Q4_K_M/kvzoo.gguf"));

    // The last shard arrives the way downloaders write it: under its final name, growing.
    const std::string bytes = gguf_test::read_file(fixture("kvzoo/t7/" + kvzoo_shard(7)));
    const std::string dest = src_ + "/Q4_K_M/" + kvzoo_shard(7);
    {
        std::ofstream out(dest, std::ios::binary);
        for (size_t off = 0; off < bytes.size(); off += 65536) {
            out.write(bytes.data() + off, static_cast<std::streamsize>(std::min<size_t>(65536, bytes.size() - off)));
            out.flush();
            if (off + 65536 >= bytes.size()) break;  // complete now: it may be served any time
            std::this_thread::sleep_for(std::chrono::milliseconds(60));
            EXPECT_FALSE(exists(mnt_ + "/Q4_K_M/kvzoo.gguf")) << "served before the download completed";
        }
    }
    auto took = time_until([&] { return exists(mnt_ + "/Q4_K_M/kvzoo.gguf"); });
    ASSERT_TRUE(took) << "the completed set did not appear within 5 s; log:\n" << log();
    std::cout << "[ measured ] completed set appeared " << took->count() << " ms after the last write\n";
    EXPECT_LE(*took, kLiveUpdateLimit);
    EXPECT_EQ(list_dir(mnt_ + "/Q4_K_M"), std::vector<std::string>{"kvzoo.gguf"});
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/Q4_K_M/kvzoo.gguf"), kKvzooMerged);

    // A brand-new folder with a complete set (inotify must watch new subdirectories).
    mkdir_p("Q8_0");
    copy_kvzoo(src_ + "/Q8_0");
    auto took2 = time_until([&] { return exists(mnt_ + "/Q8_0/kvzoo.gguf"); });
    ASSERT_TRUE(took2) << log();
    std::cout << "[ measured ] set copied into a new folder appeared after " << took2->count() << " ms\n";
    EXPECT_LE(*took2, kLiveUpdateLimit);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(lines_with(log(), "now serving Q4_K_M/kvzoo.gguf").size(), 1u) << log();
}

TEST_F(ModelDirTest, SetRemovedWhileAReaderHoldsItOpenKeepsServingTheRightBytes) {
    copy_kvzoo(src_);
    const std::string whole = gguf_test::read_file(fixture("kvzoo/merged-reference.gguf"));
    ASSERT_TRUE(mount());
    const std::string path = mnt_ + "/kvzoo.gguf";
    Fd fd{::open(path.c_str(), O_RDONLY | O_DIRECT)};  // every read reaches the daemon
    ASSERT_GE(fd.fd, 0) << std::strerror(errno);
    AlignedBuffer buf(65536);
    ASSERT_EQ(::pread(fd.fd, buf.get(), 65536, 0), 65536);
    EXPECT_EQ(std::memcmp(buf.get(), whole.data(), 65536), 0);

    for (int i = 1; i <= 7; ++i) ASSERT_EQ(::unlink((src_ + "/" + kvzoo_shard(i)).c_str()), 0);
    auto gone = time_until([&] { return list_dir(mnt_).empty() && !exists(path); });
    ASSERT_TRUE(gone) << log();
    std::cout << "[ measured ] removed set disappeared after " << gone->count() << " ms\n";
    EXPECT_LE(*gone, kLiveUpdateLimit);

    // The open descriptor still reads the whole file, byte for byte (the daemon holds the
    // deleted shards open).
    ChunkTally all = read_in_chunks(fd.fd, whole, 65536);
    EXPECT_EQ(all.wrong, 0u) << all.first_wrong;
    EXPECT_EQ(all.errors, 0u);
    EXPECT_GT(all.ok, 0u);
    struct stat st {};
    ASSERT_EQ(::fstat(fd.fd, &st), 0) << std::strerror(errno);
    EXPECT_EQ(static_cast<size_t>(st.st_size), whole.size());
    fd.close();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(lines_with(log(), "no longer serving kvzoo.gguf").size(), 1u) << log();
}

// A shard is replaced under an open reader, twice: by a rename (a new file: the reader keeps
// the old bytes) and by a rewrite in place (same inode, same size, other bytes: the reader gets
// EIO for what it has not read yet, never the new bytes). New opens see the new content.
TEST_F(ModelDirTest, ShardReplacedUnderAnOpenFileNeverGivesWrongBytes) {
    copy_kvzoo(src_);
    const std::string old_whole = gguf_test::read_file(fixture("kvzoo/merged-reference.gguf"));
    ASSERT_TRUE(mount());
    const std::string path = mnt_ + "/kvzoo.gguf";
    struct stat before {};
    ASSERT_EQ(::stat(path.c_str(), &before), 0);
    Fd fd{::open(path.c_str(), O_RDONLY | O_DIRECT)};
    ASSERT_GE(fd.fd, 0);

    // New content for shard 5: same header, tensor bytes inverted (still a valid shard).
    const std::string shard5 = src_ + "/" + kvzoo_shard(5);
    std::string bytes = gguf_test::read_file(shard5);
    const size_t data_start = 8192;  // well inside the data section of this shard
    std::string changed = bytes;
    for (size_t i = data_start; i < changed.size(); ++i) changed[i] = static_cast<char>(~changed[i]);

    // 1. Replaced by rename: a new inode at the same name.
    gguf_test::write_file(src_ + "/.tmp-shard5", changed);
    ASSERT_EQ(::rename((src_ + "/.tmp-shard5").c_str(), shard5.c_str()), 0);
    auto replanned = time_until([&] {
        struct stat now {};
        return ::stat(path.c_str(), &now) == 0 && now.st_ino != before.st_ino;
    });
    ASSERT_TRUE(replanned) << "the changed set was not re-planned within 5 s\n" << log();
    std::cout << "[ measured ] replaced shard re-planned after " << replanned->count() << " ms\n";
    EXPECT_LE(*replanned, kLiveUpdateLimit);
    ChunkTally old_reads = read_in_chunks(fd.fd, old_whole, 65536);
    EXPECT_EQ(old_reads.wrong, 0u) << old_reads.first_wrong;
    EXPECT_EQ(old_reads.errors, 0u);
    EXPECT_GT(old_reads.ok, 0u);
    // A new open reads the new content.
    const std::string new_whole = gguf_test::read_file(path);
    EXPECT_EQ(new_whole.size(), old_whole.size());
    EXPECT_NE(new_whole, old_whole);

    // 2. Rewritten in place under a second reader: same inode, same size, other bytes.
    Fd fd2{::open(path.c_str(), O_RDONLY | O_DIRECT)};
    ASSERT_GE(fd2.fd, 0);
    AlignedBuffer buf(4096);
    ASSERT_EQ(::pread(fd2.fd, buf.get(), 4096, 0), 4096);
    {
        Fd w{::open(shard5.c_str(), O_WRONLY)};
        ASSERT_GE(w.fd, 0);
        ASSERT_EQ(::pwrite(w.fd, bytes.data() + data_start, bytes.size() - data_start, static_cast<off_t>(data_start)),
                  static_cast<ssize_t>(bytes.size() - data_start));
    }
    // Every chunk is the content opened or EIO (first_wrong names a chunk with other bytes or
    // another errno).
    ChunkTally t = read_in_chunks(fd2.fd, new_whole, 65536);
    EXPECT_EQ(t.wrong, 0u) << t.first_wrong << ": bytes that are neither the content opened nor an error";
    EXPECT_TRUE(t.first_wrong.empty()) << t.first_wrong;
    EXPECT_GT(t.errors, 0u) << "no read touched the rewritten shard";
    EXPECT_GT(t.ok, 0u) << "reads of the unchanged shards must still succeed";
    // After the rescan, a new open serves the rewritten (= original) bytes again.
    auto back = time_until([&] { return gguf_test::sha256_file(path) == kKvzooMerged; });
    EXPECT_TRUE(back) << log();
    fd.close();
    fd2.close();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_GE(lines_with(log(), "modified in place").size(), 1u) << log();
}

TEST_F(ModelDirTest, SighupRescansInsteadOfUnmounting) {
    copy_kvzoo(src_, /*skip=*/4);
    ASSERT_TRUE(mount());
    EXPECT_TRUE(list_dir(mnt_).empty());
    gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(4)), src_ + "/" + kvzoo_shard(4));
    ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);
    auto took = time_until([&] { return exists(mnt_ + "/kvzoo.gguf"); });
    ASSERT_TRUE(took) << log();
    EXPECT_TRUE(daemon_.running());
    EXPECT_TRUE(find_mount(mnt_));
    for (int i = 0; i < 3; ++i) ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);  // more: still mounted
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(daemon_.running());
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), kKvzooMerged);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_GE(lines_with(log(), "rescan requested (SIGHUP)").size(), 1u) << log();
}

TEST_F(ModelDirTest, InodeNumbersAreStableWhileContentIsTheSame) {
    mkdir_p("d");
    copy_kvzoo(src_ + "/d");
    gguf_test::write_file(src_ + "/a.txt", "a");
    ASSERT_TRUE(mount());
    struct stat s1 {}, d1 {};
    ASSERT_EQ(::stat((mnt_ + "/d/kvzoo.gguf").c_str(), &s1), 0);
    ASSERT_EQ(::stat((mnt_ + "/d").c_str(), &d1), 0);
    gguf_test::write_file(src_ + "/b.txt", "b");  // a rescan happens
    ASSERT_TRUE(time_until([&] { return exists(mnt_ + "/b.txt"); }));
    struct stat s2 {}, d2 {};
    ASSERT_EQ(::stat((mnt_ + "/d/kvzoo.gguf").c_str(), &s2), 0);
    ASSERT_EQ(::stat((mnt_ + "/d").c_str(), &d2), 0);
    EXPECT_EQ(s1.st_ino, s2.st_ino);
    EXPECT_EQ(d1.st_ino, d2.st_ino);
    // Changed content: a new number.
    ::unlink((src_ + "/a.txt").c_str());
    gguf_test::write_file(src_ + "/a.txt", "aa");
    struct stat a {};
    ASSERT_TRUE(time_until([&] { return ::stat((mnt_ + "/a.txt").c_str(), &a) == 0 && a.st_size == 2; }));
    EXPECT_NE(a.st_ino, s1.st_ino);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

}  // namespace
