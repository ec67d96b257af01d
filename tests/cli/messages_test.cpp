// User messages for the faults new users hit (issue 13.6): each is one line that says what is
// wrong and what to do, asserted exactly.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using gguf_test::TempDir;

std::string kvzoo_shard(int i) { return "kvzoo-0000" + std::to_string(i) + "-of-00007.gguf"; }

/// realpath(3) of `p` (the mount resolves SOURCE's directory, so messages name the real path).
std::string real(const std::string& p) {
    char buf[PATH_MAX];
    return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

/// A directory with the 7 kvzoo shards, and an empty directory to mount on.
struct KvzooDirs {
    TempDir src, mnt;
    KvzooDirs() {
        for (int i = 1; i <= 7; ++i) gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(i)), src / kvzoo_shard(i));
    }
};

TEST(CliMessages, MistypedCommandIsUnknownAndTheClosestIsSuggested) {
    for (auto [typed, meant] : {std::pair<std::string, std::string>{"merg", "merge"}, {"chek", "check"},
                                {"spilt", "split"}, {"prefech", "prefetch"}}) {
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), typed, "a", "b"});
        EXPECT_EQ(r.exit_code, 2) << typed;
        EXPECT_EQ(r.err, "gguf-mount: unknown command '" + typed +
                             "' (and no file or directory of that name); did you mean '" + meant +
                             "'? (commands: split, merge, check, prefetch, cache, mount, umount; see 'gguf-mount --help')\n");
    }
    // A word close to no command is taken as SOURCE, which does not exist.
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "no-such-models", "b"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount: error: SOURCE no-such-models: No such file or directory; nothing mounted\n");
}

TEST(CliMessages, OneUnknownWordAloneIsAnUnknownCommandNotAMissingMountpoint) {
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "frobnicate"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.err, "gguf-mount: unknown command 'frobnicate' (and no file or directory of that name); commands: "
                     "split, merge, check, prefetch, cache, mount, umount; see 'gguf-mount --help'\n");
    // A path or a URL alone still lacks its MOUNTPOINT.
    for (std::string source : {std::string("./frobnicate"), std::string("https://example.invalid/m/"), std::string("-f")}) {
        r = gguf_test::run({gguf_test::gguf_mount_binary(), source});
        EXPECT_EQ(r.exit_code, 2) << source;
        EXPECT_NE(r.err.find("SOURCE and MOUNTPOINT are required"), std::string::npos) << source << ": " << r.err;
    }
}

TEST(CliMessages, SecondShardAsMountSourceIsOneLineNamingTheFirstShard) {
    KvzooDirs d;
    const std::string second = real(d.src.path()) + "/" + kvzoo_shard(2);
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), d.src / kvzoo_shard(2), d.mnt.path(), "-f"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(gguf_test::without_timestamps(r.err), "gguf-mount: error: " + second +
                         ": is shard 2 of 7, not the first shard; give kvzoo-00001-of-00007.gguf instead; "
                         "nothing mounted\n");
}

TEST(CliMessages, FirstShardThatIsNotGgufSaysSoWithoutNotShown) {
    TempDir src, mnt;
    gguf_test::write_file(src / "junk-00001-of-00002.gguf", "this is not a GGUF file\n");
    gguf_test::write_file(src / "junk-00002-of-00002.gguf", "neither is this one\n");
    const std::string first = real(src.path()) + "/junk-00001-of-00002.gguf";
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), src / "junk-00001-of-00002.gguf", mnt.path(), "-f"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(gguf_test::without_timestamps(r.err), "gguf-mount: error: " + first + ": offset 0: not a GGUF file (bad magic); nothing mounted\n");

    r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", src / "junk-00001-of-00002.gguf"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.out.find("1 problem:\n  junk.gguf: " + src / "junk-00001-of-00002.gguf" +
                         ": offset 0: not a GGUF file (bad magic)\n"),
              std::string::npos)
        << r.out;
}

TEST(CliMessages, CheckOfAFirstShardCountsNoDirectory) {
    KvzooDirs d;
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", d.src / kvzoo_shard(1)});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    ASSERT_GE(r.out.size(), 2u);
    const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
    EXPECT_EQ(last,
              "summary: 1 merged set(s), 0 byte-split file(s), 0 companion file(s), 0 shard file(s) shown, "
              "0 problem(s)\n");
}

TEST(CliMessages, MergeIntoADirectoryAsksForAFileName) {
    KvzooDirs d;
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", d.src / kvzoo_shard(1), d.mnt.path()});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount: error: " + d.mnt.path() + ": is a directory; give the output file's name, e.g. " +
                         d.mnt.path() + "/model.gguf\n");
}

