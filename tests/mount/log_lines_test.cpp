// The lines a mount logs, as a new user reads them (issue 25): timestamps in the foreground, a
// log file for a daemonized mount on a host without syslog (and the warning when there is
// none), a set still being downloaded not reported as an error, no jargon at info level.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using mount_test::lines_with;

/// "2026-12-01 11:40:00.123 " at the start of a line.
const std::regex kTimestamp(R"(^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} )");

/// The non-empty lines of `text`.
std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> out;
    size_t at = 0;
    while (at < text.size()) {
        size_t end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        if (end > at) out.push_back(text.substr(at, end - at));
        at = end + 1;
    }
    return out;
}

/// Sets an environment variable for the life of the object (the gguf-mount children inherit it).
struct ScopedEnv {
    ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
    ~ScopedEnv() { ::unsetenv(name_); }
    const char* name_;
};

class LogLines : public mount_test::MountFixture {
protected:
    void TearDown() override {
        mount_test::clean_up_daemonized_mount(mnt_);
        MountFixture::TearDown();
    }
};

TEST_F(LogLines, ForegroundLinesStartWithATimestamp) {
    mount_test::copy_kvzoo(src_);
    ASSERT_TRUE(mount());
    const auto all = lines(log());
    ASSERT_FALSE(all.empty());
    for (const auto& l : all) EXPECT_TRUE(std::regex_search(l, kTimestamp)) << l;
    // Sizes for people, with the exact count (it said "3525664 bytes" alone).
    EXPECT_EQ(lines_with(log(), "gguf-mount: info: serving kvzoo.gguf: merged-set, 3.36 MiB (3525664 bytes)").size(), 1u)
        << log();
    EXPECT_EQ(unmount_and_wait(), 0);
}

/// A daemonized mount's messages after the fork went to syslog only: lost without a syslog
/// daemon (containers, microVMs). --log-file keeps them, one timestamped line each.
TEST_F(LogLines, ADaemonizedMountWithALogFileWritesItsLaterMessagesThere) {
    const std::string file = root_ + "/gguf-mount.log";
    gguf_test::write_file(file, "an older line\n");  // appended to, never truncated
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), src_, mnt_, "--log-file", file});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("syslog"), std::string::npos) << r.err;  // a log file: no warning
    // Later, in the daemon: a model appears, and a set that misses a shard.
    mount_test::copy_kvzoo(src_);
    auto seen = mount_test::time_until([&] {
        return gguf_test::read_file(file).find("now serving kvzoo.gguf") != std::string::npos;
    });
    const std::string text = gguf_test::read_file(file);
    ASSERT_TRUE(seen) << text;
    const auto all = lines(text);
    ASSERT_GE(all.size(), 3u) << text;
    EXPECT_EQ(all[0], "an older line");
    for (size_t i = 1; i < all.size(); ++i) EXPECT_TRUE(std::regex_search(all[i], kTimestamp)) << all[i];
    EXPECT_EQ(lines_with(text, "now serving kvzoo.gguf").size(), 1u) << text;
}

/// The one line `r` printed on stderr: "gguf-mount: error: --log-file LOG: WHY; nothing mounted".
std::string only_line(const gguf_test::RunResult& r) {
    const auto all = lines(r.err);
    return all.size() == 1 ? all[0] : "(" + std::to_string(all.size()) + " lines) " + r.err;
}

