// Names in what a person or a program reads (README, "Names in output"): `check` text and JSON,
// split/merge info lines and errors escape every name with one injective rule; `check --json`
// always prints one document; names longer than PATH_MAX and cat-joined sets are reported.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using gguf_test::TempDir;

std::string kvzoo_shard(int i) { return "kvzoo-0000" + std::to_string(i) + "-of-00007.gguf"; }

/// No control character (C0, DEL) in `s`: nothing a terminal or a log reader would act on.
::testing::AssertionResult no_control_bytes(const std::string& s) {
    for (size_t i = 0; i < s.size(); ++i) {
        auto u = static_cast<unsigned char>(s[i]);
        if ((u < 0x20 && u != '\n') || u == 0x7f) {
            return ::testing::AssertionFailure() << "byte " << int(u) << " at " << i << " in: " << s;
        }
    }
    return ::testing::AssertionSuccess();
}

gguf_test::RunResult check(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {gguf_test::gguf_mount_binary(), "check"};
    argv.insert(argv.end(), args.begin(), args.end());
    return gguf_test::run(argv);
}

// Issue 13.5: two names that differ only in a byte that is not UTF-8 printed the same (JSON:
// both U+FFFD) or raw (text).
TEST(Names, TwoNamesDifferingOnlyInAnInvalidBytePrintDifferentlyInTextAndJson) {
    TempDir src;
    gguf_test::write_file(src / "m\xff.txt", "a");
    gguf_test::write_file(src / "m\xfe.txt", "b");
    gguf_test::write_file(src / "caf\xc3\xa9 \\ x.txt", "c");  // valid UTF-8 kept, backslash doubled
    auto r = check({src.path()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("\nm\\xfe.txt: companion, 1 bytes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\nm\\xff.txt: companion, 1 bytes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\ncaf\xc3\xa9 \\\\ x.txt: companion, 1 bytes"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find('\xff'), std::string::npos) << r.out;

    r = check({"--json", src.path()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);  // throws (fails) on invalid JSON
    ASSERT_EQ(j["entries"].size(), 3u) << r.out;
    EXPECT_EQ(j["entries"][0]["path"], "caf\xc3\xa9 \\\\ x.txt");
    EXPECT_EQ(j["entries"][0]["path_hex"], "636166c3a9205c20782e747874");
    EXPECT_EQ(j["entries"][1]["path"], "m\\xfe.txt");
    EXPECT_EQ(j["entries"][1]["path_hex"], "6dfe2e747874");
    EXPECT_EQ(j["entries"][2]["path"], "m\\xff.txt");
    EXPECT_EQ(j["entries"][2]["path_hex"], "6dff2e747874");
}

// Issue 14.12: a newline or an ESC sequence in a name forged a line of `check` output or drove
// the terminal.
TEST(Names, NewlineAndEscapeInANameNeverReachCheckOutputRaw) {
    TempDir src;
    const std::string evil = "a\n\x1b[2Jb";
    gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(1)), src / (evil + "-00001-of-00007.gguf"));
    gguf_test::write_file(src / (evil + ".txt"), "x");
    auto r = check({src.path()});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_TRUE(no_control_bytes(r.out));
    EXPECT_NE(r.out.find("\na\\x0a\\x1b[2Jb.txt: companion, 1 bytes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\n  a\\x0a\\x1b[2Jb.gguf: " + src / "a\\x0a\\x1b[2Jb-00002-of-00007.gguf: missing shard 2"),
              std::string::npos)
        << r.out;
    r = check({"--json", src.path()});
    auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["problems"].size(), 1u) << r.out;
    EXPECT_EQ(j["problems"][0]["path"], "a\\x0a\\x1b[2Jb.gguf");
    EXPECT_EQ(j["problems"][0]["path_hex"], "610a1b5b324a622e67677566");
    EXPECT_TRUE(no_control_bytes(j["problems"][0]["reason"].get<std::string>()));
}

