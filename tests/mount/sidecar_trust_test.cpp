// Sidecars under a root daemon (issue 30, items 1, 2 and 4), reproduced as the review did: the
// daemon runs as root with allow_other, the attacker is uid 65534 (nobody), who may write a folder
// under SOURCE. A sidecar is the contents of that folder, so it speaks for nobody, not for root:
//  - str:@FILE naming a path outside the sidecar's folder (absolute, "..", /proc/self/environ)
//    is refused and the model not shown; a link named as @FILE, or a sidecar that is a link,
//    is not followed and the model is served without the edits; nothing of the secret is ever
//    served, logged or printed by `check`;
//  - an @FILE root owns in nobody's folder (root 0600) is applied, but the served mode is judged
//    over it: nobody cannot read the edited model;
//  - a FIFO named as @FILE neither hangs the mount nor is waited on;
//  - in a sticky shared folder, nobody's sidecar for root's model is not applied (a Note says so)
//    and nobody's NAME.gguf does not hide root's merged set.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mount/mount_fixture.hpp"
#include "support/gguf_rewrite.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using mount_test::as_user;
using mount_test::exists;

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;
const char* const kTiny = "tiny-llama/tiny-llama.gguf";

/// 0 if `path` opens read-only (closed again), else errno.
int open_errno(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    ::close(fd);
    return 0;
}

/// Every regular file under `dir` (recursive), as paths.
void files_under(const std::string& dir, std::vector<std::string>* out) {
    for (const std::string& name : mount_test::list_dir(dir)) {
        const std::string p = dir + "/" + name;
        struct stat st {};
        if (::lstat(p.c_str(), &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) files_under(p, out);
        else if (S_ISREG(st.st_mode)) out->push_back(p);
    }
}

class SidecarTrust : public mount_test::MountFixture {
protected:
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "the attack needs root (the daemon) and uid 65534 (the attacker)";
        MountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        ASSERT_EQ(::chmod(root_.c_str(), 0755), 0);
        ASSERT_EQ(::chmod(src_.c_str(), 0755), 0);
        // The secret: a root-only file beside SOURCE and a variable of the daemon's environment.
        token_ = "SECRET-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand());
        secret_dir_ = root_ + "/private";
        ASSERT_EQ(::mkdir(secret_dir_.c_str(), 0700), 0);
        secret_ = secret_dir_ + "/secret.txt";
        gguf_test::write_file(secret_, token_ + "\n");
        ASSERT_EQ(::chmod(secret_.c_str(), 0600), 0);
        ASSERT_EQ(::setenv("GGUF_TEST_DAEMON_SECRET", token_.c_str(), 1), 0);
    }
    void TearDown() override {
        ::unsetenv("GGUF_TEST_DAEMON_SECRET");
        MountFixture::TearDown();
    }

    /// A folder src_/NAME of nobody's (0755) holding nobody's copy of tiny-llama as tiny.gguf.
    std::string user_folder(const std::string& name) {
        const std::string d = src_ + "/" + name;
        EXPECT_EQ(::mkdir(d.c_str(), 0755), 0);
        gguf_test::copy_file(fixture(kTiny), d + "/tiny.gguf");
        as_nobody(d);
        as_nobody(d + "/tiny.gguf");
        return d;
    }
    /// Writes `text` to `path` as nobody's file (mode 0644).
    void nobody_writes(const std::string& path, const std::string& text) {
        gguf_test::write_file(path, text);
        as_nobody(path);
    }
    static void as_nobody(const std::string& path) { EXPECT_EQ(::lchown(path.c_str(), kNobody, kNogroup), 0) << path; }

    /// Asserts that no model served holds the secret, that any other file that does (a link
    /// planted in the folder is a companion, catalog rule 1, judged by rule 8 like any file:
    /// served to whom could read its target) is not readable by nobody, and that nothing of
    /// it shows in the log or in `check`.
    void expect_no_secret_anywhere() {
        std::vector<std::string> served;
        files_under(mnt_, &served);
        EXPECT_FALSE(served.empty());
        for (const std::string& f : served) {
            const bool holds = gguf_test::read_file(f).find(token_) != std::string::npos;
            if (f.size() > 5 && f.compare(f.size() - 5, 5, ".gguf") == 0) {
                EXPECT_FALSE(holds) << f << " serves the secret";
            } else if (holds) {
                EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return open_errno(f); }), EACCES) << f;
            }
        }
        EXPECT_EQ(log().find(token_), std::string::npos) << log();
        const auto check = gguf_test::run({gguf_test::gguf_mount_binary(), "check", src_});
        EXPECT_EQ((check.out + check.err).find(token_), std::string::npos) << check.out << check.err;
        const auto json = gguf_test::run({gguf_test::gguf_mount_binary(), "check", "--json", src_});
        EXPECT_EQ((json.out + json.err).find(token_), std::string::npos);
    }

    std::string token_, secret_dir_, secret_;
};

