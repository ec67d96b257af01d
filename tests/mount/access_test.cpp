// fs/access.hpp without a mount: access_as() answers as the caller would be answered by a direct
// open (directories on the way, links, groups), CallerCredentials switches only the calling
// thread and restores it, and a process without privilege cannot switch (so the daemon falls
// back to the served modes alone). Needs root; skipped otherwise.
#include "fs/access.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/support.hpp"

namespace {

using gguf_mount::fs::access_as;
using gguf_mount::fs::CallerCredentials;

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;
constexpr gid_t kTeam = 4321;

/// The "Uid:" and "Groups:" lines of the calling thread's /proc status (real, effective,
/// saved, fs uid; supplementary groups).
std::string thread_ids() {
    std::ifstream in("/proc/thread-self/status");
    std::string line, out;
    while (std::getline(in, line)) {
        if (line.rfind("Uid:", 0) == 0 || line.rfind("Gid:", 0) == 0 || line.rfind("Groups:", 0) == 0) out += line + "\n";
    }
    return out;
}

class CallerAccess : public ::testing::Test {
protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "switching credentials needs root";
        d_ = tmp_.path();
        ASSERT_EQ(::mkdir((d_ + "/closed").c_str(), 0755), 0);
        ASSERT_EQ(::mkdir((d_ + "/open").c_str(), 0755), 0);
        ASSERT_EQ(::mkdir((d_ + "/team").c_str(), 0755), 0);
        for (const char* f : {"/closed/f", "/open/g", "/team/t"}) {
            gguf_test::write_file(d_ + f, "x");
            ASSERT_EQ(::chmod((d_ + f).c_str(), 0644), 0);
        }
        ASSERT_EQ(::symlink("closed/f", (d_ + "/link").c_str()), 0);
        ASSERT_EQ(::chmod((d_ + "/closed").c_str(), 0700), 0);
        ASSERT_EQ(::chown((d_ + "/team").c_str(), 0, kTeam), 0);
        ASSERT_EQ(::chmod((d_ + "/team").c_str(), 0750), 0);
    }

    gguf_test::TempDir tmp_;
    std::string d_;
};

TEST_F(CallerAccess, EveryPathIsCheckedThroughItsDirectoriesAndLinks) {
    EXPECT_EQ(access_as(kNobody, kNogroup, {}, {d_ + "/open/g"}, R_OK), 0);
    EXPECT_EQ(access_as(kNobody, kNogroup, {}, {d_ + "/link"}, R_OK), EACCES);           // into closed/
    EXPECT_EQ(access_as(kNobody, kNogroup, {}, {d_ + "/open/g", d_ + "/link"}, R_OK), EACCES);  // any part
    EXPECT_EQ(access_as(kNobody, kNogroup, {}, {d_ + "/closed"}, X_OK), EACCES);
    EXPECT_EQ(access_as(kNobody, kNogroup, {}, {d_ + "/open"}, X_OK), 0);
    EXPECT_EQ(access_as(kNobody, kNogroup, {}, {d_ + "/missing"}, R_OK), ENOENT);
    // The directory's owner passes; root is answered without a switch.
    ASSERT_EQ(::chown((d_ + "/closed").c_str(), 1000, 1000), 0);
    EXPECT_EQ(access_as(1000, 1000, {}, {d_ + "/link"}, R_OK), 0);
    EXPECT_EQ(access_as(0, 0, {}, {d_ + "/link"}, R_OK), 0);
}

TEST_F(CallerAccess, PrimaryAndSupplementaryGroupsCount) {
    const std::string t = d_ + "/team/t";
    EXPECT_EQ(access_as(kNobody, kNogroup, {}, {t}, R_OK), EACCES);
    EXPECT_EQ(access_as(kNobody, kNogroup, {kTeam}, {t}, R_OK), 0);
    EXPECT_EQ(access_as(kNobody, kTeam, {}, {t}, R_OK), 0);
}

TEST_F(CallerAccess, OnlyTheCallingThreadIsSwitchedAndItIsRestored) {
    const std::string before = thread_ids();
    std::mutex m;
    std::condition_variable cv;
    bool switched = false, done = false;
    std::string inside;
    std::thread other([&] {
        CallerCredentials as(kNobody, kNogroup, {kTeam});
        std::unique_lock<std::mutex> lock(m);
        inside = as.ok() ? thread_ids() : "switch failed";
        switched = true;
        cv.notify_all();
        cv.wait(lock, [&] { return done; });
    });
    {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return switched; });
        // The other thread runs as nobody (fsuid, fsgid, groups) ...
        EXPECT_NE(inside.find("\t65534\n"), std::string::npos) << inside;  // fsuid/fsgid, last column
        EXPECT_NE(inside.find("Groups:\t4321"), std::string::npos) << inside;
        // ... while this one keeps the daemon's ids and reads what root may read.
        EXPECT_EQ(thread_ids(), before);
        EXPECT_EQ(::faccessat(AT_FDCWD, (d_ + "/link").c_str(), R_OK, AT_EACCESS), 0);
        done = true;
        cv.notify_all();
    }
    other.join();
    EXPECT_EQ(access_as(kNobody, kNogroup, {kTeam}, {d_ + "/link"}, R_OK), EACCES);
    EXPECT_EQ(thread_ids(), before);  // restored after a refusal too
}

TEST_F(CallerAccess, AnUnprivilegedProcessCannotSwitchAndIsRefused) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (::setgroups(0, nullptr) != 0 || ::setgid(1000) != 0 || ::setuid(1000) != 0) ::_exit(3);
        CallerCredentials as(kNobody, kNogroup, {});
        if (as.ok()) ::_exit(4);
        // Fail closed: no switch, no answer but EACCES.
        ::_exit(access_as(kNobody, kNogroup, {}, {"/"}, R_OK) == EACCES ? 0 : 5);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "3: could not drop privileges, 4: switched anyway, 5: not refused";
}

}  // namespace

namespace {

// The groups of a FUSE caller are read from /proc/TID/status (libfuse 3.14's
// fuse_req_getgroups over-reads its buffer): they must be the thread's own groups.
TEST(CallerGroups, AreTheThreadsSupplementaryGroupsFromProc) {
    const gid_t extra[] = {4321, 4322, 65534};
    std::vector<gid_t> got;
    std::vector<gid_t> want;
    std::thread t([&] {
        // Raw setgroups: only this thread's groups change (glibc's would change every thread).
        ASSERT_EQ(::syscall(SYS_setgroups, 3, extra), 0);
        EXPECT_TRUE(gguf_mount::fs::thread_groups(static_cast<pid_t>(::syscall(SYS_gettid)), &got));
        want.resize(static_cast<size_t>(::getgroups(0, nullptr)));
        ::getgroups(static_cast<int>(want.size()), want.data());
        ::syscall(SYS_setgroups, 0, nullptr);
    });
    t.join();
    EXPECT_EQ(got, std::vector<gid_t>(std::begin(extra), std::end(extra)));
    EXPECT_EQ(got, want);
    std::vector<gid_t> none;
    EXPECT_FALSE(gguf_mount::fs::thread_groups(0x7ffffff0, &none));  // no such thread
}

}  // namespace
