// KV overrides: the served bytes against an independent writer of the rule (support/gguf_rewrite),
// and every refusal with its one-line message.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <gtest/gtest.h>

#include "gguf/bytes/file_io.hpp"
#include "gguf/error.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/model/kv_override.hpp"
#include "gguf/model/merge_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "support/gguf_builder.hpp"
#include "support/gguf_rewrite.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::cut_gguf;
using gguf_test::fixture;
using gguf_test::join_gguf;
using gguf_test::kv_index;
using gguf_test::RawGguf;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const std::string kTiny = "tiny-llama/tiny-llama.gguf";

std::string render(const gguf::VirtualFile& vf) {
    std::string out(vf.size(), '\0');
    EXPECT_EQ(vf.read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    return out;
}

/// Overrides from command-line style specs: "-KEY" removes, anything else is KEY=TYPE:VALUE.
gguf::KvOverrides edits(const std::vector<std::string>& specs, const std::string& base_dir = "") {
    gguf::KvOverrides o;
    for (const auto& s : specs) {
        o.edits.push_back(s[0] == '-' ? gguf::parse_kv_removal(s.substr(1), "--remove-kv")
                                      : gguf::parse_kv_override(s, "--override-kv", base_dir));
    }
    return o;
}

std::string edited_single(const std::string& path, const gguf::KvOverrides& o) {
    return render(gguf::open_edited(gguf::LogicalFile::single(path), o));
}

/// The message of the gguf::Error that `fn` throws ("" and a failure when it throws none).
template <typename Fn>
std::string error_of(Fn&& fn, gguf::Code code = gguf::Code::BadArgument) {
    try {
        fn();
    } catch (const gguf::Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        const std::string m = e.what();
        EXPECT_EQ(m.find('\n'), std::string::npos) << m;
        return m;
    }
    ADD_FAILURE() << "no error thrown";
    return "";
}

TEST(KvOverrideBytes, NewStringKeyIsAppendedAfterTheLastKey) {
    const std::string original = gguf_test::read_file(fixture(kTiny));
    RawGguf want = cut_gguf(original);
    want.kvs.push_back(gguf_test::raw_string("general.url", "https://example.invalid/tiny"));
    const std::string got = edited_single(fixture(kTiny), edits({"general.url=str:https://example.invalid/tiny"}));
    EXPECT_EQ(got.size(), join_gguf(want).size());
    EXPECT_TRUE(got == join_gguf(want));
    EXPECT_EQ(got.substr(got.size() - want.data.size()), want.data);  // every data byte unchanged
}

TEST(KvOverrideBytes, IntIntoAU32KeyStaysU32InItsPlace) {
    RawGguf want = cut_gguf(gguf_test::read_file(fixture(kTiny)));
    want.kvs[kv_index(want, "llama.context_length")] = gguf_test::raw_u32("llama.context_length", 4096);
    const std::string got = edited_single(fixture(kTiny), edits({"llama.context_length=int:4096"}));
    EXPECT_TRUE(got == join_gguf(want));
    // Same length: the file differs only in those four bytes.
    EXPECT_EQ(got.size(), gguf_test::read_file(fixture(kTiny)).size());
}

TEST(KvOverrideBytes, RemovedKeyIsGone) {
    RawGguf want = cut_gguf(gguf_test::read_file(fixture(kTiny)));
    want.kvs.erase(want.kvs.begin() + static_cast<long>(kv_index(want, "general.description")));
    const std::string got = edited_single(fixture(kTiny), edits({"-general.description"}));
    EXPECT_TRUE(got == join_gguf(want));
}

TEST(KvOverrideBytes, FloatBoolAndExactTypesKeepOrSetTheType) {
    RawGguf want = cut_gguf(gguf_test::read_file(fixture(kTiny)));
    want.kvs[kv_index(want, "llama.rope.freq_base")] = gguf_test::raw_f32("llama.rope.freq_base", 500000.0f);
    want.kvs[kv_index(want, "tokenizer.ggml.add_eos_token")] = gguf_test::raw_bool("tokenizer.ggml.add_eos_token", true);
    want.kvs[kv_index(want, "tokenizer.ggml.bos_token_id")] = gguf_test::raw_u32("tokenizer.ggml.bos_token_id", 7);
    want.kvs.push_back(gguf_test::raw_u64("zoo.new.u64", 18446744073709551615ull));
    want.kvs.push_back(gguf_test::raw_i32("zoo.new.i32", -5));
    want.kvs.push_back(gguf_test::raw_bool("zoo.new.bool", false));
    const std::string got = edited_single(
        fixture(kTiny), edits({"llama.rope.freq_base=float:500000", "tokenizer.ggml.add_eos_token=bool:true",
                               "tokenizer.ggml.bos_token_id=u32:7", "zoo.new.u64=u64:18446744073709551615",
                               "zoo.new.i32=i32:-5", "zoo.new.bool=bool:false"}));
    EXPECT_TRUE(got == join_gguf(want));
}

TEST(KvOverrideBytes, Alignment64WithAHeaderChangeThatIsNotAMultipleOfIt) {
    // A file of our own: alignment 64, two f32 tensors of 40 and 20 bytes.
    gguf_test::Bytes infos;
    infos.str("a").u32(1).i64(10).u32(0).u64(0);
    infos.str("b").u32(1).i64(5).u32(0).u64(64);
    RawGguf in;
    in.alignment = 64;
    in.kvs = {gguf_test::raw_string("general.architecture", "llama"), gguf_test::raw_u32("general.alignment", 64),
              gguf_test::raw_string("general.name", "m")};
    in.tensor_count = 2;
    in.tensor_infos = infos.str();
    in.data = std::string(40, 'A') + std::string(24, '\0') + std::string(20, 'B') + std::string(44, '\0');
    gguf_test::TempDir dir;
    gguf_test::write_file(dir / "m.gguf", join_gguf(in));

    // Header: 201 bytes, data at 256. The edit adds 12 + 51 = 63 bytes: the header ends at 264,
    // so the data starts at 320 (at 288 if padded to 32).
    const std::string url(20, 'u');
    RawGguf want = in;
    want.kvs[kv_index(want, "general.name")] = gguf_test::raw_string("general.name", "a longer name");
    want.kvs.push_back(gguf_test::raw_string("general.url", url));
    ASSERT_EQ(join_gguf(in).size() - in.data.size(), 256u);
    ASSERT_EQ(join_gguf(want).size() - in.data.size(), 320u);
    const std::string got =
        edited_single(dir / "m.gguf", edits({"general.name=str:a longer name", "general.url=str:" + url}));
    EXPECT_TRUE(got == join_gguf(want));
    EXPECT_EQ(got.size(), 320u + in.data.size());
    EXPECT_EQ(got.substr(got.size() - in.data.size()), in.data);
    EXPECT_EQ(gguf::parse_header(got, got.size(), "edited").data_offset % 64, 0u);
}

TEST(KvOverrideBytes, FileWithoutTensorsIsTheNewHeaderPaddedTo32) {
    RawGguf in;
    in.kvs = {gguf_test::raw_string("general.architecture", "llama")};
    gguf_test::TempDir dir;
    gguf_test::write_file(dir / "n.gguf", join_gguf(in));
    RawGguf want = in;
    want.kvs.push_back(gguf_test::raw_string("general.name", "none"));
    EXPECT_TRUE(edited_single(dir / "n.gguf", edits({"general.name=str:none"})) == join_gguf(want));
}

TEST(KvOverrideBytes, MegabyteChatTemplateFromAFile) {
    gguf_test::TempDir dir;
    std::string tmpl;
    for (int i = 0; tmpl.size() < (size_t{1} << 20); ++i) tmpl += "{% for m in messages %}" + std::to_string(i) + "\n";
    tmpl.resize(size_t{1} << 20);
    gguf_test::write_file(dir / "t.jinja", tmpl);
    gguf::KvOverrides o;
    o.edits.push_back(gguf::chat_template_edit(dir / "t.jinja"));
    EXPECT_EQ(o.edits.front().spelled(), "tokenizer.chat_template=str:@" + (dir / "t.jinja"));

    RawGguf want = cut_gguf(gguf_test::read_file(fixture(kTiny)));
    want.kvs.push_back(gguf_test::raw_string("tokenizer.chat_template", tmpl));
    const std::string got = edited_single(fixture(kTiny), o);
    EXPECT_EQ(got.size(), join_gguf(want).size());
    EXPECT_TRUE(got == join_gguf(want));

    // A second template replaces the first in place (the key is a string now).
    gguf_test::write_file(dir / "short.jinja", "{{ x }}");
    o.edits.push_back(gguf::chat_template_edit(dir / "short.jinja"));
    want.kvs.back() = gguf_test::raw_string("tokenizer.chat_template", "{{ x }}");
    EXPECT_TRUE(edited_single(fixture(kTiny), o) == join_gguf(want));
}

TEST(KvOverrideBytes, MergedSetGetsTheRuleAfterTheSplitKeysTheMergeWrites) {
    auto set = gguf::SplitSet::open(fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf"));
    RawGguf want = cut_gguf(gguf_test::read_file(fixture("kvzoo/merged-reference.gguf")));
    ASSERT_EQ(want.kvs.back().key, "split.count");
    want.kvs[kv_index(want, "zoo.scalar.u16")] = gguf_test::RawKv{"zoo.scalar.u16", 2, std::string("\x07\x00", 2)};
    want.kvs.erase(want.kvs.begin() + static_cast<long>(kv_index(want, "zoo.array.string")));
    want.kvs.push_back(gguf_test::raw_string("tokenizer.chat_template", "{{ messages }}"));
    const auto o = edits({"zoo.scalar.u16=int:7", "-zoo.array.string", "tokenizer.chat_template=str:{{ messages }}"});
    const std::string got = render(gguf::open_merged(set, o));
    EXPECT_EQ(got.size(), join_gguf(want).size());
    EXPECT_EQ(gguf_test::sha256_hex(got), gguf_test::sha256_hex(join_gguf(want)));
}

TEST(KvOverrideBytes, NoOverridesGiveThePlainMerge) {
    auto set = gguf::SplitSet::open(fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf"));
    const std::string got = render(gguf::open_merged(set, gguf::KvOverrides{}));
    EXPECT_TRUE(got == gguf_test::read_file(fixture("kvzoo/merged-reference.gguf")));
}

TEST(KvOverrideBytes, EditsApplyInTheOrderGiven) {
    RawGguf want = cut_gguf(gguf_test::read_file(fixture(kTiny)));
    want.kvs.erase(want.kvs.begin() + static_cast<long>(kv_index(want, "general.name")));
    want.kvs.push_back(gguf_test::raw_string("general.name", "renamed"));  // removed, then added at the end
    EXPECT_TRUE(edited_single(fixture(kTiny), edits({"-general.name", "general.name=str:renamed"})) == join_gguf(want));
}

// ---- refusals -------------------------------------------------------------------------------

std::vector<gguf::KeyValue> tiny_kvs() { return gguf::read_header(fixture(kTiny)).kvs; }

TEST(KvOverrideRefusal, StrOntoAnIntegerKey) {
    EXPECT_EQ(error_of([] { gguf::apply_kv_overrides(tiny_kvs(), edits({"llama.context_length=str:4096"})); }),
              "--override-kv: llama.context_length: the key is u32, str cannot go into it (an override keeps the "
              "key's type; use int: or u32:)");
}

TEST(KvOverrideRefusal, ExactTypeOtherThanTheKeys) {
    EXPECT_PRED2(contains, error_of([] { gguf::apply_kv_overrides(tiny_kvs(), edits({"llama.context_length=i64:4096"})); }),
                std::string("llama.context_length: the key is u32, i64 cannot go into it"));
    EXPECT_PRED2(contains, error_of([] { gguf::apply_kv_overrides(tiny_kvs(), edits({"llama.rope.freq_base=int:1"})); }),
                std::string("llama.rope.freq_base: the key is f32, int cannot go into it (an override keeps the key's "
                          "type; use float: or f32:)"));
    EXPECT_PRED2(contains, error_of([] { gguf::apply_kv_overrides(tiny_kvs(), edits({"tokenizer.ggml.tokens=str:x"})); }),
                std::string("tokenizer.ggml.tokens: the key is array, str cannot go into it (an override keeps the "
                          "key's type)"));
}

TEST(KvOverrideRefusal, OutOfTheKeysRangeNamesKeyAndRange) {
    EXPECT_EQ(error_of([] { gguf::apply_kv_overrides(tiny_kvs(), edits({"llama.context_length=int:4294967296"})); }),
              "--override-kv: llama.context_length: 4294967296 is out of range for u32 (0..4294967295)");
    EXPECT_EQ(error_of([] { gguf::apply_kv_overrides(tiny_kvs(), edits({"llama.context_length=int:-1"})); }),
              "--override-kv: llama.context_length: -1 is out of range for u32 (0..4294967295)");
    EXPECT_EQ(error_of([] { gguf::apply_kv_overrides(tiny_kvs(), edits({"llama.rope.freq_base=float:1e39"})); }),
              "--override-kv: llama.rope.freq_base: 1e39 is out of range for f32 (-3.40282e+38..3.40282e+38)");
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("x.y=i8:-129", "--override-kv"); }),
              "--override-kv: x.y: -129 is out of range for i8 (-128..127)");
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("x.y=u64:18446744073709551616", "--override-kv"); }),
              "--override-kv: x.y: 18446744073709551616 is out of range for u64 (0..18446744073709551615)");
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("x.y=int:-99999999999999999999", "--override-kv"); }),
              "--override-kv: x.y: -99999999999999999999 is out of range for every GGUF integer type "
              "(-9223372036854775808..18446744073709551615)");
    EXPECT_EQ(error_of([] { gguf::apply_kv_overrides(tiny_kvs(), edits({"general.file_type=int:-9223372036854775809"})); }),
              "--override-kv: general.file_type: -9223372036854775809 is out of range for u32 (0..4294967295)");
}

