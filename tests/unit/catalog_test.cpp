// The model-directory catalog (gguf/model/catalog.hpp) on real temporary directories: classification,
// hidden shards, byte-split files, symlinks (Hugging Face cache layout), loops, clashes,
// attributes and problems. No mount.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <chrono>
#include <iostream>

#include <gtest/gtest.h>

#include "gguf/model/catalog.hpp"
#include "gguf/error.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "support/catalog_support.hpp"
#include "support/support.hpp"

namespace {

using gguf::EntryKind;
using gguf_test::fixture;
using gguf_test::TempDir;

constexpr const char* kKvzooMerged = "188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f";
constexpr const char* kTinyLlama = "ea9f0d0bcebbc5cc8b4d9cb7f219503d31bd31f873af199d14c2b1c0a2ea4c27";

std::string kvzoo_shard(int i, int n = 7) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "kvzoo-%05d-of-%05d.gguf", i, n);
    return buf;
}

void copy_kvzoo(const std::string& dir, int skip = 0) {
    for (int i = 1; i <= 7; ++i) {
        if (i != skip) gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(i)), dir + "/" + kvzoo_shard(i));
    }
}

void mkdirs(const std::string& path) { ASSERT_EQ(::mkdir(path.c_str(), 0755), 0) << path; }

std::vector<std::string> entry_paths(const gguf::Catalog& c) {
    std::vector<std::string> out;
    for (const auto& e : c.entries) out.push_back(e.path);
    return out;
}

using gguf_test::bytes_of;
using gguf_test::problems_text;

/// The entry at `path`, or nullptr.
const gguf::CatalogEntry* find(const gguf::Catalog& c, const std::string& path) {
    return gguf_test::find_entry(c, path);
}

TEST(Catalog, NestedTreeCompanionsAndHiddenShards) {
    TempDir src;
    mkdirs(src / "Q4_K_M");
    mkdirs(src / "Q8_0");
    mkdirs(src / "empty");
    copy_kvzoo(src / "Q4_K_M");
    copy_kvzoo(src / "Q8_0", /*skip=*/6);  // download in progress
    gguf_test::write_file(src / "README.md", "# model\n");
    gguf_test::write_file(src / "config.json", "{}");
    gguf_test::write_file(src / "LICENSE", "MIT");
    gguf_test::copy_file(fixture("tiny-llama/tiny-llama.gguf"), src / "mmproj-f16.gguf");
    gguf_test::write_file(src / ".hidden", "tool state");

    auto c = gguf::build_catalog(src.path());
    EXPECT_EQ(entry_paths(c), (std::vector<std::string>{"LICENSE", "Q4_K_M/kvzoo.gguf", "README.md", "config.json",
                                                        "mmproj-f16.gguf"}));
    std::vector<std::string> dirs;
    for (const auto& d : c.directories) dirs.push_back(d.path);
    EXPECT_EQ(dirs, (std::vector<std::string>{"", "Q4_K_M", "Q8_0", "empty"}));
    ASSERT_EQ(c.problems.size(), 1u) << problems_text(c);
    EXPECT_EQ(c.problems[0].path, "Q8_0/kvzoo.gguf");
    EXPECT_EQ(c.problems[0].reason, src / "Q8_0/" + kvzoo_shard(6) + ": missing shard 6 of 7; not shown");

    const auto* merged = find(c, "Q4_K_M/kvzoo.gguf");
    ASSERT_NE(merged, nullptr);
    EXPECT_EQ(merged->kind, EntryKind::MergedSet);
    EXPECT_EQ(merged->members.size(), 7u);
    EXPECT_EQ(merged->tensor_count, 43u);
    EXPECT_EQ(gguf_test::sha256_hex(bytes_of(*merged)), kKvzooMerged);
    const auto* mmproj = find(c, "mmproj-f16.gguf");
    ASSERT_NE(mmproj, nullptr);
    EXPECT_EQ(mmproj->kind, EntryKind::Companion);
    EXPECT_EQ(gguf_test::sha256_hex(bytes_of(*mmproj)), kTinyLlama);
    EXPECT_EQ(bytes_of(*find(c, "README.md")), "# model\n");
}