// Issue 14.12: the split and merge info lines (stderr) printed output names raw.
TEST(Names, SplitAndMergeInfoLinesEscapeNames) {
    TempDir work;
    const std::string prefix = work / "s\n\x1b[31mx";
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "split", "--split-max-tensors", "20",
                             fixture("tiny-llama/tiny-llama.gguf"), prefix});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(no_control_bytes(r.err));
    EXPECT_NE(r.err.find("s\\x0a\\x1b[31mx-00001-of-00002.gguf"), std::string::npos) << r.err;
    const std::string out = work / "m\n\x1b[31m.gguf";
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", prefix + "-00001-of-00002.gguf", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(no_control_bytes(r.err));
    EXPECT_NE(r.err.find("into '" + work / "m\\x0a\\x1b[31m.gguf'"), std::string::npos) << r.err;  // quote_name
    // An error names the file escaped too.
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", prefix + "-00001-of-00002.gguf", out});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(no_control_bytes(r.err));
    EXPECT_NE(r.err.find("m\\x0a\\x1b[31m.gguf"), std::string::npos) << r.err;
}

// Issue 14.13: `check --json` printed nothing on stdout when SOURCE could not be read.
TEST(Names, CheckJsonAlwaysPrintsOneDocument) {
    for (const std::string source : {std::string("/nonexistent/x\n"), std::string("/dev/null")}) {
        auto r = check({"--json", source});
        EXPECT_EQ(r.exit_code, 1) << source;
        nlohmann::json j;
        ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << "stdout: '" << r.out << "'";
        EXPECT_EQ(j["ok"], false);
        EXPECT_TRUE(j["entries"].empty());
        ASSERT_EQ(j["problems"].size(), 1u);
        EXPECT_EQ(j["problems"][0]["path"], ".");
        const std::string reason = j["problems"][0]["reason"];
        EXPECT_NE(reason.find(source == "/dev/null" ? "/dev/null: not a directory or a regular file"
                                                    : "/nonexistent/x\\x0a: No such file or directory"),
                  std::string::npos)
            << reason;
    }
}

/// Creates `depth` nested directories named `name` under `dir` with mkdirat (paths beyond
/// PATH_MAX cannot be made with one path), and a file "deep.gguf" in the last one.
void make_deep_tree(const std::string& dir, const std::string& name, int depth) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(fd, 0);
    for (int i = 0; i < depth; ++i) {
        ASSERT_EQ(::mkdirat(fd, name.c_str(), 0755), 0) << i;
        int next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY);
        ::close(fd);
        ASSERT_GE(next, 0);
        fd = next;
    }
    int f = ::openat(fd, "deep.gguf", O_WRONLY | O_CREAT, 0644);
    EXPECT_GE(f, 0);
    ::close(f);
    ::close(fd);
}

// Issue 14.8: paths longer than PATH_MAX were dropped silently (no problem, exit 0).
TEST(Names, PathsLongerThanPathMaxAreReportedInCheck) {
    TempDir src;
    make_deep_tree(src.path(), std::string(250, 'd'), 17);  // 17 * 251 bytes > 4096
    auto r = check({src.path()});
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("File name too long"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("the limit PATH_MAX is 4096); not shown"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" bytes)..."), std::string::npos) << r.out;  // the path is cut
    r = check({"--json", src.path()});
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ok"], false);
    EXPECT_FALSE(j["problems"].empty());
    // TempDir cannot remove a tree this deep by path: rm -rf can.
    EXPECT_EQ(std::system(("rm -rf '" + src.path() + "'/d*").c_str()), 0);
}

// Issue 13.1: a set joined with cat passed `check` as a companion.
TEST(Names, CheckShowsACatJoinedSetAsTheMergedModelAndMergeAcceptsIt) {
    TempDir src, out;
    std::string all;
    for (int i = 1; i <= 7; ++i) all += gguf_test::read_file(fixture("kvzoo/t7/" + kvzoo_shard(i)));
    gguf_test::write_file(src / "x.gguf", all);
    gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(1)), src / "lone.gguf");
    auto r = check({src.path()});
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("x.gguf: merged-set of 7 shards, 3525664 bytes, 43 tensors"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  shard 2: x.gguf, 589216 bytes, at byte 561696\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  lone.gguf: " + src / "lone.gguf" + ": holds 1 of the 7 shards"), std::string::npos)
        << r.out;
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", src / "x.gguf", out / "m.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(out / "m.gguf"), "188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f");
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", "--delete-splits", src / "x.gguf", out / "n.gguf"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("--delete-splits is refused"), std::string::npos) << r.err;
    struct stat st {};
    EXPECT_NE(::stat((out / "n.gguf").c_str(), &st), 0);
    EXPECT_EQ(::stat((src / "x.gguf").c_str(), &st), 0);
}

}  // namespace