TEST(KvOverrideRefusal, SyntaxAndTypeNames) {
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("llama.context_length", "--override-kv"); }),
              "--override-kv: 'llama.context_length': expected KEY=TYPE:VALUE (no '=')");
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("llama.context_length=4096", "--override-kv"); }),
              "--override-kv: llama.context_length: expected KEY=TYPE:VALUE (no ':' after the type)");
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("a.b=uint32:1", "--override-kv"); }),
              "--override-kv: a.b: unknown type 'uint32' (int, float, bool, str, u8, i8, u16, i16, u32, i32, u64, "
              "i64, f32, f64)");
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("=str:x", "--override-kv"); }), "--override-kv: empty key");
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("a.b=int:12abc", "--override-kv"); }),
              "--override-kv: a.b: '12abc' is not an integer");
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("a.b=float:fast", "--override-kv"); }),
              "--override-kv: a.b: 'fast' is not a number");
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("a.b=bool:yes", "--override-kv"); }),
              "--override-kv: a.b: 'yes' is not a bool (true or false)");
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("a.b=u32:1.5", "--override-kv"); }),
              "--override-kv: a.b: '1.5' is not an integer");
}

TEST(KvOverrideRefusal, LayoutKeys) {
    const std::string want = ": describes the file's layout (general.alignment, split.*) and cannot be overridden or removed";
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("general.alignment=int:64", "--override-kv"); }),
              "--override-kv: general.alignment" + want);
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("split.count=int:0", "--override-kv"); }),
              "--override-kv: split.count" + want);
    EXPECT_EQ(error_of([] { gguf::parse_kv_removal("split.no", "--remove-kv"); }), "--remove-kv: split.no" + want);
    EXPECT_EQ(error_of([] { gguf::parse_kv_removal("general.alignment", "--remove-kv"); }),
              "--remove-kv: general.alignment" + want);
    // Built by hand, past the parser: the rule refuses it too.
    gguf::KvOverrides o;
    o.edits.push_back(gguf::KvEdit{gguf::KvEdit::Kind::Remove, "split.tensors.count", "test"});
    EXPECT_EQ(error_of([&] { gguf::apply_kv_overrides(tiny_kvs(), o); }), "test: split.tensors.count" + want);
}