// A mount point inside SOURCE (CatalogOptions::skip) is neither walked, shown nor watched, also
// when reached through a link.
TEST(Catalog, SkippedDirectoryIsNeitherWalkedShownNorWatched) {
    TempDir src;
    mkdirs(src / "mnt");
    mkdirs(src / "models");
    copy_kvzoo(src / "models");
    copy_kvzoo(src / "mnt");  // what a mount there would show: must not appear twice
    ASSERT_EQ(::symlink("mnt", (src / "link-to-mnt").c_str()), 0);
    struct stat st {};
    ASSERT_EQ(::stat((src / "mnt").c_str(), &st), 0);
    gguf::CatalogOptions opt;
    opt.skip.emplace_back(st.st_dev, st.st_ino);

    auto c = gguf::build_catalog(src.path(), opt);
    EXPECT_EQ(entry_paths(c), std::vector<std::string>{"models/kvzoo.gguf"});
    std::vector<std::string> dirs;
    for (const auto& d : c.directories) dirs.push_back(d.path);
    EXPECT_EQ(dirs, (std::vector<std::string>{"", "models"}));
    for (const auto& w : c.watched) EXPECT_EQ(w.path.find("mnt"), std::string::npos) << w.path;
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
}

TEST(Catalog, ShowShardsServesShardFilesAndPiecesAsTheyAre) {
    TempDir src;
    copy_kvzoo(src.path());
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"), {src / "t.gguf.part1of2", src / "t.gguf.part2of2"});
    gguf::CatalogOptions o;
    o.show_shards = true;
    auto c = gguf::build_catalog(src.path(), o);
    std::vector<std::string> want = {"kvzoo-00001-of-00007.gguf", "kvzoo-00002-of-00007.gguf",
                                     "kvzoo-00003-of-00007.gguf", "kvzoo-00004-of-00007.gguf",
                                     "kvzoo-00005-of-00007.gguf", "kvzoo-00006-of-00007.gguf",
                                     "kvzoo-00007-of-00007.gguf", "kvzoo.gguf",
                                     "t.gguf",                    "t.gguf.part1of2",
                                     "t.gguf.part2of2"};
    EXPECT_EQ(entry_paths(c), want);
    EXPECT_EQ(find(c, "kvzoo-00003-of-00007.gguf")->kind, EntryKind::Shard);
    EXPECT_EQ(find(c, "t.gguf.part2of2")->kind, EntryKind::Shard);
    EXPECT_EQ(find(c, "t.gguf")->kind, EntryKind::ByteSplit);
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
}

TEST(Catalog, BothByteSplitStylesGiveTheOriginalBytes) {
    TempDir src;
    std::vector<std::string> letters = {src / "a.gguf-split-a", src / "a.gguf-split-b", src / "a.gguf-split-c"};
    std::vector<std::string> partof;
    for (int i = 1; i <= 11; ++i) partof.push_back(src / ("b.gguf.part" + std::to_string(i) + "of11"));
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"), letters);
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"), partof);
    auto c = gguf::build_catalog(src.path());
    EXPECT_EQ(entry_paths(c), (std::vector<std::string>{"a.gguf", "b.gguf"}));
    for (const auto& e : c.entries) {
        EXPECT_EQ(e.kind, EntryKind::ByteSplit);
        EXPECT_EQ(e.tensor_count, 27u);
        EXPECT_EQ(gguf_test::sha256_hex(bytes_of(e)), kTinyLlama) << e.path;
    }
    // part10of11 comes after part9of11, not after part1of11.
    const auto& parts = find(c, "b.gguf")->members.front().parts;
    ASSERT_EQ(parts.size(), 11u);
    EXPECT_EQ(gguf::base_name(parts[9].path), "b.gguf.part10of11");
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
}

