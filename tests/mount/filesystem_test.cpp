// The inode tree of fs/filesystem.hpp and the live file system of fs/live.hpp, without a mount:
// inode numbering and stability, lookup, attributes, directory trees, snapshot diffs, problem
// reporting, lookup counts, and the warning rate limiter.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <new>
#include <cerrno>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "fs/filesystem.hpp"
#include "fs/live.hpp"
#include "fs/watcher.hpp"
#include "gguf/model/catalog.hpp"
#include "gguf/error.hpp"
#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using gguf_mount::fs::diff_snapshots;
using gguf_mount::fs::InodeTable;
using gguf_mount::fs::kRootInode;
using gguf_mount::fs::LiveFilesystem;
using gguf_mount::fs::Node;
using gguf_mount::fs::Snapshot;
using gguf_mount::fs::WarningLimiter;
using gguf_test::fixture;
using gguf_test::TempDir;
using mount_test::copy_kvzoo;
using mount_test::kvzoo_shard;

std::shared_ptr<const Snapshot> snapshot_of(const std::string& source, InodeTable& inodes,
                                            const Snapshot* previous = nullptr) {
    std::vector<std::string> errors;
    auto snap = Snapshot::build(gguf::build_catalog(source), inodes, previous, &errors);
    EXPECT_TRUE(errors.empty()) << errors.front();
    return snap;
}

TEST(Snapshot, TreeWithInodesInPathOrder) {
    TempDir src;
    ASSERT_EQ(::chmod(src.path().c_str(), 0755), 0);  // mkdtemp made it 0700
    ASSERT_EQ(::mkdir((src / "Q4_K_M").c_str(), 0755), 0);
    copy_kvzoo(src / "Q4_K_M");
    gguf_test::write_file(src / "README.md", "hi");
    InodeTable inodes;
    auto snap = snapshot_of(src.path(), inodes);
    // /, /Q4_K_M (2), /Q4_K_M/kvzoo.gguf (3), /README.md (4)
    const Node* dir = snap->lookup(kRootInode, "Q4_K_M");
    ASSERT_NE(dir, nullptr);
    EXPECT_EQ(dir->ino, 2u);
    EXPECT_TRUE(dir->directory);
    const Node* merged = snap->lookup(2, "kvzoo.gguf");
    ASSERT_NE(merged, nullptr);
    EXPECT_EQ(merged->ino, 3u);
    EXPECT_EQ(merged->parent, 2u);
    EXPECT_EQ(merged->path, "Q4_K_M/kvzoo.gguf");
    EXPECT_EQ(static_cast<uint64_t>(merged->attr.st_size), merged->file->size());
    EXPECT_EQ(snap->lookup(kRootInode, "README.md")->ino, 4u);
    EXPECT_EQ(snap->node(3), merged);
    EXPECT_EQ(snap->find("Q4_K_M/kvzoo.gguf"), merged);
    // Lookups that must fail.
    EXPECT_EQ(snap->lookup(kRootInode, "kvzoo.gguf"), nullptr);
    EXPECT_EQ(snap->lookup(3, "x"), nullptr);   // a file is no directory
    EXPECT_EQ(snap->lookup(99, "x"), nullptr);  // unknown parent
    EXPECT_EQ(snap->node(99), nullptr);
    // Attributes.
    EXPECT_TRUE(S_ISDIR(snap->root().attr.st_mode));
    EXPECT_EQ(snap->root().attr.st_mode & 07777, 0555u);
    EXPECT_EQ(snap->root().attr.st_nlink, 3u);  // ., .., Q4_K_M
    EXPECT_EQ(snap->root().children.size(), 2u);
    EXPECT_EQ(merged->attr.st_mode & 07777, 0444u);
    EXPECT_EQ(merged->attr.st_nlink, 1u);
    EXPECT_EQ(static_cast<uint64_t>(merged->attr.st_blocks), (merged->file->size() + 511) / 512);
    EXPECT_EQ(snap->file_count(), 2u);
    EXPECT_EQ(snap->total_bytes(), merged->file->size() + 2);
}

TEST(Snapshot, SamePathSameContentKeepsItsInodeAndItsOpenFile) {
    TempDir src;
    copy_kvzoo(src.path());
    gguf_test::write_file(src / "a.txt", "a");
    InodeTable inodes;
    auto first = snapshot_of(src.path(), inodes);
    gguf_test::write_file(src / "b.txt", "b");  // something else changes
    auto second = snapshot_of(src.path(), inodes, first.get());
    const Node* a1 = first->find("kvzoo.gguf");
    const Node* a2 = second->find("kvzoo.gguf");
    ASSERT_TRUE(a1 && a2);
    EXPECT_EQ(a1->ino, a2->ino);
    EXPECT_EQ(a1->file.get(), a2->file.get());  // the same open VirtualFile, not reopened
    auto d = diff_snapshots(*first, *second);
    EXPECT_EQ(d.added, std::vector<std::string>{"b.txt"});
    EXPECT_TRUE(d.removed.empty());
    ASSERT_EQ(d.entries.size(), 1u);
    EXPECT_EQ(d.entries[0].parent, kRootInode);
    EXPECT_EQ(d.entries[0].name, "b.txt");
}

