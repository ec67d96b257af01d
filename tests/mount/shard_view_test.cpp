// Shard views through a real mount (`gguf-mount SOURCE MNT --split-max-tensors N | --split-max-size
// N(M|G) [--no-tensor-first-split]`): every shard equals what `gguf-mount split` writes with the
// same options, for every option set the split tests use; a 7-shard set re-cut; `cp -r` of the
// view gives split's files; `merge` of the view's first shard gives the merged reference; mmap;
// a changed source is a new generation of every shard; options that make no plan are refused
// with split's message. Every test mounts its own temporary directory.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "gguf/model/split_set.hpp"
#include "mount/mount_fixture.hpp"
#include "support/sparse_model.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using gguf_test::TempDir;
using mount_test::Fd;
using mount_test::kLiveUpdateLimit;
using mount_test::list_dir;
using mount_test::time_until;

std::vector<std::string> words(const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

gguf_test::RunResult gm(std::vector<std::string> args) {
    args.insert(args.begin(), gguf_test::gguf_mount_binary());
    return gguf_test::run(args);
}

/// name -> sha256 of every regular file under `dir` (relative names, recursive).
std::map<std::string, std::string> tree_sha256(const std::string& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
        if (e.is_regular_file()) {
            out[std::filesystem::relative(e.path(), dir).string()] = gguf_test::sha256_file(e.path().string());
        }
    }
    return out;
}

class ShardViewMount : public mount_test::MountFixture {
protected:
    /// `gguf-mount split -q OPTIONS INPUT OUT_DIR/PREFIX`; fails the test when split fails.
    void split_into(const std::string& options, const std::string& input, const std::string& prefix) {
        auto args = words(options);
        args.insert(args.begin(), {"split", "-q"});
        args.push_back(input);
        args.push_back(prefix);
        auto r = gm(args);
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }
};

// Every option set split is tested with (tests/cli/split_merge_test.cpp), from one file.
TEST_F(ShardViewMount, EveryShardEqualsSplitsOutput) {
    struct Case {
        std::string input, options;
    };
    std::vector<Case> cases = {{"tiny-llama/tiny-llama.gguf", "--split-max-tensors 10"},
                               {"kvzoo/original.gguf", "--split-max-size 1M"},
                               {"kvzoo/original.gguf", "--split-max-size 5M --no-tensor-first-split"},
                               {"tiny-llama/tiny-llama.gguf", "--split-max-tensors 128"}};
    std::map<std::string, gguf_test::ManifestCase> manifest;
    for (const auto& c : gguf_test::manifest_cases()) {
        cases.push_back({c.original, c.split_options});
        manifest[c.original + " " + c.split_options] = c;
    }
    for (const Case& c : cases) {
        SCOPED_TRACE(c.input + " " + c.options);
        TempDir out;
        split_into(c.options, fixture(c.input), out / "m");
        gguf_test::copy_file(fixture(c.input), src_ + "/m.gguf");
        ASSERT_TRUE(mount(words(c.options), src_ + "/m.gguf"));
        const auto want = tree_sha256(out.path());
        EXPECT_EQ(tree_sha256(mnt_), want);
        auto it = manifest.find(c.input + " " + c.options);
        if (it != manifest.end()) {  // and llama-gguf-split's own output
            const auto& mc = it->second;
            ASSERT_EQ(want.size(), mc.shards.size());
            for (size_t i = 0; i < mc.shards.size(); ++i) {
                const std::string name = gguf::shard_path("m", static_cast<uint32_t>(i + 1),
                                                          static_cast<uint32_t>(mc.shards.size()));
                EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + name), mc.shard_sha256[i]) << name;
            }
        }
        ASSERT_EQ(unmount_and_wait(), 0) << log();
        ::unlink((src_ + "/m.gguf").c_str());
    }
}

