// The mount point rules (README "Mount point rules", fs/mount_point.hpp): a dead mount of ours is
// cleared and never stacked on, a live mount is refused and keeps serving, a non-empty mount
// point needs --allow-non-empty, a mount point inside SOURCE is never scanned, and SOURCE inside
// the mount point is refused.
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "fs/mount_point.hpp"
#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using mount_test::find_mount;
using mount_test::lines_with;
using mount_test::list_dir;

class MountPoint : public mount_test::MountFixture {};

TEST(MountInfo, ParsesEscapedPathsOptionalFieldsAndTheTopmostMount) {
    const std::string text =
        "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
        "42 27 0:39 / /tmp/my\\040models ro,nosuid,nodev shared:12 master:3 - fuse.gguf-mount /src\\054x "
        "ro,user_id=0\n"
        "43 42 0:40 / /tmp/my\\040models ro - fuse.other srcb ro\n"
        "garbage line\n";
    auto all = gguf_mount::fs::parse_mountinfo(text);
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all[1].mount_point, "/tmp/my models");
    EXPECT_EQ(all[1].fstype, "fuse.gguf-mount");
    EXPECT_EQ(all[1].source, "/src,x");
    EXPECT_EQ(all[1].mount_options, "ro,nosuid,nodev");
    EXPECT_EQ(all[1].super_options, "ro,user_id=0");
    EXPECT_EQ(all[1].major, 0u);
    EXPECT_EQ(all[1].minor, 39u);
    EXPECT_EQ(all[2].fstype, "fuse.other");
}

TEST(MountInfo, AbsoluteMountPathKeepsTheLastNameAndDropsTrailingSlashes) {
    gguf_test::TempDir tmp;
    char buf[PATH_MAX];
    ASSERT_NE(::realpath(tmp.path().c_str(), buf), nullptr);
    const std::string real = buf;
    ASSERT_EQ(::mkdir((tmp / "m").c_str(), 0755), 0);
    EXPECT_EQ(gguf_mount::fs::absolute_mount_path(tmp / "m/"), real + "/m");
    EXPECT_EQ(gguf_mount::fs::absolute_mount_path(tmp / "missing"), real + "/missing");
}

/// Number of mounts stacked on `path` in /proc/self/mountinfo.
size_t mounts_on(const std::string& path) {
    std::ifstream in("/proc/self/mountinfo");
    std::stringstream ss;
    ss << in.rdbuf();
    size_t n = 0;
    for (const auto& m : gguf_mount::fs::parse_mountinfo(ss.str())) n += m.mount_point == path;
    return n;
}

/// Runs gguf-mount SOURCE MNT -f extra... that is expected to refuse: returns its exit status and
/// stderr without the timestamps of -f lines; if it mounted instead, unmounts it and fails the
/// test.
gguf_test::RunResult run_refused(const std::string& source, const std::string& mnt,
                                 const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {gguf_test::gguf_mount_binary(), source, mnt, "-f"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    mount_test::Daemon d;
    gguf_test::TempDir logdir;
    const std::string log = logdir.path() + "/log";
    gguf_test::RunResult r;
    if (!d.start(argv, log)) {
        ADD_FAILURE() << "cannot start gguf-mount";
        return r;
    }
    auto code = d.wait_exit();
    if (!code) {
        ADD_FAILURE() << "gguf-mount did not refuse (still running); stopping it";
        d.stop(mnt);
        code = d.exit_code();
    }
    r.exit_code = code ? *code : -1;
    r.err = gguf_test::without_timestamps(gguf_test::read_file(log));
    return r;
}

TEST_F(MountPoint, DeadMountOfAKilledDaemonIsClearedAndNotStackedOn) {
    mount_test::copy_kvzoo(src_);
    ASSERT_TRUE(mount());
    ASSERT_EQ(::kill(daemon_.pid(), SIGKILL), 0);
    ASSERT_TRUE(daemon_.wait_exit());
    struct statfs sfs {};
    ASSERT_NE(::statfs(mnt_.c_str(), &sfs), 0);
    ASSERT_EQ(errno, ENOTCONN) << "the killed daemon should leave a dead mount";

    ASSERT_TRUE(start());
    // The device number of the dead mount may be reused: wait until the mount answers again.
    auto replaced = mount_test::time_until([&] {
        return ::statfs(mnt_.c_str(), &sfs) == 0 && static_cast<unsigned long>(sfs.f_type) == FUSE_SUPER_MAGIC;
    });
    ASSERT_TRUE(replaced) << log();
    EXPECT_EQ(mounts_on(mnt_), 1u) << "a mount is stacked on the dead one";
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256);
    EXPECT_EQ(lines_with(log(), "cleared a dead gguf-mount mount").size(), 1u) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(mounts_on(mnt_), 0u) << "the dead mount came back after the unmount";
}