TEST(Catalog, IncompleteOrInvalidByteSplitIsAProblem) {
    TempDir src;
    // Missing middle part: named by the name check.
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"), {src / "a.gguf.part1of3", src / "x", src / "a.gguf.part3of3"});
    ::unlink((src / "x").c_str());
    // Missing last letter piece: only the strict read can tell (truncated).
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"), {src / "b.gguf-split-a", src / "b.gguf-split-b", src / "y"});
    ::unlink((src / "y").c_str());
    // Not GGUF at all.
    gguf_test::write_file(src / "c.gguf.part1of2", "hello ");
    gguf_test::write_file(src / "c.gguf.part2of2", "world");
    // A later piece that is a GGUF file of its own.
    gguf_test::copy_file(fixture("tiny-llama/tiny-llama.gguf"), src / "d.gguf-split-a");
    gguf_test::copy_file(fixture("tiny-llama/tiny-llama.gguf"), src / "d.gguf-split-b");
    auto c = gguf::build_catalog(src.path());
    EXPECT_TRUE(c.entries.empty()) << entry_paths(c).size();
    ASSERT_EQ(c.problems.size(), 4u) << problems_text(c);
    EXPECT_EQ(c.problems[0].path, "a.gguf");
    EXPECT_NE(c.problems[0].reason.find("byte-split part 2 of 3 (a.gguf.part2of3) is missing"), std::string::npos);
    EXPECT_EQ(c.problems[1].path, "b.gguf");
    EXPECT_NE(c.problems[1].reason.find(src / "b.gguf: "), std::string::npos) << c.problems[1].reason;
    EXPECT_NE(c.problems[1].reason.find("truncated"), std::string::npos) << c.problems[1].reason;
    EXPECT_EQ(c.problems[2].path, "c.gguf");
    EXPECT_NE(c.problems[2].reason.find("not a GGUF file"), std::string::npos) << c.problems[2].reason;
    EXPECT_EQ(c.problems[3].path, "d.gguf");
    EXPECT_NE(c.problems[3].reason.find(src / "d.gguf-split-b: starts with GGUF"), std::string::npos)
        << c.problems[3].reason;
}

TEST(Catalog, ByteSplitShardsOfASplitSet) {
    TempDir src;
    // m-00001-of-00007 as two letter pieces, m-00002 as three part-of pieces, the rest plain.
    gguf_test::cut_file(fixture("kvzoo/t7/" + kvzoo_shard(1)),
                        {src / (kvzoo_shard(1) + "-split-a"), src / (kvzoo_shard(1) + "-split-b")});
    gguf_test::cut_file(fixture("kvzoo/t7/" + kvzoo_shard(2)),
                        {src / (kvzoo_shard(2) + ".part1of3"), src / (kvzoo_shard(2) + ".part2of3"),
                         src / (kvzoo_shard(2) + ".part3of3")});
    for (int i = 3; i <= 7; ++i) gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(i)), src / kvzoo_shard(i));
    auto c = gguf::build_catalog(src.path());
    ASSERT_EQ(entry_paths(c), std::vector<std::string>{"kvzoo.gguf"}) << problems_text(c);
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
    EXPECT_EQ(c.entries[0].parts().size(), 10u);
    EXPECT_EQ(gguf_test::sha256_hex(bytes_of(c.entries[0])), kKvzooMerged);
}

// Hugging Face cache: SOURCE is the snapshot folder; every name is a link to ../../blobs/<sha>.
TEST(Catalog, HuggingFaceSnapshotLinksOutsideSource) {
    TempDir repo;
    mkdirs(repo / "blobs");
    mkdirs(repo / "snapshots");
    mkdirs(repo / "snapshots/abc123");
    mkdirs(repo / "snapshots/abc123/Q4_K_M");
    for (int i = 1; i <= 7; ++i) {
        std::string blob = "blob" + std::to_string(i);
        gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(i)), repo / ("blobs/" + blob));
        ASSERT_EQ(::symlink(("../../../blobs/" + blob).c_str(), (repo / ("snapshots/abc123/Q4_K_M/" + kvzoo_shard(i))).c_str()), 0);
    }
    gguf_test::write_file(repo / "blobs/readme", "hello");
    ASSERT_EQ(::symlink("../../blobs/readme", (repo / "snapshots/abc123/README.md").c_str()), 0);
    ASSERT_EQ(::chmod((repo / "blobs/blob3").c_str(), 0640), 0);

    auto c = gguf::build_catalog(repo / "snapshots/abc123");
    EXPECT_EQ(entry_paths(c), (std::vector<std::string>{"Q4_K_M/kvzoo.gguf", "README.md"}));
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
    const auto* e = find(c, "Q4_K_M/kvzoo.gguf");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(gguf_test::sha256_hex(bytes_of(*e)), kKvzooMerged);
    // Classified by the link name, read through the link; attributes come from the blobs.
    EXPECT_EQ(gguf::base_name(e->members[2].parts[0].path), kvzoo_shard(3));
    EXPECT_EQ(e->attr.mode, 0440u);
}

