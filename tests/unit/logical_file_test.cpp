// Logical files (gguf/bytes/logical_file.hpp): part ranges, pread over a concatenation, the strict
// header reader over byte-split pieces, extent flattening, and split sets whose shards are
// themselves byte-split.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <random>

#include <gtest/gtest.h>

#include "gguf/model/merge_plan.hpp"
#include "gguf/error.hpp"
#include "gguf/bytes/logical_file.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using gguf_test::TempDir;

gguf::LogicalFile logical_of(const std::string& name, const std::vector<std::string>& paths) {
    gguf::LogicalFile f;
    f.path = name;
    for (const auto& p : paths) f.parts.push_back(gguf::LogicalFile::single(p).parts.front());
    return f;
}

std::string render(const gguf::VirtualFile& vf) {
    std::string out(vf.size(), '\0');
    EXPECT_EQ(vf.read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    return out;
}

TEST(LogicalFile, PartRangesTable) {
    gguf::LogicalFile f;
    f.parts.resize(3);
    f.parts[0].size = 1000;
    f.parts[1].size = 0;  // an empty part is skipped
    f.parts[2].size = 500;
    EXPECT_EQ(f.size(), 1500u);
    struct Case {
        uint64_t off, len;
        std::vector<std::array<uint64_t, 3>> want;
    };
    const std::vector<Case> cases = {
        {0, 10, {{0, 0, 10}}},
        {990, 20, {{0, 990, 10}, {2, 0, 10}}},
        {1000, 500, {{2, 0, 500}}},
        {1499, 100, {{2, 499, 1}}},
        {1500, 10, {}},
        {0, 0, {}},
        {0, 5000, {{0, 0, 1000}, {2, 0, 500}}},
    };
    for (const auto& c : cases) {
        std::vector<std::array<uint64_t, 3>> got;
        f.for_each_part_range(c.off, c.len, [&](size_t i, uint64_t o, uint64_t n) { got.push_back({i, o, n}); });
        EXPECT_EQ(got, c.want) << "range " << c.off << "+" << c.len;
    }
}

TEST(LogicalFile, PreadAcrossPiecesEqualsTheOriginal) {
    TempDir dir;
    const std::string original = gguf_test::read_file(fixture("tiny-llama/tiny-llama.gguf"));
    std::vector<std::string> pieces = {dir / "t.gguf.part1of3", dir / "t.gguf.part2of3", dir / "t.gguf.part3of3"};
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"), pieces);
    auto open = gguf::OpenLogicalFile::open(logical_of(dir / "t.gguf", pieces));
    ASSERT_EQ(open.size(), original.size());
    std::mt19937_64 rng(7);
    std::string buf;
    for (int i = 0; i < 500; ++i) {
        uint64_t off = rng() % (original.size() + 10);
        size_t len = static_cast<size_t>(rng() % 300000);
        buf.assign(len, '\x55');
        ssize_t n = open.pread(buf.data(), len, off);
        size_t want = off >= original.size() ? 0 : std::min<size_t>(len, original.size() - off);
        ASSERT_EQ(n, static_cast<ssize_t>(want)) << off << "+" << len;
        ASSERT_EQ(buf.substr(0, want), original.substr(std::min<size_t>(off, original.size()), want));
    }
}

TEST(LogicalFile, HeaderOfByteSplitPiecesEqualsTheOriginalHeader) {
    TempDir dir;
    // Cut so that the header itself (9920 bytes) spans several pieces.
    const std::string bytes = gguf_test::read_file(fixture("tiny-llama/tiny-llama.gguf"));
    gguf_test::write_file(dir / "t.gguf-split-a", bytes.substr(0, 100));
    gguf_test::write_file(dir / "t.gguf-split-b", bytes.substr(100, 5000));
    gguf_test::write_file(dir / "t.gguf-split-c", bytes.substr(5100));
    auto open = gguf::OpenLogicalFile::open(
        logical_of(dir / "t.gguf", {dir / "t.gguf-split-a", dir / "t.gguf-split-b", dir / "t.gguf-split-c"}));
    gguf::Header h = gguf::read_header(open);
    gguf::Header want = gguf::read_header(fixture("tiny-llama/tiny-llama.gguf"));
    EXPECT_EQ(h.file_size, want.file_size);
    EXPECT_EQ(h.data_offset, want.data_offset);
    ASSERT_EQ(h.kvs.size(), want.kvs.size());
    for (size_t i = 0; i < h.kvs.size(); ++i) {
        EXPECT_EQ(h.kvs[i].key, want.kvs[i].key);
        EXPECT_EQ(h.kvs[i].value.raw, want.kvs[i].value.raw);
    }
    ASSERT_EQ(h.tensors.size(), want.tensors.size());
    EXPECT_EQ(h.tensors.back().name, want.tensors.back().name);
}

TEST(LogicalFile, MissingLastPieceIsTruncatedNamingTheLogicalFile) {
    TempDir dir;
    std::vector<std::string> pieces = {dir / "t.gguf.part1of3", dir / "t.gguf.part2of3", dir / "t.gguf.part3of3"};
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"), pieces);
    auto open = gguf::OpenLogicalFile::open(logical_of(dir / "t.gguf", {pieces[0], pieces[1]}));
    try {
        gguf::read_header(open);
        FAIL() << "two of three pieces parsed as a complete GGUF file";
    } catch (const gguf::Error& e) {
        EXPECT_EQ(e.code(), gguf::Code::Truncated);
        EXPECT_EQ(std::string(e.what()).rfind(dir / "t.gguf: ", 0), 0u) << e.what();
    }
}

TEST(LogicalFile, OpenRefusesAPartThatChangedSinceItWasListed) {
    TempDir dir;
    gguf_test::write_file(dir / "a", "0123456789");
    auto f = logical_of(dir / "a", {dir / "a"});
    gguf_test::write_file(dir / "a", "01234567890");  // one byte longer
    try {
        gguf::OpenLogicalFile::open(f);
        FAIL() << "a changed part was accepted";
    } catch (const gguf::Error& e) {
        EXPECT_EQ(e.code(), gguf::Code::BadSplit);
        EXPECT_NE(std::string(e.what()).find("changed while it was being read"), std::string::npos) << e.what();
    }
}

TEST(LogicalFile, FlattenCutsExtentsAtPartBoundaries) {
    gguf::VirtualLayout logical;
    logical.append_header("HEAD");
    logical.append_source(0, 5, 20);   // file 0 has parts of 10 and 30 bytes: cut at 10
    logical.append_zeros(3);
    logical.append_source(1, 0, 7);    // file 1 is one part
    std::vector<gguf::LogicalFile> files(2);
    files[0].parts.resize(2);
    files[0].parts[0].size = 10;
    files[0].parts[1].size = 30;
    files[1].parts.resize(1);
    files[1].parts[0].size = 7;
    gguf::VirtualLayout flat = gguf::flatten_sources(logical, files);
    EXPECT_EQ(flat.size(), logical.size());
    EXPECT_EQ(flat.header(), "HEAD");
    const auto& e = flat.extents();
    ASSERT_EQ(e.size(), 5u);
    EXPECT_EQ(e[0].kind, gguf::Extent::Kind::Header);
    EXPECT_EQ(e[1].source, 0u);
    EXPECT_EQ(e[1].source_offset, 5u);
    EXPECT_EQ(e[1].length, 5u);
    EXPECT_EQ(e[2].source, 1u);
    EXPECT_EQ(e[2].source_offset, 0u);
    EXPECT_EQ(e[2].length, 15u);
    EXPECT_EQ(e[3].kind, gguf::Extent::Kind::Zeros);
    EXPECT_EQ(e[4].source, 2u);  // file 1, part 0 -> flattened index 2
    // An extent past the end of its file is refused.
    gguf::VirtualLayout bad;
    bad.append_source(1, 1, 7);
    EXPECT_THROW(gguf::flatten_sources(bad, files), gguf::Error);
}

// kvzoo-00001-of-00007.gguf made of two letter pieces, kvzoo-00002 of three part-of pieces, the
// rest plain files: the merged bytes equal llama.cpp's reference merge.
TEST(LogicalFile, SplitSetOfByteSplitShardsMergesToTheReference) {
    TempDir dir;
    auto shard = [&](int i) { return "kvzoo-0000" + std::to_string(i) + "-of-00007.gguf"; };
    std::map<std::string, gguf::LogicalFile> files;
    std::vector<std::string> p1 = {dir / (shard(1) + "-split-a"), dir / (shard(1) + "-split-b")};
    std::vector<std::string> p2 = {dir / (shard(2) + ".part1of3"), dir / (shard(2) + ".part2of3"),
                                   dir / (shard(2) + ".part3of3")};
    gguf_test::cut_file(fixture("kvzoo/t7/" + shard(1)), p1);
    gguf_test::cut_file(fixture("kvzoo/t7/" + shard(2)), p2);
    files[dir / shard(1)] = logical_of(dir / shard(1), p1);
    files[dir / shard(2)] = logical_of(dir / shard(2), p2);
    for (int i = 3; i <= 7; ++i) {
        gguf_test::copy_file(fixture("kvzoo/t7/" + shard(i)), dir / shard(i));
        files[dir / shard(i)] = logical_of(dir / shard(i), {dir / shard(i)});
    }
    auto resolve = [&](const std::string& path) -> std::optional<gguf::LogicalFile> {
        auto it = files.find(path);
        if (it == files.end()) return std::nullopt;
        return it->second;
    };
    auto set = gguf::SplitSet::open(dir / shard(1), resolve);
    ASSERT_EQ(set.shards().size(), 7u);
    EXPECT_EQ(gguf::set_parts(set).size(), 10u);
    auto vf = gguf::open_merged(set);
    EXPECT_EQ(vf.sources().size(), 10u);
    EXPECT_EQ(gguf_test::sha256_hex(render(vf)), "188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f");

    // A missing shard (here: its pieces are gone) is reported as missing.
    files.erase(dir / shard(2));
    try {
        gguf::SplitSet::open(dir / shard(1), resolve);
        FAIL();
    } catch (const gguf::Error& e) {
        EXPECT_NE(std::string(e.what()).find(shard(2) + ": missing shard 2 of 7"), std::string::npos) << e.what();
    }
}

TEST(VirtualFile, ConcatenationServesThePiecesInOrder) {
    TempDir dir;
    gguf_test::write_file(dir / "a", "hello ");
    gguf_test::write_file(dir / "b", "");
    gguf_test::write_file(dir / "c", "world");
    auto vf = gguf::VirtualFile::concatenation(logical_of(dir / "x", {dir / "a", dir / "b", dir / "c"}));
    EXPECT_EQ(vf.size(), 11u);
    EXPECT_EQ(render(vf), "hello world");
    char buf[4];
    EXPECT_EQ(vf.read(4, 4, buf), 4);
    EXPECT_EQ(std::string(buf, 4), "o wo");
}

TEST(VirtualFile, SourceRewrittenInPlaceGivesEioNotNewBytes) {
    TempDir dir;
    gguf_test::write_file(dir / "a", std::string(8192, 'A'));
    auto vf = gguf::VirtualFile::concatenation(logical_of(dir / "a", {dir / "a"}));
    char buf[16];
    ASSERT_EQ(vf.read(0, sizeof buf, buf), 16);
    // Same size, same inode, new content: pread alone would return 'B's.
    struct timespec later[2] = {{0, UTIME_OMIT}, {2000000000, 0}};
    {
        gguf::UniqueFd fd(::open((dir / "a").c_str(), O_WRONLY));
        ASSERT_TRUE(fd);
        std::string b(8192, 'B');
        ASSERT_EQ(::pwrite(fd.get(), b.data(), b.size(), 0), 8192);
        ASSERT_EQ(::futimens(fd.get(), later), 0);  // a distinct mtime whatever the clock granularity
    }
    uint32_t failed = 99;
    EXPECT_EQ(vf.read(0, sizeof buf, buf, &failed), -EIO);
    EXPECT_EQ(failed, 0u);
    EXPECT_TRUE(vf.source_changed(0));
}

TEST(VirtualFile, SourceDeletedKeepsServingItsBytes) {
    TempDir dir;
    gguf_test::write_file(dir / "a", "keep me");
    auto vf = gguf::VirtualFile::concatenation(logical_of(dir / "a", {dir / "a"}));
    ASSERT_EQ(::unlink((dir / "a").c_str()), 0);
    gguf_test::write_file(dir / "a", "other bytes");  // a new file under the same name
    EXPECT_EQ(render(vf), "keep me");
    EXPECT_FALSE(vf.source_changed(0));
}

}  // namespace