/// tests/support/plainfs serving `root` at `mountpoint` for the test's lifetime; with
/// `stop_at_open` N > 0 it stops itself (SIGSTOP) at its Nth open request. The destructor lets
/// it run again (SIGCONT), unmounts it and reaps it, also when an assertion failed.
class PlainFs {
public:
    bool start(const std::string& root, const std::string& mountpoint, const std::string& log, int stop_at_open = 0) {
#ifdef GGUF_PLAINFS_BINARY
        mountpoint_ = mountpoint;
        if (stop_at_open > 0) ::setenv("PLAINFS_STOP_AT_OPEN", std::to_string(stop_at_open).c_str(), 1);
        const bool started = daemon_.start({GGUF_PLAINFS_BINARY, root, mountpoint}, log);
        ::unsetenv("PLAINFS_STOP_AT_OPEN");
        return started && daemon_.wait_mounted(mountpoint);
#else
        (void)root, (void)mountpoint, (void)log, (void)stop_at_open;
        return false;
#endif
    }
    ~PlainFs() {
        if (daemon_.pid() <= 0) return;
        ::kill(daemon_.pid(), SIGCONT);
        daemon_.stop(mountpoint_);
    }
    pid_t pid() const { return daemon_.pid(); }

private:
    mount_test::Daemon daemon_;
    std::string mountpoint_;
};

#ifdef GGUF_PLAINFS_BINARY
/// SOURCE `src` = the kvzoo shards plus notes.txt, a link into a plainfs mount (under `root`)
/// that stops itself at its second open: the scan's look is the first, the daemon's start-up
/// read the second, which then waits.
void hold_the_start_up_read(const std::string& root, const std::string& src, PlainFs* plainfs) {
    mount_test::copy_kvzoo(src);
    const std::string slow_src = root + "/slow-src", slow_mnt = root + "/slow";
    ASSERT_EQ(::mkdir(slow_src.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(slow_mnt.c_str(), 0755), 0);
    gguf_test::write_file(slow_src + "/notes.txt", "slow notes\n");
    ASSERT_TRUE(plainfs->start(slow_src, slow_mnt, root + "/plainfs.log", 2));
    ASSERT_EQ(::symlink((slow_mnt + "/notes.txt").c_str(), (src + "/notes.txt").c_str()), 0);
}
#endif

/// True when process `pid` has a descriptor open on /dev/fuse.
bool holds_dev_fuse(pid_t pid) {
    std::error_code ec;
    for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
        std::error_code link_ec;
        if (std::filesystem::read_symlink(fd.path(), link_ec) == "/dev/fuse") return true;
    }
    return false;
}