TEST(Snapshot, ChangedContentGetsANewInodeNeverAnOldOne) {
    TempDir src;
    gguf_test::write_file(src / "a.txt", "one");
    InodeTable inodes;
    auto s1 = snapshot_of(src.path(), inodes);
    uint64_t ino1 = s1->find("a.txt")->ino;
    auto held = s1->find("a.txt")->file->acquire();  // as a FUSE open holds it
    ::unlink((src / "a.txt").c_str());
    gguf_test::write_file(src / "a.txt", "two!");
    auto s2 = snapshot_of(src.path(), inodes, s1.get());
    uint64_t ino2 = s2->find("a.txt")->ino;
    EXPECT_NE(ino1, ino2);
    auto d = diff_snapshots(*s1, *s2);
    EXPECT_EQ(d.replaced, std::vector<std::string>{"a.txt"});
    ASSERT_EQ(d.entries.size(), 1u);
    EXPECT_EQ(d.entries[0].name, "a.txt");
    // Removed, then a third content: a third number.
    ::unlink((src / "a.txt").c_str());
    auto s3 = snapshot_of(src.path(), inodes, s2.get());
    EXPECT_EQ(s3->find("a.txt"), nullptr);
    EXPECT_EQ(diff_snapshots(*s2, *s3).removed, std::vector<std::string>{"a.txt"});
    gguf_test::write_file(src / "a.txt", "three");
    auto s4 = snapshot_of(src.path(), inodes, s3.get());
    EXPECT_NE(s4->find("a.txt")->ino, ino1);
    EXPECT_NE(s4->find("a.txt")->ino, ino2);
    // A file opened before the change still serves its own bytes; the old snapshot, whose
    // companion was not open, no longer opens it (the file it planned is gone).
    std::string buf(3, '\0');
    EXPECT_EQ(held->read(0, 3, buf.data()), 3);
    EXPECT_EQ(buf, "one");
    held.reset();
    EXPECT_THROW(s1->find("a.txt")->file->acquire(), gguf::Error);
}

TEST(Snapshot, AttributeChangeWithoutNewContentIsAnAttributeChange) {
    TempDir src;
    gguf_test::write_file(src / "a.txt", "one");
    InodeTable inodes;
    auto s1 = snapshot_of(src.path(), inodes);
    ASSERT_EQ(::chmod((src / "a.txt").c_str(), 0600), 0);
    auto s2 = snapshot_of(src.path(), inodes, s1.get());
    EXPECT_EQ(s1->find("a.txt")->ino, s2->find("a.txt")->ino);
    EXPECT_EQ(s2->find("a.txt")->attr.st_mode & 07777, 0400u);
    auto d = diff_snapshots(*s1, *s2);
    EXPECT_TRUE(d.entries.empty());
    EXPECT_EQ(d.attributes, std::vector<uint64_t>{s2->find("a.txt")->ino});
}

TEST(Snapshot, EmptyCatalogIsAnEmptyRoot) {
    gguf::Catalog c;
    InodeTable inodes;
    auto snap = Snapshot::build(c, inodes, nullptr, nullptr);
    EXPECT_EQ(snap->nodes().size(), 1u);
    EXPECT_EQ(snap->root().ino, kRootInode);
    EXPECT_EQ(snap->file_count(), 0u);
    EXPECT_EQ(snap->root().attr.st_mode & 07777, 0555u);
}

TEST(InodeTable, NumbersAreStableAndNeverReused) {
    InodeTable t;
    EXPECT_EQ(t.assign("", "x"), kRootInode);
    EXPECT_EQ(t.assign("a", "1"), 2u);
    EXPECT_EQ(t.assign("b", "1"), 3u);
    EXPECT_EQ(t.assign("a", "1"), 2u);
    EXPECT_EQ(t.assign("a", "2"), 4u);
    EXPECT_EQ(t.assign("a", "1"), 5u);  // back to old content: still a new number
    EXPECT_EQ(t.assign("b", "1"), 3u);
}

