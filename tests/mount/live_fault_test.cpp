// Live faults under a real mount (issue 7): many threads reading at random for 30 s, a shard of
// one set truncated or deleted under an open reader while another set keeps being served, SOURCE
// disappearing, and a lazy unmount under a reader. The promise checked everywhere: a read returns
// the bytes the file was opened with or an error, never other bytes. Every test mounts its own
// temporary directory; TearDown always unmounts and reaps the daemon (only the PID it started).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/model/merge_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using gguf_test::fixture;
using mount_test::AlignedBuffer;
using mount_test::ChunkTally;
using mount_test::copy_kvzoo;
using mount_test::Fd;
using mount_test::find_mount;
using mount_test::kLiveUpdateLimit;
using mount_test::kvzoo_shard;
using mount_test::lines_with;
using mount_test::list_dir;
using mount_test::read_in_chunks;
using mount_test::time_until;

/// Fixture: ROOT/src (SOURCE), ROOT/mnt, ROOT/daemon.log; the reference merged kvzoo bytes.
class LiveFault : public mount_test::MountFixture {
protected:
    void SetUp() override {
        MountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        whole_ = gguf_test::read_file(fixture("kvzoo/merged-reference.gguf"));
        ASSERT_GT(whole_.size(), 1000000u);
    }

    std::string whole_;
};

// ---- 1. many readers -----------------------------------------------------------------------------

// 8 threads, 30 s, random offsets and lengths (half of them straddling an extent boundary of the
// merged layout, some past EOF). Threads 0-3 use O_DIRECT so every read reaches the daemon; the
// others read through the page cache and drop it every 64 reads.
TEST_F(LiveFault, EightThreadsOfRandomReadsForThirtySecondsAreByteExact) {
    copy_kvzoo(src_);
    const auto vf = gguf::open_merged(gguf::SplitSet::open(src_ + "/" + kvzoo_shard(1)));
    ASSERT_EQ(vf.size(), whole_.size());
    std::vector<uint64_t> boundaries;
    for (const auto& e : vf.layout().extents()) boundaries.push_back(e.start);
    ASSERT_GT(boundaries.size(), 14u);
    ASSERT_TRUE(mount());
    const std::string path = mnt_ + "/kvzoo.gguf";

    constexpr int kThreads = 8;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    std::atomic<uint64_t> reads{0}, bytes{0}, mismatches{0}, failures{0}, direct_reads{0};
    std::mutex first_mu;
    std::string first_problem;
    auto note = [&](const std::string& what) {
        std::lock_guard<std::mutex> lock(first_mu);
        if (first_problem.empty()) first_problem = what;
    };
    auto worker = [&](int id) {
        const bool direct = id < kThreads / 2;
        Fd fd{::open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0))};
        if (fd.fd < 0) {
            ++failures;
            note("open: " + std::string(std::strerror(errno)));
            return;
        }
        std::mt19937_64 rng(0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(id + 1));
        const size_t max_len = 300000;
        AlignedBuffer buf(max_len + 8192);
        const size_t align = direct ? 4096 : 1;
        for (uint64_t i = 0; Clock::now() < deadline; ++i) {
            uint64_t off;
            if (i % 2 == 0) {
                uint64_t b = boundaries[rng() % boundaries.size()];
                uint64_t back = rng() % 8192;
                off = b > back ? b - back : 0;
            } else {
                off = rng() % (whole_.size() + 200);
            }
            size_t len = static_cast<size_t>(rng() % 70000) + 1;
            if (i % 40 == 0) len = static_cast<size_t>(rng() % max_len) + 1;
            off -= off % align;
            len = (len + align - 1) / align * align;
            std::memset(buf.get(), 0xa5, len);
            ssize_t n = ::pread(fd.fd, buf.get(), len, static_cast<off_t>(off));
            const size_t expect = off >= whole_.size() ? 0 : std::min<size_t>(len, whole_.size() - off);
            ++reads;
            if (direct) ++direct_reads;
            if (n < 0) {
                ++failures;
                note("pread at " + std::to_string(off) + ": " + std::strerror(errno));
                continue;
            }
            if (static_cast<size_t>(n) != expect ||
                std::memcmp(buf.get(), whole_.data() + std::min<uint64_t>(off, whole_.size()), expect) != 0) {
                ++mismatches;
                note("pread at " + std::to_string(off) + " len " + std::to_string(len) + " returned " +
                     std::to_string(n) + " wrong bytes");
                continue;
            }
            bytes += expect;
            if (!direct && i % 64 == 63) ::posix_fadvise(fd.fd, 0, 0, POSIX_FADV_DONTNEED);
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
    for (auto& t : threads) t.join();

    std::cout << "[ measured ] " << reads.load() << " reads (" << direct_reads.load() << " O_DIRECT), "
              << bytes.load() << " bytes checked, " << mismatches.load() << " mismatches, " << failures.load()
              << " errors in 30 s from " << kThreads << " threads\n";
    EXPECT_EQ(mismatches.load(), 0u) << first_problem;
    EXPECT_EQ(failures.load(), 0u) << first_problem;
    EXPECT_GT(direct_reads.load(), 1000u);
    EXPECT_GT(bytes.load(), uint64_t{100} << 20);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_TRUE(lines_with(log(), "warn").empty()) << log();
}