/// True when process `pid` is stopped (state T in /proc/PID/stat).
bool is_stopped(pid_t pid) {
    const std::string stat = gguf_test::read_file("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = stat.rfind(')');  // "pid (comm) S ...": the state follows the last ')'
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T';
}

// The daemon reads every served file once through its own mount before READY=1. A kill -9
// while one of those reads waits for the daemon's answer must still end the daemon, leave no
// process behind, and leave a dead mount that the next mount clears. To hold the read there, a
// served file links to a file on plainfs, which stops itself (SIGSTOP) at its second open
// request (the first is the scan's look at the file's first bytes): the daemon's open of the
// file for the start-up read waits on plainfs, and the start-up open waits on the daemon (an
// open waits for its answer; a read waits on page locks, which a kill interrupts).
TEST_F(MountPoint, KillDuringTheStartUpReadEndsTheDaemonAndLeavesADeadMountThatIsCleared) {
#ifndef GGUF_PLAINFS_BINARY
    GTEST_SKIP() << "plainfs was not built";
#else
    // Aborting the connection (fusectl) ends a process left waiting on the mount, so that a
    // failure here does not hang the suite.
    mount_test::Fusectl fusectl;
    std::string why;
    if (!fusectl.ensure(root_ + "/fusectl", &why)) GTEST_SKIP() << why;
    PlainFs plainfs;
    ASSERT_NO_FATAL_FAILURE(hold_the_start_up_read(root_, src_, &plainfs));

    ASSERT_TRUE(mount());
    auto entry = find_mount(mnt_);
    ASSERT_TRUE(entry);
    ASSERT_TRUE(mount_test::time_until([&] { return is_stopped(plainfs.pid()); }))
        << "the start-up read never reached plainfs\n" << log();
    std::vector<pid_t> readers;
    for (pid_t p : mount_test::pids_with_argument(mnt_)) {
        if (p != daemon_.pid()) readers.push_back(p);
    }
    EXPECT_EQ(readers.size(), 1u) << "the start-up read should run in one child process of the daemon";
    for (pid_t p : readers) EXPECT_FALSE(holds_dev_fuse(p)) << "the start-up reader " << p << " holds /dev/fuse";

    ASSERT_EQ(::kill(daemon_.pid(), SIGKILL), 0);
    // The daemon's own open of notes.txt waits (uninterruptibly: plainfs took the request) until
    // plainfs answers; after that nothing may hold the daemon or its reader.
    ASSERT_EQ(::kill(plainfs.pid(), SIGCONT), 0);
    const std::string abort_file = fusectl.file(*entry, "abort");
    auto code = daemon_.wait_exit(std::chrono::seconds(5));
    if (!code) {
        std::ofstream(abort_file) << "1\n";
        daemon_.wait_exit();
        FAIL() << "kill -9 did not end the daemon within 5 s: a thread of it waited on its own mount";
    }
    EXPECT_EQ(*code, 128 + SIGKILL);
    if (!mount_test::time_until([&] { return mount_test::pids_with_argument(mnt_).empty(); })) {
        std::ofstream(abort_file) << "1\n";
        FAIL() << "a process of the killed daemon is left (waiting on the dead mount)";
    }
    struct statfs sfs {};
    ASSERT_NE(::statfs(mnt_.c_str(), &sfs), 0);
    ASSERT_EQ(errno, ENOTCONN) << "the killed daemon should leave a dead mount";

    // The next mount clears the dead one and serves both files.
    ASSERT_TRUE(start());
    auto replaced = mount_test::time_until([&] {
        return ::statfs(mnt_.c_str(), &sfs) == 0 && static_cast<unsigned long>(sfs.f_type) == FUSE_SUPER_MAGIC;
    });
    ASSERT_TRUE(replaced) << log();
    EXPECT_EQ(mounts_on(mnt_), 1u) << "a mount is stacked on the dead one";
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256);
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/notes.txt"), "slow notes\n");
    EXPECT_EQ(lines_with(log(), "cleared a dead gguf-mount mount").size(), 1u) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
#endif
}

// The start-up reader ends only by the daemon's hand (SIGTERM is blocked in it: a Ctrl-C or a
// systemd stop reaches the whole process group) or by SIGKILL from outside; then the daemon
// says so in one line and keeps serving.
TEST_F(MountPoint, AStartUpReaderKilledFromOutsideIsLoggedAndTheMountServes) {
#ifndef GGUF_PLAINFS_BINARY
    GTEST_SKIP() << "plainfs was not built";
#else
    PlainFs plainfs;
    ASSERT_NO_FATAL_FAILURE(hold_the_start_up_read(root_, src_, &plainfs));
    ASSERT_TRUE(mount());
    ASSERT_TRUE(mount_test::time_until([&] { return is_stopped(plainfs.pid()); })) << log();
    std::vector<pid_t> readers;
    for (pid_t p : mount_test::pids_with_argument(mnt_)) {
        if (p != daemon_.pid()) readers.push_back(p);
    }
    ASSERT_EQ(readers.size(), 1u);
    ASSERT_EQ(::kill(readers[0], SIGTERM), 0);
    ASSERT_EQ(::kill(readers[0], SIGKILL), 0);
    ASSERT_EQ(::kill(plainfs.pid(), SIGCONT), 0);  // the reader's open gets its answer, then it dies
    ASSERT_TRUE(mount_test::time_until([&] {
        return !lines_with(log(), "the start-up read check ended early").empty();
    })) << log();
    EXPECT_EQ(lines_with(log(), "the start-up read check ended early (killed by Killed); READY=1 without it").size(),
              1u)
        << log();
    EXPECT_TRUE(daemon_.running());
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/notes.txt"), "slow notes\n");
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
#endif
}