TEST(Catalog, LinkLoopIsReportedOnceAndNotFollowed) {
    TempDir src;
    mkdirs(src / "a");
    copy_kvzoo(src / "a");
    ASSERT_EQ(::symlink("..", (src / "a/up").c_str()), 0);
    ASSERT_EQ(::symlink("self2", (src / "self1").c_str()), 0);
    ASSERT_EQ(::symlink("self1", (src / "self2").c_str()), 0);
    ASSERT_EQ(::symlink("missing-target", (src / "dangling").c_str()), 0);
    auto c = gguf::build_catalog(src.path());
    EXPECT_EQ(entry_paths(c), std::vector<std::string>{"a/kvzoo.gguf"});
    ASSERT_EQ(c.problems.size(), 4u) << problems_text(c);
    EXPECT_EQ(c.problems[0].path, "a/up");
    EXPECT_NE(c.problems[0].reason.find("symlink loop: it is the directory '.' again"), std::string::npos);
    EXPECT_EQ(c.problems[1].path, "dangling");
    EXPECT_NE(c.problems[1].reason.find("dangling symlink to 'missing-target'"), std::string::npos);
    EXPECT_EQ(c.problems[2].path, "self1");
    EXPECT_NE(c.problems[2].reason.find("symlink loop"), std::string::npos);
    EXPECT_EQ(c.problems[3].path, "self2");
}

// Issue 14.3: 16 levels of two links each to the next level expand to 2^16 paths; each
// directory is now walked once and every other path to it is a Problem.
TEST(Catalog, LinksThatFanOutWalkEachDirectoryOnce) {
    TempDir root;
    const std::string src = gguf_test::make_link_fan_out(root.path(), 16);
    const auto t0 = std::chrono::steady_clock::now();
    auto c = gguf::build_catalog(src);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "[ measured ] 16-level link fan-out catalogued in " << ms << " ms\n";
    EXPECT_LT(ms, 500);
    std::string leaf;
    for (int i = 0; i < 16; ++i) leaf += "a/";
    EXPECT_EQ(entry_paths(c), std::vector<std::string>{leaf + "leaf.txt"});
    ASSERT_EQ(c.problems.size(), 16u) << problems_text(c);
    EXPECT_EQ(c.problems[0].path, "a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/b");
    EXPECT_NE(c.problems[0].reason.find("the directory 'a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a' again (another link to it)"),
              std::string::npos)
        << problems_text(c);
    EXPECT_EQ(c.problems[15].path, "b");
}

TEST(Catalog, EntriesBeyondMaxEntriesAreCutAndReported) {
    TempDir src;
    for (int i = 0; i < 10; ++i) gguf_test::write_file(src / ("f" + std::to_string(i) + ".txt"), "x");
    gguf::CatalogOptions options;
    options.max_entries = 4;
    auto c = gguf::build_catalog(src.path(), options);
    EXPECT_EQ(c.entries.size(), 4u);
    ASSERT_EQ(c.problems.size(), 1u) << problems_text(c);
    EXPECT_EQ(c.problems[0].path, ".");
    EXPECT_NE(c.problems[0].reason.find("more than 4 entries under SOURCE"), std::string::npos) << problems_text(c);
    options.max_entries = 10;
    EXPECT_TRUE(gguf::build_catalog(src.path(), options).problems.empty());
}