// A 7-shard set re-cut in a model directory with a companion and a nested folder: `cp -r` of
// the view is split's output plus the companion; merging the view gives the merged reference;
// an mmap of a shard reads its bytes.
TEST_F(ShardViewMount, ReCutSetCopiesMergesAndMaps) {
    ASSERT_EQ(::mkdir((src_ + "/sub").c_str(), 0755), 0);
    mount_test::copy_kvzoo(src_);
    gguf_test::copy_file(fixture("tiny-llama/tiny-llama.gguf"), src_ + "/sub/tiny.gguf");
    gguf_test::write_file(src_ + "/README.md", "model card\n");
    TempDir want;
    split_into("--split-max-tensors 5", fixture("kvzoo/merged-reference.gguf"), want / "kvzoo");
    ASSERT_EQ(::mkdir((want / "sub").c_str(), 0755), 0);
    split_into("--split-max-tensors 5", fixture("tiny-llama/tiny-llama.gguf"), want / "sub/tiny");
    gguf_test::write_file(want / "README.md", "model card\n");

    ASSERT_TRUE(mount({"--split-max-tensors", "5"}));
    TempDir copy;
    auto r = gguf_test::run({"/bin/cp", "-r", mnt_ + "/.", copy / "view"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(tree_sha256(copy / "view"), tree_sha256(want.path()));
    EXPECT_EQ(list_dir(mnt_).front(), "README.md");

    auto m = gm({"merge", "-q", mnt_ + "/kvzoo-00001-of-00009.gguf", copy / "merged.gguf"});
    ASSERT_EQ(m.exit_code, 0) << m.err;
    EXPECT_EQ(gguf_test::sha256_file(copy / "merged.gguf"), mount_test::kKvzooMergedSha256);

    const std::string expect = gguf_test::read_file(want / "kvzoo-00004-of-00009.gguf");
    Fd fd{::open((mnt_ + "/kvzoo-00004-of-00009.gguf").c_str(), O_RDONLY)};
    ASSERT_GE(fd.fd, 0);
    void* p = ::mmap(nullptr, expect.size(), PROT_READ, MAP_PRIVATE, fd.fd, 0);
    ASSERT_NE(p, MAP_FAILED);
    EXPECT_EQ(std::memcmp(p, expect.data(), expect.size()), 0);
    ::munmap(p, expect.size());
    fd.close();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

// A changed source is a new generation (inode) of every shard of its model, with the new bytes.
TEST_F(ShardViewMount, AChangedSourceIsANewGenerationOfEveryShard) {
    gguf_test::copy_file(fixture("kvzoo/original.gguf"), src_ + "/k.gguf");
    ASSERT_TRUE(mount({"--split-max-tensors", "7"}));
    std::vector<ino_t> before;
    for (uint32_t i = 1; i <= 7; ++i) {
        struct stat st {};
        ASSERT_EQ(::stat((mnt_ + "/" + gguf::shard_path("k", i, 7)).c_str(), &st), 0);
        before.push_back(st.st_ino);
    }
    // Same header, one data byte changed: the same plan, and every shard is a new generation.
    gguf_test::copy_file(fixture("kvzoo/original.gguf"), src_ + "/.k.tmp");
    std::string bytes = gguf_test::read_file(src_ + "/.k.tmp");
    bytes.back() ^= 1;  // the last byte of the last tensor (or padding): same plan, new content
    gguf_test::write_file(src_ + "/.k.tmp", bytes);
    ASSERT_EQ(::rename((src_ + "/.k.tmp").c_str(), (src_ + "/k.gguf").c_str()), 0);
    auto changed = time_until(
        [&] {
            for (uint32_t i = 1; i <= 7; ++i) {
                struct stat st {};
                if (::stat((mnt_ + "/" + gguf::shard_path("k", i, 7)).c_str(), &st) != 0) return false;
                if (st.st_ino == before[i - 1]) return false;
            }
            return true;
        },
        kLiveUpdateLimit);
    ASSERT_TRUE(changed) << log();
    TempDir want;
    split_into("--split-max-tensors 7", src_ + "/k.gguf", want / "k");
    EXPECT_EQ(tree_sha256(mnt_), tree_sha256(want.path()));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

// KV overrides on the mount (a sidecar, then the command line) apply to the model before it is
// cut: the view is split's output of `merge` with the same edits; editing the sidecar is a new
// generation of every shard.
TEST_F(ShardViewMount, AViewWithOverridesIsTheSplitOfTheEditedMerge) {
    mount_test::copy_kvzoo(src_);
    gguf_test::write_file(src_ + "/kvzoo.gguf.kv", "general.name=str:fixed\n");
    auto expected = [&](const std::string& name) {
        TempDir want;
        auto m = gm({"merge", "-q", "--override-kv", "general.name=str:" + name, "--override-kv",
                     "general.description=str:cli", src_ + "/" + mount_test::kvzoo_shard(1), want / "edited.gguf"});
        EXPECT_EQ(m.exit_code, 0) << m.err;
        split_into("--split-max-tensors 5", want / "edited.gguf", want / "kvzoo");
        ::unlink((want / "edited.gguf").c_str());
        return tree_sha256(want.path());
    };
    ASSERT_TRUE(mount({"--split-max-tensors", "5", "--override-kv", "general.description=str:cli"}));
    EXPECT_EQ(tree_sha256(mnt_), expected("fixed"));
    struct stat st {};
    ASSERT_EQ(::stat((mnt_ + "/kvzoo-00002-of-00009.gguf").c_str(), &st), 0);
    const ino_t before = st.st_ino;
    gguf_test::write_file(src_ + "/.kv.tmp", "general.name=str:other\n");
    ASSERT_EQ(::rename((src_ + "/.kv.tmp").c_str(), (src_ + "/kvzoo.gguf.kv").c_str()), 0);
    ASSERT_TRUE(time_until(
        [&] {
            struct stat now {};
            return ::stat((mnt_ + "/kvzoo-00002-of-00009.gguf").c_str(), &now) == 0 && now.st_ino != before;
        },
        kLiveUpdateLimit))
        << log();
    EXPECT_EQ(tree_sha256(mnt_), expected("other"));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

// Options that make no plan are refused as split refuses them, with its message.
TEST_F(ShardViewMount, OptionsThatMakeNoPlanAreRefusedLikeSplit) {
    gguf_test::write_sparse_model(src_ + "/m.gguf", {{"first.weight", {300000}}, {"b", {10}}});  // 1.2 MB tensor
    auto zero = gm({src_, mnt_, "-f", "--split-max-tensors", "0"});
    EXPECT_EQ(zero.exit_code, 2);
    EXPECT_NE(zero.err.find("--split-max-tensors '0': must be at least 1"), std::string::npos) << zero.err;
    auto both = gm({src_, mnt_, "-f", "--split-max-tensors", "3", "--split-max-size", "1M"});
    EXPECT_EQ(both.exit_code, 2);
    EXPECT_NE(both.err.find("--split-max-size and --split-max-tensors cannot be used together"), std::string::npos)
        << both.err;
    auto alone = gm({src_, mnt_, "-f", "--no-tensor-first-split"});
    EXPECT_EQ(alone.exit_code, 2);
    EXPECT_NE(alone.err.find("--no-tensor-first-split needs --split-max-tensors N or --split-max-size"),
              std::string::npos)
        << alone.err;
    auto small = gm({src_ + "/m.gguf", mnt_, "-f", "--split-max-size", "1M"});
    auto split = gm({"split", "--split-max-size", "1M", src_ + "/m.gguf", root_ + "/out"});
    EXPECT_EQ(small.exit_code, 1);
    EXPECT_EQ(split.exit_code, 1);
    const std::string msg = "one of the splits would have 0 tensors: tensor 'first.weight' (1200000 bytes padded) "
                            "does not fit in shard 1 under --split-max-size of 1000000 bytes";
    EXPECT_NE(small.err.find(msg), std::string::npos) << small.err;
    EXPECT_NE(split.err.find(msg), std::string::npos) << split.err;
    EXPECT_FALSE(mount_test::find_mount(mnt_));
}

TEST(ShardViewHelp, MountAndCheckListTheFlags) {
    for (const char* cmd : {"mount", "check"}) {
        auto r = gm({cmd, "--help"});
        EXPECT_EQ(r.exit_code, 0);
        for (const char* flag : {"--split-max-tensors", "--split-max-size", "--no-tensor-first-split"}) {
            EXPECT_NE(r.out.find(flag), std::string::npos) << cmd << " " << flag;
        }
        if (std::string(cmd) == "mount") EXPECT_NE(r.out.find("NAME-00001-of-0000N.gguf"), std::string::npos);
    }
}

}  // namespace
