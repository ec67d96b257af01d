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