/// The processes whose parent is `parent` among those with `arg` in their command line.
std::vector<pid_t> children_with_argument(pid_t parent, const std::string& arg) {
    std::vector<pid_t> out;
    for (pid_t p : mount_test::pids_with_argument(arg)) {
        const std::string stat = gguf_test::read_file("/proc/" + std::to_string(p) + "/stat");
        const size_t close = stat.rfind(')');  // "pid (comm) S ppid ..."
        if (close != std::string::npos && std::strtol(stat.c_str() + close + 3, nullptr, 10) == parent) {
            out.push_back(p);
        }
    }
    return out;
}

#ifdef GGUF_PLAINFS_BINARY
/// hold_the_start_up_read, then `gguf-mount SRC MNT` daemonized (no -f; its stderr to `log`) as
/// `daemon`, until its start-up read waits on the stopped plainfs.
void daemonize_with_a_held_start_up_read(const std::string& root, const std::string& src, const std::string& mnt,
                                         const std::string& log, PlainFs* plainfs, mount_test::Daemon* daemon) {
    ASSERT_NO_FATAL_FAILURE(hold_the_start_up_read(root, src, plainfs));
    ASSERT_TRUE(daemon->start({gguf_test::gguf_mount_binary(), src, mnt}, log));
    ASSERT_TRUE(mount_test::time_until([&] { return is_stopped(plainfs->pid()); }))
        << "the start-up read never reached plainfs\n" << gguf_test::read_file(log);
}
#endif

// Issue 25.1: a daemonized mount returned while its start-up read check still had files open in
// the mount, and `fusermount3 -u` right after failed (EBUSY). The foreground process now waits
// as long as that check is held up (plainfs stopped), exits 0 once it is over, and the unmount
// right after succeeds; when the daemon dies before that, it says so and exits 1.
TEST_F(MountPoint, ADaemonizedMountReturnsOnlyOnceTheStartUpReadIsOver) {
#ifndef GGUF_PLAINFS_BINARY
    GTEST_SKIP() << "plainfs was not built";
#else
    PlainFs plainfs;
    ASSERT_NO_FATAL_FAILURE(daemonize_with_a_held_start_up_read(root_, src_, mnt_, log_, &plainfs, &daemon_));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(daemon_.running()) << "the mount returned (exit " << daemon_.exit_code().value_or(-1)
                                   << ") while the start-up read still waited";
    ASSERT_EQ(::kill(plainfs.pid(), SIGCONT), 0);
    auto code = daemon_.wait_exit();
    ASSERT_TRUE(code) << "the mount did not return once the start-up read was over";
    EXPECT_EQ(*code, 0) << log();
    EXPECT_TRUE(lines_with(log(), ": error: ").empty()) << log();
    const std::vector<pid_t> left = mount_test::pids_with_argument(mnt_);
    EXPECT_EQ(left.size(), 1u) << "only the daemon may be left when the mount returns";
    auto unmounted = gguf_test::run({mount_test::fusermount3_path(), "-u", mnt_});
    EXPECT_EQ(unmounted.exit_code, 0) << unmounted.err;
    for (pid_t p : left) {
        if (!mount_test::wait_gone(p)) {
            ::kill(p, SIGKILL);
            ADD_FAILURE() << "daemon " << p << " still running after fusermount3 -u";
        }
    }
#endif
}

