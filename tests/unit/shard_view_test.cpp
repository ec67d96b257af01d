// Shard views (gguf/model/shard_view.hpp) at the catalog level: every fixture and split option
// the split tests use, from a single file, a shard set re-cut, byte-split parts and a
// cat-joined set, against the llama-gguf-split sha256 of tests/fixtures/MANIFEST.json; plans
// that cannot be made, name clashes, companions kept as they are. No mount.
#include <fcntl.h>
#include <sys/stat.h>

#include <fstream>

#include <gtest/gtest.h>

#include "gguf/model/catalog.hpp"
#include "gguf/model/shard_view.hpp"
#include "gguf/model/split_set.hpp"
#include "support/catalog_support.hpp"
#include "support/sparse_model.hpp"
#include "support/manifest_options.hpp"
#include "support/support.hpp"

namespace {

using gguf::EntryKind;
using gguf_test::bytes_of;
using gguf_test::fixture;
using gguf_test::problems_text;
using gguf_test::TempDir;


gguf::Catalog view(const std::string& source, const gguf::SplitOptions& o) {
    gguf::CatalogOptions co;
    co.split_view = o;
    return gguf::build_catalog(source, co);
}

/// Checks that `c` serves, under `prefix`-0000i-of-N.gguf, exactly the shards of manifest case
/// `mc` (sha256 of llama-gguf-split's output), as split-shard entries of `view_of`.
void expect_reference_shards(const gguf::Catalog& c, const gguf_test::ManifestCase& mc, const std::string& prefix,
                             const std::string& view_of) {
    const auto n = static_cast<uint32_t>(mc.shards.size());
    for (uint32_t i = 0; i < n; ++i) {
        const std::string name = gguf::shard_path(prefix, i + 1, n);
        const gguf::CatalogEntry* e = gguf_test::find_entry(c, name);
        ASSERT_NE(e, nullptr) << name << "\n" << problems_text(c);
        EXPECT_EQ(e->kind, EntryKind::SplitShard);
        EXPECT_EQ(e->view_of, view_of);
        EXPECT_EQ(gguf_test::sha256_hex(bytes_of(*e)), mc.shard_sha256[i]) << mc.id << " " << name;
    }
}

class ShardViewCase : public ::testing::TestWithParam<gguf_test::ManifestCase> {};

TEST_P(ShardViewCase, SingleFileGivesTheReferenceShards) {
    const auto& mc = GetParam();
    TempDir src;
    gguf_test::copy_file(fixture(mc.original), src / "m.gguf");
    auto c = view(src / "m.gguf", gguf_test::parse_manifest_options(mc.split_options));
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
    EXPECT_EQ(c.entries.size(), mc.shards.size());
    expect_reference_shards(c, mc, "m", "m.gguf");
}

TEST_P(ShardViewCase, ShardSetReCutGivesTheReferenceShards) {
    // The set of another cut (kvzoo/t7, notensors/t7-ntfs), planned over its merged view.
    const auto& mc = GetParam();
    const std::string other = mc.id.rfind("kvzoo", 0) == 0 ? "kvzoo/t7" : "notensors/t7-ntfs";
    const auto source_case = [&] {
        for (const auto& c : gguf_test::manifest_cases()) {
            if (c.id == other) return c;
        }
        return gguf_test::ManifestCase{};
    }();
    ASSERT_FALSE(source_case.shards.empty());
    TempDir src;
    ASSERT_EQ(::mkdir((src / "sub").c_str(), 0755), 0);
    for (const auto& s : source_case.shards) gguf_test::copy_file(fixture(s), src / ("sub/" + gguf::base_name(s)));
    gguf_test::write_file(src / "README.md", "companion\n");
    auto c = view(src.path(), gguf_test::parse_manifest_options(mc.split_options));
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
    const std::string prefix = gguf::parse_shard_name(gguf::base_name(source_case.shards[0]))->prefix;
    expect_reference_shards(c, mc, "sub/" + prefix, "sub/" + prefix + ".gguf");
    const gguf::CatalogEntry* readme = gguf_test::find_entry(c, "README.md");
    ASSERT_NE(readme, nullptr);
    EXPECT_EQ(readme->kind, EntryKind::Companion);
    EXPECT_EQ(c.entries.size(), mc.shards.size() + 1);
}

TEST_P(ShardViewCase, ByteSplitFileGivesTheReferenceShards) {
    const auto& mc = GetParam();
    TempDir src;
    gguf_test::cut_file(fixture(mc.original), {src / "b.gguf.part1of3", src / "b.gguf.part2of3", src / "b.gguf.part3of3"});
    auto c = view(src.path(), gguf_test::parse_manifest_options(mc.split_options));
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
    expect_reference_shards(c, mc, "b", "b.gguf");
}

TEST_P(ShardViewCase, CatJoinedSetGivesTheReferenceShards) {
    const auto& mc = GetParam();
    TempDir src;
    std::ofstream out(src / "joined.gguf", std::ios::binary);
    for (const auto& s : mc.shards) out << gguf_test::read_file(fixture(s));
    out.close();
    auto c = view(src.path(), gguf_test::parse_manifest_options(mc.split_options));
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
    expect_reference_shards(c, mc, "joined", "joined.gguf");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ShardViewCase, ::testing::ValuesIn(gguf_test::manifest_cases()),
                         [](const auto& info) {
                             std::string n = info.param.id;
                             for (auto& ch : n) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return n;
                         });

TEST(ShardView, ByteSplitShardsOfASetAreReCut) {
    TempDir src;
    const auto mc = [] {
        for (const auto& c : gguf_test::manifest_cases()) {
            if (c.id == "kvzoo/t7-ntfs") return c;
        }
        return gguf_test::ManifestCase{};
    }();
    for (int i = 1; i <= 7; ++i) {
        const std::string name = gguf::shard_path("kvzoo", static_cast<uint32_t>(i), 7);
        if (i == 3) {
            gguf_test::cut_file(fixture("kvzoo/t7/" + name), {src / (name + ".part1of2"), src / (name + ".part2of2")});
        } else {
            gguf_test::copy_file(fixture("kvzoo/t7/" + name), src / name);
        }
    }
    auto c = view(src.path(), gguf_test::parse_manifest_options(mc.split_options));
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
    expect_reference_shards(c, mc, "kvzoo", "kvzoo.gguf");
}

TEST(ShardView, EachShardOpensOnlyTheSourceShardsItReads) {
    auto c = view(fixture("kvzoo/t7"), gguf_test::parse_manifest_options("--split-max-tensors 5"));
    ASSERT_EQ(c.entries.size(), 9u) << problems_text(c);
    std::vector<std::string> got;
    for (const auto& e : c.entries) {
        std::string names;
        for (const auto& m : e.members) names += gguf::base_name(m.path).substr(6, 5) + " ";
        got.push_back(names);
    }
    // 43 tensors in source shards of 7 (the last of 1), cut into shards of 5: shard k reads
    // tensors 5(k-1) .. 5k-1.
    EXPECT_EQ(got, (std::vector<std::string>{"00001 ", "00001 00002 ", "00002 00003 ", "00003 ", "00003 00004 ",
                                             "00004 00005 ", "00005 ", "00006 ", "00006 00007 "}));
    // Shard 1 carries the KV pairs of source shard 1 even when it holds no tensor.
    auto ntfs = view(fixture("kvzoo/t7"), gguf_test::parse_manifest_options("--split-max-tensors 5 --no-tensor-first-split"));
    ASSERT_FALSE(ntfs.entries.empty());
    ASSERT_EQ(ntfs.entries[0].members.size(), 1u);
    EXPECT_EQ(gguf::base_name(ntfs.entries[0].members[0].path), "kvzoo-00001-of-00007.gguf");
}

TEST(ShardView, ALimitSmallerThanTheFirstTensorIsTheProblemSplitReports) {
    TempDir src;
    gguf_test::write_sparse_model(src / "m.gguf", {{"first.weight", {300000}}, {"b", {10}}});  // 1.2 MB first tensor
    gguf_test::write_file(src / "README.md", "x\n");
    gguf::SplitOptions o;
    o.mode = gguf::SplitOptions::Mode::Size;
    o.max_bytes = 1000000;
    auto c = view(src.path(), o);
    ASSERT_EQ(c.problems.size(), 1u) << problems_text(c);
    EXPECT_EQ(c.problems[0].path, "m.gguf");
    const std::string& r = c.problems[0].reason;
    EXPECT_EQ(r.rfind(src / "m.gguf" + ": one of the splits would have 0 tensors: tensor 'first.weight'", 0), 0u) << r;
    EXPECT_NE(r.find("--split-max-size of 1000000 bytes"), std::string::npos) << r;
    ASSERT_EQ(c.entries.size(), 1u);
    EXPECT_EQ(c.entries[0].path, "README.md");
}

TEST(ShardView, AShardNameTakenByADirectoryHidesTheWholeModel) {
    TempDir src;
    gguf_test::copy_file(fixture("kvzoo/original.gguf"), src / "k.gguf");
    ASSERT_EQ(::mkdir((src / "k-00002-of-00007.gguf").c_str(), 0755), 0);
    auto c = view(src.path(), gguf_test::parse_manifest_options("--split-max-tensors 7"));
    ASSERT_EQ(c.problems.size(), 1u) << problems_text(c);
    EXPECT_EQ(c.problems[0].path, "k.gguf");
    EXPECT_NE(c.problems[0].reason.find("name clash: k-00002-of-00007.gguf is already served"), std::string::npos)
        << c.problems[0].reason;
    EXPECT_TRUE(c.entries.empty());
}

TEST(ShardView, ProjectorsAndOtherFilesStayAsTheyAre) {
    TempDir src;
    gguf_test::copy_file(fixture("kvzoo/original.gguf"), src / "mmproj-f16.gguf");
    gguf_test::write_file(src / "notes.gguf", "not a GGUF file");
    gguf_test::copy_file(fixture("tiny-llama/tiny-llama.gguf"), src / "tiny.gguf");
    auto c = view(src.path(), gguf_test::parse_manifest_options("--split-max-tensors 10"));
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
    std::vector<std::string> paths;
    for (const auto& e : c.entries) paths.push_back(e.path + ":" + gguf::entry_kind_name(e.kind));
    EXPECT_EQ(paths, (std::vector<std::string>{"mmproj-f16.gguf:companion", "notes.gguf:companion",
                                               "tiny-00001-of-00003.gguf:split-shard",
                                               "tiny-00002-of-00003.gguf:split-shard",
                                               "tiny-00003-of-00003.gguf:split-shard"}));
}

TEST(ShardView, EntriesNameTheirOptionsAndShardInTheirIdentity) {
    auto c = view(fixture("kvzoo/original.gguf"), gguf_test::parse_manifest_options("--split-max-tensors 7 --no-tensor-first-split"));
    ASSERT_EQ(c.entries.size(), 8u) << problems_text(c);
    EXPECT_EQ(c.entries[1].identity, "split-view --split-max-tensors 7 --no-tensor-first-split shard 2 of 8 model files " +
                                         gguf_test::sha256_hex(gguf::files_state(c.entries[1].members)));
    EXPECT_EQ(c.entries[0].tensor_count, 0u);
    EXPECT_EQ(c.entries[1].tensor_count, 7u);
}

// Every shard's identity names the state of every file of the model (a change to any of them
// is a new generation of every shard) in a fixed size: as text it grew with the number of files,
// so a view of a 1,200-shard set held 1,200 x 1,200 file states (0.4 GiB of daemon memory).
TEST(ShardView, IdentitiesHaveAFixedSizeAndFollowEveryFileOfTheModel) {
    TempDir src;
    for (int i = 1; i <= 7; ++i) {
        const std::string name = gguf::shard_path("kvzoo", static_cast<uint32_t>(i), 7);
        gguf_test::copy_file(fixture("kvzoo/t7/" + name), src / name);
    }
    const auto options = gguf_test::parse_manifest_options("--split-max-tensors 3");
    auto before = view(src.path(), options);
    ASSERT_TRUE(before.problems.empty()) << problems_text(before);
    ASSERT_GT(before.entries.size(), 2u);
    for (const auto& e : before.entries) {
        EXPECT_LE(e.identity.size(), 128u) << e.path << ": " << e.identity;
    }
    // Shard 1 reads only the first files of the set; a change to the last one still moves it.
    struct stat st {};
    ASSERT_EQ(::stat((src / gguf::shard_path("kvzoo", 7, 7)).c_str(), &st), 0);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    times[1].tv_sec += 10;
    ASSERT_EQ(::utimensat(AT_FDCWD, (src / gguf::shard_path("kvzoo", 7, 7)).c_str(), times, 0), 0);
    auto after = view(src.path(), options);
    ASSERT_EQ(after.entries.size(), before.entries.size());
    for (size_t i = 0; i < after.entries.size(); ++i) {
        EXPECT_NE(after.entries[i].identity, before.entries[i].identity) << after.entries[i].path;
    }
}

TEST(ShardView, WithoutKeepLayoutsOnlySizesRemain) {
    gguf::CatalogOptions co;
    co.split_view = gguf_test::parse_manifest_options("--split-max-tensors 7");
    co.keep_layouts = false;
    auto c = gguf::build_catalog(fixture("kvzoo/original.gguf"), co);
    ASSERT_EQ(c.entries.size(), 7u) << problems_text(c);
    EXPECT_EQ(c.entries[0].size(), 561696u);
    EXPECT_TRUE(c.entries[0].layout.extents().empty());
    EXPECT_TRUE(c.entries[0].layout.header().empty());
}

}  // namespace
