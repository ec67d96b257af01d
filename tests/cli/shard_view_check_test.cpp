// `gguf-mount check SOURCE --split-max-tensors N | --split-max-size N(M|G)`: the planned shards of
// a shard view, in text and JSON, with the sizes `gguf-mount split` writes.
#include <sys/stat.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gguf/model/split_set.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;

gguf_test::RunResult gm(std::vector<std::string> args) {
    args.insert(args.begin(), gguf_test::gguf_mount_binary());
    return gguf_test::run(args);
}

TEST(CheckShardView, TextListsThePlannedShardsOfAReCutSet) {
    auto r = gm({"check", fixture("kvzoo/t7"), "--split-max-tensors", "5"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("kvzoo-00001-of-00009.gguf: split-shard of kvzoo.gguf, 337728 bytes, 5 tensors, mode 0444\n"
                         "  source 1: kvzoo-00001-of-00007.gguf, 561696 bytes\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("kvzoo-00009-of-00009.gguf: split-shard of kvzoo.gguf, 288576 bytes, 3 tensors, mode 0444\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("9 split shard(s), 1 directory, 0 problem(s)"), std::string::npos) << r.out;
}

TEST(CheckShardView, JsonSizesEqualSplitsFiles) {
    gguf_test::TempDir out;
    auto s = gm({"split", "-q", "--split-max-size", "1M", fixture("kvzoo/original.gguf"), out / "original"});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    auto r = gm({"check", "--json", fixture("kvzoo/original.gguf"), "--split-max-size", "1M"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["entries"].size(), 4u) << r.out;
    for (size_t i = 0; i < 4; ++i) {
        const auto& e = j["entries"][i];
        const std::string name = gguf::shard_path("original", static_cast<uint32_t>(i + 1), 4);
        EXPECT_EQ(e["path"], name);
        EXPECT_EQ(e["kind"], "split-shard");
        EXPECT_EQ(e["view_of"], "original.gguf");
        struct stat st {};
        ASSERT_EQ(::stat((out / name).c_str(), &st), 0) << name;
        EXPECT_EQ(e["size"].get<uint64_t>(), static_cast<uint64_t>(st.st_size)) << name;
    }
}

TEST(CheckShardView, OptionsThatMakeNoPlanAreUsageErrors) {
    auto r = gm({"check", fixture("kvzoo/t7"), "--split-max-tensors", "0"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("--split-max-tensors '0': must be at least 1"), std::string::npos) << r.err;
}

}  // namespace
