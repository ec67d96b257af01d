// gguf::write_virtual_file and gguf::OutputFile: same bytes with every copy method, holes kept,
// truncation detected, cancellation and errors leave nothing behind, publish never overwrites.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include "gguf/model/merge_plan.hpp"
#include "gguf/error.hpp"
#include "gguf/bytes/output.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/model/split_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "support/sparse_model.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;

std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

gguf::VirtualFile kvzoo_merged() {
    return gguf::open_merged(gguf::SplitSet::open(fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf")));
}

/// A VirtualFile for shard `index` of splitting `input` with `options`.
gguf::VirtualFile shard_of(const std::string& input, const gguf::SplitOptions& options, size_t index) {
    auto plans = gguf::plan_split(gguf::read_header(input), options);
    return gguf::VirtualFile(std::move(plans.at(index).layout), {std::make_shared<gguf::LocalFileSource>(input)});
}

TEST(Output, EveryCopyMethodWritesTheReferenceMerge) {
    gguf_test::TempDir tmp;
    const auto vf = kvzoo_merged();
    struct Method { const char* name; bool buffered; bool holes; };
    for (Method m : {Method{"kernel", false, true}, Method{"buffered", true, true}, Method{"kernel-dense", false, false},
                     Method{"buffered-dense", true, false}}) {
        const std::string path = tmp / (std::string(m.name) + ".gguf");
        gguf::WriteOptions o;
        o.force_buffered = m.buffered;
        o.preserve_holes = m.holes;
        uint64_t reported = 0;
        o.progress = [&](uint64_t n) { reported += n; };
        auto out = gguf::OutputFile::create(path);
        auto stats = gguf::write_virtual_file(vf, out, o);
        out.publish();
        EXPECT_EQ(gguf_test::sha256_file(path), "188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f")
            << m.name;
        EXPECT_EQ(reported, vf.size()) << m.name;
        EXPECT_EQ(stats.header_bytes + stats.zero_bytes + stats.kernel_bytes + stats.buffered_bytes + stats.hole_bytes,
                  vf.size());
        if (m.buffered) EXPECT_EQ(stats.kernel_bytes, 0u) << m.name;
    }
    struct stat st {};
    ASSERT_EQ(::stat((tmp / "kernel.gguf").c_str(), &st), 0);
    mode_t mask = ::umask(022);
    ::umask(mask);
    EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
    // only the four published files: no temporary left
    EXPECT_EQ(list_dir(tmp.path()).size(), 4u);
}

TEST(Output, HolesOfSparseSourcesStayHoles) {
    gguf_test::TempDir tmp;
    const std::string input = tmp / "sparse.gguf";
    gguf_test::write_sparse_model(input, {{"a", {1000}}, {"big", {16 << 20}}, {"c", {999}}});
    gguf::SplitOptions o;
    o.max_tensors = 2;
    const auto vf = shard_of(input, o, 0);
    const std::string path = tmp / "out-00001-of-00002.gguf";
    auto out = gguf::OutputFile::create(path);
    auto stats = gguf::write_virtual_file(vf, out);
    out.publish();
    EXPECT_GT(stats.hole_bytes, uint64_t{32} << 20);
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), vf.size());
    EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, uint64_t{8} << 20) << "holes were written as data";

    // Dense writing gives the same bytes.
    gguf::WriteOptions dense;
    dense.preserve_holes = false;
    auto out2 = gguf::OutputFile::create(tmp / "dense.gguf");
    gguf::write_virtual_file(vf, out2, dense);
    out2.publish();
    EXPECT_EQ(gguf_test::sha256_file(path), gguf_test::sha256_file(tmp / "dense.gguf"));
}

