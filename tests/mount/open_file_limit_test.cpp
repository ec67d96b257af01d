// Open-file limit: a merged file holds every one of its shards open, so a set of more shards
// than the soft RLIMIT_NOFILE needs the soft limit raised. gguf-mount raises it to the hard limit
// (cli/offline.cpp raise_open_file_limit(), called by the mount command and by split/merge).
// Checked with 150 shards of one tensor each, started with a soft limit of 64: the mount serves
// the merged file with the bytes of the offline merge and /proc/PID/limits shows the raised soft
// limit; `gguf-mount merge` succeeds too. Controls with the hard limit also 64 (nothing to raise
// to) show that 64 descriptors are really too few for this set.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

constexpr int kShards = 150;
constexpr rlim_t kLowSoftLimit = 64;

/// The "Max open files" soft and hard limits in /proc/`pid`/limits, as written there
/// ("1024", "unlimited"); {"", ""} if the line is missing.
std::pair<std::string, std::string> max_open_files(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/limits");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("Max open files", 0) != 0) continue;
        std::istringstream fields(line.substr(std::string("Max open files").size()));
        std::string soft, hard;
        fields >> soft >> hard;
        return {soft, hard};
    }
    return {"", ""};
}

/// How /proc/PID/limits writes the limit `v`.
std::string limit_text(rlim_t v) { return v == RLIM_INFINITY ? "unlimited" : std::to_string(v); }

/// SOURCE holds tiny-00001-of-00150.gguf ... : a dense model of 150 one-tensor shards, and
/// ROOT/reference.gguf is their offline merge made with this process's (unchanged) limits.
class OpenFileLimit : public mount_test::MountFixture {
protected:
    void SetUp() override {
        MountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limits_), 0);
        if (limits_.rlim_max < 2 * kShards) {
            GTEST_SKIP() << "the hard RLIMIT_NOFILE (" << limits_.rlim_max << ") is too low to serve " << kShards
                         << " shards at all";
        }
        // Tensor I holds 16 + I floats: every shard differs in size and content.
        const auto shards =
            mount_test::split_dense_model(kShards, [](int i) { return int64_t{16} + i; }, 1, 7, src_ + "/tiny");
        ASSERT_FALSE(HasFailure());
        ASSERT_EQ(shards.size(), static_cast<size_t>(kShards));
        ASSERT_EQ(mount_test::list_dir(src_).size(), static_cast<size_t>(kShards));
        first_ = shards.front();
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", first_, root_ + "/reference.gguf"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        reference_sha_ = gguf_test::sha256_file(root_ + "/reference.gguf");
    }

    /// Runs `gguf-mount merge -q FIRST OUT` with RLIMIT_NOFILE set to `nofile`; returns its exit
    /// status (-1 if it did not finish within kTimeout) and puts its output in `*output`.
    int merge_with_limit(const rlimit& nofile, const std::string& out, std::string* output) {
        mount_test::Daemon merge;  // any child: killed and reaped by its destructor if still running
        const std::string merge_log = root_ + "/merge.log";
        if (!merge.start({gguf_test::gguf_mount_binary(), "merge", "-q", first_, out}, merge_log, nofile)) return -1;
        auto code = merge.wait_exit();
        *output = gguf_test::read_file(merge_log);
        return code ? *code : -1;
    }

    rlimit limits_{};
    std::string first_, reference_sha_;
};

