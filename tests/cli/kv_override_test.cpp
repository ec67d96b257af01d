// `gguf-mount merge` with --override-kv, --remove-kv and --chat-template-file: the bytes written
// (sha256) against an independent writer of the rule (support/gguf_rewrite), a single unsplit file
// edited offline, and the refusals with their one-line messages and nothing written.
#include <sys/stat.h>

#include <unistd.h>

#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/gguf_rewrite.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::cut_gguf;
using gguf_test::fixture;
using gguf_test::join_gguf;
using gguf_test::kv_index;
using gguf_test::RawGguf;
using gguf_test::RunResult;
using gguf_test::TempDir;

RunResult gm(std::vector<std::string> args) {
    args.insert(args.begin(), gguf_test::gguf_mount_binary());
    return gguf_test::run(args);
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

/// The one line of stderr (fails when there are more).
std::string one_line(const std::string& err) {
    EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
    return err.substr(0, err.find('\n'));
}

TEST(MergeOverrides, SetWithFlagsWritesTheRuleBytes) {
    TempDir dir;
    std::string tmpl(size_t{1} << 20, 'x');
    for (size_t i = 0; i < tmpl.size(); i += 100) tmpl[i] = '\n';
    gguf_test::write_file(dir / "t.jinja", tmpl);
    RawGguf want = cut_gguf(gguf_test::read_file(fixture("kvzoo/merged-reference.gguf")));
    want.kvs[kv_index(want, "llama.context_length")] = gguf_test::raw_u32("llama.context_length", 8192);
    want.kvs.erase(want.kvs.begin() + static_cast<long>(kv_index(want, "general.name")));
    want.kvs.push_back(gguf_test::raw_string("general.url", "https://example.invalid/a,b"));
    want.kvs.push_back(gguf_test::raw_string("tokenizer.chat_template", tmpl));

    const RunResult r = gm({"merge", "-q", fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf"), dir / "out.gguf",
                            "--override-kv", "llama.context_length=int:8192", "--remove-kv", "general.name",
                            "--override-kv", "general.url=str:https://example.invalid/a,b", "--chat-template-file",
                            dir / "t.jinja"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(dir / "out.gguf"), gguf_test::sha256_hex(join_gguf(want)));
}

TEST(MergeOverrides, TheSidecarBesideTheFirstShardIsAppliedAsAMountServesIt) {
    // Issue 30 item 10: merge ignored kvzoo.gguf.kv silently while mount and check applied it.
    TempDir dir;
    for (int i = 1; i <= 7; ++i) {
        const std::string name = "kvzoo-0000" + std::to_string(i) + "-of-00007.gguf";
        gguf_test::copy_file(fixture("kvzoo/t7/" + name), dir / name);
    }
    gguf_test::write_file(dir / "kvzoo.gguf.kv", "llama.context_length=int:8192\n");
    RawGguf want = cut_gguf(gguf_test::read_file(fixture("kvzoo/merged-reference.gguf")));
    want.kvs[kv_index(want, "llama.context_length")] = gguf_test::raw_u32("llama.context_length", 8192);
    want.kvs.push_back(gguf_test::raw_string("general.url", "u"));  // the sidecar's, then the flags'
    const RunResult r = gm({"merge", dir / "kvzoo-00001-of-00007.gguf", dir / "out.gguf", "--override-kv",
                            "general.url=str:u"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("applying the KV sidecar " + (dir / "kvzoo.gguf.kv") + " (1 edit; --no-sidecar leaves it out)"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(gguf_test::sha256_file(dir / "out.gguf"), gguf_test::sha256_hex(join_gguf(want)));
    // --no-sidecar: the shards alone, byte-identical to gguf-split --merge.
    const RunResult plain = gm({"merge", "-q", "--no-sidecar", dir / "kvzoo-00001-of-00007.gguf", dir / "plain.gguf"});
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_EQ(gguf_test::sha256_file(dir / "plain.gguf"),
              gguf_test::sha256_file(fixture("kvzoo/merged-reference.gguf")));
    // A bad line writes nothing, naming the sidecar and the line.
    gguf_test::write_file(dir / "kvzoo.gguf.kv", "# x\nllama.context_length=int4096\n");
    const RunResult bad = gm({"merge", dir / "kvzoo-00001-of-00007.gguf", dir / "bad.gguf"});
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_NE(bad.err.find(dir / "kvzoo.gguf.kv:2: llama.context_length"), std::string::npos) << bad.err;
    struct stat st {};
    EXPECT_NE(::stat((dir / "bad.gguf").c_str(), &st), 0);
}

TEST(MergeOverrides, SingleUnsplitFileIsEditedOffline) {
    TempDir dir;
    RawGguf want = cut_gguf(gguf_test::read_file(fixture("tiny-llama/tiny-llama.gguf")));
    want.kvs[kv_index(want, "tokenizer.ggml.add_eos_token")] = gguf_test::raw_bool("tokenizer.ggml.add_eos_token", true);
    want.kvs.push_back(gguf_test::raw_u32("llama.expert_count", 0));
    const RunResult r = gm({"merge", fixture("tiny-llama/tiny-llama.gguf"), dir / "edited.gguf", "--override-kv",
                            "tokenizer.ggml.add_eos_token=bool:true", "--override-kv", "llama.expert_count=u32:0"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("wrote " + (dir / "edited.gguf") + " with the edited metadata, 27 tensors"), std::string::npos)
        << r.err;
    EXPECT_EQ(gguf_test::sha256_file(dir / "edited.gguf"), gguf_test::sha256_hex(join_gguf(want)));
}

TEST(MergeOverrides, SingleFileWithoutOverridesIsStillRefused) {
    TempDir dir;
    const RunResult r = gm({"merge", fixture("tiny-llama/tiny-llama.gguf"), dir / "out.gguf"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_FALSE(exists(dir / "out.gguf"));
}

TEST(MergeOverrides, SingleFileRefusesDeleteSplits) {
    TempDir dir;
    const RunResult r = gm({"merge", "--delete-splits", fixture("tiny-llama/tiny-llama.gguf"), dir / "out.gguf",
                            "--override-kv", "general.name=str:x"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(one_line(r.err), "gguf-mount: error: " + fixture("tiny-llama/tiny-llama.gguf") +
                                   ": a single unsplit file; --delete-splits is refused (there are no shards to delete)");
    EXPECT_FALSE(exists(dir / "out.gguf"));
}

TEST(MergeOverrides, MalformedFlagIsAUsageErrorNamingTheKey) {
    TempDir dir;
    const RunResult r = gm({"merge", fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf"), dir / "out.gguf",
                            "--override-kv", "llama.context_length=integer:1"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(one_line(r.err), "gguf-mount merge: --override-kv: llama.context_length: unknown type 'integer' (int, "
                               "float, bool, str, u8, i8, u16, i16, u32, i32, u64, i64, f32, f64); see 'gguf-mount "
                               "merge --help'");
    const RunResult layout = gm({"merge", fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf"), dir / "out.gguf",
                                 "--remove-kv", "split.count"});
    EXPECT_EQ(layout.exit_code, 2);
    EXPECT_NE(one_line(layout.err).find("--remove-kv: split.count: describes the file's layout"), std::string::npos);
    EXPECT_FALSE(exists(dir / "out.gguf"));
}

TEST(MergeOverrides, OverrideThatDoesNotFitTheModelWritesNothing) {
    TempDir dir;
    const RunResult r = gm({"merge", fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf"), dir / "out.gguf",
                            "--override-kv", "zoo.scalar.u8=int:256"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(one_line(r.err), "gguf-mount: error: --override-kv: zoo.scalar.u8: 256 is out of range for u8 (0..255)");
    const RunResult missing = gm({"merge", fixture("tiny-llama/tiny-llama.gguf"), dir / "out.gguf", "--remove-kv",
                                  "general.license"});
    EXPECT_EQ(missing.exit_code, 1);
    EXPECT_EQ(one_line(missing.err), "gguf-mount: error: --remove-kv: general.license: not in the file, nothing to remove");
    EXPECT_FALSE(exists(dir / "out.gguf"));
    EXPECT_EQ(::access(dir.path().c_str(), F_OK), 0);
}

// ---- check: the overrides in force for each model ------------------------------------------

/// A directory with the kvzoo set (a sidecar beside its first shard), tiny-llama cut into two
/// byte pieces (a sidecar of its own), and a set in bad/ whose sidecar has a bad line 3.
void make_edited_source(const TempDir& src) {
    for (int i = 1; i <= 7; ++i) {
        const std::string name = "kvzoo-0000" + std::to_string(i) + "-of-00007.gguf";
        gguf_test::copy_file(fixture("kvzoo/t7/" + name), src / name);
    }
    gguf_test::write_file(src / "kvzoo.gguf.kv", "llama.context_length=int:8192\n-general.name\n");
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"), {src / "tiny.gguf.part1of2", src / "tiny.gguf.part2of2"});
    gguf_test::write_file(src / "tiny.gguf.kv", "general.url=str:" + std::string(70, 'u') + "\n");
    ASSERT_EQ(::mkdir((src / "bad").c_str(), 0755), 0);
    for (int i = 1; i <= 7; ++i) {
        const std::string name = "kvzoo-0000" + std::to_string(i) + "-of-00007.gguf";
        gguf_test::copy_file(fixture("kvzoo/t7/" + name), src / ("bad/" + name));
    }
    gguf_test::write_file(src / "bad/kvzoo.gguf.kv", "# two good lines, then a bad one\ngeneral.name=str:x\nx=int\n");
}

TEST(CheckOverrides, TextShowsTheOverridesOfEachModelAndTheBadSidecar) {
    TempDir src;
    make_edited_source(src);
    const RunResult r = gm({"check", src.path(), "--override-kv", "general.license=str:MIT"});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("kvzoo.gguf: merged-set of 7 shards"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\n  override llama.context_length=int:8192\n  override -general.name\n"
                         "  override general.license=str:MIT\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("tiny.gguf: byte-split of 2 pieces"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  override general.url=str:<70 bytes>\n  override general.license=str:MIT\n"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("1 problem:\n  bad/kvzoo.gguf: " + src / "bad/kvzoo.gguf.kv" +
                         ":3: x: expected KEY=TYPE:VALUE (no ':' after the type); not shown\n"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("\nkvzoo.gguf.kv: "), std::string::npos) << r.out;  // no sidecar served
    EXPECT_EQ(r.out.find("\ntiny.gguf.kv: "), std::string::npos) << r.out;
}

TEST(CheckOverrides, JsonListsTheOverridesUnderEachEntry) {
    TempDir src;
    make_edited_source(src);
    const RunResult r = gm({"check", "--json", src.path()});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    std::map<std::string, nlohmann::json> by_path;
    for (const auto& e : j["entries"]) by_path[e["path"].get<std::string>()] = e;
    ASSERT_EQ(by_path.count("kvzoo.gguf"), 1u) << r.out;
    EXPECT_EQ(by_path["kvzoo.gguf"]["overrides"],
              nlohmann::json::array({"llama.context_length=int:8192", "-general.name"}));
    EXPECT_EQ(by_path["tiny.gguf"]["overrides"], nlohmann::json::array({"general.url=str:<70 bytes>"}));
    EXPECT_EQ(by_path.count("kvzoo.gguf.kv"), 0u);
    EXPECT_EQ(by_path.count("bad/kvzoo.gguf"), 0u);
    ASSERT_EQ(j["problems"].size(), 1u) << r.out;
    EXPECT_EQ(j["problems"][0]["path"], "bad/kvzoo.gguf");
}

TEST(CheckOverrides, SidecarWithoutAModelIsAProblem) {
    TempDir src;
    gguf_test::write_file(src / "gone.gguf.kv", "general.name=str:x\n");
    const RunResult r = gm({"check", src.path()});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("  gone.gguf.kv: " + src / "gone.gguf.kv" +
                         ": a KV sidecar, but no model gone.gguf is served here; not applied\n"),
              std::string::npos)
        << r.out;
}

}  // namespace