/// Issue 30, item 5: root opened logs/gguf.log through a link planted by the owner of logs/ (uid
/// 65534) and appended to what it named. A link, a file of another uid, a hard link and a
/// folder others may write are each refused with one line and exit status 1, and the file the
/// link or hard link names is left as it was.
TEST_F(LogLines, ALogFileThatIsALinkOrNotTheDaemonsOwnIsRefusedAndItsTargetUntouched) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (a folder of uid 65534)";
    mount_test::copy_kvzoo(src_);
    const std::string victim = root_ + "/victim", logs = root_ + "/logs", log_file = logs + "/gguf.log";
    ASSERT_EQ(::mkdir(victim.c_str(), 0700), 0);
    gguf_test::write_file(victim + "/secret", "root's own\n");
    ASSERT_EQ(::chmod((victim + "/secret").c_str(), 0600), 0);
    ASSERT_EQ(::mkdir(logs.c_str(), 0755), 0);
    ASSERT_EQ(::chown(logs.c_str(), 65534, 65534), 0);
    auto mount_with_log = [&] {
        return gguf_test::run({gguf_test::gguf_mount_binary(), src_, mnt_, "--log-file", log_file});
    };
    const std::string refused = "gguf-mount: error: --log-file " + log_file + ": ";

    ASSERT_EQ(::symlink((victim + "/secret").c_str(), log_file.c_str()), 0);
    auto r = mount_with_log();
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(only_line(r), refused + "is a symbolic link: refused (the daemon would append to whatever it points "
                                      "to); give the file itself; nothing mounted");
    EXPECT_EQ(gguf_test::read_file(victim + "/secret"), "root's own\n");
    EXPECT_FALSE(mount_test::exists(mnt_ + "/kvzoo.gguf")) << "mounted";
    // A link to a file that is not there yet (the issue's victim/profile.sh): nothing is created.
    ASSERT_EQ(::unlink(log_file.c_str()), 0);
    ASSERT_EQ(::symlink((victim + "/profile.sh").c_str(), log_file.c_str()), 0);
    r = mount_with_log();
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(only_line(r).find("is a symbolic link: refused"), std::string::npos) << r.err;
    EXPECT_FALSE(mount_test::exists(victim + "/profile.sh"));
    // The folder's owner puts their own file there.
    ASSERT_EQ(::unlink(log_file.c_str()), 0);
    gguf_test::write_file(log_file, "");
    ASSERT_EQ(::chown(log_file.c_str(), 65534, 65534), 0);
    r = mount_with_log();
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(only_line(r), refused + "is owned by uid 65534, not by this daemon's uid 0: refused (its owner chose "
                                      "what it is); remove it or give another file; nothing mounted");
    // A hard link to root's file.
    ASSERT_EQ(::unlink(log_file.c_str()), 0);
    ASSERT_EQ(::link((victim + "/secret").c_str(), log_file.c_str()), 0);
    r = mount_with_log();
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(only_line(r), refused + "has 2 hard links: refused (another name of it may be any file); remove it or "
                                      "give another file; nothing mounted");
    EXPECT_EQ(gguf_test::read_file(victim + "/secret"), "root's own\n");
    // A folder everyone may write, without the sticky bit.
    ASSERT_EQ(::unlink(log_file.c_str()), 0);
    ASSERT_EQ(::chown(logs.c_str(), 0, 0), 0);
    ASSERT_EQ(::chmod(logs.c_str(), 0777), 0);
    r = mount_with_log();
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(only_line(r), refused + "its folder " + logs + " is writable by its group or others without the sticky "
                                      "bit (mode 0777): refused (another user could put a link there); give a folder "
                                      "only its owner may write; nothing mounted");
    EXPECT_FALSE(mount_test::exists(log_file));
    // With the sticky bit (as /tmp) the daemon's own new file is fine.
    ASSERT_EQ(::chmod(logs.c_str(), 01777), 0);
    r = mount_with_log();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256);
    EXPECT_NE(gguf_test::read_file(log_file).find("serving kvzoo.gguf"), std::string::npos);
}

/// Issue 30, item 5: a served name "$(touch ...)" reached a log line as it is, and a shell that
/// sourced the log ran it. A name in a log line is one shell word that a shell takes literally:
/// quoted when it holds anything but [A-Za-z0-9_@%+=:,./-], escaped inside as everywhere.
TEST_F(LogLines, ServedNamesAreQuotedSoThatAShellTakesThemLiterally) {
    gguf_test::write_file(src_ + "/$(touch pwned)`touch pwned2`.txt", "x");
    gguf_test::write_file(src_ + "/it's\na;b.txt", "y");
    ASSERT_TRUE(mount());
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    const std::string text = gguf_test::without_timestamps(log());
    const std::vector<std::pair<std::string, std::string>> words = {
        // the word in the log line, and what a shell makes of it (the escaped name)
        {"'$(touch pwned)`touch pwned2`.txt'", "$(touch pwned)`touch pwned2`.txt"},
        {"'it'\"'\"'s\\x0aa;b.txt'", "it's\\x0aa;b.txt"},
    };
    const std::string shell_dir = root_ + "/shell";
    ASSERT_EQ(::mkdir(shell_dir.c_str(), 0755), 0);
    for (const auto& [word, literal] : words) {
        EXPECT_EQ(lines_with(text, "gguf-mount: info: serving " + word + ": companion").size(), 1u) << text;
        // The word as the log has it, given to sh: printed as it is, nothing run.
        const auto said = lines_with(text, "gguf-mount: info: serving ");
        std::string found;
        for (const auto& l : said) {
            const size_t at = l.find("serving ") + 8, end = l.rfind(": companion");
            if (end != std::string::npos && l.compare(at, word.size(), word) == 0) found = l.substr(at, end - at);
        }
        ASSERT_FALSE(found.empty()) << text;
        gguf_test::write_file(shell_dir + "/line.sh", "printf '%s' " + found + " > out\n");
        auto r = gguf_test::run({"/bin/sh", "-c", "cd " + shell_dir + " && . ./line.sh"});
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(gguf_test::read_file(shell_dir + "/out"), literal);
    }
    EXPECT_FALSE(mount_test::exists(shell_dir + "/pwned")) << "a name in the log ran a command";
    EXPECT_FALSE(mount_test::exists(shell_dir + "/pwned2")) << "a name in the log ran a command";
}

