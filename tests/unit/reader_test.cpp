// The GGUF header reader: golden fixtures, writer round trip, and a matrix of corrupt inputs,
// each of which must be refused with the right code and a message naming the problem.
#include <functional>
#include <set>

#include <gtest/gtest.h>

#include "gguf/error.hpp"
#include "gguf/format/reader.hpp"
#include "common/text.hpp"
#include "gguf/format/writer.hpp"
#include "support/gguf_builder.hpp"
#include "support/support.hpp"

namespace {

using gguf::Code;
using gguf_test::Bytes;
using gguf_test::fixture;

TEST(Reader, KvzooOriginalHeader) {
    auto h = gguf::read_header(fixture("kvzoo/original.gguf"));
    EXPECT_EQ(h.version, 3u);
    EXPECT_EQ(h.kvs.size(), 48u);
    EXPECT_EQ(h.tensors.size(), 43u);
    EXPECT_EQ(h.alignment, 32u);
    EXPECT_EQ(h.file_size, 3525600u);
    EXPECT_EQ(h.data_offset % 32, 0u);
    // Every value type of the spec occurs in kvzoo.
    std::set<gguf::ValueType> types;
    for (const auto& kv : h.kvs) types.insert(kv.value.type);
    EXPECT_EQ(types.size(), gguf::kValueTypeCount);
    // The last tensor ends inside the file, and the data section is packed.
    const auto& last = h.tensors.back();
    EXPECT_LE(h.data_offset + last.offset + last.nbytes, h.file_size);
    EXPECT_EQ(h.tensors.front().name, "token_embd.weight");
}

TEST(Reader, SplitKeysOfAShard) {
    auto h = gguf::read_header(fixture("kvzoo/t7/kvzoo-00003-of-00007.gguf"));
    ASSERT_EQ(h.kvs.size(), 3u);
    EXPECT_EQ(h.kvs[0].key, "split.no");
    EXPECT_EQ(h.kvs[1].key, "split.tensors.count");
    EXPECT_EQ(h.kvs[2].key, "split.count");
    EXPECT_EQ(h.kvs[0].value.type, gguf::ValueType::U16);
    EXPECT_EQ(*h.kvs[0].value.as_int(), 2);
    EXPECT_EQ(*h.kvs[1].value.as_int(), 43);
    EXPECT_EQ(*h.kvs[2].value.as_int(), 7);
    EXPECT_EQ(h.tensors.size(), 7u);
}

TEST(Reader, TinyLlamaAlignmentKeyAndDataStart) {
    auto h = gguf::read_header(fixture("tiny-llama/tiny-llama.gguf"));
    EXPECT_EQ(h.kvs.size(), 26u);
    EXPECT_EQ(h.tensors.size(), 27u);
    ASSERT_NE(h.find("general.alignment"), nullptr);
    EXPECT_EQ(h.alignment, 32u);
    EXPECT_EQ(h.data_offset, 9920u);  // tiny-llama/README.md
}

// The writer re-renders every fixture header byte for byte (header + padding).
TEST(Writer, RendersFixtureHeadersByteExactly) {
    for (const char* f : {"kvzoo/original.gguf", "kvzoo/merged-reference.gguf", "kvzoo/t7/kvzoo-00001-of-00007.gguf",
                          "kvzoo/t7-ntfs/kvzoo-00001-of-00008.gguf", "notensors/original.gguf",
                          "notensors/t7-ntfs/notensors-00002-of-00002.gguf", "tiny-llama/tiny-llama.gguf"}) {
        auto h = gguf::read_header(fixture(f));
        std::string bytes = gguf_test::read_file(fixture(f));
        std::string rendered = gguf::render_header(h.kvs, h.tensors, h.alignment);
        EXPECT_EQ(rendered.size(), gguf::align_up(h.header_size, 32)) << f;
        EXPECT_EQ(rendered, bytes.substr(0, rendered.size())) << f;
    }
}

TEST(Reader, EveryTruncationOfAHeaderIsRefused) {
    std::string bytes = gguf_test::read_file(fixture("notensors/t7-ntfs/notensors-00002-of-00002.gguf"));
    auto h = gguf::parse_header(bytes, bytes.size(), "x");
    for (size_t n = 0; n < h.header_size; ++n) {
        try {
            gguf::parse_header(bytes.substr(0, n), n, "cut.gguf");
            ADD_FAILURE() << "a header cut to " << n << " bytes was accepted";
        } catch (const gguf::Error& e) {
            EXPECT_TRUE(e.code() == Code::Truncated || e.code() == Code::BadMagic) << n << ": " << e.what();
            EXPECT_NE(std::string(e.what()).find("cut.gguf"), std::string::npos);
        }
    }
}

TEST(Reader, TruncatedTensorDataIsRefused) {
    std::string bytes = gguf_test::read_file(fixture("kvzoo/t7/kvzoo-00007-of-00007.gguf"));
    std::string cut = bytes.substr(0, bytes.size() - 100);
    try {
        gguf::parse_header(cut, cut.size(), "kvzoo-00007-of-00007.gguf");
        FAIL() << "accepted";
    } catch (const gguf::Error& e) {
        EXPECT_EQ(e.code(), Code::Truncated);
        EXPECT_NE(std::string(e.what()).find("output.weight"), std::string::npos) << e.what();
    }
}

// ---- corruption matrix ------------------------------------------------------------------------

struct Corrupt {
    std::string name;
    std::function<std::string()> make;
    Code code;
    std::string message;  // substring the error must contain
};

std::ostream& operator<<(std::ostream& os, const Corrupt& c) { return os << c.name; }

// A valid header with one KV ("a" = u32 7) and one f32 [8] tensor "t", then the hook's bytes.
std::string one_tensor(const std::function<void(Bytes&)>& tensor_info, int64_t n_tensors = 1) {
    Bytes b;
    b.preamble(3, n_tensors, 1).str("a").u32(4).u32(7);
    tensor_info(b);
    b.pad(32);
    b.raw(std::string(256, '\0'));
    return b.str();
}

std::string with_kv(const std::function<void(Bytes&)>& kv, int64_t n_kv = 1) {
    Bytes b;
    b.preamble(3, 0, n_kv);
    kv(b);
    b.pad(32);
    return b.str();
}

const std::vector<Corrupt>& corruptions() {
    static const std::vector<Corrupt> all = {
        {"BadMagic", [] { return std::string("GGML") + std::string(60, '\0'); }, Code::BadMagic, "not a GGUF file"},
        {"GitLfsPointer",
         [] { return std::string("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n"); },
         Code::BadMagic, "git-lfs pointer"},
        {"TooShort", [] { return std::string("GG"); }, Code::BadMagic, "not a GGUF file"},
        {"Version1", [] { return Bytes().preamble(1, 0, 0).str(); }, Code::BadVersion, "version 1"},
        {"Version4", [] { return Bytes().preamble(4, 0, 0).str(); }, Code::BadVersion, "unsupported GGUF version 4"},
        {"BigEndian", [] { return Bytes().preamble(0x03000000, 0, 0).str(); }, Code::BigEndian, "big-endian"},
        {"NegativeTensorCount", [] { return Bytes().preamble(3, -1, 0).str(); }, Code::Truncated, "tensor count -1"},
        {"HugeTensorCount", [] { return Bytes().preamble(3, INT64_MAX, 0).str(); }, Code::Truncated, "cannot fit"},
        {"HugeKvCount", [] { return Bytes().preamble(3, 0, 1LL << 40).str(); }, Code::Truncated, "KV count"},
        {"KeyLengthPastEnd", [] { return with_kv([](Bytes& b) { b.u64(1000).raw("abc"); }); }, Code::Truncated,
         "key length 1000 exceeds"},
        {"StringLengthOver2p30",
         [] { return with_kv([](Bytes& b) { b.str("k").u32(8).u64((1ULL << 30) + 1); }); }, Code::TooLarge,
         "exceeds the limit of 2^30"},
        {"StringValuePastEnd", [] { return with_kv([](Bytes& b) { b.str("k").u32(8).u64(500).raw("x"); }); },
         Code::Truncated, "string value of 'k'"},
        {"ArrayCountOver2p30",
         [] { return with_kv([](Bytes& b) { b.str("k").u32(9).u32(0).u64((1ULL << 30) + 1); }); }, Code::TooLarge,
         "array count"},
        {"ArrayPastEnd", [] { return with_kv([](Bytes& b) { b.str("k").u32(9).u32(4).u64(1000); }); },
         Code::Truncated, "array of 1000 u32"},
        {"StringArrayPastEnd", [] { return with_kv([](Bytes& b) { b.str("k").u32(9).u32(8).u64(100000); }); },
         Code::Truncated, "array of 100000 string"},
        {"ArrayOfArrays", [] { return with_kv([](Bytes& b) { b.str("k").u32(9).u32(9).u64(0); }); },
         Code::BadValue, "arrays of arrays"},
        {"UnknownValueType", [] { return with_kv([](Bytes& b) { b.str("k").u32(13).u32(0); }); }, Code::BadValue,
         "unknown value type 13"},
        {"UnknownArrayType", [] { return with_kv([](Bytes& b) { b.str("k").u32(9).u32(77).u64(0); }); },
         Code::BadValue, "unknown array element type 77"},
        {"KeyWithNul", [] { return with_kv([](Bytes& b) { b.str(std::string("a\0x", 3)).u32(0).u8(1); }); },
         Code::BadValue, "key 'a\u2400x' contains a NUL byte (ggml's consumers would read it as 'a')"},
        {"TensorNameWithNul",
         [] { return one_tensor([](Bytes& b) { b.str(std::string("t\0u", 3)).u32(1).i64(8).u32(0).u64(0); }); },
         Code::BadTensor, "tensor name 't\u2400u' contains a NUL byte"},
        {"ZeroDimDroppedByGgmlWriter",
         [] { return one_tensor([](Bytes& b) { b.str("t").u32(2).i64(8).i64(0).u32(0).u64(0); }); },
         Code::BadTensor, "tensor 't': dimension 1 is 0 after the last dimension > 1"},
        {"ZeroDimBeforeTrailingOne",
         [] { return one_tensor([](Bytes& b) { b.str("t").u32(3).i64(8).i64(0).i64(1).u32(0).u64(0); }); },
         Code::BadTensor, "dimension 1 is 0"},
        {"EmptyKey", [] { return with_kv([](Bytes& b) { b.str("").u32(0).u8(1); }); }, Code::BadValue, "empty key"},
        {"DuplicateKey",
         [] { return with_kv([](Bytes& b) { b.str("k").u32(0).u8(1).str("k").u32(0).u8(2); }, 2); },
         Code::BadValue, "duplicate key 'k'"},
        {"AlignmentZero", [] { return with_kv([](Bytes& b) { b.str("general.alignment").u32(4).u32(0); }); },
         Code::BadAlignment, "not a non-zero power of two"},
        {"AlignmentThree", [] { return with_kv([](Bytes& b) { b.str("general.alignment").u32(4).u32(3); }); },
         Code::BadAlignment, "= 3 is not"},
        {"AlignmentNotU32", [] { return with_kv([](Bytes& b) { b.str("general.alignment").u32(10).u64(32); }); },
         Code::BadAlignment, "has type u64, expected u32"},
        {"NDimsFive",
         [] { return one_tensor([](Bytes& b) { b.str("t").u32(5).i64(8).i64(1).i64(1).i64(1).i64(1).u32(0).u64(0); }); },
         Code::BadTensor, "n_dims 5 exceeds 4"},
        {"NegativeDim", [] { return one_tensor([](Bytes& b) { b.str("t").u32(2).i64(8).i64(-3).u32(0).u64(0); }); },
         Code::BadTensor, "is negative"},
        {"ElementCountOverflow",
         [] { return one_tensor([](Bytes& b) { b.str("t").u32(2).i64(INT64_MAX - 2).i64(4).u32(24).u64(0); }); },
         Code::BadTensor, "element count overflows"},
        {"ByteSizeOverflow",
         [] { return one_tensor([](Bytes& b) { b.str("t").u32(1).i64(INT64_MAX - 7).u32(0).u64(0); }); },
         Code::BadTensor, "byte size overflows"},
        {"RemovedType", [] { return one_tensor([](Bytes& b) { b.str("t").u32(1).i64(32).u32(4).u64(0); }); },
         Code::BadTensor, "unknown or removed ggml type 4"},
        {"UnknownType", [] { return one_tensor([](Bytes& b) { b.str("t").u32(1).i64(32).u32(99).u64(0); }); },
         Code::BadTensor, "ggml type 99"},
        {"Ne0NotMultipleOfBlock",
         [] { return one_tensor([](Bytes& b) { b.str("t").u32(1).i64(33).u32(2).u64(0); }); }, Code::BadTensor,
         "not a multiple of the q4_0 block size 32"},
        {"NameTooLong",
         [] { return one_tensor([](Bytes& b) { b.str(std::string(64, 'n')).u32(1).i64(8).u32(0).u64(0); }); },
         Code::BadTensor, "the limit is 63"},
        {"EmptyTensorName", [] { return one_tensor([](Bytes& b) { b.str("").u32(1).i64(8).u32(0).u64(0); }); },
         Code::BadTensor, "empty name"},
        {"DuplicateTensorName",
         [] {
             return one_tensor([](Bytes& b) {
                 b.str("t").u32(1).i64(8).u32(0).u64(0);
                 b.str("t").u32(1).i64(8).u32(0).u64(32);
             }, 2);
         },
         Code::BadTensor, "duplicate tensor name 't'"},
        {"OffsetNotConsecutive",
         [] {
             return one_tensor([](Bytes& b) {
                 b.str("t").u32(1).i64(8).u32(0).u64(0);
                 b.str("u").u32(1).i64(8).u32(0).u64(64);
             }, 2);
         },
         Code::BadTensor, "tensor 'u' has offset 64, expected 32"},
        {"FirstOffsetNotZero", [] { return one_tensor([](Bytes& b) { b.str("t").u32(1).i64(8).u32(0).u64(32); }); },
         Code::BadTensor, "has offset 32, expected 0"},
        {"TensorPastEnd",
         [] {
             Bytes b;
             b.preamble(3, 1, 0).str("t").u32(1).i64(1024).u32(0).u64(0).pad(32).raw(std::string(100, '\0'));
             return b.str();
         },
         Code::Truncated, "tensor 't' data ends at offset"},
    };
    return all;
}

class CorruptHeader : public ::testing::TestWithParam<Corrupt> {};

TEST_P(CorruptHeader, IsRefusedWithAClearMessage) {
    const Corrupt& c = GetParam();
    std::string bytes = c.make();
    try {
        auto h = gguf::parse_header(bytes, bytes.size(), "evil.gguf");
        FAIL() << "accepted a header with " << h.kvs.size() << " KVs";
    } catch (const gguf::Error& e) {
        // As printed: names are kept raw in what() and escaped where text leaves the program.
        std::string msg = gguf::escape(e.what());
        EXPECT_EQ(e.code(), c.code) << msg;
        EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
        EXPECT_EQ(msg.rfind("evil.gguf: ", 0), 0u) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "message must be one line: " << msg;
    }
}

INSTANTIATE_TEST_SUITE_P(Matrix, CorruptHeader, ::testing::ValuesIn(corruptions()),
                         [](const auto& info) { return info.param.name; });

TEST(Reader, SameBytesFromDescriptorAndMemory) {
    auto from_file = gguf::read_header(fixture("kvzoo/merged-reference.gguf"));
    std::string bytes = gguf_test::read_file(fixture("kvzoo/merged-reference.gguf"));
    auto from_mem = gguf::parse_header(bytes, bytes.size(), "m");
    ASSERT_EQ(from_file.kvs.size(), from_mem.kvs.size());
    for (size_t i = 0; i < from_file.kvs.size(); ++i) EXPECT_EQ(from_file.kvs[i].value.raw, from_mem.kvs[i].value.raw);
    EXPECT_EQ(from_file.data_offset, from_mem.data_offset);
}

TEST(Reader, BuilderProducesParsableFilesWithOtherAlignments) {
    std::vector<gguf::KeyValue> kvs = {{"general.alignment", gguf::Value::u32(64)}};
    std::string f = gguf_test::build_gguf(kvs, {{"a", {7}, 0}, {"b", {32, 3}, 8}, {"c", {5, 1}, 1}}, 64);
    auto h = gguf::parse_header(f, f.size(), "b.gguf");
    EXPECT_EQ(h.alignment, 64u);
    ASSERT_EQ(h.tensors.size(), 3u);
    EXPECT_EQ(h.tensors[1].offset, 64u);
    EXPECT_EQ(h.tensors[1].nbytes, 3u * 34u);
    EXPECT_EQ(h.tensors[2].offset, 64u + 128u);
    EXPECT_EQ(h.tensors[2].n_dims, 1u);  // trailing 1 stripped by the writer, as ggml does
    EXPECT_EQ(h.data_offset % 64, 0u);
}

}  // namespace