TEST(Output, SourceTruncatedAfterPlanningIsDetectedByEveryMethod) {
    for (bool buffered : {false, true}) {
        for (bool holes : {false, true}) {
            gguf_test::TempDir tmp;
            const std::string input = tmp / "m.gguf";
            gguf_test::copy_file(fixture("kvzoo/original.gguf"), input);
            gguf::SplitOptions o;
            o.max_tensors = 7;
            const auto vf = shard_of(input, o, 6);  // the last shard: data at the end of the file
            ASSERT_EQ(::truncate(input.c_str(), 3525600 - 5000), 0);
            gguf::WriteOptions w;
            w.force_buffered = buffered;
            w.preserve_holes = holes;
            try {
                auto out = gguf::OutputFile::create(tmp / "x-00007-of-00007.gguf");
                gguf::write_virtual_file(vf, out, w);
                ADD_FAILURE() << "truncation not detected (buffered " << buffered << ", holes " << holes << ")";
            } catch (const gguf::Error& e) {
                EXPECT_EQ(e.code(), gguf::Code::Truncated) << e.what();
                EXPECT_NE(std::string(e.what()).find(input), std::string::npos) << e.what();
            }
            EXPECT_EQ(list_dir(tmp.path()), (std::vector<std::string>{"m.gguf"}));
        }
    }
}

TEST(Output, CancellationStopsAndRemovesTheTemporaryFile) {
    gguf_test::TempDir tmp;
    const auto vf = kvzoo_merged();
    volatile std::sig_atomic_t flag = 0;
    gguf::WriteOptions o;
    o.cancel = &flag;
    o.force_buffered = true;
    uint64_t seen = 0;
    o.progress = [&](uint64_t n) {
        seen += n;
        if (seen > 100000) flag = 1;
    };
    try {
        auto out = gguf::OutputFile::create(tmp / "merged.gguf");
        EXPECT_EQ(list_dir(tmp.path()).size(), 1u);
        gguf::write_virtual_file(vf, out, o);
        ADD_FAILURE() << "not cancelled";
    } catch (const gguf::Error& e) {
        EXPECT_EQ(e.code(), gguf::Code::Io);
        EXPECT_EQ(e.sys_errno(), EINTR);
    }
    EXPECT_TRUE(list_dir(tmp.path()).empty());
}

TEST(Output, PublishNeverReplacesAnExistingFile) {
    gguf_test::TempDir tmp;
    const std::string path = tmp / "merged.gguf";
    gguf_test::write_file(path, "precious");
    const auto vf = kvzoo_merged();
    {
        auto out = gguf::OutputFile::create(path);
        EXPECT_EQ(gguf::base_name(out.temp_path()).rfind(".merged.gguf.tmp-", 0), 0u) << out.temp_path();
        gguf::write_virtual_file(vf, out);
        try {
            out.publish();
            ADD_FAILURE() << "overwrote an existing file";
        } catch (const gguf::Error& e) {
            EXPECT_EQ(e.code(), gguf::Code::Exists);
            EXPECT_NE(std::string(e.what()).find("output file " + path + " already exists"), std::string::npos);
        }
    }
    EXPECT_EQ(gguf_test::read_file(path), "precious");
    EXPECT_EQ(list_dir(tmp.path()), (std::vector<std::string>{"merged.gguf"}));
    EXPECT_THROW(gguf::ensure_absent(path), gguf::Error);
    EXPECT_NO_THROW(gguf::ensure_absent(tmp / "other.gguf"));
}

// Every publish method refuses an existing final name and keeps it (ExclusiveRename is what
// file systems without RENAME_NOREPLACE and hard links get, issue 14.9), and publishes the exact
// bytes when the name is free. The probe picks RenameNoReplace on the test's local file system.
TEST(Output, EveryPublishMethodPublishesAndNeverReplaces) {
    gguf_test::TempDir tmp;
    EXPECT_EQ(gguf::probe_publish_method(tmp / "x.gguf"), gguf::PublishMethod::RenameNoReplace);
    EXPECT_EQ(list_dir(tmp.path()), std::vector<std::string>{});  // the probe files are gone
    const auto vf = kvzoo_merged();
    int n = 0;
    for (auto method : {gguf::PublishMethod::RenameNoReplace, gguf::PublishMethod::Link,
                        gguf::PublishMethod::ExclusiveRename}) {
        const std::string taken = tmp / ("taken" + std::to_string(n) + ".gguf");
        const std::string fresh = tmp / ("fresh" + std::to_string(n++) + ".gguf");
        gguf_test::write_file(taken, "precious");
        auto out = gguf::OutputFile::create(taken, method);
        gguf::write_virtual_file(vf, out);
        EXPECT_THROW(out.publish(), gguf::Error);
        EXPECT_EQ(gguf_test::read_file(taken), "precious");
        out.discard();
        auto ok = gguf::OutputFile::create(fresh, method);
        gguf::write_virtual_file(vf, ok);
        ok.publish();
        EXPECT_EQ(gguf_test::sha256_file(fresh), "188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f");
    }
    for (const auto& name : list_dir(tmp.path())) EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
}

