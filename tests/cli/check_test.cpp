// `gguf-mount check SOURCE [--json] [--show-shards]`: text and JSON output, exit status.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using gguf_test::TempDir;

std::string kvzoo_shard(int i) { return "kvzoo-0000" + std::to_string(i) + "-of-00007.gguf"; }

/// A model directory: a complete set in Q4/, a byte-split model, a companion; and, when
/// `broken`, an incomplete set in Q8/.
void make_source(const TempDir& src, bool broken) {
    ASSERT_EQ(::mkdir((src / "Q4").c_str(), 0755), 0);
    for (int i = 1; i <= 7; ++i) gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(i)), src / ("Q4/" + kvzoo_shard(i)));
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"), {src / "tiny.gguf.part1of2", src / "tiny.gguf.part2of2"});
    gguf_test::write_file(src / "README.md", "hello\n");
    if (broken) {
        ASSERT_EQ(::mkdir((src / "Q8").c_str(), 0755), 0);
        for (int i = 1; i <= 2; ++i) {
            gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(i)), src / ("Q8/" + kvzoo_shard(i)));
        }
    }
}

TEST(CliCheck, TextListsEverySetItsShardsSizeAndExitsZeroWhenAllIsValid) {
    TempDir src;
    make_source(src, false);
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", src.path()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("Q4/kvzoo.gguf: merged-set of 7 shards, 3525664 bytes, 43 tensors, mode 0444"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  shard 7: Q4/kvzoo-00007-of-00007.gguf, 288320 bytes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tiny.gguf: byte-split of 2 pieces, 524864 bytes, 27 tensors"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  piece tiny.gguf.part2of2, 262432 bytes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("README.md: companion, 6 bytes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("0 problem(s)"), std::string::npos) << r.out;
    EXPECT_EQ(r.err, "");
}

TEST(CliCheck, ProblemsAreListedAndTheExitStatusIsOne) {
    TempDir src;
    make_source(src, true);
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", src.path()});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("1 problem:\n  Q8/kvzoo.gguf: " + src / "Q8/kvzoo-00003-of-00007.gguf" +
                         ": missing shard 3 of 7; not shown\n"),
              std::string::npos) << r.out;
    // The valid set is still listed.
    EXPECT_NE(r.out.find("Q4/kvzoo.gguf: merged-set"), std::string::npos) << r.out;
}

// Issue 14.3: check reports every link it did not follow again (16 for the 16-level fan-out).
TEST(CliCheck, ReportsTheCutOfALinkFanOut) {
    TempDir root;
    const std::string src = gguf_test::make_link_fan_out(root.path(), 16);
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", src});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("16 problems:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  b: " + src + "/b: the directory 'a' again (another link to it); shown there only"),
              std::string::npos)
        << r.out;
}

TEST(CliCheck, JsonHasEntriesShardsPartsAndProblems) {
    TempDir src;
    make_source(src, true);
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", "--json", src.path()});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["source"], src.path());
    EXPECT_EQ(j["ok"], false);
    ASSERT_EQ(j["entries"].size(), 3u) << r.out;
    const auto& set = j["entries"][0];
    EXPECT_EQ(set["path"], "Q4/kvzoo.gguf");
    EXPECT_EQ(set["kind"], "merged-set");
    EXPECT_EQ(set["size"], 3525664);
    EXPECT_EQ(set["tensors"], 43);
    ASSERT_EQ(set["shards"].size(), 7u);
    EXPECT_EQ(set["shards"][0]["path"], "Q4/kvzoo-00001-of-00007.gguf");
    EXPECT_EQ(set["shards"][0]["parts"][0]["size"], 561696);
    EXPECT_EQ(j["entries"][1]["path"], "README.md");
    EXPECT_EQ(j["entries"][1]["kind"], "companion");
    EXPECT_EQ(j["entries"][2]["kind"], "byte-split");
    EXPECT_EQ(j["entries"][2]["files"][0]["parts"].size(), 2u);
    ASSERT_EQ(j["problems"].size(), 1u);
    EXPECT_EQ(j["problems"][0]["path"], "Q8/kvzoo.gguf");
    EXPECT_NE(j["problems"][0]["reason"].get<std::string>().find("missing shard 3 of 7"), std::string::npos);
    EXPECT_EQ(j["directories"].size(), 3u);

    TempDir ok;
    make_source(ok, false);
    auto r2 = gguf_test::run({gguf_test::gguf_mount_binary(), "check", ok.path(), "--json"});
    EXPECT_EQ(r2.exit_code, 0) << r2.err;
    EXPECT_EQ(nlohmann::json::parse(r2.out)["ok"], true);
}

TEST(CliCheck, ShowShardsListsShardFiles) {
    TempDir src;
    make_source(src, false);
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", "--json", "--show-shards", src.path()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    size_t shards = 0;
    for (const auto& e : j["entries"]) shards += e["kind"] == "shard";
    EXPECT_EQ(shards, 9u);  // 7 shard files and 2 byte pieces
}

TEST(CliCheck, ModesAreNarrowedByTheDirectoriesOnTheWayAndAclsAreNoted) {
    TempDir root;
    const std::string src = root / "src", closed = root / "closed";
    ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(closed.c_str(), 0755), 0);
    gguf_test::write_file(closed + "/secret.txt", "secret");
    ASSERT_EQ(::chmod((closed + "/secret.txt").c_str(), 0644), 0);
    ASSERT_EQ(::symlink("../closed/secret.txt", (src + "/secret.txt").c_str()), 0);
    ASSERT_EQ(::chmod(closed.c_str(), 0700), 0);
    gguf_test::write_file(src + "/acl.txt", "acl");
    ASSERT_EQ(::chmod((src + "/acl.txt").c_str(), 0644), 0);
    auto acl = gguf_test::run({"/bin/sh", "-c", "command -v setfacl >/dev/null && setfacl -m u:65534:--- '" + src +
                                                    "/acl.txt'"});
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", src});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;  // narrowed, still served: no problem
    EXPECT_NE(r.out.find("secret.txt: companion, 6 bytes, mode 0400\n"), std::string::npos) << r.out;
    auto j = gguf_test::run({gguf_test::gguf_mount_binary(), "check", "--json", src});
    auto json = nlohmann::json::parse(j.out);
    ASSERT_TRUE(json["notes"].is_array()) << j.out;
    if (acl.exit_code != 0) {
        EXPECT_TRUE(json["notes"].empty()) << j.out;
        GTEST_SKIP() << "setfacl (apt package acl) missing or ACLs unsupported: the ACL half was not run";
    }
    EXPECT_NE(r.out.find("acl.txt: companion, 3 bytes, mode 0400\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("1 note (served, but not as the files alone say: narrower than their mode bits, or without a sidecar):\n  acl.txt: " + src +
                         "/acl.txt has a POSIX ACL (system.posix_acl_access), which mode bits cannot judge; served "
                         "with mode 0400\n"),
              std::string::npos) << r.out;
    ASSERT_EQ(json["notes"].size(), 1u) << j.out;
    EXPECT_EQ(json["notes"][0]["path"], "acl.txt");
    ASSERT_EQ(::chmod(closed.c_str(), 0755), 0);
}

TEST(CliCheck, UsageAndMissingSource) {
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("SOURCE is required"), std::string::npos) << r.err;
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", "a", "b"});
    EXPECT_EQ(r.exit_code, 2);
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", "/nonexistent/x"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "gguf-mount: error: /nonexistent/x: No such file or directory\n");
}

}  // namespace