TEST_F(SidecarTrust, AtFileOutsideTheSidecarsFolderIsNeverRead) {
    // Each attack in a folder of its own (one bad line refuses a whole sidecar).
    const std::string abs = user_folder("abs"), rel = user_folder("rel"), env = user_folder("env");
    const std::string link = user_folder("link"), sidelink = user_folder("sidelink"), sub = user_folder("sub");
    nobody_writes(abs + "/tiny.gguf.kv", "x.abs=str:@" + secret_ + "\n");
    nobody_writes(rel + "/tiny.gguf.kv", "x.rel=str:@../../../../../../../.." + secret_ + "\n");
    nobody_writes(env + "/tiny.gguf.kv", "x.env=str:@/proc/self/environ\n");
    ASSERT_EQ(::symlink(secret_.c_str(), (link + "/secret.link").c_str()), 0);
    as_nobody(link + "/secret.link");
    nobody_writes(link + "/tiny.gguf.kv", "x.link=str:@secret.link\n");
    ASSERT_EQ(::symlink(secret_.c_str(), (sidelink + "/tiny.gguf.kv").c_str()), 0);  // the sidecar is a link
    as_nobody(sidelink + "/tiny.gguf.kv");
    // A link as a folder on the way: sub/d -> the folder holding the secret.
    ASSERT_EQ(::symlink(secret_dir_.c_str(), (sub + "/d").c_str()), 0);
    as_nobody(sub + "/d");
    nobody_writes(sub + "/tiny.gguf.kv", "x.sub=str:@d/secret.txt\n");

    ASSERT_TRUE(mount({"-o", "allow_other"}));
    const std::string original = gguf_test::read_file(fixture(kTiny));
    // Outside the folder: a bad line of the sidecar's owner, the model not shown.
    EXPECT_FALSE(exists(mnt_ + "/abs/tiny.gguf"));
    EXPECT_FALSE(exists(mnt_ + "/rel/tiny.gguf"));
    EXPECT_FALSE(exists(mnt_ + "/env/tiny.gguf"));
    EXPECT_NE(log().find("is not in the sidecar's folder"), std::string::npos) << log();
    // Links, which anyone who may write the folder can plant: served without the edits.
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/link/tiny.gguf"), original);
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/sidelink/tiny.gguf"), original);
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/sub/tiny.gguf"), original);
    EXPECT_NE(log().find("symbolic link"), std::string::npos) << log();
    expect_no_secret_anywhere();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(SidecarTrust, RootsFileInTheUsersFolderNarrowsTheServedMode) {
    const std::string d = user_folder("own");
    const std::string priv = d + "/private.txt";
    gguf_test::write_file(priv, token_);
    ASSERT_EQ(::chmod(priv.c_str(), 0600), 0);  // root's, 0600
    nobody_writes(d + "/tiny.gguf.kv", "x.private=str:@private.txt\n");
    ASSERT_EQ(as_user(kNobody, kNogroup, [&] { return open_errno(priv); }), EACCES);

    ASSERT_TRUE(mount({"-o", "allow_other"}));
    const std::string served = d.substr(src_.size()) + "/tiny.gguf";
    struct stat st {};
    ASSERT_EQ(::stat((mnt_ + served).c_str(), &st), 0) << log();
    // Judged over the shards AND the @FILE: nobody (the owner served) cannot read private.txt.
    EXPECT_EQ(st.st_mode & 0444, 0u) << std::oct << st.st_mode;
    EXPECT_EQ(as_user(kNobody, kNogroup, [&] { return open_errno(mnt_ + served); }), EACCES);
    // Made readable to all, the edit is served to all (the rule is the mode, not a refusal).
    ASSERT_EQ(::chmod(priv.c_str(), 0644), 0);
    const bool readable = mount_test::time_until([&] {
        return as_user(kNobody, kNogroup, [&] { return open_errno(mnt_ + served); }) == 0;
    }, mount_test::kLiveUpdateLimit).has_value();
    EXPECT_TRUE(readable) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(SidecarTrust, AFifoAsAtFileNeitherHangsTheMountNorIsWaitedOn) {
    const std::string d = user_folder("fifo");
    ASSERT_EQ(::mkfifo((d + "/t.jinja").c_str(), 0644), 0);
    as_nobody(d + "/t.jinja");
    nobody_writes(d + "/tiny.gguf.kv", "tokenizer.chat_template=str:@t.jinja\n");
    ASSERT_TRUE(mount({"-o", "allow_other"}));  // ready within kTimeout, not blocked on the FIFO
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/fifo/tiny.gguf"), gguf_test::read_file(fixture(kTiny)));
    EXPECT_NE(log().find("not a regular file (a FIFO)"), std::string::npos) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(SidecarTrust, AnotherUsersSidecarOrShadowInAStickyFolderChangesNothing) {
    // Root's model in a shared 1777 folder; nobody may create files there but not touch root's.
    const std::string shared = src_ + "/shared";
    ASSERT_EQ(::mkdir(shared.c_str(), 0755), 0);
    ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
    mount_test::copy_kvzoo(shared);
    nobody_writes(shared + "/kvzoo.gguf.kv", "llama.context_length=int:1\n");
    ASSERT_TRUE(mount({"-o", "allow_other"}));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/shared/kvzoo.gguf"), mount_test::kKvzooMergedSha256);
    EXPECT_NE(log().find("owned by uid 65534"), std::string::npos) << log();
    const auto check = gguf_test::run({gguf_test::gguf_mount_binary(), "check", src_});
    EXPECT_NE(check.out.find("owned by uid 65534, not by the daemon's uid 0"), std::string::npos) << check.out;
    EXPECT_NE(check.out.find("served without its edits"), std::string::npos) << check.out;

    // nobody's own kvzoo.gguf would hide root's merged set (rule 6): it does not.
    nobody_writes(shared + "/kvzoo.gguf", "not the model\n");
    EXPECT_TRUE(mount_test::time_until([&] { return log().find("does not hide the merged model") != std::string::npos; },
                                       mount_test::kLiveUpdateLimit)
                    .has_value())
        << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/shared/kvzoo.gguf"), mount_test::kKvzooMergedSha256);

    // Root's own sidecar there is applied (the owner rule, not a ban on sticky folders).
    ASSERT_EQ(::unlink((shared + "/kvzoo.gguf").c_str()), 0);
    ASSERT_EQ(::unlink((shared + "/kvzoo.gguf.kv").c_str()), 0);
    gguf_test::write_file(shared + "/kvzoo.gguf.kv", "llama.context_length=int:1\n");
    EXPECT_TRUE(mount_test::time_until([&] {
                    return gguf_test::sha256_file(mnt_ + "/shared/kvzoo.gguf") != mount_test::kKvzooMergedSha256;
                }, mount_test::kLiveUpdateLimit)
                    .has_value())
        << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

}  // namespace