// ---- 2. a shard of one set changes under an open reader -----------------------------------------
// The in-place rewrite (same size, newer mtime) is covered by
// ModelDirTest.ShardReplacedUnderAnOpenFileNeverGivesWrongBytes; truncation and deletion here.

enum class ShardFault { Truncated, Deleted };

class ShardFaultTest : public LiveFault, public ::testing::WithParamInterface<ShardFault> {};

TEST_P(ShardFaultTest, OpenReaderGetsOldBytesOrEioAndTheOtherSetIsServedThroughout) {
    const bool truncated = GetParam() == ShardFault::Truncated;
    for (const char* d : {"A", "B"}) {
        ASSERT_EQ(::mkdir((src_ + "/" + d).c_str(), 0755), 0);
        copy_kvzoo(src_ + "/" + d);
    }
    const std::string shard5 = src_ + "/A/" + kvzoo_shard(5);
    // Which 64 KiB chunks of the merged file touch shard 5 (source index 4).
    constexpr size_t kChunk = 65536;
    const auto vf = gguf::open_merged(gguf::SplitSet::open(src_ + "/A/" + kvzoo_shard(1)));
    auto touches_shard5 = [&](uint64_t off) {
        for (const auto& e : vf.layout().extents()) {
            if (e.kind == gguf::Extent::Kind::Source && e.source == 4 && e.length > 0 && e.start < off + kChunk &&
                off < e.start + e.length) {
                return true;
            }
        }
        return false;
    };
    ASSERT_TRUE(mount());
    ASSERT_EQ(list_dir(mnt_ + "/A"), std::vector<std::string>{"kvzoo.gguf"});

    Fd a{::open((mnt_ + "/A/kvzoo.gguf").c_str(), O_RDONLY | O_DIRECT)};
    ASSERT_GE(a.fd, 0) << std::strerror(errno);
    AlignedBuffer head(kChunk);
    ASSERT_EQ(::pread(a.fd, head.get(), kChunk, 0), static_cast<ssize_t>(kChunk));
    ASSERT_EQ(std::memcmp(head.get(), whole_.data(), kChunk), 0);

    // Set B is read in a loop from before the fault until the checks are done.
    std::atomic<bool> stop{false};
    std::atomic<size_t> b_rounds{0}, b_ok{0}, b_bad{0};
    std::string b_problem;
    std::thread b_reader([&] {
        while (!stop) {
            Fd b{::open((mnt_ + "/B/kvzoo.gguf").c_str(), O_RDONLY | O_DIRECT)};
            if (b.fd < 0) {
                ++b_bad;
                b_problem = std::string("open B: ") + std::strerror(errno);
                return;
            }
            ChunkTally t = read_in_chunks(b.fd, whole_, kChunk);
            b_ok += t.ok;
            b_bad += t.errors + t.wrong;
            if (t.errors + t.wrong > 0 && b_problem.empty()) b_problem = t.first_wrong;
            ++b_rounds;
        }
    });

    if (truncated) {
        struct stat st {};
        ASSERT_EQ(::stat(shard5.c_str(), &st), 0);
        ASSERT_EQ(::truncate(shard5.c_str(), st.st_size / 2), 0);
    } else {
        ASSERT_EQ(::unlink(shard5.c_str()), 0);
    }
    // The changed set leaves the listing (incomplete or bad); B stays.
    auto gone = time_until([&] { return list_dir(mnt_ + "/A").empty(); });
    EXPECT_TRUE(gone) << log();
    if (gone) {
        std::cout << "[ measured ] set with a " << (truncated ? "truncated" : "deleted") << " shard left the listing after "
                  << gone->count() << " ms\n";
        EXPECT_LE(*gone, kLiveUpdateLimit);
    }
    EXPECT_EQ(list_dir(mnt_ + "/B"), std::vector<std::string>{"kvzoo.gguf"});

    // The descriptor opened before the change: every chunk is the old bytes or EIO.
    ChunkTally t = read_in_chunks(a.fd, whole_, kChunk);
    EXPECT_EQ(t.wrong, 0u) << t.first_wrong;
    if (truncated) {
        // Every read that touches shard 5 fails (its size changed); every other read succeeds.
        size_t expect_errors = 0;
        for (uint64_t off = 0; off < whole_.size(); off += kChunk) expect_errors += touches_shard5(off) ? 1 : 0;
        EXPECT_GT(expect_errors, 0u);
        EXPECT_EQ(t.errors, expect_errors);
        for (uint64_t off : t.error_offsets) EXPECT_TRUE(touches_shard5(off)) << "EIO at " << off;
    } else {
        // The daemon holds the deleted inode open: the whole file still reads.
        EXPECT_EQ(t.errors, 0u);
    }
    std::cout << "[ measured ] open reader after the fault: " << t.ok << " chunks exact, " << t.errors << " EIO, "
              << t.wrong << " wrong\n";
    a.close();

    // Let B be read at least twice more after the checks, then stop.
    const size_t rounds_now = b_rounds;
    ASSERT_TRUE(time_until([&] { return b_rounds >= rounds_now + 2 || b_bad > 0; }, std::chrono::seconds(20)));
    stop = true;
    b_reader.join();
    EXPECT_EQ(b_bad.load(), 0u) << b_problem;
    EXPECT_GE(b_rounds.load(), 2u);
    std::cout << "[ measured ] set B: " << b_rounds.load() << " full reads, " << b_ok.load()
              << " chunks exact, 0 expected errors\n";
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/B/kvzoo.gguf"), gguf_test::sha256_hex(whole_));

    EXPECT_EQ(unmount_and_wait(), 0) << log();
    const std::string text = log();
    EXPECT_FALSE(lines_with(text, "A/" + kvzoo_shard(5)).empty()) << text;
    if (truncated) {
        auto warn = lines_with(text, kvzoo_shard(5) + ": read of");
        ASSERT_FALSE(warn.empty()) << text;
        EXPECT_NE(warn[0].find("EIO"), std::string::npos) << warn[0];
    }
    EXPECT_EQ(lines_with(text, "no longer serving A/kvzoo.gguf").size(), 1u) << text;
    EXPECT_TRUE(lines_with(text, "no longer serving B/").empty()) << text;
}