TEST(Catalog, RealFileWinsAndFirstSourceNameWinsAmongVirtualOnes) {
    TempDir src;
    copy_kvzoo(src.path());  // kvzoo-0000k-of-00007
    for (int i = 1; i <= 8; ++i) {
        gguf_test::copy_file(fixture("kvzoo/t7-ntfs/" + kvzoo_shard(i, 8)), src / kvzoo_shard(i, 8));
    }
    gguf_test::copy_file(fixture("notensors/t7/notensors-00001-of-00001.gguf"), src / "notensors-00001-of-00001.gguf");
    gguf_test::write_file(src / "notensors.gguf", "a real file");
    // A byte-split kvzoo.gguf too: "kvzoo.gguf-split-a" sorts after "kvzoo-00001-...".
    gguf_test::cut_file(fixture("kvzoo/merged-reference.gguf"), {src / "kvzoo.gguf-split-a", src / "kvzoo.gguf-split-b"});
    auto c = gguf::build_catalog(src.path());
    EXPECT_EQ(entry_paths(c), (std::vector<std::string>{"kvzoo.gguf", "notensors.gguf"}));
    EXPECT_EQ(find(c, "kvzoo.gguf")->kind, EntryKind::MergedSet);
    EXPECT_EQ(find(c, "kvzoo.gguf")->members.size(), 7u);  // -of-00007 sorts before -of-00008
    EXPECT_EQ(find(c, "notensors.gguf")->kind, EntryKind::Companion);
    EXPECT_EQ(bytes_of(*find(c, "notensors.gguf")), "a real file");
    ASSERT_EQ(c.problems.size(), 3u) << problems_text(c);
    EXPECT_EQ(c.problems[0].reason, src / kvzoo_shard(1, 8) + ": name clash: kvzoo.gguf is already served from " +
                                        src / kvzoo_shard(1) + "; not shown");
    EXPECT_EQ(c.problems[1].reason, src / "kvzoo.gguf-split-a" + ": name clash: kvzoo.gguf is already served from " +
                                        src / kvzoo_shard(1) + "; not shown");
    EXPECT_EQ(c.problems[2].reason, src / "notensors-00001-of-00001.gguf" + ": name clash: a real file notensors.gguf "
                                        "exists in " + src.path() + " and is served instead; not shown");
}

TEST(Catalog, AttributesNeverWidenAccess) {
    TempDir src;
    mkdirs(src / "d");
    copy_kvzoo(src / "d");
    for (int i = 1; i <= 7; ++i) ASSERT_EQ(::chmod((src / ("d/" + kvzoo_shard(i))).c_str(), 0666), 0);
    ASSERT_EQ(::chmod((src / ("d/" + kvzoo_shard(4))).c_str(), 0604), 0);
    struct timespec times[2] = {{2000000000, 5}, {2000000000, 5}};
    ASSERT_EQ(::utimensat(AT_FDCWD, (src / ("d/" + kvzoo_shard(6))).c_str(), times, 0), 0);
    gguf_test::write_file(src / "d/notes.txt", "x");
    ASSERT_EQ(::chmod((src / "d/notes.txt").c_str(), 0700), 0);
    ASSERT_EQ(::chmod((src / "d").c_str(), 0750), 0);
    auto c = gguf::build_catalog(src.path());
    const auto* e = find(c, "d/kvzoo.gguf");
    ASSERT_NE(e, nullptr);
    // Shard 4 (0604) denies the group; d (0750) denies "other" the search (rule 8).
    EXPECT_EQ(e->attr.mode, 0400u);
    EXPECT_EQ(e->attr.uid, ::getuid());
    EXPECT_EQ(e->attr.mtime.tv_sec, 2000000000);
    EXPECT_EQ(e->attr.mtime.tv_nsec, 5);
    EXPECT_EQ(find(c, "d/notes.txt")->attr.mode, 0400u);
    ASSERT_EQ(c.directories.size(), 2u);
    EXPECT_EQ(c.directories[1].attr.mode, 0550u);
    ASSERT_EQ(::chmod((src / "d").c_str(), 0755), 0);
}