TEST(KvOverrideRefusal, RemovingAKeyThatIsNotThere) {
    EXPECT_EQ(error_of([] { gguf::apply_kv_overrides(tiny_kvs(), edits({"-general.license"})); }),
              "--remove-kv: general.license: not in the file, nothing to remove");
}

TEST(KvOverrideRefusal, IntAndFloatForANewKeyAskForAnExactType) {
    EXPECT_EQ(error_of([] { gguf::apply_kv_overrides(tiny_kvs(), edits({"llama.rope.scaling.factor=float:2"})); }),
              "--override-kv: llama.rope.scaling.factor: not in the file, and float does not say which type to write: "
              "give f32 or f64 (llama.cpp reads a key from a file only with its exact type)");
    EXPECT_PRED2(contains, error_of([] { gguf::apply_kv_overrides(tiny_kvs(), edits({"llama.expert_count=int:8"})); }),
                std::string("llama.expert_count: not in the file, and int does not say which type to write: give u8, "
                          "i8, u16, i16, u32, i32, u64 or i64"));
}

TEST(KvOverrideRefusal, UnreadableValueFileIsNamed) {
    EXPECT_EQ(error_of([] { gguf::chat_template_edit("/nonexistent/t.jinja"); }, gguf::Code::Io),
              "--chat-template-file: tokenizer.chat_template: /nonexistent/t.jinja: No such file or directory");
}