// Issue 14.4: the table kept every name ever seen. Names no longer served are now forgotten;
// a name that comes back still gets a number never used before.
TEST(InodeTable, NamesNoLongerServedAreForgottenAndTheirNumbersNeverReused) {
    TempDir src;
    InodeTable inodes;
    for (int i = 0; i < 2000; ++i) gguf_test::write_file(src / ("f" + std::to_string(i) + ".txt"), "x");
    auto s1 = snapshot_of(src.path(), inodes);
    EXPECT_EQ(inodes.size(), 2000u);
    const uint64_t old_ino = s1->find("f7.txt")->ino;
    uint64_t highest = 0;
    for (const Node& n : s1->nodes()) highest = std::max(highest, n.ino);
    for (int i = 0; i < 2000; ++i) ::unlink((src / ("f" + std::to_string(i) + ".txt")).c_str());
    gguf_test::write_file(src / "only.txt", "y");
    auto s2 = snapshot_of(src.path(), inodes, s1.get());
    EXPECT_EQ(inodes.size(), 1u);
    gguf_test::write_file(src / "f7.txt", "x");
    auto s3 = snapshot_of(src.path(), inodes, s2.get());
    EXPECT_EQ(inodes.size(), 2u);
    EXPECT_NE(s3->find("f7.txt")->ino, old_ino);
    EXPECT_GT(s3->find("f7.txt")->ino, highest);
    EXPECT_EQ(s3->find("only.txt")->ino, s2->find("only.txt")->ino);
}

TEST(LiveFilesystem, RescanReportsProblemsOnceAndAgainAfterTheyWereFixed) {
    TempDir src;
    copy_kvzoo(src.path(), /*skip=*/7);
    LiveFilesystem live(src.path(), {});
    EXPECT_EQ(live.current()->file_count(), 0u);  // nothing before the first scan
    auto r1 = live.rescan();
    ASSERT_EQ(r1.new_problems.size(), 1u);
    EXPECT_NE(r1.new_problems[0].reason.find("missing shard 7 of 7"), std::string::npos);
    auto r2 = live.rescan();
    EXPECT_TRUE(r2.new_problems.empty());  // same problem: not again
    EXPECT_TRUE(r2.changes.empty());
    // A growing shard 7 (download in progress): one new problem, not one per size.
    const std::string bytes = gguf_test::read_file(fixture("kvzoo/t7/" + kvzoo_shard(7)));
    gguf_test::write_file(src / kvzoo_shard(7), bytes.substr(0, 100000));
    auto r3 = live.rescan();
    ASSERT_EQ(r3.new_problems.size(), 1u);
    gguf_test::write_file(src / kvzoo_shard(7), bytes.substr(0, 200000));
    EXPECT_TRUE(live.rescan().new_problems.empty());
    // Complete: served, and the problem is forgotten.
    gguf_test::write_file(src / kvzoo_shard(7), bytes);
    auto r4 = live.rescan();
    EXPECT_TRUE(r4.new_problems.empty());
    EXPECT_EQ(r4.changes.added, std::vector<std::string>{"kvzoo.gguf"});
    EXPECT_EQ(live.current()->file_count(), 1u);
    // Broken again: reported again.
    ::unlink((src / kvzoo_shard(7)).c_str());
    auto r5 = live.rescan();
    EXPECT_EQ(r5.new_problems.size(), 1u);
    EXPECT_EQ(r5.changes.removed, std::vector<std::string>{"kvzoo.gguf"});
}

TEST(LiveFilesystem, VanishedSourceIsAnEmptyRootAndComesBack) {
    TempDir tmp;
    const std::string src = tmp / "src";
    ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
    gguf_test::write_file(src + "/a.txt", "a");
    LiveFilesystem live(src, {});
    live.rescan();
    EXPECT_EQ(live.current()->file_count(), 1u);
    ASSERT_EQ(::unlink((src + "/a.txt").c_str()), 0);
    ASSERT_EQ(::rmdir(src.c_str()), 0);
    auto r = live.rescan();
    EXPECT_EQ(live.current()->file_count(), 0u);
    ASSERT_EQ(r.new_problems.size(), 1u);
    EXPECT_NE(r.new_problems[0].reason.find("serving an empty directory"), std::string::npos);
    ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
    gguf_test::write_file(src + "/b.txt", "b");
    live.rescan();
    EXPECT_NE(live.current()->find("b.txt"), nullptr);
}

TEST(LiveFilesystem, UnreachableBuilderSourceKeepsWhatItServesUntilItIsGone) {
    // A catalog builder (a remote URL) that fails like a server that is down, then answers 404.
    TempDir tmp;
    const std::string src = tmp / "src";
    ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
    gguf_test::write_file(src + "/a.txt", "a");
    int fail_errno = 0;
    auto live = LiveFilesystem::with_builder("http://127.0.0.1:1/m/", [&] {
        if (fail_errno) throw gguf::Error(gguf::Code::Io, "http://127.0.0.1:1/m/: connection refused", fail_errno);
        return gguf::build_catalog(src);
    });
    live->rescan();
    const auto* a = live->current()->find("a.txt");
    ASSERT_NE(a, nullptr);
    const uint64_t ino = a->ino;
    fail_errno = ECONNREFUSED;
    auto r = live->rescan();
    EXPECT_TRUE(r.changes.empty());
    ASSERT_EQ(r.new_problems.size(), 1u);
    EXPECT_NE(r.new_problems[0].reason.find("connection refused; still serving the last version found"),
              std::string::npos) << r.new_problems[0].reason;
    ASSERT_NE(live->current()->find("a.txt"), nullptr);
    EXPECT_EQ(live->current()->find("a.txt")->ino, ino);
    EXPECT_TRUE(live->rescan().new_problems.empty());  // reported once
    fail_errno = ENOENT;  // 404/410: the source is gone
    live->rescan();
    EXPECT_EQ(live->current()->file_count(), 0u);
    fail_errno = 0;
    live->rescan();
    EXPECT_NE(live->current()->find("a.txt"), nullptr);
}

