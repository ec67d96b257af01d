// Raw byte-split piece names (gguf/model/byte_split.hpp): parsing and grouping, no I/O.
#include <gtest/gtest.h>

#include "gguf/model/byte_split.hpp"

namespace {

using gguf::ByteSplitStyle;
using gguf::detect_byte_splits;
using gguf::parse_byte_split_name;

TEST(ByteSplitName, LettersStyle) {
    auto a = parse_byte_split_name("model.gguf-split-a");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->logical, "model.gguf");
    EXPECT_EQ(a->style, ByteSplitStyle::Letters);
    EXPECT_EQ(a->index, 0u);
    EXPECT_EQ(a->suffix_length, 1u);
    EXPECT_EQ(parse_byte_split_name("model.gguf-split-c")->index, 2u);
    EXPECT_EQ(parse_byte_split_name("model.gguf-split-ba")->index, 26u);
    EXPECT_EQ(parse_byte_split_name("model.gguf-split-ba")->suffix_length, 2u);
    // The logical name may itself be a gguf-split shard name.
    EXPECT_EQ(parse_byte_split_name("m-00001-of-00002.gguf-split-b")->logical, "m-00001-of-00002.gguf");
}

TEST(ByteSplitName, PartOfStyle) {
    auto p = parse_byte_split_name("model.gguf.part10of12");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->logical, "model.gguf");
    EXPECT_EQ(p->style, ByteSplitStyle::PartOf);
    EXPECT_EQ(p->index, 9u);
    EXPECT_EQ(p->count, 12u);
    EXPECT_EQ(parse_byte_split_name("model.gguf.part01of3")->index, 0u);
    EXPECT_EQ(parse_byte_split_name("m-00002-of-00002.gguf.part1of2")->logical, "m-00002-of-00002.gguf");
}

TEST(ByteSplitName, NotPieces) {
    for (const char* n : {"model.gguf", "model.gguf-split-", "model.gguf-split-A", "model.gguf-split-abcde",
                          "model.gguf-split-a1", ".gguf-split-a", "model.bin-split-a", "model.gguf.part0of2",
                          "model.gguf.part3of2", "model.gguf.part1of", "model.gguf.partof2", "model.gguf.part1of2x",
                          "model.gguf.part-1of2", "model.gguf.part1234567of1234567", ".gguf.part1of1",
                          "model.safetensors.part1of2", "dir/model.gguf-split-a", "m-00001-of-00002.gguf"}) {
        EXPECT_FALSE(parse_byte_split_name(n)) << n;
    }
}

TEST(ByteSplitGroups, CompleteGroupsInConcatenationOrder) {
    auto groups = detect_byte_splits({"b.gguf.part10of10", "README.md", "a.gguf-split-b", "b.gguf.part2of10",
                                      "a.gguf-split-a", "b.gguf.part1of10", "b.gguf.part3of10", "b.gguf.part4of10",
                                      "b.gguf.part5of10", "b.gguf.part6of10", "b.gguf.part7of10", "b.gguf.part8of10",
                                      "b.gguf.part9of10", "x-00001-of-00002.gguf"});
    ASSERT_EQ(groups.size(), 2u);
    EXPECT_EQ(groups[0].logical, "a.gguf");
    EXPECT_EQ(groups[0].style, ByteSplitStyle::Letters);
    EXPECT_EQ(groups[0].pieces, (std::vector<std::string>{"a.gguf-split-a", "a.gguf-split-b"}));
    EXPECT_EQ(groups[0].problem, "");
    EXPECT_EQ(groups[1].logical, "b.gguf");
    ASSERT_EQ(groups[1].pieces.size(), 10u);
    EXPECT_EQ(groups[1].pieces[1], "b.gguf.part2of10");  // numeric order: part10 comes last
    EXPECT_EQ(groups[1].pieces[9], "b.gguf.part10of10");
    EXPECT_EQ(groups[1].problem, "");
}

TEST(ByteSplitGroups, MissingPartIsNamed) {
    auto groups = detect_byte_splits({"m.gguf.part1of3", "m.gguf.part3of3"});
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].problem, "m.gguf: byte-split part 2 of 3 (m.gguf.part2of3) is missing");
    EXPECT_EQ(groups[0].pieces, (std::vector<std::string>{"m.gguf.part1of3", "m.gguf.part3of3"}));
}

TEST(ByteSplitGroups, MissingLastPartOfThreeIsNamed) {
    auto groups = detect_byte_splits({"m.gguf.part1of3", "m.gguf.part2of3"});
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].problem, "m.gguf: byte-split part 3 of 3 (m.gguf.part3of3) is missing");
}

TEST(ByteSplitGroups, LetterGapIsNamed) {
    auto groups = detect_byte_splits({"m.gguf-split-a", "m.gguf-split-c"});
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].problem, "m.gguf: byte-split piece m.gguf-split-b is missing");
    groups = detect_byte_splits({"m.gguf-split-b"});
    EXPECT_EQ(groups[0].problem, "m.gguf: byte-split piece m.gguf-split-a is missing");
    groups = detect_byte_splits({"m.gguf-split-aa", "m.gguf-split-ac"});
    EXPECT_EQ(groups[0].problem, "m.gguf: byte-split piece m.gguf-split-ab is missing");
}

TEST(ByteSplitGroups, DuplicatePositionIsAProblem) {
    auto groups = detect_byte_splits({"m.gguf.part1of2", "m.gguf.part01of2", "m.gguf.part2of2"});
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].problem, "m.gguf: byte-split pieces m.gguf.part01of2 and m.gguf.part1of2 both claim position 1");
}

TEST(ByteSplitGroups, DifferentStylesCountsAndLengthsAreSeparateGroups) {
    auto groups = detect_byte_splits({"m.gguf-split-a", "m.gguf-split-aa", "m.gguf.part1of1", "m.gguf.part1of2",
                                      "m.gguf.part2of2"});
    ASSERT_EQ(groups.size(), 4u);
    EXPECT_EQ(groups[0].style, ByteSplitStyle::Letters);
    EXPECT_EQ(groups[0].pieces, std::vector<std::string>{"m.gguf-split-a"});
    EXPECT_EQ(groups[1].pieces, std::vector<std::string>{"m.gguf-split-aa"});
    EXPECT_EQ(groups[2].pieces, std::vector<std::string>{"m.gguf.part1of1"});
    EXPECT_EQ(groups[3].pieces, (std::vector<std::string>{"m.gguf.part1of2", "m.gguf.part2of2"}));
    for (const auto& g : groups) EXPECT_EQ(g.problem, "") << g.logical;
}

TEST(ByteSplitGroups, NoPiecesNoGroups) {
    EXPECT_TRUE(detect_byte_splits({}).empty());
    EXPECT_TRUE(detect_byte_splits({"a.gguf", "b-00001-of-00002.gguf", "config.json"}).empty());
}

}  // namespace