TEST(KvOverrideRefusal, AShardIsNotEditedAlone) {
    EXPECT_PRED2(contains, error_of([] { gguf::open_edited(gguf::LogicalFile::single(fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf")),
                                                edits({"general.name=str:x"})); },
                         gguf::Code::BadSplit),
                std::string("kvzoo-00001-of-00007.gguf: is one shard of a split set (split.count above 1)"));
}

// ---- sidecars -------------------------------------------------------------------------------

TEST(KvSidecar, LinesCommentsBlanksAndFilesRelativeToTheSidecar) {
    gguf_test::TempDir dir;
    ASSERT_EQ(::mkdir((dir / "sub").c_str(), 0755), 0);
    gguf_test::write_file(dir / "sub/t.jinja", "{{ bos }}\n");
    gguf_test::write_file(dir / "sub/m.gguf.kv",
                          "# fixes for m.gguf\n"
                          "\n"
                          "   llama.context_length=int:4096\r\n"
                          "tokenizer.chat_template=str:@t.jinja\n"
                          "  # indented comment\n"
                          "-general.description\n"
                          "general.name=str:with spaces # not a comment ");
    const gguf::KvOverrides o = gguf::read_kv_sidecar(dir / "sub/m.gguf.kv");
    ASSERT_EQ(o.edits.size(), 4u);
    EXPECT_EQ(o.edits[0].spelled(), "llama.context_length=int:4096");
    EXPECT_EQ(o.edits[0].origin, dir / "sub/m.gguf.kv:3");
    EXPECT_EQ(o.edits[1].text, "{{ bos }}\n");
    EXPECT_EQ(o.edits[1].from_file, dir / "sub/t.jinja");
    EXPECT_EQ(o.edits[2].spelled(), "-general.description");
    EXPECT_EQ(o.edits[2].origin, dir / "sub/m.gguf.kv:6");
    EXPECT_EQ(o.edits[3].text, "with spaces # not a comment ");

    RawGguf want = cut_gguf(gguf_test::read_file(fixture(kTiny)));
    want.kvs[kv_index(want, "llama.context_length")] = gguf_test::raw_u32("llama.context_length", 4096);
    want.kvs.erase(want.kvs.begin() + static_cast<long>(kv_index(want, "general.description")));
    want.kvs[kv_index(want, "general.name")] = gguf_test::raw_string("general.name", "with spaces # not a comment ");
    want.kvs.push_back(gguf_test::raw_string("tokenizer.chat_template", "{{ bos }}\n"));
    EXPECT_TRUE(edited_single(fixture(kTiny), o) == join_gguf(want));
}

TEST(KvSidecar, AnyBadLineRefusesTheWholeSidecarNamingFileAndLine) {
    gguf_test::TempDir dir;
    gguf_test::write_file(dir / "m.gguf.kv", "general.name=str:ok\n# fine\nllama.context_length=int4096\n");
    EXPECT_EQ(error_of([&] { gguf::read_kv_sidecar(dir / "m.gguf.kv"); }),
              dir / "m.gguf.kv:3: llama.context_length: expected KEY=TYPE:VALUE (no ':' after the type)");
    gguf_test::write_file(dir / "m.gguf.kv", "-split.count\n");
    EXPECT_PRED2(contains, error_of([&] { gguf::read_kv_sidecar(dir / "m.gguf.kv"); }),
                std::string("m.gguf.kv:1: split.count: describes the file's layout"));
    gguf_test::write_file(dir / "m.gguf.kv", "tokenizer.chat_template=str:@missing.jinja\n");
    EXPECT_EQ(error_of([&] { gguf::read_kv_sidecar(dir / "m.gguf.kv"); }, gguf::Code::Io),
              dir / "m.gguf.kv:1: tokenizer.chat_template: " + (dir / "missing.jinja") + ": No such file or directory");
    // A line that parses but does not fit the model is named when applied.
    gguf_test::write_file(dir / "m.gguf.kv", "# x\nllama.context_length=str:long\n");
    const auto o = gguf::read_kv_sidecar(dir / "m.gguf.kv");
    EXPECT_PRED2(contains, error_of([&] { gguf::apply_kv_overrides(tiny_kvs(), o); }),
                std::string("m.gguf.kv:2: llama.context_length: the key is u32, str cannot go into it"));
}

/// Issue 30, item 9: "KEY =..." added a junk key "KEY " and a BOM a junk key "\xef\xbb\xbfKEY".
TEST(KvSidecar, ABomIsDroppedAndBlanksAroundTheKeyAreRefusedNamingOriginAndKey) {
    gguf_test::TempDir dir;
    gguf_test::write_file(dir / "m.gguf.kv", "\xEF\xBB\xBFllama.context_length=int:4096\n-general.description\n");
    const gguf::KvOverrides o = gguf::read_kv_sidecar(dir / "m.gguf.kv");
    ASSERT_EQ(o.edits.size(), 2u);
    EXPECT_EQ(o.edits[0].key, "llama.context_length");
    EXPECT_EQ(o.edits[0].origin, dir / "m.gguf.kv:1");
    // The BOM line overrides the key the model has: it stays u32 in its place, no key is added.
    RawGguf want = cut_gguf(gguf_test::read_file(fixture(kTiny)));
    want.kvs[kv_index(want, "llama.context_length")] = gguf_test::raw_u32("llama.context_length", 4096);
    want.kvs.erase(want.kvs.begin() + static_cast<long>(kv_index(want, "general.description")));
    EXPECT_TRUE(edited_single(fixture(kTiny), o) == join_gguf(want));
    // A BOM elsewhere is part of the key (a key may hold any UTF-8), only the file's first is dropped.
    EXPECT_EQ(gguf::parse_kv_sidecar("a=str:1\n\xEF\xBB\xBF" "b=str:2\n", "s.kv").edits[1].key,
              "\xEF\xBB\xBF" "b");

    gguf_test::write_file(dir / "m.gguf.kv", "general.name=str:ok\nllama.context_length =int:8192\n");
    EXPECT_EQ(error_of([&] { gguf::read_kv_sidecar(dir / "m.gguf.kv"); }),
              dir / "m.gguf.kv:2: llama.context_length : blanks around the key; write KEY=TYPE:VALUE");
    EXPECT_EQ(error_of([] { gguf::parse_kv_override("llama.context_length\t=int:1", "--override-kv"); }),
              "--override-kv: llama.context_length\t: blanks around the key; write KEY=TYPE:VALUE");
    EXPECT_EQ(error_of([] { gguf::parse_kv_override(" general.name=str:x", "--override-kv"); }),
              "--override-kv:  general.name: blanks around the key; write KEY=TYPE:VALUE");
    // Blanks in the value are the value's (a string keeps them).
    EXPECT_EQ(gguf::parse_kv_override("general.name=str: x ", "--override-kv").text, " x ");
}

TEST(KvSidecar, MissingSidecarIsAnIoError) {
    EXPECT_PRED2(contains, error_of([] { gguf::read_kv_sidecar("/nonexistent/m.gguf.kv"); }, gguf::Code::Io),
                std::string("/nonexistent/m.gguf.kv: No such file or directory"));
}

TEST(KvOverrideParse, LiteralAtAndSpelledForms) {
    EXPECT_EQ(gguf::parse_kv_override("a.b=str:@@handle", "--override-kv").text, "@handle");
    EXPECT_EQ(gguf::parse_kv_override("a.b=str:", "--override-kv").text, "");
    EXPECT_EQ(gguf::parse_kv_override("a.b=str:x=y:z", "--override-kv").text, "x=y:z");
    EXPECT_EQ(gguf::parse_kv_override("a.b=str:" + std::string(100, 'x'), "o").spelled(), "a.b=str:<100 bytes>");
    EXPECT_EQ(gguf::parse_kv_override("a.b=i16:-32768", "o").spelled(), "a.b=i16:-32768");
}

}  // namespace