INSTANTIATE_TEST_SUITE_P(Kinds, ShardFaultTest, ::testing::Values(ShardFault::Truncated, ShardFault::Deleted),
                         [](const auto& tp) { return tp.param == ShardFault::Truncated ? "Truncated" : "Deleted"; });

// ---- 3. SOURCE disappears --------------------------------------------------------------------------

enum class SourceFault { RemovedRecursively, RenamedAway };

class SourceGoneTest : public LiveFault, public ::testing::WithParamInterface<SourceFault> {};

TEST_P(SourceGoneTest, ListingEmptiesOpenFileKeepsItsBytesAndUnmountIsClean) {
    ASSERT_EQ(::mkdir((src_ + "/Q4").c_str(), 0755), 0);
    copy_kvzoo(src_);
    copy_kvzoo(src_ + "/Q4");
    gguf_test::write_file(src_ + "/README.md", "card\n");
    ASSERT_TRUE(mount());
    ASSERT_EQ(list_dir(mnt_), (std::vector<std::string>{"Q4", "README.md", "kvzoo.gguf"}));
    Fd fd{::open((mnt_ + "/kvzoo.gguf").c_str(), O_RDONLY | O_DIRECT)};
    ASSERT_GE(fd.fd, 0) << std::strerror(errno);
    Fd nested{::open((mnt_ + "/Q4/kvzoo.gguf").c_str(), O_RDONLY | O_DIRECT)};
    ASSERT_GE(nested.fd, 0) << std::strerror(errno);

    if (GetParam() == SourceFault::RemovedRecursively) {
        std::filesystem::remove_all(src_);
    } else {
        ASSERT_EQ(::rename(src_.c_str(), (root_ + "/moved-away").c_str()), 0);
    }
    auto empty = time_until([&] {
        struct stat st {};
        return ::stat(mnt_.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && list_dir(mnt_).empty() &&
               ::stat((mnt_ + "/kvzoo.gguf").c_str(), &st) == -1 && errno == ENOENT;
    });
    ASSERT_TRUE(empty) << "the listing did not empty within 5 s:\n" << log();
    std::cout << "[ measured ] listing empty " << empty->count() << " ms after SOURCE went away\n";
    EXPECT_LE(*empty, kLiveUpdateLimit);
    EXPECT_TRUE(daemon_.running());

    // The open files keep the bytes they were opened with (the shards stay open in the daemon).
    for (Fd* f : {&fd, &nested}) {
        ChunkTally t = read_in_chunks(f->fd, whole_, 65536);
        EXPECT_EQ(t.wrong, 0u) << t.first_wrong;
        EXPECT_EQ(t.errors, 0u);
        EXPECT_GT(t.ok, 0u);
    }
    fd.close();
    nested.close();
    EXPECT_TRUE(daemon_.running());
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    const std::string text = log();
    EXPECT_GE(lines_with(text, "serving an empty directory").size(), 1u) << text;
    EXPECT_FALSE(lines_with(text, src_).empty()) << text;
}

INSTANTIATE_TEST_SUITE_P(Kinds, SourceGoneTest,
                         ::testing::Values(SourceFault::RemovedRecursively, SourceFault::RenamedAway),
                         [](const auto& tp) {
                             return tp.param == SourceFault::RemovedRecursively ? "RemovedRecursively" : "RenamedAway";
                         });

// ---- 4. lazy unmount under a reader ------------------------------------------------------------

TEST_F(LiveFault, LazyUnmountUnderAReaderKeepsItsBytesAndTheDaemonExitsZeroWhenItCloses) {
    copy_kvzoo(src_);
    ASSERT_TRUE(mount());
    Fd fd{::open((mnt_ + "/kvzoo.gguf").c_str(), O_RDONLY | O_DIRECT)};
    ASSERT_GE(fd.fd, 0) << std::strerror(errno);

    std::atomic<bool> stop{false};
    std::atomic<bool> detached{false};
    std::atomic<size_t> ok_before{0}, ok_after{0}, errors{0}, wrong{0};
    std::string problem;
    std::thread reader([&] {
        while (!stop) {
            const bool after = detached;
            ChunkTally t = read_in_chunks(fd.fd, whole_, 65536);
            (after ? ok_after : ok_before) += t.ok;
            errors += t.errors;
            wrong += t.wrong;
            if (t.wrong > 0 && problem.empty()) problem = t.first_wrong;
        }
    });
    ASSERT_TRUE(time_until([&] { return ok_before > 0; }));
    const std::string fusermount = mount_test::fusermount3_path();
    ASSERT_FALSE(fusermount.empty());
    auto r = gguf_test::run({fusermount, "-uz", mnt_});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(find_mount(mnt_));
    detached = true;
    // The reader goes on for a while on the detached mount; the daemon must stay up meanwhile.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    EXPECT_TRUE(daemon_.running()) << log();
    stop = true;
    reader.join();
    std::cout << "[ measured ] lazy unmount: " << ok_before.load() << " chunks exact before, " << ok_after.load()
              << " after, " << errors.load() << " errors, " << wrong.load() << " wrong\n";
    EXPECT_EQ(wrong.load(), 0u) << problem;
    EXPECT_GT(ok_after.load(), 0u);
    fd.close();  // the last reference: the kernel ends the session
    auto code = daemon_.wait_exit();
    ASSERT_TRUE(code) << "the daemon did not exit after the reader closed:\n" << log();
    EXPECT_EQ(*code, 0) << log();
    EXPECT_FALSE(find_mount(mnt_));
}

}  // namespace