TEST_F(MountPoint, ADaemonizedMountWhoseDaemonDiesBeforeItIsReadySaysSoAndExits1) {
#ifndef GGUF_PLAINFS_BINARY
    GTEST_SKIP() << "plainfs was not built";
#else
    PlainFs plainfs;
    ASSERT_NO_FATAL_FAILURE(daemonize_with_a_held_start_up_read(root_, src_, mnt_, log_, &plainfs, &daemon_));
    const std::vector<pid_t> daemons = children_with_argument(daemon_.pid(), mnt_);
    ASSERT_EQ(daemons.size(), 1u) << "the foreground process should have forked one daemon";
    ASSERT_EQ(::kill(daemons[0], SIGKILL), 0);
    ASSERT_EQ(::kill(plainfs.pid(), SIGCONT), 0);
    auto code = daemon_.wait_exit();
    if (!mount_test::wait_gone(daemons[0])) ::kill(daemons[0], SIGKILL);
    ASSERT_TRUE(code) << "the foreground process did not exit after its daemon died";
    EXPECT_EQ(*code, 1);
    EXPECT_EQ(lines_with(log(), ": error: "),
              std::vector<std::string>{"gguf-mount: error: " + mnt_ +
                                       ": the daemon was killed by signal 9 (Killed) before the mount was ready (its "
                                       "messages went to syslog; mount with -f to see them)"})
        << log();
    EXPECT_TRUE(mount_test::time_until([&] { return mount_test::pids_with_argument(mnt_).empty(); }))
        << "a process of the killed daemon is left";
#endif
}

// A FUSE mount whose connection is aborted while our statfs waits on it (the statfs then
// fails with ECONNABORTED, later ones with ENOTCONN) is a dead mount, not one that "does not
// answer". Here plainfs is stopped and its connection aborted through fusectl; the same
// happens when a killed daemon's last /dev/fuse descriptor closes a moment later.
TEST_F(MountPoint, AMountAbortedWhileItIsCheckedIsADeadMount) {
#ifndef GGUF_PLAINFS_BINARY
    GTEST_SKIP() << "plainfs was not built";
#else
    mount_test::Fusectl fusectl;
    std::string why;
    if (!fusectl.ensure(root_ + "/fusectl", &why)) GTEST_SKIP() << why;
    copy_case_shards("notensors/t7", src_);
    const std::string plain_src = root_ + "/plain-src";
    ASSERT_EQ(::mkdir(plain_src.c_str(), 0755), 0);
    PlainFs plainfs;
    ASSERT_TRUE(plainfs.start(plain_src, mnt_, root_ + "/plainfs.log"));
    auto plain = find_mount(mnt_);
    ASSERT_TRUE(plain);
    ASSERT_EQ(::kill(plainfs.pid(), SIGSTOP), 0);

    mount_test::Daemon d;
    ASSERT_TRUE(d.start({gguf_test::gguf_mount_binary(), src_, mnt_, "-f"}, log_));
    // "waiting": the number of requests plainfs has not answered; a failed read is an error.
    std::string waiting, read_error;
    const bool asked = mount_test::time_until([&] {
        return !mount_test::read_first_line(fusectl.file(*plain, "waiting"), &waiting, &read_error) || waiting != "0";
    }).has_value();
    std::ofstream abort(fusectl.file(*plain, "abort"));
    abort << "1\n" << std::flush;
    const bool aborted = abort.good();
    abort.close();
    ASSERT_TRUE(read_error.empty()) << read_error;
    ASSERT_TRUE(aborted) << "cannot write " << fusectl.file(*plain, "abort");
    ASSERT_TRUE(asked) << "gguf-mount never asked the stopped mount (waiting = " << waiting << ")";
    auto code = d.wait_exit();
    ASSERT_TRUE(code);
    EXPECT_EQ(*code, 1);
    EXPECT_EQ(gguf_test::without_timestamps(log()), "gguf-mount: error: " + mnt_ + ": a dead fuse.plainfs mount is there (Transport endpoint is " +
                         "not connected: its daemon is gone); clear it with 'fusermount3 -uz " + mnt_ +
                         "', then mount again; nothing mounted\n");
#endif
}

TEST_F(MountPoint, DeadMountOfAnotherTypeIsRefusedWithTheCommandThatClearsIt) {
    copy_case_shards("notensors/t7", src_);
    ASSERT_TRUE(mount({"-o", "subtype=othertool"}));
    ASSERT_EQ(find_mount(mnt_)->fstype, "fuse.othertool");
    ASSERT_EQ(::kill(daemon_.pid(), SIGKILL), 0);
    ASSERT_TRUE(daemon_.wait_exit());

    auto r = run_refused(src_, mnt_);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount: error: " + mnt_ + ": a dead fuse.othertool mount is there (Transport endpoint is " +
                         "not connected: its daemon is gone); clear it with 'fusermount3 -uz " + mnt_ +
                         "', then mount again; nothing mounted\n");
    EXPECT_EQ(mounts_on(mnt_), 1u);  // left alone (TearDown clears it)
}