TEST(Catalog, ClassesPassingOnlyWhenEveryWayAMemberCanMatchGrants) {
    using gguf::AccessCheck;
    using gguf::classes_passing;
    constexpr unsigned R = 4, X = 1;
    EXPECT_EQ(classes_passing(0, 0, {}), 0444u);
    EXPECT_EQ(classes_passing(0, 0, {AccessCheck{0, 0, 0644, false, R}}), 0444u);
    EXPECT_EQ(classes_passing(0, 0, {AccessCheck{0, 0, 0644, false, R}, AccessCheck{0, 0, 0700, false, X}}), 0400u);
    EXPECT_EQ(classes_passing(0, 0, {AccessCheck{0, 0, 0644, false, R}, AccessCheck{0, 0, 0710, false, X}}), 0440u);
    // Another user's 0640 file: the served owner may or may not be in its group.
    EXPECT_EQ(classes_passing(0, 0, {AccessCheck{65534, 0, 0640, false, R}}), 0040u);
    EXPECT_EQ(classes_passing(0, 0, {AccessCheck{65534, 0, 0644, false, R}}), 0444u);
    // A directory of another owner and group, 0705: its group members (some of ours, maybe)
    // cannot search it, so neither the served owner nor the served group pass.
    EXPECT_EQ(classes_passing(0, 0, {AccessCheck{1000, 1000, 0705, false, X}}), 0000u);
    EXPECT_EQ(classes_passing(0, 0, {AccessCheck{1000, 1000, 0755, false, X}}), 0444u);
    // The object's owner (1000, maybe in group 0) is denied by its owner bits: only the served
    // owner, who is not the object's owner, passes through group and other bits.
    EXPECT_EQ(classes_passing(0, 0, {AccessCheck{1000, 0, 0044, false, R}}), 0400u);
    // An ACL'd object: only its own owner is judged (by the owner bits).
    EXPECT_EQ(classes_passing(0, 0, {AccessCheck{0, 0, 0755, true, X}}), 0400u);
    EXPECT_EQ(classes_passing(0, 0, {AccessCheck{1000, 0, 0755, true, X}}), 0000u);
}

TEST(Catalog, DirectoriesOnTheWayNarrowModesThroughEveryKindOfLink) {
    TempDir root;
    const std::string src = root / "src";
    mkdirs(src);
    mkdirs(root / "closed");
    mkdirs(root / "closed/open");
    gguf_test::write_file(root / "closed/secret.txt", "secret");
    gguf_test::write_file(root / "closed/open/inner.txt", "inner");
    ASSERT_EQ(::chmod((root / "closed/secret.txt").c_str(), 0644), 0);
    ASSERT_EQ(::symlink("../closed/secret.txt", (src + "/link.txt").c_str()), 0);    // a file link out
    ASSERT_EQ(::symlink("../closed/open", (src + "/outdir").c_str()), 0);            // a directory link out
    mkdirs(src + "/private");
    gguf_test::write_file(src + "/private/p.txt", "p");
    gguf_test::write_file(src + "/plain.txt", "plain");
    // HF cache: snapshots/<rev>/x -> ../../blobs/<sha>, with the blobs directory 0700.
    mkdirs(src + "/hf");
    mkdirs(src + "/hf/blobs");
    mkdirs(src + "/hf/snapshots");
    mkdirs(src + "/hf/snapshots/rev");
    for (int i = 1; i <= 7; ++i) {
        const std::string blob = "sha" + std::to_string(i);
        gguf_test::copy_file(fixture("kvzoo/t7/" + kvzoo_shard(i)), src + "/hf/blobs/" + blob);
        ASSERT_EQ(::chmod((src + "/hf/blobs/" + blob).c_str(), 0644), 0);
        ASSERT_EQ(::symlink(("../../blobs/" + blob).c_str(), (src + "/hf/snapshots/rev/" + kvzoo_shard(i)).c_str()), 0);
    }
    // A byte-split file whose second piece is a link into ROOT/closed.
    gguf_test::cut_file(fixture("tiny-llama/tiny-llama.gguf"), {src + "/tiny.gguf.part1of2", root / "closed/piece2"});
    ASSERT_EQ(::chmod((src + "/tiny.gguf.part1of2").c_str(), 0644), 0);
    ASSERT_EQ(::chmod((root / "closed/piece2").c_str(), 0644), 0);
    ASSERT_EQ(::symlink("../closed/piece2", (src + "/tiny.gguf.part2of2").c_str()), 0);
    ASSERT_EQ(::chmod((root / "closed").c_str(), 0700), 0);
    ASSERT_EQ(::chmod((src + "/private").c_str(), 0700), 0);
    ASSERT_EQ(::chmod((src + "/hf/blobs").c_str(), 0700), 0);

    auto c = gguf::build_catalog(src);
    // The blobs are shards under names that are not shard names (catalog rule 9): each is a
    // Problem, not a file passed through. Nothing else is.
    ASSERT_EQ(c.problems.size(), 7u) << problems_text(c);
    for (const auto& p : c.problems) EXPECT_EQ(p.path.rfind("hf/blobs/sha", 0), 0u) << problems_text(c);
    EXPECT_TRUE(c.notes.empty());
    auto mode_of = [&](const std::string& path) -> int {
        const auto* e = find(c, path);
        return e ? static_cast<int>(e->attr.mode) : -1;
    };
    EXPECT_EQ(mode_of("plain.txt"), 0444);
    EXPECT_EQ(mode_of("link.txt"), 0400);           // ROOT/closed is 0700
    EXPECT_EQ(mode_of("outdir/inner.txt"), 0400);   // reached through ROOT/closed
    EXPECT_EQ(mode_of("private/p.txt"), 0400);      // SOURCE/private is 0700
    EXPECT_EQ(mode_of("hf/snapshots/rev/kvzoo.gguf"), 0400);  // the blobs directory is 0700
    EXPECT_EQ(mode_of("tiny.gguf"), 0400);          // one piece behind ROOT/closed
    std::map<std::string, mode_t> dirs;
    for (const auto& d : c.directories) dirs[d.path] = d.attr.mode;
    EXPECT_EQ(dirs["outdir"], 0500u);  // itself 0755, but behind ROOT/closed
    EXPECT_EQ(dirs["private"], 0500u);
    EXPECT_EQ(dirs["hf/blobs"], 0500u);
    EXPECT_EQ(dirs["hf/snapshots/rev"], 0555u);
    // The source paths a direct reader opens: the link names, not their targets.
    ASSERT_NE(find(c, "link.txt"), nullptr);
    EXPECT_EQ(find(c, "link.txt")->access_paths(), std::vector<std::string>{src + "/link.txt"});
    ASSERT_EQ(::chmod((root / "closed").c_str(), 0755), 0);
}

