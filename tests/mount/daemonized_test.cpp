// A daemonized mount (no -f) returns only once the mount is ready and holds nothing an unmount
// waits for: scripts, CI jobs and ExecStop= lines run `gguf-mount SRC MNT && fusermount3 -u MNT`,
// and an unmount that meets a file still open by the start-up read check (fs/self_read.hpp)
// fails with "Device or resource busy".
#include <signal.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using mount_test::find_mount;

class Daemonized : public mount_test::MountFixture {
protected:
    /// Unmounts MNT as a script would not (lazily if need be) and waits until every process
    /// with MNT in its command line (the daemon, a start-up reader) is gone; SIGKILLs what is
    /// left after 10 s (those PIDs only, all started by this test) and fails the test then.
    void clean_up_mount() {
        mount_test::unmount(mnt_);
        for (pid_t pid : mount_test::pids_with_argument(mnt_)) {
            if (!mount_test::wait_gone(pid)) {
                ::kill(pid, SIGKILL);
                ADD_FAILURE() << "process " << pid << " still running 10 s after the unmount";
            }
        }
    }
};

// Issue 25.1: before the fix, 14-16 of 20 such unmounts failed with a folder of 7 models.
TEST_F(Daemonized, MountThenAnImmediateUnmountSucceedsEveryTime) {
    constexpr int kModels = 7, kRuns = 20;
    for (int m = 1; m <= kModels; ++m) {
        const std::string dir = src_ + "/model-" + std::to_string(m);
        ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
        mount_test::copy_kvzoo(dir);
    }
    const std::string fusermount = mount_test::fusermount3_path();
    int busy = 0, helpers_left = 0;
    std::string first_error;
    for (int run = 0; run < kRuns; ++run) {
        auto started = gguf_test::run({gguf_test::gguf_mount_binary(), src_, mnt_});
        ASSERT_EQ(started.exit_code, 0) << "run " << run << ": " << started.err;
        ASSERT_TRUE(find_mount(mnt_)) << "run " << run << ": exit status 0 but nothing mounted";
        // The daemon alone: no start-up reader (a child with the same command line) is left.
        const size_t processes = mount_test::pids_with_argument(mnt_).size();
        if (processes != 1) ++helpers_left;
        auto unmounted = gguf_test::run({fusermount, "-u", mnt_});
        if (unmounted.exit_code != 0) {
            ++busy;
            if (first_error.empty()) first_error = unmounted.err;
        }
        ASSERT_NO_FATAL_FAILURE(clean_up_mount());
        ASSERT_FALSE(find_mount(mnt_)) << "run " << run;
    }
    EXPECT_EQ(busy, 0) << busy << " of " << kRuns << " unmounts right after the mount returned failed; first: "
                       << first_error;
    EXPECT_EQ(helpers_left, 0) << "in " << helpers_left << " of " << kRuns
                               << " runs a process besides the daemon was left when the mount returned";
}

}  // namespace