TEST_F(MountPoint, SecondMountOnALiveMountPointIsRefusedAndTheFirstKeepsServing) {
    mount_test::copy_kvzoo(src_);
    ASSERT_TRUE(mount());
    auto r = run_refused(src_, mnt_);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount: error: " + mnt_ + ": already mounted (fuse.gguf-mount from " + src_ +
                         "); unmount it first with 'gguf-mount umount " + mnt_ +
                         "', or choose another mount point; nothing mounted\n");
    EXPECT_EQ(mounts_on(mnt_), 1u);
    EXPECT_TRUE(daemon_.running());
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(MountPoint, NonEmptyMountPointIsRefusedUnlessAllowed) {
    copy_case_shards("notensors/t7", src_);
    gguf_test::write_file(mnt_ + "/notes.txt", "mine\n");
    auto r = run_refused(src_, mnt_);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount: error: " + mnt_ + ": mount point is not empty (it holds 'notes.txt'), and the " +
                         "mount would hide its files; use an empty directory, or pass --allow-non-empty " +
                         "(-o nonempty) to mount over them; nothing mounted\n");
    EXPECT_EQ(mounts_on(mnt_), 0u);

    for (const std::vector<std::string>& allow : {std::vector<std::string>{"--allow-non-empty"},
                                                   std::vector<std::string>{"-o", "nonempty"}}) {
        ASSERT_TRUE(mount(allow)) << allow.back();
        EXPECT_EQ(list_dir(mnt_), std::vector<std::string>{"notensors.gguf"});
        EXPECT_EQ(unmount_and_wait(), 0) << log();
        EXPECT_EQ(gguf_test::read_file(mnt_ + "/notes.txt"), "mine\n");
    }
}

// SOURCE and MOUNTPOINT swapped: the "mount point" holds the shards. Said so, and
// --allow-non-empty (which would hide the models) is not offered.
/// Runs gguf-mount with SOURCE and MOUNTPOINT swapped (`empty` as SOURCE, the model directory
/// `models` as the mount point) and expects the refusal that names `model` (as found in
/// `models`) and the right order.
void expect_refused_as_swapped(const std::string& empty, const std::string& models, const std::string& model) {
    auto r = run_refused(empty, models);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount: error: " + models + ": mount point holds models (e.g. '" + model + "'); " +
                         "did you swap SOURCE and MOUNTPOINT? The order is 'gguf-mount SOURCE MOUNTPOINT' " +
                         "(MOUNTPOINT an empty directory); nothing mounted\n");
    EXPECT_EQ(mounts_on(models), 0u);
}

TEST_F(MountPoint, SwappedArgumentsAreNamedAsSuch) {
    copy_case_shards("notensors/t7", src_);
    expect_refused_as_swapped(mnt_, src_, "notensors-00001-of-00001.gguf");
}

// The same with the models one folder down (a folder per quantization, as model directories
// often are): before, the message offered --allow-non-empty, which hid the models.
TEST_F(MountPoint, SwappedArgumentsWithModelsInSubFoldersAreNamedAsSuch) {
    ASSERT_EQ(::mkdir((src_ + "/Q4").c_str(), 0755), 0);
    copy_case_shards("notensors/t7", src_ + "/Q4");
    gguf_test::write_file(src_ + "/README.md", "models\n");
    expect_refused_as_swapped(mnt_, src_, "Q4/notensors-00001-of-00001.gguf");
}

// An empty SOURCE and a mount point holding files: said to be swapped too, and
// --allow-non-empty is not offered.
TEST_F(MountPoint, AnEmptySourceAndAFullMountPointAreNamedAsSwapped) {
    gguf_test::write_file(src_ + "/notes.txt", "mine\n");
    auto r = run_refused(mnt_, src_);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount: error: " + src_ + ": mount point is not empty (it holds 'notes.txt') and SOURCE " +
                         mnt_ + " is an empty directory; did you swap SOURCE and MOUNTPOINT? The order is " +
                         "'gguf-mount SOURCE MOUNTPOINT' (MOUNTPOINT an empty directory); nothing mounted\n");
    EXPECT_EQ(mounts_on(src_), 0u);
}

