// plan_split against the golden shards made with llama.cpp's gguf-split, and its cutting rules
// on synthetic headers. Pure: the shards are rendered through VirtualFile::read, nothing is written.
#include <sstream>

#include <gtest/gtest.h>

#include "gguf/error.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/model/split_plan.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "gguf/format/writer.hpp"
#include "support/manifest_options.hpp"
#include "support/support.hpp"

namespace {

using gguf::Code;
using gguf::SplitOptions;
using gguf_test::fixture;

using gguf_test::parse_manifest_options;

/// Renders a planned shard over `input_path` through VirtualFile::read.
std::string render_shard(const gguf::ShardPlan& plan, const std::string& input_path) {
    gguf::VirtualFile vf(plan.layout, {std::make_shared<gguf::LocalFileSource>(input_path)});
    std::string out(vf.size(), '\0');
    EXPECT_EQ(vf.read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    return out;
}

class SplitCase : public ::testing::TestWithParam<gguf_test::ManifestCase> {};

TEST_P(SplitCase, PlannedShardsMatchReferenceBytes) {
    const auto& c = GetParam();
    const std::string input = fixture(c.original);
    auto plans = gguf::plan_split(gguf::read_header(input), parse_manifest_options(c.split_options));
    ASSERT_EQ(plans.size(), c.shards.size());
    for (size_t i = 0; i < plans.size(); ++i) {
        EXPECT_EQ(gguf_test::sha256_hex(render_shard(plans[i], input)), c.shard_sha256[i]) << c.shards[i];
    }
}

TEST_P(SplitCase, ResplittingTheMergedFileReproducesTheShards) {
    // The merged file already carries split.* keys; they move to the end in the same order.
    const auto& c = GetParam();
    const std::string merged = fixture(c.id.substr(0, c.id.find('/')) + "/merged-reference.gguf");
    auto plans = gguf::plan_split(gguf::read_header(merged), parse_manifest_options(c.split_options));
    ASSERT_EQ(plans.size(), c.shards.size());
    for (size_t i = 0; i < plans.size(); ++i) {
        EXPECT_EQ(gguf_test::sha256_hex(render_shard(plans[i], merged)), c.shard_sha256[i]) << c.shards[i];
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SplitCase, ::testing::ValuesIn(gguf_test::manifest_cases()),
                         [](const auto& info) {
                             std::string n = info.param.id;
                             for (auto& ch : n) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return n;
                         });

TEST(SplitPlan, TinyLlamaTenTensorsMatchesReadme) {
    const std::string input = fixture("tiny-llama/tiny-llama.gguf");
    SplitOptions o;
    o.max_tensors = 10;
    auto plans = gguf::plan_split(gguf::read_header(input), o);
    ASSERT_EQ(plans.size(), 3u);
    const char* want[] = {"9b07ed6ed440cbad52be31b1228eb55d818ed97c04fe774147f8857f7b71eb85",
                          "e2ad57ef7a6b9407f81256b9704cc2d29802a9c402f199eaa18d5aace349c39e",
                          "52d58d7c63cab7fc33f1f2faae90fd5c7a990daf97acad022d8fe39b99a40ac8"};
    const uint64_t sizes[] = {231808, 135136, 158240};
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(plans[i].layout.size(), sizes[i]);
        EXPECT_EQ(gguf_test::sha256_hex(render_shard(plans[i], input)), want[i]);
    }
}

TEST(SplitPlan, SummaryOfKvzooT7MatchesTheReferenceShards) {
    // S = (header incl. padding + unpadded tensor bytes) / 1000 / 1000, from the reference shards.
    std::string want = "n_split: 7\n";
    for (int i = 1; i <= 7; ++i) {
        char name[64];
        std::snprintf(name, sizeof name, "kvzoo/t7/kvzoo-%05d-of-00007.gguf", i);
        gguf::Header h = gguf::read_header(fixture(name));
        uint64_t bytes = h.data_offset;
        for (const auto& t : h.tensors) bytes += t.nbytes;
        char line[128];
        std::snprintf(line, sizeof line, "split %05d: n_tensors = %zu, total_size = %lluM\n", i, h.tensors.size(),
                      static_cast<unsigned long long>(bytes / 1000 / 1000));
        want += line;
    }
    SplitOptions o;
    o.max_tensors = 7;
    EXPECT_EQ(gguf::split_summary(gguf::plan_split(gguf::read_header(fixture("kvzoo/original.gguf")), o)), want);
}

// ---- cutting rules on synthetic headers -------------------------------------------------------

/// A header with F32 tensors of the given element counts, laid out consecutively like a file.
gguf::Header synthetic(const std::vector<int64_t>& elements, uint64_t alignment = 32, bool declare_alignment = false) {
    gguf::Header h;
    h.alignment = alignment;
    h.kvs.push_back({"general.architecture", gguf::Value::string("test")});
    if (declare_alignment) h.kvs.push_back({"general.alignment", gguf::Value::u32(static_cast<uint32_t>(alignment))});
    uint64_t off = 0;
    for (size_t i = 0; i < elements.size(); ++i) {
        gguf::TensorInfo t;
        t.name = "t" + std::to_string(i);
        t.n_dims = 1;
        t.ne = {elements[i], 1, 1, 1};
        t.type = 0;
        t.nbytes = static_cast<uint64_t>(elements[i]) * 4;
        t.offset = off;
        off += gguf::align_up(t.nbytes, alignment);
        h.tensors.push_back(t);
    }
    h.header_size = 1000;  // arbitrary: plan_split uses data_offset only to locate data
    h.data_offset = gguf::align_up(h.header_size, alignment);
    h.file_size = h.data_offset + off;
    return h;
}

std::vector<size_t> counts(const std::vector<gguf::ShardPlan>& plans) {
    std::vector<size_t> out;
    for (const auto& p : plans) out.push_back(p.tensors.size());
    return out;
}

std::vector<std::string> keys(const gguf::ShardPlan& p) {
    std::vector<std::string> out;
    for (const auto& kv : p.kvs) out.push_back(kv.key);
    return out;
}

SplitOptions by_size(uint64_t bytes, bool ntfs = false) {
    SplitOptions o;
    o.mode = SplitOptions::Mode::Size;
    o.max_bytes = bytes;
    o.no_tensor_first_split = ntfs;
    return o;
}

SplitOptions by_tensors(uint64_t n, bool ntfs = false) {
    SplitOptions o;
    o.max_tensors = n;
    o.no_tensor_first_split = ntfs;
    return o;
}

TEST(SplitPlan, TensorModeCutsEveryNTensors) {
    auto h = synthetic({1, 2, 3, 4, 5, 6, 7});
    EXPECT_EQ(counts(gguf::plan_split(h, by_tensors(3))), (std::vector<size_t>{3, 3, 1}));
    EXPECT_EQ(counts(gguf::plan_split(h, by_tensors(7))), (std::vector<size_t>{7}));
    EXPECT_EQ(counts(gguf::plan_split(h, by_tensors(100))), (std::vector<size_t>{7}));
    EXPECT_EQ(counts(gguf::plan_split(h, by_tensors(1))), (std::vector<size_t>(7, 1)));
    EXPECT_EQ(counts(gguf::plan_split(h, by_tensors(3, true))), (std::vector<size_t>{0, 3, 3, 1}));
}

TEST(SplitPlan, SizeModeUsesPaddedSizesAndRestartsTheRunningTotal) {
    // 8 elements = 32 bytes; 9 elements = 36 bytes -> 64 padded.
    auto h = synthetic({8, 8, 8, 9, 8});
    // limit 96: 32+32+32 = 96 fits; +64 > 96 -> cut, running = 64; 64+32 = 96 fits.
    EXPECT_EQ(counts(gguf::plan_split(h, by_size(96))), (std::vector<size_t>{3, 2}));
    // limit 95: 32+32 = 64; +32 = 96 > 95 -> cut; 32 + 64 = 96 > 95 -> cut; 64 + 32 > 95 -> cut.
    EXPECT_EQ(counts(gguf::plan_split(h, by_size(95))), (std::vector<size_t>{2, 1, 1, 1}));
}

TEST(SplitPlan, OversizedTensorGetsAShardOfItsOwn) {
    auto h = synthetic({8, 8, 1000, 8, 8});  // 32, 32, 4000, 32, 32 bytes
    EXPECT_EQ(counts(gguf::plan_split(h, by_size(100))), (std::vector<size_t>{2, 1, 2}));
}

TEST(SplitPlan, FirstTensorLargerThanTheLimitIsTheZeroTensorError) {
    auto h = synthetic({1000, 8});
    for (bool ntfs : {false, true}) {
        try {
            gguf::plan_split(h, by_size(100, ntfs));
            ADD_FAILURE() << "expected an error";
        } catch (const gguf::Error& e) {
            EXPECT_EQ(e.code(), Code::BadArgument);
            std::string m = e.what();
            EXPECT_NE(m.find("0 tensors"), std::string::npos) << m;
            EXPECT_NE(m.find("'t0'"), std::string::npos) << m;
            EXPECT_NE(m.find("100 bytes"), std::string::npos) << m;
        }
    }
}

TEST(SplitPlan, NoTensorFirstSplitKeepsMetadataInShardOneOnly) {
    auto h = synthetic({8, 8, 8});
    auto plans = gguf::plan_split(h, by_tensors(2, true));
    ASSERT_EQ(plans.size(), 3u);
    EXPECT_EQ(keys(plans[0]),
              (std::vector<std::string>{"general.architecture", "split.no", "split.tensors.count", "split.count"}));
    EXPECT_EQ(keys(plans[1]), (std::vector<std::string>{"split.no", "split.tensors.count", "split.count"}));
    EXPECT_EQ(plans[0].tensors.size(), 0u);
    EXPECT_EQ(*plans[2].kvs[0].value.as_int(), 2);   // split.no
    EXPECT_EQ(*plans[2].kvs[1].value.as_int(), 3);   // split.tensors.count
    EXPECT_EQ(*plans[2].kvs[2].value.as_int(), 3);   // split.count
    EXPECT_EQ(plans[2].kvs[0].value.type, gguf::ValueType::U16);
    EXPECT_EQ(plans[2].kvs[1].value.type, gguf::ValueType::I32);
    EXPECT_EQ(plans[2].kvs[2].value.type, gguf::ValueType::U16);
}

TEST(SplitPlan, ExistingSplitKeysMoveToTheEndInReferenceOrder) {
    auto h = synthetic({8, 8});
    h.kvs.insert(h.kvs.begin(), {"split.count", gguf::Value::u16(0)});
    h.kvs.insert(h.kvs.begin(), {"split.tensors.count", gguf::Value::i32(2)});
    h.kvs.push_back({"zzz", gguf::Value::u32(1)});
    auto plans = gguf::plan_split(h, by_tensors(1));
    EXPECT_EQ(keys(plans[0]), (std::vector<std::string>{"general.architecture", "zzz", "split.no",
                                                        "split.tensors.count", "split.count"}));
}

TEST(SplitPlan, NonDefaultAlignmentIsHonouredAndCopiedToEveryShard) {
    auto h = synthetic({9, 9, 9}, 64, true);  // 36 bytes each, padded to 64
    auto plans = gguf::plan_split(h, by_tensors(1));
    ASSERT_EQ(plans.size(), 3u);
    for (size_t i = 1; i < 3; ++i) {
        EXPECT_EQ(keys(plans[i]),
                  (std::vector<std::string>{"general.alignment", "split.no", "split.tensors.count", "split.count"}));
    }
    for (const auto& p : plans) {
        EXPECT_EQ(p.header_bytes % 64, 0u);
        EXPECT_EQ(p.layout.size() % 64, 0u);
        // Every shard parses with the strict reader (alignment and offsets consistent).
        gguf::Header parsed = gguf::parse_header(p.layout.header(), p.layout.size(), "shard");
        EXPECT_EQ(parsed.alignment, 64u);
        EXPECT_EQ(parsed.data_offset, p.header_bytes);
    }
    // Declared alignment 32 is not copied (byte-identical to the reference, cf. tiny-llama).
    auto h32 = synthetic({9, 9}, 32, true);
    EXPECT_EQ(keys(gguf::plan_split(h32, by_tensors(1))[1]),
              (std::vector<std::string>{"split.no", "split.tensors.count", "split.count"}));
}

TEST(SplitPlan, HugeAlignmentSummaryCountsTheHeaderPadding) {
    auto h = synthetic({9, 9}, uint64_t{4} << 20, true);  // 4 MiB alignment
    auto plans = gguf::plan_split(h, by_tensors(1));
    ASSERT_EQ(plans.size(), 2u);
    for (const auto& p : plans) EXPECT_EQ(p.header_bytes, uint64_t{4} << 20);
    EXPECT_EQ(gguf::split_summary(plans),
              "n_split: 2\nsplit 00001: n_tensors = 1, total_size = 4M\nsplit 00002: n_tensors = 1, total_size = 4M\n");
}

TEST(SplitPlan, NoTensorsGivesOneShard) {
    auto h = synthetic({});
    EXPECT_EQ(counts(gguf::plan_split(h, by_tensors(7))), (std::vector<size_t>{0}));
    EXPECT_EQ(counts(gguf::plan_split(h, by_tensors(7, true))), (std::vector<size_t>{0, 0}));
    EXPECT_EQ(counts(gguf::plan_split(h, by_size(1000000))), (std::vector<size_t>{0}));
}

TEST(SplitPlan, RejectsZeroLimitsTooManyShardsAndShardInputs) {
    auto h = synthetic({8, 8});
    EXPECT_THROW(gguf::plan_split(h, by_tensors(0)), gguf::Error);
    EXPECT_THROW(gguf::plan_split(h, by_size(0)), gguf::Error);

    auto many = synthetic(std::vector<int64_t>(70000, 1));
    try {
        gguf::plan_split(many, by_tensors(1));
        ADD_FAILURE() << "expected an error";
    } catch (const gguf::Error& e) {
        EXPECT_EQ(e.code(), Code::BadArgument);
        EXPECT_NE(std::string(e.what()).find("65535"), std::string::npos) << e.what();
    }

    auto shard = synthetic({8});
    shard.kvs.push_back({"split.count", gguf::Value::u16(3)});
    try {
        gguf::plan_split(shard, by_tensors(1));
        ADD_FAILURE() << "expected an error";
    } catch (const gguf::Error& e) {
        EXPECT_EQ(e.code(), Code::BadSplit);
    }
}

TEST(SplitPlan, ShardSourcesPointAtTheInputData) {
    auto h = synthetic({8, 9, 10});
    auto plans = gguf::plan_split(h, by_tensors(2));
    ASSERT_EQ(plans.size(), 2u);
    EXPECT_EQ(plans[1].tensors[0].source, 0u);
    EXPECT_EQ(plans[1].tensors[0].source_offset, h.data_offset + h.tensors[2].offset);
    EXPECT_EQ(plans[1].tensors[0].info.name, "t2");
    EXPECT_EQ(plans[0].tensor_bytes, 32u + 36u);
}

// ---- option values ----------------------------------------------------------------------------

TEST(SplitOptionValues, SizesInPowersOfThousand) {
    EXPECT_EQ(gguf::parse_split_max_size("1M"), 1000000u);
    EXPECT_EQ(gguf::parse_split_max_size("2G"), 2000000000u);
    EXPECT_EQ(gguf::parse_split_max_size("4096M"), 4096000000u);
    EXPECT_EQ(gguf::parse_split_max_size("5000G"), 5000000000000u);
}

TEST(SplitOptionValues, RejectsBadSizesWithClearMessages) {
    struct Bad { const char* value; const char* says; };
    for (Bad b : {Bad{"1.5G", "fractions"}, Bad{"0G", "positive"}, Bad{"-1G", "sign"}, Bad{"2K", "unit"},
                  Bad{"2", "missing unit"}, Bad{"", "whole number"}, Bad{"G", "whole number"},
                  Bad{"abcM", "whole number"}, Bad{"99999999999999G", "too large"}, Bad{"2g", "unit"}}) {
        try {
            gguf::parse_split_max_size(b.value);
            ADD_FAILURE() << "accepted " << b.value;
        } catch (const gguf::Error& e) {
            EXPECT_EQ(e.code(), Code::BadArgument);
            std::string m = e.what();
            EXPECT_NE(m.find(b.says), std::string::npos) << b.value << ": " << m;
            EXPECT_NE(m.find(std::string("'") + b.value + "'"), std::string::npos) << m;
        }
    }
}

TEST(SplitOptionValues, TensorCounts) {
    EXPECT_EQ(gguf::parse_split_max_tensors("128"), 128u);
    EXPECT_EQ(gguf::parse_split_max_tensors("2147483647"), 2147483647u);
    for (const char* bad : {"0", "abc", "-3", "1.5", "", "2147483648", "7x"}) {
        EXPECT_THROW(gguf::parse_split_max_tensors(bad), gguf::Error) << bad;
    }
}

}  // namespace