TEST(Catalog, PosixAclOnTheWayServesOwnerOnlyWithANote) {
    TempDir root;
    const std::string src = root / "src";
    mkdirs(src);
    gguf_test::write_file(src + "/a.txt", "a");
    gguf_test::write_file(src + "/b.txt", "b");
    ASSERT_EQ(::chmod((src + "/a.txt").c_str(), 0644), 0);
    auto r = gguf_test::run({"/bin/sh", "-c", "command -v setfacl >/dev/null && setfacl -m u:65534:--- '" + src + "/a.txt'"});
    if (r.exit_code != 0) GTEST_SKIP() << "setfacl (apt package acl) missing or ACLs unsupported here: " << r.err;
    auto c = gguf::build_catalog(src);
    ASSERT_NE(find(c, "a.txt"), nullptr);
    EXPECT_EQ(find(c, "a.txt")->attr.mode, 0400u);
    EXPECT_EQ(find(c, "b.txt")->attr.mode, 0444u);
    ASSERT_EQ(c.notes.size(), 1u);
    EXPECT_EQ(c.notes[0].path, "a.txt");
    EXPECT_EQ(c.notes[0].reason, src + "/a.txt has a POSIX ACL (system.posix_acl_access), which mode bits cannot "
                                       "judge; served with mode 0400");
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
}

TEST(Catalog, FirstShardAsSourceServesOnlyThatSet) {
    TempDir src;
    copy_kvzoo(src.path());
    gguf_test::copy_file(fixture("notensors/t7/notensors-00001-of-00001.gguf"), src / "notensors-00001-of-00001.gguf");
    gguf_test::write_file(src / "README.md", "x");
    auto c = gguf::build_catalog(src / kvzoo_shard(1));
    EXPECT_EQ(entry_paths(c), std::vector<std::string>{"kvzoo.gguf"});
    EXPECT_TRUE(c.problems.empty()) << problems_text(c);
    auto second = gguf::build_catalog(src / kvzoo_shard(2));
    EXPECT_TRUE(second.entries.empty());
    ASSERT_EQ(second.problems.size(), 1u);
    EXPECT_NE(second.problems[0].reason.find("not the first shard"), std::string::npos) << second.problems[0].reason;
}