// ---- sidecar rules under a root daemon (issue 30, items 1-4) ---------------------------------

namespace {

/// `text` in DIR/NAME, made with mode `mode`.
void write_mode(const std::string& path, const std::string& text, mode_t mode) {
    gguf_test::write_file(path, text);
    ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

}  // namespace

TEST(KvSidecarRules, AtFileOutsideTheFolderIsRefusedBeforeAnythingIsOpened) {
    gguf_test::TempDir dir;
    ASSERT_EQ(::mkdir((dir / "m").c_str(), 0755), 0);
    gguf_test::write_file(dir / "secret.txt", "s3cr3t");
    for (const std::string& name : {dir / "secret.txt", std::string("../secret.txt"), std::string("./../secret.txt"),
                                    std::string("/proc/self/environ"), std::string("a/../../secret.txt"),
                                    std::string("a//b"), std::string(".")}) {
        gguf_test::write_file(dir / "m/m.gguf.kv", "x.y=str:@" + name + "\n");
        const std::string m = error_of([&] { gguf::read_kv_sidecar(dir / "m/m.gguf.kv"); });
        EXPECT_EQ(m, dir / "m/m.gguf.kv:1: x.y: @" + name + " is not in the sidecar's folder: a sidecar's str:@FILE "
                                                           "names a file in its folder or below it (relative, no '..')");
        EXPECT_EQ(m.find("s3cr3t"), std::string::npos);
    }
}

TEST(KvSidecarRules, LinksAndSpecialFilesAreNotFollowedAndMakeTheSidecarNotApply) {
    gguf_test::TempDir dir;
    ASSERT_EQ(::mkdir((dir / "m").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((dir / "m/sub").c_str(), 0755), 0);
    gguf_test::write_file(dir / "secret.txt", "s3cr3t");
    gguf_test::write_file(dir / "m/sub/t.jinja", "{{ ok }}");
    ASSERT_EQ(::symlink((dir / "secret.txt").c_str(), (dir / "m/link.txt").c_str()), 0);
    ASSERT_EQ(::symlink(dir.path().c_str(), (dir / "m/up").c_str()), 0);
    ASSERT_EQ(::mkfifo((dir / "m/fifo").c_str(), 0644), 0);
    // Below the folder, no link on the way: read.
    gguf_test::write_file(dir / "m/m.gguf.kv", "x.y=str:@sub/t.jinja\n");
    const gguf::KvOverrides ok = gguf::read_kv_sidecar(dir / "m/m.gguf.kv");
    ASSERT_EQ(ok.edits.size(), 1u);
    EXPECT_EQ(ok.edits[0].text, "{{ ok }}");
    ASSERT_EQ(ok.files.size(), 2u);  // the sidecar, then its @FILE
    EXPECT_EQ(ok.files[0].path, dir / "m/m.gguf.kv");
    EXPECT_EQ(ok.files[1].path, dir / "m/sub/t.jinja");
    EXPECT_TRUE(ok.files[1].folder);
    // A link as the @FILE or on the way to it; a FIFO (never opened, never waited on).
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"link.txt", "link.txt: is a symbolic link (not followed); the sidecar is not applied"},
        {"up/secret.txt", "up/secret.txt: is or passes through a symbolic link (not followed); the sidecar is not applied"},
        {"fifo", "fifo: not a regular file (a FIFO); the sidecar is not applied"},
    };
    for (const auto& [name, tail] : cases) {
        gguf_test::write_file(dir / "m/m.gguf.kv", "x.y=str:@" + name + "\n");
        const std::string m = error_of([&] { gguf::read_kv_sidecar(dir / "m/m.gguf.kv"); }, gguf::Code::Untrusted);
        EXPECT_EQ(m, dir / "m/m.gguf.kv:1: x.y: " + (dir / "m/") + tail);
        EXPECT_EQ(m.find("s3cr3t"), std::string::npos);
    }
    // The sidecar itself a link (to a file whose first line would be quoted by a parse error).
    gguf_test::write_file(dir / "secret.kv", "s3cr3t line without an equals sign\n");
    ASSERT_EQ(::unlink((dir / "m/m.gguf.kv").c_str()), 0);
    ASSERT_EQ(::symlink((dir / "secret.kv").c_str(), (dir / "m/m.gguf.kv").c_str()), 0);
    const std::string m = error_of([&] { gguf::read_kv_sidecar(dir / "m/m.gguf.kv"); }, gguf::Code::Untrusted);
    EXPECT_EQ(m, dir / "m/m.gguf.kv: is a symbolic link (not followed); not applied");
    // A command line's @FILE is the operator's own: links followed, a FIFO still refused.
    EXPECT_EQ(gguf::parse_kv_override("x.y=str:@" + (dir / "m/link.txt"), "--override-kv").text, "s3cr3t");
    EXPECT_EQ(error_of([&] { gguf::parse_kv_override("x.y=str:@" + (dir / "m/fifo"), "--override-kv"); },
                       gguf::Code::Io),
              "--override-kv: x.y: " + (dir / "m/fifo") + ": not a regular file (a FIFO)");
}