TEST(Watcher, RevalidateRescansOnItsPeriodWithoutAnyLocalChange) {
    TempDir tmp;
    const std::string src = tmp / "src";
    ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
    std::atomic<int> builds{0};
    auto live = LiveFilesystem::with_builder("http://127.0.0.1:1/m/", [&] {
        ++builds;
        return gguf::build_catalog(src);
    });
    live->rescan();
    gguf_mount::fs::Watcher::Options o;
    o.revalidate = std::chrono::milliseconds(200);
    gguf_mount::fs::Watcher watcher(*live, {}, o);
    watcher.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    EXPECT_TRUE(watcher.stop(std::chrono::seconds(5)));
    EXPECT_GE(watcher.rescans(), 3u);
    EXPECT_LE(watcher.rescans(), 6u);
    // Without the option nothing local changes, so nothing is rebuilt.
    gguf_mount::fs::Watcher idle(*live, {}, gguf_mount::fs::Watcher::Options{});
    idle.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    EXPECT_TRUE(idle.stop(std::chrono::seconds(5)));
    EXPECT_EQ(idle.rescans(), 0u);
}

TEST(Watcher, AFailedRescanKeepsLiveUpdatesGoing) {
    // Issue 30 item 3: "live updates stopped: std::bad_alloc" was final. A rescan that throws
    // keeps the last version served, and the next one publishes what it finds.
    TempDir tmp;
    const std::string src = tmp / "src";
    ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
    std::atomic<int> builds{0};
    auto live = LiveFilesystem::with_builder("http://127.0.0.1:1/m/", [&] {
        if (++builds == 2) throw std::bad_alloc();
        return gguf::build_catalog(src);
    });
    live->rescan();  // build 1
    gguf_mount::fs::Watcher::Options o;
    o.revalidate = std::chrono::milliseconds(200);
    gguf_mount::fs::Watcher watcher(*live, {}, o);
    watcher.start();
    gguf_test::write_file(src + "/a.txt", "a\n");
    bool seen = false;
    for (int i = 0; i < 100 && !seen; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        seen = live->current()->find("a.txt") != nullptr;
    }
    EXPECT_TRUE(watcher.stop(std::chrono::seconds(5)));
    EXPECT_GE(builds.load(), 3);  // the failed build 2, then at least one more
    EXPECT_TRUE(seen);
}

TEST(LiveFilesystem, LookupCountsKeepAttributesUntilForgotten) {
    TempDir src;
    LiveFilesystem live(src.path(), {});
    struct stat st {};
    st.st_mode = S_IFREG | 0444;
    st.st_size = 42;
    live.remember_lookup(7, st);
    live.remember_lookup(7, st);
    struct stat out {};
    ASSERT_TRUE(live.known_attributes(7, &out));
    EXPECT_EQ(out.st_size, 42);
    live.forget(7, 1);
    EXPECT_TRUE(live.known_attributes(7, &out));
    live.forget(7, 1);
    EXPECT_FALSE(live.known_attributes(7, &out));
    EXPECT_EQ(live.known_inodes(), 0u);
    live.remember_lookup(kRootInode, st);  // the root is never counted
    EXPECT_EQ(live.known_inodes(), 0u);
}

TEST(ProblemKey, LongNumbersAreMaskedSmallOnesKept) {
    using gguf_mount::fs::problem_key;
    gguf::Problem a{"x.gguf", "/s/x-00003-of-00007.gguf: truncated: data ends at offset 512000 but the file has 100000 bytes"};
    gguf::Problem b{"x.gguf", "/s/x-00003-of-00007.gguf: truncated: data ends at offset 512000 but the file has 200000 bytes"};
    EXPECT_EQ(problem_key(a), problem_key(b));
    gguf::Problem c{"x.gguf", "/s/x-00006-of-00007.gguf: missing shard 6 of 7"};
    gguf::Problem d{"x.gguf", "/s/x-00007-of-00007.gguf: missing shard 7 of 7"};
    EXPECT_NE(problem_key(c), problem_key(d));
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