TEST(Catalog, WatchedPathsCoverEveryFileAndDirectoryLookedAt) {
    TempDir src;
    mkdirs(src / "sub");
    copy_kvzoo(src / "sub", 3);
    ASSERT_EQ(::symlink("nowhere", (src / "dangling").c_str()), 0);
    auto c = gguf::build_catalog(src.path());
    size_t dirs = 0, files = 0, missing = 0;
    for (const auto& w : c.watched) {
        if (!w.exists) ++missing;
        else if (w.directory) ++dirs;
        else ++files;
    }
    EXPECT_EQ(dirs, 2u);
    EXPECT_EQ(files, 6u);  // the shards of the incomplete set too
    EXPECT_EQ(missing, 1u);
}

TEST(Catalog, MissingSourceThrows) {
    EXPECT_THROW(gguf::build_catalog("/nonexistent/gguf-mount-test"), gguf::Error);
}

}  // namespace

// ---- rule 11 with rule 8: an edited model's attributes (issue 30, items 1, 3, 10) ------------

namespace {

/// Sets the mtime of `path` to `sec` seconds after the epoch.
void set_mtime(const std::string& path, time_t sec) {
    const timespec times[2] = {{sec, 0}, {sec, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

}  // namespace

TEST(CatalogEdits, ModeMtimeAndAccessPathsAreJudgedOverTheSidecarAndItsAtFiles) {
    TempDir src;
    copy_kvzoo(src.path());
    gguf_test::write_file(src / "t.jinja", "{{ t }}");
    gguf_test::write_file(src / "kvzoo.gguf.kv", "tokenizer.chat_template=str:@t.jinja\n");
    for (int i = 1; i <= 7; ++i) set_mtime(src / kvzoo_shard(i), 1000000);
    set_mtime(src / "kvzoo.gguf.kv", 2000000);
    set_mtime(src / "t.jinja", 3000000);
    ASSERT_EQ(::chmod((src / "t.jinja").c_str(), 0600), 0);
    auto c = gguf::build_catalog(src.path());
    const gguf::CatalogEntry* e = find(c, "kvzoo.gguf");
    ASSERT_NE(e, nullptr) << problems_text(c);
    // The newest of shards, sidecar and @FILE: a sidecar edit is a new mtime (rsync, make).
    EXPECT_EQ(e->attr.mtime.tv_sec, 3000000);
    // t.jinja 0600: only its owner may read it directly, so only the owner may read the model.
    EXPECT_EQ(e->attr.mode & 0444, 0400u);
    const auto paths = e->access_paths();
    ASSERT_EQ(paths.size(), 9u);
    EXPECT_EQ(paths[7], src / "kvzoo.gguf.kv");
    EXPECT_EQ(paths[8], src / "t.jinja");
    // Without the sidecar, the shards alone decide.
    ASSERT_EQ(::unlink((src / "kvzoo.gguf.kv").c_str()), 0);
    c = gguf::build_catalog(src.path());
    e = find(c, "kvzoo.gguf");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->attr.mtime.tv_sec, 1000000);
    EXPECT_EQ(e->attr.mode & 0444, 0444u);
    EXPECT_EQ(gguf_test::sha256_hex(bytes_of(*e)), kKvzooMerged);
}

TEST(CatalogEdits, ShardViewShardsShareTheModelsEditsAndEditFiles) {
    TempDir src;
    copy_kvzoo(src.path());
    std::string text;
    for (int i = 0; i < 2000; ++i) text += "x.k" + std::to_string(i) + "=str:v\n";
    gguf_test::write_file(src / "kvzoo.gguf.kv", text);
    gguf::CatalogOptions o;
    gguf::SplitOptions split;
    split.mode = gguf::SplitOptions::Mode::Tensors;
    split.max_tensors = 1;
    o.split_view = split;
    const auto c = gguf::build_catalog(src.path(), o);
    ASSERT_GT(c.entries.size(), 2u) << problems_text(c);
    const std::vector<std::string>& first = c.entries.front().kv_edits.list();
    ASSERT_EQ(first.size(), 2000u);
    for (const auto& e : c.entries) {
        EXPECT_EQ(&e.kv_edits.list(), &first) << e.path;  // one list, not a copy per shard
        ASSERT_EQ(e.edit_files.size(), 1u) << e.path;
        EXPECT_EQ(e.edit_files[0].path, src / "kvzoo.gguf.kv");
    }
}