TEST(Output, MissingDirectoryIsAnIoErrorNamingIt) {
    gguf_test::TempDir tmp;
    try {
        gguf::OutputFile::create(tmp / "no/such/dir/out.gguf");
        ADD_FAILURE() << "created a file in a missing directory";
    } catch (const gguf::Error& e) {
        EXPECT_EQ(e.code(), gguf::Code::Io);
        EXPECT_NE(std::string(e.what()).find("no/such/dir"), std::string::npos) << e.what();
    }
}

// ---- stale temporary files of killed runs ---------------------------------------------------------

TEST(Output, RemovesOnlyUnlockedTemporariesOfTheSameNameAndPattern) {
    gguf_test::TempDir tmp;
    const std::string final_path = tmp / "merged.gguf";
    const auto vf = kvzoo_merged();
    // A live writer for the same name, already committed (its descriptor is closed: the lock must
    // survive that), and one still writing.
    auto committed = gguf::OutputFile::create(final_path);
    gguf::write_virtual_file(vf, committed);
    committed.commit();
    auto writing = gguf::OutputFile::create(final_path);
    // Left by killed runs: these two must go.
    gguf_test::write_file(tmp / ".merged.gguf.tmp-Ab12cD", "stale");
    gguf_test::write_file(tmp / ".merged.gguf.tmp-zzzzzz", "stale too");
    // Look-alikes and things that are not ours: all must stay.
    const std::vector<std::string> keep = {
        ".merged.gguf.tmp-abc",      ".merged.gguf.tmp-abcdefg", ".merged.gguf.tmp-ab-def",
        "merged.gguf.tmp-abcdef",    ".other.gguf.tmp-abcdef",   ".merged.gguf.tmp-abcde",
        ".merged.gguf.tmp-link00",   ".merged.gguf.tmp-dir000",  ".merged.gguf.tmp-held00",
        "target"};
    for (const auto& n : keep) {
        if (n == ".merged.gguf.tmp-link00" || n == ".merged.gguf.tmp-dir000") continue;
        gguf_test::write_file(tmp / n, "keep");
    }
    ASSERT_EQ(::symlink((tmp / "target").c_str(), (tmp / ".merged.gguf.tmp-link00").c_str()), 0);
    ASSERT_EQ(::mkdir((tmp / ".merged.gguf.tmp-dir000").c_str(), 0755), 0);
    // Another writer's lock (a separate open file description conflicts even in this process).
    int held = ::open((tmp / ".merged.gguf.tmp-held00").c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(held, 0);
    ASSERT_EQ(::flock(held, LOCK_EX), 0);

    std::vector<std::string> removed = gguf::remove_stale_temporaries(final_path);
    std::sort(removed.begin(), removed.end());
    EXPECT_EQ(removed, (std::vector<std::string>{tmp / ".merged.gguf.tmp-Ab12cD", tmp / ".merged.gguf.tmp-zzzzzz"}));
    ::close(held);
    for (const auto& n : keep) EXPECT_EQ(::access((tmp / n).c_str(), F_OK), 0) << n;
    EXPECT_EQ(::access(committed.temp_path().c_str(), F_OK), 0) << "removed a committed, unpublished file";
    EXPECT_EQ(::access(writing.temp_path().c_str(), F_OK), 0) << "removed a file being written";
    EXPECT_EQ(gguf_test::read_file(tmp / "target"), "keep");

    // The live writers are unharmed: one publishes, the other is refused and removes its file.
    committed.publish();
    EXPECT_EQ(gguf_test::sha256_file(final_path), "188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f");
    gguf::write_virtual_file(vf, writing);
    EXPECT_THROW(writing.publish(), gguf::Error);
    const std::string writing_temp = writing.temp_path();
    writing.discard();
    EXPECT_EQ(::access(writing_temp.c_str(), F_OK), -1);
    // The file whose lock was released above is now stale like the others.
    EXPECT_EQ(gguf::remove_stale_temporaries(final_path), std::vector<std::string>{tmp / ".merged.gguf.tmp-held00"});
    EXPECT_TRUE(gguf::remove_stale_temporaries(tmp / "no-such-dir/x.gguf").empty());
}

TEST(Output, TemporaryOfAProcessKilledWithSigkillIsRemovedOnlyAfterItDied) {
    gguf_test::TempDir tmp;
    const std::string final_path = tmp / "m.gguf";
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::close(ready[0]);
        auto out = gguf::OutputFile::create(final_path);  // locked while this process lives
        char ok = 1;
        if (::write(ready[1], &ok, 1) != 1) ::_exit(2);
        for (;;) ::pause();
    }
    ::close(ready[1]);
    char ok = 0;
    ASSERT_EQ(::read(ready[0], &ok, 1), 1);
    ::close(ready[0]);
    EXPECT_TRUE(gguf::remove_stale_temporaries(final_path).empty()) << "removed the file of a live process";
    EXPECT_EQ(list_dir(tmp.path()).size(), 1u);
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_EQ(list_dir(tmp.path()).size(), 1u) << "kill -9 leaves the temporary file";
    EXPECT_EQ(gguf::remove_stale_temporaries(final_path).size(), 1u);
    EXPECT_TRUE(list_dir(tmp.path()).empty());
}