/// With no syslog daemon a daemonized mount says once, before it forks, that its later messages
/// are lost and what to do (the socket checked is moved to a missing path for the test).
TEST_F(LogLines, WithoutASyslogSocketADaemonizedMountWarnsOnce) {
    mount_test::copy_kvzoo(src_);
    const std::string missing = root_ + "/no-syslog-here";
    {
        ScopedEnv env("GGUF_MOUNT_SYSLOG_SOCKET", missing);
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), src_, mnt_});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(lines_with(r.err, "no syslog daemon").size(), 1u) << r.err;
        EXPECT_EQ(lines_with(r.err, missing + ": No such file or directory").size(), 1u) << r.err;
        EXPECT_EQ(lines_with(r.err, "--log-file FILE").size(), 1u) << r.err;
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), mount_test::kKvzooMergedSha256);
        auto pids = mount_test::daemon_pids_with_argument(mnt_);
        ASSERT_TRUE(mount_test::unmount(mnt_));
        for (pid_t pid : pids) EXPECT_TRUE(mount_test::wait_gone(pid));
    }
    // A socket someone listens on: no warning.
    const std::string socket_path = root_ + "/log.sock";
    const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
    {
        ScopedEnv env("GGUF_MOUNT_SYSLOG_SOCKET", socket_path);
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), src_, mnt_});
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(r.err.find("syslog"), std::string::npos) << r.err;
    }
    ::close(fd);
}

/// Shards arriving one by one (a download into SOURCE) are a set that is not complete yet: said
/// at info level, not as an error, and served once the last shard is there.
TEST_F(LogLines, ASetStillBeingDownloadedIsNotAnError) {
    ASSERT_TRUE(mount());
    mount_test::copy_kvzoo(src_, 7);
    ASSERT_TRUE(mount_test::time_until([&] { return log().find("missing shard 7 of 7") != std::string::npos; }))
        << log();
    auto said = lines_with(log(), "missing shard 7 of 7");
    ASSERT_EQ(said.size(), 1u) << log();
    EXPECT_EQ(said[0].find(": error: "), std::string::npos) << said[0];
    EXPECT_NE(said[0].find(": info: "), std::string::npos) << said[0];
    gguf_test::copy_file(gguf_test::fixture("kvzoo/t7/" + mount_test::kvzoo_shard(7)), src_ + "/" + mount_test::kvzoo_shard(7));
    ASSERT_TRUE(mount_test::time_until([&] { return mount_test::exists(mnt_ + "/kvzoo.gguf"); })) << log();
    EXPECT_EQ(lines_with(log(), ": error: ").size(), 0u) << log();
    EXPECT_EQ(unmount_and_wait(), 0);
}

/// "access is checked on each caller's own credentials (open, opendir, lookup)" was jargon at
/// info level on every mount: now a debug line in plain words.
TEST_F(LogLines, TheAccessCheckLineIsNotJargonAtInfoLevel) {
    mount_test::copy_kvzoo(src_);
    ASSERT_TRUE(mount());
    EXPECT_EQ(log().find("credentials"), std::string::npos) << log();
    EXPECT_EQ(unmount_and_wait(), 0);
}

// Issue 30, item 10: a single file served with overrides was logged as a "companion" (README: a
// file shown as it is), though its header is new.
TEST_F(LogLines, ASingleFileWithOverridesIsNotLoggedAsACompanion) {
    gguf_test::copy_file(gguf_test::fixture("kvzoo/original.gguf"), src_ + "/kv.gguf");
    gguf_test::write_file(src_ + "/notes.txt", "plain");
    ASSERT_TRUE(mount({"--override-kv", "general.name=str:fixed"}));
    auto kv = lines_with(log(), "serving kv.gguf: ");
    ASSERT_EQ(kv.size(), 1u) << log();
    EXPECT_NE(kv[0].find("serving kv.gguf: single model with edited metadata, "), std::string::npos) << kv[0];
    EXPECT_EQ(lines_with(log(), "serving notes.txt: companion, ").size(), 1u) << log();
    EXPECT_EQ(unmount_and_wait(), 0);
}

// In a shard view a real NAME.gguf beside NAME's shards is served as its view's shards, not
// "instead" under its name: the clash line says which.
TEST_F(LogLines, ANameClashInAShardViewSaysTheRealFileIsServedAsItsViewShards) {
    mount_test::copy_kvzoo(src_);
    gguf_test::copy_file(gguf_test::fixture("kvzoo/original.gguf"), src_ + "/kvzoo.gguf");
    ASSERT_TRUE(mount({"--split-max-tensors", "20"}));
    auto clash = lines_with(log(), "name clash: a real file kvzoo.gguf exists");
    ASSERT_EQ(clash.size(), 1u) << log();
    EXPECT_NE(clash[0].find(" and wins (it is served as the shards of its view); not shown"), std::string::npos)
        << clash[0];
    EXPECT_EQ(clash[0].find("served instead"), std::string::npos) << clash[0];
    EXPECT_TRUE(mount_test::exists(mnt_ + "/kvzoo-00001-of-00003.gguf")) << log();
    EXPECT_EQ(unmount_and_wait(), 0);
}

}  // namespace