TEST(KvSidecarRules, OnlyTheDaemonsOrTheModelOwnersUnwritableFilesApply) {
    gguf_test::TempDir dir;
    write_mode(dir / "t.jinja", "{{ t }}", 0644);
    write_mode(dir / "m.gguf.kv", "x.y=str:@t.jinja\n", 0644);
    gguf::KvSidecarRules rules;
    rules.model_owner = 1000;
    EXPECT_EQ(gguf::read_kv_sidecar(dir / "m.gguf.kv", rules).edits.at(0).text, "{{ t }}");  // the euid's
    // Group- or other-writable: anyone in that class could have written it.
    ASSERT_EQ(::chmod((dir / "m.gguf.kv").c_str(), 0664), 0);
    EXPECT_EQ(error_of([&] { gguf::read_kv_sidecar(dir / "m.gguf.kv", rules); }, gguf::Code::Untrusted),
              dir / "m.gguf.kv: writable by group or others (mode 0664); not applied");
    ASSERT_EQ(::chmod((dir / "m.gguf.kv").c_str(), 0644), 0);
    if (::geteuid() != 0) GTEST_SKIP() << "the owner cases need chown (root)";
    ASSERT_EQ(::chown((dir / "m.gguf.kv").c_str(), 1000, 1000), 0);  // the model's owner: applies
    EXPECT_EQ(gguf::read_kv_sidecar(dir / "m.gguf.kv", rules).edits.at(0).text, "{{ t }}");
    ASSERT_EQ(::chown((dir / "m.gguf.kv").c_str(), 1001, 1001), 0);  // someone else
    EXPECT_EQ(error_of([&] { gguf::read_kv_sidecar(dir / "m.gguf.kv", rules); }, gguf::Code::Untrusted),
              dir / "m.gguf.kv: owned by uid 1001, not by the daemon's uid 0 or the model's owner 1000; not applied");
    ASSERT_EQ(::chown((dir / "m.gguf.kv").c_str(), 0, 0), 0);
    ASSERT_EQ(::chown((dir / "t.jinja").c_str(), 1001, 1001), 0);  // the @FILE of someone else
    EXPECT_EQ(error_of([&] { gguf::read_kv_sidecar(dir / "m.gguf.kv", rules); }, gguf::Code::Untrusted),
              dir / "m.gguf.kv:1: x.y: " + (dir / "t.jinja") +
                  ": owned by uid 1001, not by the daemon's uid 0 or the model's owner 1000; the sidecar is not applied");
}