namespace {
// ggml accepts a tensor info with n_dims 0 (a scalar: one element); so must the count check.
TEST(Reader, ZeroDimensionalTensorIsAScalar) {
    Bytes b;
    b.preamble(3, 1, 0).str("s").u32(0).u32(0).u64(0).pad(32).raw(std::string(32, '\0'));
    auto h = gguf::parse_header(b.str(), b.size(), "scalar.gguf");
    ASSERT_EQ(h.tensors.size(), 1u);
    EXPECT_EQ(h.tensors[0].n_dims, 0u);
    EXPECT_EQ(h.tensors[0].nbytes, 4u);
}
}  // namespace

namespace {
// ggml's reader accepts a bool byte of 2..255; so do we, and the byte is written back unchanged
// (a merge must stay byte-identical to gguf-split's), for a scalar and inside a bool array.
TEST(Reader, BoolBytesAboveOneAreAcceptedAndKept) {
    Bytes b;
    b.preamble(3, 0, 2).str("b").u32(7).u8(2).str("arr").u32(9).u32(7).u64(3).u8(0).u8(1).u8(255).pad(32);
    auto h = gguf::parse_header(b.str(), b.size(), "bool.gguf");
    ASSERT_EQ(h.kvs.size(), 2u);
    EXPECT_EQ(h.kvs[0].value.raw, std::string("\x02", 1));
    EXPECT_EQ(h.kvs[1].value.raw.substr(12), std::string("\x00\x01\xff", 3));
    EXPECT_EQ(gguf::render_header(h.kvs, h.tensors, 32), b.str());
}

// String VALUES may hold NUL bytes (only keys and tensor names are names): kept byte for byte.
TEST(Reader, StringValueWithNulIsKept) {
    Bytes b;
    b.preamble(3, 0, 1).str("s").u32(8).str(std::string("a\0b", 3)).pad(32);
    auto h = gguf::parse_header(b.str(), b.size(), "s.gguf");
    ASSERT_EQ(h.kvs.size(), 1u);
    EXPECT_EQ(*h.kvs[0].value.as_string(), std::string("a\0b", 3));
}

// A 0 that ggml's writer keeps (it is not after the last dimension > 1) is accepted: [0, 8] and
// [0] are written by ggml as they are and hold no data.
TEST(Reader, ZeroDimKeptByGgmlWriterIsAccepted) {
    for (std::vector<int64_t> ne : {std::vector<int64_t>{0, 8}, std::vector<int64_t>{0}}) {
        Bytes b;
        b.preamble(3, 1, 0).str("e").u32(static_cast<uint32_t>(ne.size()));
        for (int64_t n : ne) b.i64(n);
        b.u32(0).u64(0).pad(32);
        auto h = gguf::parse_header(b.str(), b.size(), "e.gguf");
        ASSERT_EQ(h.tensors.size(), 1u);
        EXPECT_EQ(h.tensors[0].nbytes, 0u);
        EXPECT_EQ(h.tensors[0].effective_dims(), ne.size());
    }
}
}  // namespace
