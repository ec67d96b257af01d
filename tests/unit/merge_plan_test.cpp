// The merged layout planner against the golden fixtures made with llama.cpp's gguf-split.
#include <random>

#include <gtest/gtest.h>

#include "gguf/model/merge_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;

/// Renders the whole virtual file through VirtualFile::read in one call.
std::string render(const gguf::VirtualFile& vf) {
    std::string out(vf.size(), '\0');
    ssize_t n = vf.read(0, out.size(), out.data());
    EXPECT_EQ(n, static_cast<ssize_t>(out.size()));
    return out;
}

class MergeCase : public ::testing::TestWithParam<gguf_test::ManifestCase> {};

TEST_P(MergeCase, PlannedBytesMatchReferenceMerge) {
    const auto& c = GetParam();
    auto set = gguf::SplitSet::open(fixture(c.shards.front()));
    ASSERT_EQ(set.shards().size(), c.shards.size());
    auto vf = gguf::open_merged(set);
    EXPECT_EQ(vf.size(), c.merged_size);
    EXPECT_EQ(gguf_test::sha256_hex(render(vf)), c.merged_sha256);
}

TEST_P(MergeCase, RandomReadsEqualSlicesOfTheWholeFile) {
    const auto& c = GetParam();
    auto vf = gguf::open_merged(gguf::SplitSet::open(fixture(c.shards.front())));
    const std::string whole = render(vf);
    std::mt19937_64 rng(1234);
    std::string buf;
    const auto& ext = vf.layout().extents();
    for (int i = 0; i < 2000; ++i) {
        uint64_t off;
        if (i % 2 == 0 && !ext.empty()) {
            // straddle an extent boundary: header/tensor/padding/shard transitions
            const auto& e = ext[rng() % ext.size()];
            uint64_t back = rng() % 64;
            off = e.start > back ? e.start - back : 0;
        } else {
            off = rng() % (whole.size() + 100);
        }
        size_t len = static_cast<size_t>(rng() % 70000);
        buf.assign(len, '\x55');
        ssize_t n = vf.read(off, len, buf.data());
        size_t expect = off >= whole.size() ? 0 : std::min<size_t>(len, whole.size() - off);
        ASSERT_EQ(n, static_cast<ssize_t>(expect)) << "offset " << off << " len " << len;
        ASSERT_EQ(buf.substr(0, expect), whole.substr(off < whole.size() ? off : whole.size(), expect))
            << "offset " << off << " len " << len;
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MergeCase, ::testing::ValuesIn(gguf_test::manifest_cases()),
                         [](const auto& info) {
                             std::string n = info.param.id;
                             for (auto& ch : n) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return n;
                         });

}  // namespace