// A SOURCE that does not exist is named as SOURCE, and nothing is mounted.
TEST_F(MountPoint, AMissingSourceIsNamedAsSource) {
    auto r = run_refused(src_ + "/nothere", mnt_);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount: error: SOURCE " + src_ + "/nothere: No such file or directory; nothing mounted\n");
    EXPECT_EQ(mounts_on(mnt_), 0u);
}

TEST_F(MountPoint, MountPointInsideSourceIsNeverScannedAndUnmounts) {
    copy_case_shards("notensors/t7", src_);
    mnt_ = src_ + "/mnt";  // TearDown unmounts this one
    ASSERT_EQ(::mkdir(mnt_.c_str(), 0755), 0);
    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_), std::vector<std::string>{"notensors.gguf"});
    // Changes in SOURCE make the daemon rescan; each rescan must leave its own mount alone.
    for (const char* name : {"a.txt", "b.txt"}) {
        gguf_test::write_file(src_ + "/" + name, name);
        ASSERT_TRUE(mount_test::time_until([&] { return mount_test::exists(mnt_ + "/" + name); })) << log();
    }
    ::kill(daemon_.pid(), SIGHUP);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    EXPECT_EQ(list_dir(mnt_), (std::vector<std::string>{"a.txt", "b.txt", "notensors.gguf"}));
    EXPECT_FALSE(mount_test::exists(mnt_ + "/mnt"));
    auto r = gguf_test::run({mount_test::fusermount3_path(), "-u", mnt_});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(daemon_.wait_exit(), 0) << log();
}

TEST_F(MountPoint, SourceThatIsOrLiesInsideTheMountPointIsRefused) {
    auto r = run_refused(mnt_, mnt_);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount: error: SOURCE " + mnt_ + " is the mount point: the mount would hide it; choose a " +
                         "mount point outside SOURCE (e.g. a new empty directory next to it); nothing mounted\n");

    // A first shard inside the mount point: its set would be hidden by the mount.
    const std::string inner = mnt_ + "/models";
    ASSERT_EQ(::mkdir(inner.c_str(), 0755), 0);
    mount_test::copy_kvzoo(inner);
    const std::string first = inner + "/" + mount_test::kvzoo_shard(1);
    r = run_refused(first, mnt_);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount: error: SOURCE " + first + " is inside the mount point " + mnt_ +
                         ": the mount would hide it; choose a mount point outside SOURCE (e.g. a new empty " +
                         "directory next to it); nothing mounted\n");
    EXPECT_EQ(mounts_on(mnt_), 0u);
}

// Hugging Face cache: snapshots/<rev>/x-00001-of-00007.gguf -> ../../blobs/<hash>. The set is
// recognised by the link names the user gave, and served byte-exact.
TEST_F(MountPoint, SymlinkedFirstShardSourceAsInTheHuggingFaceCache) {
    const std::string blobs = src_ + "/blobs", snap = src_ + "/snapshots", rev = snap + "/r1";
    ASSERT_EQ(::mkdir(blobs.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(snap.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(rev.c_str(), 0755), 0);
    for (int i = 1; i <= 7; ++i) {
        const std::string blob = "blob" + std::to_string(1000 + i * 37);
        gguf_test::write_file(blobs + "/" + blob,
                              gguf_test::read_file(fixture("kvzoo/t7/" + mount_test::kvzoo_shard(i))));
        ASSERT_EQ(::symlink(("../../blobs/" + blob).c_str(), (rev + "/" + mount_test::kvzoo_shard(i)).c_str()), 0);
    }
    const std::string first = rev + "/" + mount_test::kvzoo_shard(1);
    ASSERT_TRUE(mount({}, first));
    EXPECT_EQ(list_dir(mnt_), std::vector<std::string>{"kvzoo.gguf"});
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256);
    EXPECT_EQ(find_mount(mnt_)->source, first);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

}  // namespace