TEST(Output, TemporaryOfAnotherUserIsKept) {
    if (::geteuid() != 0) GTEST_SKIP() << "chown to another user needs root";
    gguf_test::TempDir tmp;
    gguf_test::write_file(tmp / ".m.gguf.tmp-abcdef", "theirs");
    ASSERT_EQ(::chown((tmp / ".m.gguf.tmp-abcdef").c_str(), 65534, 65534), 0);
    EXPECT_TRUE(gguf::remove_stale_temporaries(tmp / "m.gguf").empty());
    EXPECT_EQ(gguf_test::read_file(tmp / ".m.gguf.tmp-abcdef"), "theirs");
}

}  // namespace

namespace {

// A resumed write (merge URL): bytes before resume_from are neither written nor read, the
// rest completes the file; resume points come every durable_step bytes; keep() leaves the
// temporary file for OutputFile::resume, which refuses a file it did not name.
TEST(Output, ResumedWriteCompletesAKeptTemporaryWithDurablePoints) {
    gguf_test::TempDir tmp;
    const auto vf = kvzoo_merged();
    const std::string path = tmp / "m.gguf";
    const uint64_t resume = vf.size() / 3 + 5;  // inside a Source extent
    std::string temp;
    {
        auto out = gguf::OutputFile::create(path);
        temp = out.temp_path();
        // The first part as an earlier run left it: the right bytes.
        std::string head(resume, '\0');
        ASSERT_EQ(vf.read(0, resume, head.data()), static_cast<ssize_t>(resume));
        ASSERT_EQ(::pwrite(out.fd(), head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
        out.keep();
    }
    ASSERT_TRUE(std::filesystem::exists(temp));
    EXPECT_THROW(gguf::OutputFile::resume(path, tmp / "other"), gguf::Error);
    auto out = gguf::OutputFile::resume(path, temp);
    gguf::WriteOptions o;
    o.resume_from = resume;
    o.durable_step = 256 << 10;
    std::vector<uint64_t> points;
    o.durable = [&](uint64_t end) { points.push_back(end); };
    uint64_t reported = 0;
    o.progress = [&](uint64_t n) { reported += n; };
    auto stats = gguf::write_virtual_file(vf, out, o);
    out.publish();
    EXPECT_EQ(gguf_test::sha256_file(path), "188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f");
    EXPECT_EQ(reported, vf.size());
    // Only the bytes after the resume point were written.
    EXPECT_EQ(stats.header_bytes + stats.zero_bytes + stats.kernel_bytes + stats.buffered_bytes + stats.hole_bytes,
              vf.size() - resume);
    ASSERT_FALSE(points.empty());
    EXPECT_GE(points.front(), resume + o.durable_step);
    for (size_t i = 1; i < points.size(); ++i) EXPECT_GE(points[i] - points[i - 1], o.durable_step);
    EXPECT_LE(points.back(), vf.size());
    EXPECT_EQ(list_dir(tmp.path()), std::vector<std::string>{"m.gguf"});
}

}  // namespace