TEST(KvSidecarRules, TheBudgetBoundsWhatIsReadWhileReading) {
    gguf_test::TempDir dir;
    // A sparse 1 GiB file named six times: refused at the first line past the model's budget,
    // without reading (or holding) it.
    {
        gguf::UniqueFd fd(::open((dir / "big.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
        ASSERT_TRUE(fd);
        ASSERT_EQ(::ftruncate(fd.get(), off_t{1} << 30), 0);
    }
    std::string text;
    for (int i = 0; i < 6; ++i) text += "x.k" + std::to_string(i) + "=str:@big.bin\n";
    gguf_test::write_file(dir / "m.gguf.kv", text);
    gguf::KvReadBudget budget;
    gguf::KvSidecarRules rules;
    rules.budget = &budget;
    const int rc = gguf_test::in_bounded_child(
        [&] {
            try {
                gguf::read_kv_sidecar(dir / "m.gguf.kv", rules);
            } catch (const gguf::Error& e) {
                return e.code() == gguf::Code::TooLarge &&
                       std::string(e.what()) == dir / "m.gguf.kv:1: x.k0: " + (dir / "big.bin") +
                                                    ": 1073741824 bytes, more than the " +
                                                    std::to_string((uint64_t{64} << 20) - text.size()) +
                                                    " bytes left for this model's KV edits";  // the sidecar's own bytes count
            }
            return false;
        },
        size_t{256} << 20);
    EXPECT_EQ(rc, 0);
    // Small files add up, per model and per scan.
    write_mode(dir / "t.txt", std::string(40u << 20, 'a'), 0644);
    gguf_test::write_file(dir / "m.gguf.kv", "x.a=str:@t.txt\nx.b=str:@t.txt\n");
    EXPECT_PRED2(contains, error_of([&] { gguf::read_kv_sidecar(dir / "m.gguf.kv", rules); }, gguf::Code::TooLarge),
                 std::string("m.gguf.kv:2: x.b: "));
    budget = gguf::KvReadBudget{};
    gguf_test::write_file(dir / "m.gguf.kv", "x.a=str:@t.txt\n");
    for (int model = 0; model < 6; ++model) {  // 6 x 40 MiB fit the scan's 256 MiB
        budget.start_model();
        EXPECT_EQ(gguf::read_kv_sidecar(dir / "m.gguf.kv", rules).edits.size(), 1u) << model;
    }
    budget.start_model();  // the 7th does not
    EXPECT_PRED2(contains, error_of([&] { gguf::read_kv_sidecar(dir / "m.gguf.kv", rules); }, gguf::Code::TooLarge),
                 std::string("bytes left for KV edits in this scan"));
}

TEST(KvSidecarRules, HereDocumentHoldsAMultiLineStringInAnySidecar) {
    const std::string text = "# a template\n"
                             "tokenizer.chat_template=str:<<END\n"
                             "{% for m in messages %}\r\n"
                             "  {{ m.content }}\n"
                             "\n"
                             "{% endfor %}\n"
                             "END\n"
                             "general.name=str:after\n";
    const gguf::KvOverrides o = gguf::parse_kv_sidecar(text, "https://h/m.gguf.kv");  // a remote sidecar
    ASSERT_EQ(o.edits.size(), 2u);
    EXPECT_EQ(o.edits[0].text, "{% for m in messages %}\n  {{ m.content }}\n\n{% endfor %}");
    EXPECT_EQ(o.edits[0].origin, "https://h/m.gguf.kv:2");
    EXPECT_EQ(o.edits[1].origin, "https://h/m.gguf.kv:8");
    EXPECT_EQ(o.edits[1].text, "after");
    EXPECT_EQ(error_of([] { gguf::parse_kv_sidecar("a.b=str:<<EOF\nno end\n", "s.kv"); }),
              "s.kv:1: a.b: the here-document <<EOF has no closing line EOF");
    // Not a TAG: the literal value, as before.
    EXPECT_EQ(gguf::parse_kv_sidecar("a.b=str:<<not a tag\n", "s.kv").edits.at(0).text, "<<not a tag");
    EXPECT_PRED2(contains, error_of([] { gguf::parse_kv_sidecar("a.b=str:@t.jinja\n", "s.kv"); }),
                 std::string("s.kv:1: a.b: str:@FILE is not allowed in a remote sidecar"));
}

TEST(KvApply, AHundredThousandNewKeysAreAllAppliedInOrder) {
    gguf::KvOverrides o;
    for (int i = 0; i < 100000; ++i) {
        o.edits.push_back(gguf::parse_kv_override("x.k" + std::to_string(i) + "=u32:" + std::to_string(i), "s.kv"));
    }
    o.edits.push_back(gguf::parse_kv_removal("x.k5", "s.kv"));
    o.edits.push_back(gguf::parse_kv_override("x.k7=u32:70", "s.kv"));
    const auto base = tiny_kvs();
    const auto out = gguf::apply_kv_overrides(base, o);
    ASSERT_EQ(out.size(), base.size() + 99999);
    EXPECT_EQ(out[base.size()].key, "x.k0");
    EXPECT_EQ(out[base.size() + 5].key, "x.k6");  // x.k5 removed, the rest keep their order
    uint32_t v = 0;
    std::memcpy(&v, out[base.size() + 6].value.raw.data(), 4);
    EXPECT_EQ(out[base.size() + 6].key, "x.k7");
    EXPECT_EQ(v, 70u);
    EXPECT_EQ(out.back().key, "x.k99999");
}