TEST_F(OpenFileLimit, MountDaemonStartedWithSoftLimit64ServesA150ShardSet) {
    // Control: with the hard limit at 64 too there is nothing to raise to; the set cannot be
    // opened and a first-shard SOURCE mounts nothing (exit 1).
    ASSERT_TRUE(start({}, first_, rlimit{kLowSoftLimit, kLowSoftLimit}));
    auto code = daemon_.wait_exit();
    ASSERT_TRUE(code) << "the daemon limited to 64 descriptors did not exit:\n" << log();
    EXPECT_EQ(*code, 1) << log();
    EXPECT_FALSE(mount_test::lines_with(log(), "Too many open files").empty()) << log();
    EXPECT_FALSE(mount_test::find_mount(mnt_));

    // Soft 64, hard unchanged: the daemon raises its soft limit and serves the set.
    ASSERT_TRUE(mount({}, "", rlimit{kLowSoftLimit, limits_.rlim_max}));
    EXPECT_EQ(mount_test::list_dir(mnt_), std::vector<std::string>{"tiny.gguf"});
    const auto [soft, hard] = max_open_files(daemon_.pid());
    std::cout << "[ measured ] daemon started with soft limit " << kLowSoftLimit << ": /proc/" << daemon_.pid()
              << "/limits shows Max open files " << soft << " (soft) " << hard << " (hard)\n";
    EXPECT_EQ(soft, limit_text(limits_.rlim_max));
    EXPECT_EQ(hard, limit_text(limits_.rlim_max));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/tiny.gguf"), reference_sha_);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_TRUE(mount_test::lines_with(log(), "error").empty()) << log();
}

TEST_F(OpenFileLimit, OfflineMergeStartedWithSoftLimit64Succeeds) {
    std::string output;
    // Control: hard limit 64 too; the merge fails, naming the cause, and leaves no output.
    const std::string failed = root_ + "/merged-64-64.gguf";
    EXPECT_EQ(merge_with_limit(rlimit{kLowSoftLimit, kLowSoftLimit}, failed, &output), 1) << output;
    EXPECT_NE(output.find("Too many open files"), std::string::npos) << output;
    EXPECT_FALSE(mount_test::exists(failed));

    const std::string merged = root_ + "/merged-64.gguf";
    EXPECT_EQ(merge_with_limit(rlimit{kLowSoftLimit, limits_.rlim_max}, merged, &output), 0) << output;
    EXPECT_EQ(gguf_test::sha256_file(merged), reference_sha_);
}

/// Number of open descriptors of process `pid` (entries of /proc/PID/fd), or -1.
int open_descriptors(pid_t pid) {
    DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
    if (!d) return -1;
    int n = 0;
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
    return n;
}

// Issue 14.2: every served file used to keep a descriptor (plus an O_DIRECT one after the
// start-up self-read), so 2,000 companions under RLIMIT_NOFILE 1024 lost the set and the
// watcher. Now companions are opened on demand and closed at release.
class DescriptorBound : public mount_test::MountFixture {};

TEST_F(DescriptorBound, TwoThousandCompanionsAndASetUnderLimit1024) {
    constexpr int kCompanions = 2000;
    constexpr int kMaxDescriptors = 64;  // FUSE, inotify, pipes, log, 7 shards + their O_DIRECT twins
    for (int i = 0; i < kCompanions; ++i) {
        gguf_test::write_file(src_ + "/note-" + std::to_string(i) + ".txt", "companion " + std::to_string(i));
    }
    mount_test::copy_kvzoo(src_);
    ASSERT_TRUE(mount({}, "", rlimit{1024, 1024}));
    EXPECT_EQ(mount_test::list_dir(mnt_).size(), static_cast<size_t>(kCompanions + 1));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256);
    // Every companion reads back (each open closes again at release).
    int wrong = 0;
    for (int i = 0; i < kCompanions; ++i) {
        wrong += gguf_test::read_file(mnt_ + "/note-" + std::to_string(i) + ".txt") !=
                 "companion " + std::to_string(i);
    }
    EXPECT_EQ(wrong, 0);
    const int fds = open_descriptors(daemon_.pid());
    std::cout << "[ measured ] " << kCompanions << " companions + a 7-shard set, RLIMIT_NOFILE 1024: " << fds
              << " descriptors open in the daemon after reading every file\n";
    EXPECT_GT(fds, 0);
    EXPECT_LE(fds, kMaxDescriptors);
    // The watcher runs: a new file shows up within the live-update promise.
    gguf_test::write_file(src_ + "/late.txt", "late");
    EXPECT_TRUE(mount_test::time_until([&] { return mount_test::exists(mnt_ + "/late.txt"); },
                                       mount_test::kLiveUpdateLimit))
        << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_TRUE(mount_test::lines_with(log(), "Too many open files").empty()) << log();
}

}  // namespace