TEST(CliMessages, OutputIntoAMissingDirectorySaysToCreateIt) {
    KvzooDirs d;
    const std::string out = d.mnt / "no/such/dir/model.gguf";
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", d.src / kvzoo_shard(1), out});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount: error: " + out + ": directory " + d.mnt / "no/such/dir" +
                         " does not exist; create it first (mkdir -p " + d.mnt / "no/such/dir" + ")\n");
}

}  // namespace

namespace {

// Issue 30, item 11: `split` into a missing folder printed the whole plan (n_split, one line per
// shard) and then the error: the error alone now, nothing on stdout.
TEST(CliMessages, SplitIntoAMissingFolderPrintsNoPlanFirst) {
    TempDir out;
    const std::string prefix = out / "no/such/dir/model";
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "split", "--split-max-tensors", "10",
                             fixture("tiny-llama/tiny-llama.gguf"), prefix});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("does not exist; create it first (mkdir -p " + out / "no/such/dir" + ")"), std::string::npos)
        << r.err;
}

// Usage errors of mount options pointed to `gguf-mount --help`, which lists none of them.
TEST(CliMessages, AMountUsageErrorPointsToTheMountHelp) {
    KvzooDirs d;
    for (const std::vector<std::string>& bad :
         {std::vector<std::string>{"--readahead-kb", "x"}, std::vector<std::string>{"--no-such-option"}}) {
        std::vector<std::string> argv = {gguf_test::gguf_mount_binary(), d.src.path(), d.mnt.path()};
        argv.insert(argv.end(), bad.begin(), bad.end());
        auto r = gguf_test::run(argv);
        EXPECT_EQ(r.exit_code, 2) << bad.front() << ": " << r.err;
        EXPECT_NE(r.err.find("(see 'gguf-mount mount --help')"), std::string::npos) << r.err;
    }
}

// An option of one kind of SOURCE given with another would be ignored: each command refuses it
// as a usage error naming the option and the sources it is for, before anything is read.
TEST(CliMessages, AnOptionOfAnotherKindOfSourceIsAUsageErrorNamingTheSourcesItIsFor) {
    KvzooDirs d;
    const std::string first = d.src / kvzoo_shard(1);
    const std::string out = d.mnt.path() + "/merged.gguf";
    struct Case {
        std::vector<std::string> argv;
        std::string says;
    };
    const std::string oci = "--plain-http is an option of oci:// and ollama:// sources; SOURCE is not one";
    const std::string s3 = " is an option of s3:// sources; SOURCE is not one";
    const std::vector<Case> cases = {
        {{"mount", d.src.path(), d.mnt.path(), "--plain-http"}, oci},
        {{"check", d.src.path(), "--plain-http"}, oci},
        {{"check", "s3://bucket/models/", "--plain-http"}, oci},
        {{"prefetch", "https://127.0.0.1:9/m/", "--plain-http"}, oci},
        {{"merge", first, out, "--plain-http"}, oci},
        {{"mount", "oci://127.0.0.1:9/m", d.mnt.path(), "--region", "eu-west-1"}, "--region" + s3},
        {{"check", d.src.path(), "--no-sign-request"}, "--no-sign-request" + s3},
        {{"prefetch", "hf://org/repo", "--endpoint-url", "http://127.0.0.1:9"}, "--endpoint-url" + s3},
        {{"merge", first, out, "--profile", "x"}, "--profile" + s3},
    };
    for (const Case& c : cases) {
        std::vector<std::string> argv = {gguf_test::gguf_mount_binary()};
        argv.insert(argv.end(), c.argv.begin(), c.argv.end());
        auto r = gguf_test::run(argv);
        EXPECT_EQ(r.exit_code, 2) << c.argv[0] << " " << c.argv[1] << ": " << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
        EXPECT_FALSE(std::filesystem::exists(out)) << "nothing written";
    }
    // Where it belongs it is taken (no usage error; the unreachable registry is another matter).
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", "oci://127.0.0.1:9/m", "--plain-http",
                             "--net-timeout", "1"});
    EXPECT_NE(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err.find("is an option of"), std::string::npos) << r.err;
}

// "serving X" lines came before the "nothing mounted" of an override unfit for the model.
TEST(CliMessages, NoServingLineBeforeNothingMounted) {
    KvzooDirs d;
    gguf_test::write_file(d.src / "README.md", "a companion, served as it is\n");
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), d.src.path(), d.mnt.path(), "-f", "--remove-kv",
                             "no.such.key"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("nothing mounted"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("serving "), std::string::npos) << r.err;
}

}  // namespace
