// `gguf-mount split` and `gguf-mount merge` as a user runs them: golden bytes against llama.cpp's
// gguf-split, dry run, size mode, round trips, and every error case with its message and a
// clean directory afterwards.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>

#include "gguf/bytes/file_io.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/model/split_set.hpp"
#include "support/sparse_model.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using gguf_test::RunResult;
using gguf_test::TempDir;

constexpr const char* kKvzooMerged = "188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f";

RunResult gm(std::vector<std::string> args) {
    args.insert(args.begin(), gguf_test::gguf_mount_binary());
    return gguf_test::run(args);
}

/// Runs gguf-mount as user and group nobody (65534), without supplementary groups.
RunResult gm_as_nobody(std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               gguf_test::gguf_mount_binary()});
    return gguf_test::run(args);
}

std::vector<std::string> words(const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

std::string shard_name(const std::string& prefix, int i, int n) { return gguf::shard_path(prefix, i, n); }

/// Copies the shards of a fixture case into `dir`, returning the path of the first.
std::string copy_shards(const gguf_test::ManifestCase& c, const std::string& dir) {
    for (const auto& s : c.shards) gguf_test::copy_file(fixture(s), dir + "/" + gguf::base_name(s));
    return dir + "/" + gguf::base_name(c.shards.front());
}

gguf_test::ManifestCase find_case(const std::string& id) {
    for (auto& c : gguf_test::manifest_cases()) {
        if (c.id == id) return c;
    }
    ADD_FAILURE() << "no case " << id;
    return {};
}

// ---- golden ------------------------------------------------------------------------------------

class CliCase : public ::testing::TestWithParam<gguf_test::ManifestCase> {};

TEST_P(CliCase, SplitReproducesTheReferenceShards) {
    const auto& c = GetParam();
    TempDir tmp;
    const std::string prefix = gguf::parse_shard_name(gguf::base_name(c.shards[0]))->prefix;
    auto args = words(c.split_options);
    args.insert(args.begin(), "split");
    args.push_back(fixture(c.original));
    args.push_back(tmp / prefix);
    auto r = gm(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const int n = static_cast<int>(c.shards.size());
    EXPECT_EQ(list_dir(tmp.path()).size(), c.shards.size());
    for (int i = 0; i < n; ++i) {
        EXPECT_EQ(gguf_test::sha256_file(shard_name(tmp / prefix, i + 1, n)), c.shard_sha256[i]) << c.shards[i];
    }
}

TEST_P(CliCase, MergeReproducesTheReferenceMerge) {
    const auto& c = GetParam();
    TempDir tmp;
    auto r = gm({"merge", fixture(c.shards.front()), tmp / "merged.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(tmp / "merged.gguf"), c.merged_sha256);
    EXPECT_EQ(list_dir(tmp.path()), (std::vector<std::string>{"merged.gguf"}));
}

TEST_P(CliCase, SplitThenMergeRoundTrip) {
    const auto& c = GetParam();
    TempDir tmp;
    auto args = words(c.split_options);
    args.insert(args.begin(), {"split", "-q"});
    args.push_back(fixture(c.original));
    args.push_back(tmp / "m");
    ASSERT_EQ(gm(args).exit_code, 0);
    auto r = gm({"merge", "-q", shard_name(tmp / "m", 1, static_cast<int>(c.shards.size())), tmp / "merged.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(tmp / "merged.gguf"), c.merged_sha256);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CliCase, ::testing::ValuesIn(gguf_test::manifest_cases()), [](const auto& info) {
    std::string n = info.param.id;
    for (auto& ch : n) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
});

TEST(CliSplit, TinyLlamaTenTensorsMatchesReadme) {
    TempDir tmp;
    auto r = gm({"split", "--split-max-tensors", "10", fixture("tiny-llama/tiny-llama.gguf"), tmp / "tiny-llama"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(list_dir(tmp.path()).size(), 3u);
    EXPECT_EQ(gguf_test::sha256_file(tmp / "tiny-llama-00001-of-00003.gguf"),
              "9b07ed6ed440cbad52be31b1228eb55d818ed97c04fe774147f8857f7b71eb85");
    EXPECT_EQ(gguf_test::sha256_file(tmp / "tiny-llama-00002-of-00003.gguf"),
              "e2ad57ef7a6b9407f81256b9704cc2d29802a9c402f199eaa18d5aace349c39e");
    EXPECT_EQ(gguf_test::sha256_file(tmp / "tiny-llama-00003-of-00003.gguf"),
              "52d58d7c63cab7fc33f1f2faae90fd5c7a990daf97acad022d8fe39b99a40ac8");
    r = gm({"merge", tmp / "tiny-llama-00001-of-00003.gguf", tmp / "merged.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(tmp / "merged.gguf"),
              "3a7d0b4b3ba2417ad2b31050616fb5caef8221715a369463fb6b3cf668a56914");
}

TEST(CliSplit, ResplittingTheMergedReferenceReproducesTheShards) {
    const auto c = find_case("kvzoo/t7");
    TempDir tmp;
    ASSERT_EQ(gm({"split", "--split-max-tensors", "7", fixture("kvzoo/merged-reference.gguf"), tmp / "kvzoo"}).exit_code,
              0);
    for (int i = 0; i < 7; ++i) EXPECT_EQ(gguf_test::sha256_file(shard_name(tmp / "kvzoo", i + 1, 7)), c.shard_sha256[i]);
}

TEST(CliSplit, DefaultIs128TensorsPerShard) {
    TempDir tmp;
    auto r = gm({"split", "-q", fixture("kvzoo/original.gguf"), tmp / "k"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(list_dir(tmp.path()), (std::vector<std::string>{"k-00001-of-00001.gguf"}));
}

// ---- dry run -----------------------------------------------------------------------------------

TEST(CliSplit, DryRunPrintsThePlanOfKvzooT7AndWritesNothing) {
    std::string want = "n_split: 7\n";
    for (int i = 1; i <= 7; ++i) {
        gguf::Header h = gguf::read_header(fixture("kvzoo/t7/" + gguf::base_name(shard_name("kvzoo", i, 7))));
        uint64_t bytes = h.data_offset;  // header including padding
        for (const auto& t : h.tensors) bytes += t.nbytes;
        char line[128];
        std::snprintf(line, sizeof line, "split %05d: n_tensors = %zu, total_size = %lluM\n", i, h.tensors.size(),
                      static_cast<unsigned long long>(bytes / 1000 / 1000));
        want += line;
    }
    TempDir tmp;
    auto r = gm({"split", "--dry-run", "--split-max-tensors", "7", fixture("kvzoo/original.gguf"), tmp / "kvzoo"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, want);
    EXPECT_TRUE(list_dir(tmp.path()).empty());
}

TEST(CliSplit, DryRunSizesInMegabytesMatchTheWrittenShards) {
    // Big sparse tensors so total_size is not 0M; expected values come from the shards written
    // by a real run, read back with the strict reader.
    TempDir tmp;
    const std::string input = tmp / "in.gguf";
    gguf_test::write_sparse_model(input, {{"a", {700000}}, {"b", {900001}}, {"c", {300000}}, {"d", {1200000}},
                                          {"e", {25}}});
    TempDir out;
    const std::vector<std::string> opts = {"--split-max-size", "5M", "--no-tensor-first-split"};
    auto args = opts;
    args.insert(args.begin(), {"split", "--dry-run"});
    args.push_back(input);
    args.push_back(out / "s");
    auto dry = gm(args);
    ASSERT_EQ(dry.exit_code, 0) << dry.err;
    EXPECT_TRUE(list_dir(out.path()).empty());

    args.erase(args.begin() + 1);  // same options, real run
    args.insert(args.begin() + 1, "-q");
    auto real = gm(args);
    ASSERT_EQ(real.exit_code, 0) << real.err;
    const auto files = list_dir(out.path());
    std::string want = "n_split: " + std::to_string(files.size()) + "\n";
    for (size_t i = 0; i < files.size(); ++i) {
        gguf::Header h = gguf::read_header(out / files[i]);
        uint64_t bytes = h.data_offset;
        for (const auto& t : h.tensors) bytes += t.nbytes;
        char line[128];
        std::snprintf(line, sizeof line, "split %05zu: n_tensors = %zu, total_size = %lluM\n", i + 1,
                      h.tensors.size(), static_cast<unsigned long long>(bytes / 1000 / 1000));
        want += line;
    }
    EXPECT_EQ(dry.out, want);
    EXPECT_EQ(files.size(), 4u);  // empty first shard, {a, b}, {c, d}, {e}
}

// ---- size mode ---------------------------------------------------------------------------------

TEST(CliSplit, SizeModeShardsRemergeToTheSameBytes) {
    TempDir tmp;
    auto r = gm({"split", "--split-max-size", "1M", fixture("kvzoo/original.gguf"), tmp / "k"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto files = list_dir(tmp.path());
    ASSERT_GE(files.size(), 3u);
    uint64_t tensors = 0;
    for (const auto& f : files) {
        gguf::Header h = gguf::read_header(tmp / f);
        uint64_t padded = 0;
        for (const auto& t : h.tensors) padded += gguf::align_up(t.nbytes, 32);
        EXPECT_TRUE(padded <= 1000000 || h.tensors.size() == 1) << f;
        EXPECT_GT(h.tensors.size(), 0u) << f;
        tensors += h.tensors.size();
    }
    EXPECT_EQ(tensors, 43u);
    r = gm({"merge", tmp / files.front(), tmp / "merged.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(tmp / "merged.gguf"), kKvzooMerged);
}

TEST(CliSplit, OversizedTensorGetsItsOwnShard) {
    TempDir tmp;
    const std::string input = tmp / "in.gguf";
    gguf_test::write_sparse_model(input, {{"a", {1000}}, {"huge", {1000000}}, {"b", {1000}}});  // 4 MB middle tensor
    TempDir out;
    auto r = gm({"split", "-q", "--split-max-size", "1M", input, out / "s"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(list_dir(out.path()).size(), 3u);
    EXPECT_EQ(gguf::read_header(shard_name(out / "s", 2, 3)).tensors.at(0).name, "huge");
}

// ---- errors ------------------------------------------------------------------------------------

/// Expects exit status `code`, one stderr line containing every string in `needles`, and the
/// directory listing to be exactly `listing` afterwards (nothing written, no temporary files).
void expect_failure(const RunResult& r, int code, const std::vector<std::string>& needles, const std::string& dir,
                    const std::vector<std::string>& listing) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << "'" << n << "' not in: " << r.err;
    EXPECT_EQ(list_dir(dir), listing);
}

class MergeErrors : public ::testing::Test {
protected:
    void SetUp() override {
        first_ = copy_shards(find_case("kvzoo/t7"), tmp_.path());
        names_ = list_dir(tmp_.path());
    }
    std::string shard(int i) const { return shard_name(tmp_ / "kvzoo", i, 7); }
    RunResult merge(const std::string& first, std::vector<std::string> extra = {}) {
        std::vector<std::string> args = {"merge"};
        args.insert(args.end(), extra.begin(), extra.end());
        args.push_back(first);
        args.push_back(tmp_ / "merged.gguf");
        return gm(args);
    }
    /// Overwrites the i32 value of split.tensors.count in `path`.
    static void patch_tensors_count(const std::string& path, int32_t value) {
        std::string bytes = gguf_test::read_file(path);
        const std::string key = "split.tensors.count";
        auto at = bytes.find(key);
        ASSERT_NE(at, std::string::npos);
        std::memcpy(&bytes[at + key.size() + 4], &value, 4);
        gguf_test::write_file(path, bytes);
    }
    TempDir tmp_;
    std::string first_;
    std::vector<std::string> names_;
};

TEST_F(MergeErrors, MissingShard) {
    ASSERT_EQ(::unlink(shard(3).c_str()), 0);
    auto names = list_dir(tmp_.path());
    expect_failure(merge(first_, {"--delete-splits"}), 1, {"kvzoo-00003-of-00007.gguf", "missing shard 3 of 7"},
                   tmp_.path(), names);
}

TEST_F(MergeErrors, UnreadableShard) {
    // Tests run as root, so permissions do not stop a read: a directory in place of shard 2 does.
    ASSERT_EQ(::unlink(shard(2).c_str()), 0);
    ASSERT_EQ(::mkdir(shard(2).c_str(), 0755), 0);
    auto names = list_dir(tmp_.path());
    expect_failure(merge(first_), 1, {"kvzoo-00002-of-00007.gguf", "not a regular file"}, tmp_.path(), names);
}

TEST_F(MergeErrors, WrongNamePattern) {
    ASSERT_EQ(::rename(first_.c_str(), (tmp_ / "model.gguf").c_str()), 0);
    auto names = list_dir(tmp_.path());
    expect_failure(merge(tmp_ / "model.gguf"), 1, {"model.gguf", "-00001-of-NNNNN.gguf"}, tmp_.path(), names);
    // a later shard given instead of the first
    expect_failure(merge(shard(2)), 1, {"kvzoo-00002-of-00007.gguf", "not the first shard"}, tmp_.path(), names);
}

TEST_F(MergeErrors, SplitCountMissingOrZero) {
    gguf_test::copy_file(fixture("kvzoo/original.gguf"), tmp_ / "plain-00001-of-00001.gguf");
    gguf_test::copy_file(fixture("kvzoo/merged-reference.gguf"), tmp_ / "merged-00001-of-00001.gguf");
    auto names = list_dir(tmp_.path());
    expect_failure(merge(tmp_ / "plain-00001-of-00001.gguf"), 1,
                   {"plain-00001-of-00001.gguf", "'split.count' is missing"}, tmp_.path(), names);
    expect_failure(merge(tmp_ / "merged-00001-of-00001.gguf"), 1,
                   {"merged-00001-of-00001.gguf", "'split.count' is 0"}, tmp_.path(), names);
}

TEST_F(MergeErrors, ShardCountMismatch) {
    for (int i = 1; i <= 7; ++i) {
        ASSERT_EQ(::rename(shard(i).c_str(), shard_name(tmp_ / "kvzoo", i, 8).c_str()), 0);
    }
    auto names = list_dir(tmp_.path());
    expect_failure(merge(shard_name(tmp_ / "kvzoo", 1, 8)), 1,
                   {"kvzoo-00001-of-00008.gguf", "'split.count' is 7", "says 8"}, tmp_.path(), names);
}

TEST_F(MergeErrors, TensorsCountDiffersBetweenShards) {
    patch_tensors_count(shard(5), 42);
    expect_failure(merge(first_), 1, {"kvzoo-00005-of-00007.gguf", "'split.tensors.count' is 42"}, tmp_.path(),
                   names_);
}

TEST_F(MergeErrors, TensorsCountDiffersFromTheRealTotal) {
    for (int i = 1; i <= 7; ++i) patch_tensors_count(shard(i), 44);
    expect_failure(merge(first_), 1, {"kvzoo-00001-of-00007.gguf", "44", "hold 43 tensors"}, tmp_.path(), names_);
}

TEST_F(MergeErrors, TruncatedShard) {
    ASSERT_EQ(::truncate(shard(4).c_str(), 589216 - 100), 0);
    expect_failure(merge(first_, {"--delete-splits"}), 1, {"kvzoo-00004-of-00007.gguf", "truncated"}, tmp_.path(),
                   names_);
}

TEST_F(MergeErrors, OutputExists) {
    gguf_test::write_file(tmp_ / "merged.gguf", "mine");
    auto names = list_dir(tmp_.path());
    expect_failure(merge(first_, {"--delete-splits"}), 1,
                   {"output file " + tmp_ / "merged.gguf" + " already exists"}, tmp_.path(), names);
    EXPECT_EQ(gguf_test::read_file(tmp_ / "merged.gguf"), "mine");
}

TEST_F(MergeErrors, OutputExistsIsCheckedBeforeReadingAnything) {
    gguf_test::write_file(tmp_ / "merged.gguf", "mine");
    auto names = list_dir(tmp_.path());
    expect_failure(merge(tmp_ / "nope-00001-of-00002.gguf"), 1, {"nope-00001-of-00002.gguf", "No such file"},
                   tmp_.path(), names);
    EXPECT_EQ(gguf_test::read_file(tmp_ / "merged.gguf"), "mine");
}

/// `merge OUT.gguf FIRST_SHARD` (the arguments the wrong way round) said "output file
/// FIRST_SHARD already exists; remove it": the tool told the user to delete their first shard
/// (a new user's trial). The input is checked first, the swap is named, nothing is touched.
TEST_F(MergeErrors, SwappedArgumentsAreNamedAndTouchNothing) {
    const std::string before = gguf_test::read_file(first_);
    const std::string before_sha = gguf_test::sha256_hex(before);
    auto r = gm({"merge", tmp_ / "merged.gguf", first_});
    expect_failure(r, 1, {"did you swap", "kvzoo-00001-of-00007.gguf", "merged.gguf", "gguf-mount merge FIRST_SHARD GGUF_OUT"},
                   tmp_.path(), names_);
    EXPECT_EQ(r.err.find("remove it"), std::string::npos) << r.err;
    EXPECT_EQ(gguf_test::sha256_hex(gguf_test::read_file(first_)), before_sha);
    // The same with a URL as the output: a swapped 'merge OUT URL'.
    r = gm({"merge", tmp_ / "merged.gguf", "http://127.0.0.1:9/m/kvzoo-00001-of-00007.gguf"});
    expect_failure(r, 1, {"did you swap", "http://127.0.0.1:9/m/kvzoo-00001-of-00007.gguf"}, tmp_.path(), names_);
}

TEST_F(MergeErrors, OutputDirectoryMissing) {
    auto r = gm({"merge", first_, tmp_ / "no/such/merged.gguf"});
    expect_failure(r, 1, {"no/such", "does not exist; create it first"}, tmp_.path(), names_);
}

TEST_F(MergeErrors, UsageErrors) {
    expect_failure(gm({"merge", first_}), 2, {"expected FIRST_SHARD and GGUF_OUT", "--help"}, tmp_.path(), names_);
    expect_failure(gm({"merge", "--split-max-tensors", "3", first_, tmp_ / "m.gguf"}), 2, {"split-max-tensors", "--help"},
                   tmp_.path(), names_);
}

TEST_F(MergeErrors, DeleteSplitsAfterSuccessRemovesOnlyTheShards) {
    auto r = gm({"merge", "--delete-splits", first_, tmp_ / "merged.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(list_dir(tmp_.path()), (std::vector<std::string>{"merged.gguf"}));
    EXPECT_EQ(gguf_test::sha256_file(tmp_ / "merged.gguf"), kKvzooMerged);
}

// Issue 14.14: --delete-splits deleted the shards it could and stopped at the first it could not
// ("2 of 7 deleted"). Every shard is now checked first; when one cannot be deleted, nothing is
// written and nothing is deleted. Here shard 3 is immutable (chattr +i: even root cannot unlink).
TEST_F(MergeErrors, DeleteSplitsWithAnImmutableShardTouchesNothing) {
    auto set_flags = [](const std::string& path, bool immutable) {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        int flags = 0;
        ASSERT_EQ(::ioctl(fd, FS_IOC_GETFLAGS, &flags), 0) << std::strerror(errno);
        flags = immutable ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
        int rc = ::ioctl(fd, FS_IOC_SETFLAGS, &flags);
        int e = errno;
        ::close(fd);
        if (rc != 0 && e == EOPNOTSUPP) GTEST_SKIP() << "no immutable flag on this file system";
        ASSERT_EQ(rc, 0) << std::strerror(e);
    };
    set_flags(shard(3), true);
    if (testing::Test::IsSkipped()) return;
    auto r = merge(first_, {"--delete-splits"});
    set_flags(shard(3), false);  // so that the temporary directory can be removed
    expect_failure(r, 1, {"kvzoo-00003-of-00007.gguf", "immutable", "nothing was written or deleted"}, tmp_.path(),
                   names_);
}

// The same as another user: in a sticky directory (like /tmp) a shard owned by someone else
// cannot be deleted, although the directory is writable.
TEST_F(MergeErrors, DeleteSplitsInAStickyDirectoryAsAnotherUserTouchesNothing) {
    ASSERT_EQ(::chmod(tmp_.path().c_str(), 01777), 0);
    for (int i = 1; i <= 7; ++i) {
        if (i != 5) ASSERT_EQ(::chown(shard(i).c_str(), 65534, 65534), 0);
    }
    auto r = gm_as_nobody({"merge", "--delete-splits", first_, tmp_ / "merged.gguf"});
    expect_failure(r, 1, {"kvzoo-00005-of-00007.gguf", "sticky", "nothing was written or deleted"}, tmp_.path(),
                   names_);
    // Without --delete-splits the same user merges (the sticky bit only protects the shard).
    auto ok = gm_as_nobody({"merge", "-q", first_, tmp_ / "merged.gguf"});
    EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// Shards that are symbolic links: the links are removed, the files they point to are kept, and
// the command says so.
TEST_F(MergeErrors, DeleteSplitsOfSymlinkedShardsSaysTheTargetsWereKept) {
    TempDir links;
    for (int i = 1; i <= 7; ++i) {
        ASSERT_EQ(::symlink(shard(i).c_str(), shard_name(links / "kvzoo", i, 7).c_str()), 0);
    }
    auto r = gm({"merge", "--delete-splits", shard_name(links / "kvzoo", 1, 7), links / "merged.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(list_dir(links.path()), (std::vector<std::string>{"merged.gguf"}));
    EXPECT_EQ(list_dir(tmp_.path()), names_);  // the targets are all still there
    EXPECT_NE(r.err.find("removed 7 symbolic link(s); the files they point to were kept"), std::string::npos)
        << r.err;
}

class SplitErrors : public ::testing::Test {
protected:
    RunResult split(std::vector<std::string> opts, const std::string& input = fixture("kvzoo/original.gguf")) {
        opts.insert(opts.begin(), "split");
        opts.push_back(input);
        opts.push_back(tmp_ / "k");
        return gm(opts);
    }
    TempDir tmp_;
};

TEST_F(SplitErrors, LimitTooSmallForTheFirstTensor) {
    TempDir in;
    gguf_test::write_sparse_model(in / "m.gguf", {{"first.weight", {300000}}, {"b", {10}}});  // 1.2 MB first tensor
    for (bool ntfs : {false, true}) {
        std::vector<std::string> opts = {"--split-max-size", "1M"};
        if (ntfs) opts.push_back("--no-tensor-first-split");
        expect_failure(split(opts, in / "m.gguf"), 1, {"0 tensors", "'first.weight'", "1000000 bytes", "too small"},
                       tmp_.path(), {});
    }
}

TEST_F(SplitErrors, BadSizeValues) {
    expect_failure(split({"--split-max-size", "2K"}), 2, {"'2K'", "unit", "--help"}, tmp_.path(), {});
    expect_failure(split({"--split-max-size", "100"}), 2, {"'100'", "missing unit"}, tmp_.path(), {});
    expect_failure(split({"--split-max-size", "0M"}), 2, {"'0M'", "positive"}, tmp_.path(), {});
    expect_failure(split({"--split-max-size", "-1G"}), 2, {"'-1G'", "positive"}, tmp_.path(), {});
    expect_failure(split({"--split-max-size", "1.5G"}), 2, {"'1.5G'", "fractions are not accepted", "1500M"},
                   tmp_.path(), {});
    expect_failure(split({"--split-max-size", "abcG"}), 2, {"'abcG'"}, tmp_.path(), {});
}

TEST_F(SplitErrors, BadTensorCounts) {
    expect_failure(split({"--split-max-tensors", "0"}), 2, {"'0'", "at least 1"}, tmp_.path(), {});
    expect_failure(split({"--split-max-tensors", "abc"}), 2, {"'abc'", "not a whole number"}, tmp_.path(), {});
    expect_failure(split({"--split-max-tensors", "-5"}), 2, {"'-5'", "positive"}, tmp_.path(), {});
}

TEST_F(SplitErrors, BothModes) {
    expect_failure(split({"--split-max-size", "1M", "--split-max-tensors", "3"}), 2,
                   {"--split-max-size and --split-max-tensors cannot be used together"}, tmp_.path(), {});
}

TEST_F(SplitErrors, ExistingShardIsNeverOverwritten) {
    gguf_test::write_file(shard_name(tmp_ / "k", 3, 7), "mine");
    expect_failure(split({"--split-max-tensors", "7"}), 1, {"k-00003-of-00007.gguf", "already exists"}, tmp_.path(),
                   {"k-00003-of-00007.gguf"});
    EXPECT_EQ(gguf_test::read_file(shard_name(tmp_ / "k", 3, 7)), "mine");
}

TEST_F(SplitErrors, InputMissingOrNotGguf) {
    expect_failure(split({}, tmp_ / "absent.gguf"), 1, {"absent.gguf", "No such file"}, tmp_.path(), {});
    TempDir in;
    gguf_test::write_file(in / "junk.gguf", std::string(100, 'x'));
    expect_failure(split({}, in / "junk.gguf"), 1, {"junk.gguf"}, tmp_.path(), {});
}

TEST_F(SplitErrors, InputThatIsAShardOfALargerSet) {
    expect_failure(split({}, fixture("kvzoo/t7/kvzoo-00002-of-00007.gguf")), 1, {"7-shard set", "merge"},
                   tmp_.path(), {});
}

TEST_F(SplitErrors, UsageErrors) {
    expect_failure(gm({"split", fixture("kvzoo/original.gguf")}), 2, {"expected GGUF_IN and OUT_PREFIX"}, tmp_.path(),
                   {});
    expect_failure(gm({"split", "--bogus", fixture("kvzoo/original.gguf"), tmp_ / "k"}), 2, {"bogus", "--help"},
                   tmp_.path(), {});
    expect_failure(gm({"split", "--split-max-tensors"}), 2, {"split-max-tensors"}, tmp_.path(), {});
}

TEST(CliHelp, SplitAndMergeDocumentTheirPolicies) {
    auto s = gm({"split", "--help"});
    EXPECT_EQ(s.exit_code, 0);
    EXPECT_NE(s.out.find("--split-max-size"), std::string::npos);
    EXPECT_NE(s.out.find("REJECTED"), std::string::npos);
    EXPECT_NE(s.out.find("never overwritten"), std::string::npos);
    auto m = gm({"merge", "--help"});
    EXPECT_EQ(m.exit_code, 0);
    EXPECT_NE(m.out.find("--delete-splits"), std::string::npos);
}

}  // namespace

namespace {

TEST(CliNames, CommasAndSpacesInPathsAreKept) {
    TempDir tmp;
    auto r = gm({"split", "-q", "--split-max-tensors", "7", fixture("kvzoo/original.gguf"), tmp / "my model,v2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = gm({"merge", "-q", tmp / "my model,v2-00001-of-00007.gguf", tmp / "merged, final.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(tmp / "merged, final.gguf"), kKvzooMerged);
    r = gm({"merge", tmp / "my model,v2-00001-of-00007.gguf", tmp / "x.gguf", "extra"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("'extra'"), std::string::npos) << r.err;
}

}  // namespace
