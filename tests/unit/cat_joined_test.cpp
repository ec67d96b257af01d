// A gguf-split set joined with cat (`cat x-0000{1,2,3}-of-00003.gguf > x.gguf`): the catalog
// serves the merged model under the file's name (gguf/model/catalog.hpp rule 9), byte-identical to
// `gguf-split --merge`, and never passes a file whose header says split.count > 1 through.
#include <sys/stat.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/model/catalog.hpp"
#include "support/catalog_support.hpp"
#include "support/support.hpp"

namespace {

using gguf::EntryKind;
using gguf_test::fixture;
using gguf_test::TempDir;

/// The bytes of the fixture files `relative` joined in order.
std::string joined(const std::vector<std::string>& relative) {
    std::string out;
    for (const auto& r : relative) out += gguf_test::read_file(fixture(r));
    return out;
}

/// The shard paths of manifest case `id`.
std::vector<std::string> case_shards(const std::string& id) {
    for (const auto& c : gguf_test::manifest_cases()) {
        if (c.id == id) return c.shards;
    }
    ADD_FAILURE() << "no manifest case " << id;
    return {};
}

using gguf_test::bytes_of;
using gguf_test::find_entry;
using gguf_test::problems_text;

constexpr const char* kKvzooMerged = "188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f";
constexpr const char* kTinyLlamaMerged = "3a7d0b4b3ba2417ad2b31050616fb5caef8221715a369463fb6b3cf668a56914";

TEST(CatJoined, KvzooSetsJoinedWithCatAreServedMergedUnderTheirName) {
    TempDir src;
    gguf_test::write_file(src / "t7.gguf", joined(case_shards("kvzoo/t7")));
    gguf_test::write_file(src / "t7-ntfs.gguf", joined(case_shards("kvzoo/t7-ntfs")));
    const gguf::Catalog c = gguf::build_catalog(src.path());
    EXPECT_EQ(c.problems.size(), 0u) << problems_text(c);
    for (const char* name : {"t7.gguf", "t7-ntfs.gguf"}) {
        const gguf::CatalogEntry* e = find_entry(c, name);
        ASSERT_NE(e, nullptr) << name;
        EXPECT_EQ(e->kind, EntryKind::MergedSet) << name;
        EXPECT_EQ(e->size(), 3525664u) << name;
        EXPECT_EQ(e->tensor_count, 43u) << name;
        EXPECT_EQ(gguf_test::sha256_hex(bytes_of(*e)), kKvzooMerged) << name;
    }
    const gguf::CatalogEntry* ntfs = find_entry(c, "t7-ntfs.gguf");
    ASSERT_NE(ntfs, nullptr);
    ASSERT_EQ(ntfs->members.size(), 8u);
    // Shard 2 starts right after shard 1 (9,824 bytes, no tensors) and is 552,000 bytes long.
    EXPECT_EQ(ntfs->members[1].parts.at(0).offset, 9824u);
    EXPECT_EQ(ntfs->members[1].size(), 552000u);
}

TEST(CatJoined, TinyLlamaShardsJoinedWithCatGiveTheMergedModel) {
    TempDir src, work;
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "split", "--split-max-tensors", "10", "-q",
                             fixture("tiny-llama/tiny-llama.gguf"), work / "tiny"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string all;
    for (int i = 1; i <= 3; ++i) all += gguf_test::read_file(work / ("tiny-0000" + std::to_string(i) + "-of-00003.gguf"));
    gguf_test::write_file(src / "tiny-llama.gguf", all);
    const gguf::Catalog c = gguf::build_catalog(src.path());
    const gguf::CatalogEntry* e = find_entry(c, "tiny-llama.gguf");
    ASSERT_NE(e, nullptr) << problems_text(c);
    EXPECT_EQ(e->kind, EntryKind::MergedSet);
    EXPECT_EQ(e->size(), 524960u);
    EXPECT_EQ(gguf_test::sha256_hex(bytes_of(*e)), kTinyLlamaMerged);
    // SOURCE given as the joined file itself: the same merged model.
    const gguf::Catalog single = gguf::build_catalog(src / "tiny-llama.gguf");
    const gguf::CatalogEntry* s = find_entry(single, "tiny-llama.gguf");
    ASSERT_NE(s, nullptr) << problems_text(single);
    EXPECT_EQ(gguf_test::sha256_hex(bytes_of(*s)), kTinyLlamaMerged);
}

TEST(CatJoined, BadJoinsAndLoneShardsUnderOtherNamesAreProblemsNeverPassedThrough) {
    TempDir src;
    const std::vector<std::string> t7 = case_shards("kvzoo/t7");
    ASSERT_EQ(t7.size(), 7u);
    gguf_test::write_file(src / "order.gguf", joined({t7[0], t7[1], t7[3], t7[2], t7[4], t7[5], t7[6]}));
    gguf_test::write_file(src / "lone.gguf", joined({t7[0]}));
    gguf_test::write_file(src / "trailing.gguf", joined(t7) + "junk");
    const std::string whole = joined(t7);
    gguf_test::write_file(src / "cut.gguf", whole.substr(0, 2000000));
    const gguf::Catalog c = gguf::build_catalog(src.path());
    EXPECT_TRUE(c.entries.empty()) << "served: " << (c.entries.empty() ? "" : c.entries[0].path);
    ASSERT_EQ(c.problems.size(), 4u) << problems_text(c);
    const std::string p = problems_text(c);
    EXPECT_NE(p.find("cut.gguf | " + src / "cut.gguf" + ": shard 4 at byte 1549952: truncated"), std::string::npos) << p;
    EXPECT_NE(p.find("lone.gguf | " + src / "lone.gguf" + ": holds 1 of the 7 shards"), std::string::npos) << p;
    EXPECT_NE(p.find("order.gguf | " + src / "order.gguf" +
                     ": shard 3 at byte 1150912: key 'split.no' is 3 but its position in the file says 2"),
              std::string::npos)
        << p;
    EXPECT_NE(p.find("trailing.gguf | " + src / "trailing.gguf" + ": 4 bytes after the last of its 7 shards"),
              std::string::npos)
        << p;
    EXPECT_NE(p.find("'gguf-mount merge PREFIX-00001-of-NNNNN.gguf OUTPUT'"), std::string::npos) << p;
}

}  // namespace
