// Real FUSE mounts of the gguf-mount binary: the mounted bytes against the reference merges
// made with llama.cpp's gguf-split, the read-only semantics, bad input, signals and shard I/O
// errors. Every test mounts its own temporary directory, and TearDown always unmounts and reaps
// the daemon. Skipped when /dev/fuse or fusermount3 is unavailable.
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "gguf/model/merge_plan.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using mount_test::AlignedBuffer;
using mount_test::Fd;
using mount_test::find_mount;
using mount_test::lines_with;
using mount_test::list_dir;

/// All bytes of a virtual file, read through VirtualFile::read (the planner's view).
std::string render(const gguf::VirtualFile& vf) {
    std::string out(vf.size(), '\0');
    EXPECT_EQ(vf.read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    return out;
}

/// The planner's bytes for the set whose first shard is `first_shard`.
std::string planned_bytes(const std::string& first_shard) {
    return render(gguf::open_merged(gguf::SplitSet::open(first_shard)));
}

/// "kvzoo-00001-of-00007.gguf" -> "kvzoo.gguf".
std::string merged_name_of(const std::string& shard_path) {
    auto n = gguf::parse_shard_name(gguf::base_name(shard_path));
    return n ? n->prefix + ".gguf" : "";
}

/// `count` preads at random offsets and lengths (half of them straddling an extent boundary of
/// `layout`, some past EOF) through `fd`, each compared with `whole`. `align` > 1 rounds
/// offsets, lengths and the buffer to that size (for O_DIRECT).
void check_random_preads(int fd, const std::string& whole, const gguf::VirtualLayout& layout, int count, uint64_t seed,
                         size_t align = 1) {
    std::mt19937_64 rng(seed);
    const auto& ext = layout.extents();
    const size_t max_len = 300000;
    AlignedBuffer buf(max_len + 4096);
    ASSERT_TRUE(buf.get());
    for (int i = 0; i < count; ++i) {
        uint64_t off;
        if (i % 2 == 0 && !ext.empty()) {
            const auto& e = ext[rng() % ext.size()];
            uint64_t back = rng() % 64;
            off = e.start > back ? e.start - back : 0;
        } else {
            off = rng() % (whole.size() + 100);
        }
        size_t len = static_cast<size_t>(rng() % 70000) + 1;
        if (i % 50 == 0) len = static_cast<size_t>(rng() % max_len) + 1;  // a few large ones (> 128 KiB)
        off -= off % align;
        len = (len + align - 1) / align * align;
        std::memset(buf.get(), 0x55, len);
        ssize_t n = ::pread(fd, buf.get(), len, static_cast<off_t>(off));
        size_t expect = off >= whole.size() ? 0 : std::min<size_t>(len, whole.size() - off);
        ASSERT_EQ(n, static_cast<ssize_t>(expect)) << "pread offset " << off << " len " << len << ": "
                                                   << (n < 0 ? std::strerror(errno) : "");
        ASSERT_EQ(std::memcmp(buf.get(), whole.data() + std::min<uint64_t>(off, whole.size()), expect), 0)
            << "pread offset " << off << " len " << len;
    }
}

/// Real mounts of ROOT/src on ROOT/mnt (mount_fixture.hpp).
class MountTest : public mount_test::MountFixture {};

// ---- every golden case, served and compared ------------------------------------------------

class ManifestMount : public MountTest, public ::testing::WithParamInterface<gguf_test::ManifestCase> {};

TEST_P(ManifestMount, ServesTheReferenceMergeReadOnly) {
    const auto& c = GetParam();
    mount_test::copy_shards(c, src_);
    const std::string first = src_ + "/" + gguf::base_name(c.shards.front());
    const std::string name = merged_name_of(first);
    const auto vf = gguf::open_merged(gguf::SplitSet::open(first));
    const std::string whole = render(vf);
    ASSERT_EQ(gguf_test::sha256_hex(whole), c.merged_sha256);

    ASSERT_TRUE(mount());
    const std::string path = mnt_ + "/" + name;

    // The mount table shows the file system type and SOURCE.
    auto entry = find_mount(mnt_);
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->fstype, "fuse.gguf-mount");
    EXPECT_EQ(entry->source, src_);
    EXPECT_EQ(entry->mount_options.rfind("ro", 0), 0u) << entry->mount_options;

    // readdir: exactly the merged file.
    EXPECT_EQ(list_dir(mnt_), std::vector<std::string>{name});

    // Attributes.
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << std::strerror(errno);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0444u);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), c.merged_size);
    EXPECT_EQ(st.st_uid, ::getuid());
    EXPECT_EQ(st.st_ino, 2u);
    struct stat root_st {};
    ASSERT_EQ(::stat(mnt_.c_str(), &root_st), 0);
    EXPECT_EQ(root_st.st_mode & 07777, 0555u);

    // Random preads first, while the page cache is cold, so they go through the daemon.
    {
        Fd fd{::open(path.c_str(), O_RDONLY)};
        ASSERT_GE(fd.fd, 0) << std::strerror(errno);
        check_random_preads(fd.fd, whole, vf.layout(), 2000, 1234);
    }
    // O_DIRECT: every read reaches the daemon.
    {
        Fd fd{::open(path.c_str(), O_RDONLY | O_DIRECT)};
        ASSERT_GE(fd.fd, 0) << "O_DIRECT open: " << std::strerror(errno);
        check_random_preads(fd.fd, whole, vf.layout(), 200, 99, 4096);
    }

    // The whole file: sha256 equals the reference merge.
    EXPECT_EQ(gguf_test::sha256_file(path), c.merged_sha256);

    // mmap(MAP_SHARED), as llama.cpp maps models: same bytes as the planner.
    {
        Fd fd{::open(path.c_str(), O_RDONLY)};
        ASSERT_GE(fd.fd, 0);
        void* map = ::mmap(nullptr, whole.size(), PROT_READ, MAP_SHARED, fd.fd, 0);
        ASSERT_NE(map, MAP_FAILED) << "MAP_SHARED mmap: " << std::strerror(errno);
        EXPECT_EQ(std::memcmp(map, whole.data(), whole.size()), 0);
        ::munmap(map, whole.size());
    }

    // statfs.
    struct statfs sfs {};
    ASSERT_EQ(::statfs(mnt_.c_str(), &sfs), 0) << std::strerror(errno);
    EXPECT_EQ(static_cast<unsigned long>(sfs.f_type), static_cast<unsigned long>(FUSE_SUPER_MAGIC));
    EXPECT_EQ(static_cast<uint64_t>(sfs.f_blocks), (c.merged_size + 4095) / 4096);

    // Read-only: opens for writing and every modification fail with EROFS.
    errno = 0;
    EXPECT_EQ(::open(path.c_str(), O_WRONLY), -1);
    EXPECT_EQ(errno, EROFS);
    errno = 0;
    EXPECT_EQ(::open(path.c_str(), O_RDWR), -1);
    EXPECT_EQ(errno, EROFS);
    errno = 0;
    EXPECT_EQ(::open((mnt_ + "/new.gguf").c_str(), O_WRONLY | O_CREAT, 0644), -1);
    EXPECT_EQ(errno, EROFS);
    errno = 0;
    EXPECT_EQ(::mkdir((mnt_ + "/d").c_str(), 0755), -1);
    EXPECT_EQ(errno, EROFS);
    errno = 0;
    EXPECT_EQ(::unlink(path.c_str()), -1);
    EXPECT_EQ(errno, EROFS);
    errno = 0;
    EXPECT_EQ(::truncate(path.c_str(), 0), -1);
    EXPECT_EQ(errno, EROFS);

    // A missing name, twice (the second answer comes from the negative dentry cache).
    for (int i = 0; i < 2; ++i) {
        struct stat missing {};
        errno = 0;
        EXPECT_EQ(::stat((mnt_ + "/missing.gguf").c_str(), &missing), -1);
        EXPECT_EQ(errno, ENOENT);
    }

    // fusermount3 -u ends the daemon with status 0.
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_FALSE(find_mount(mnt_));
    EXPECT_TRUE(lines_with(log(), "warn").empty()) << log();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ManifestMount, ::testing::ValuesIn(gguf_test::manifest_cases()),
                         [](const auto& tp) {
                             std::string n = tp.param.id;
                             for (auto& ch : n) {
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             }
                             return n;
                         });

// ---- SOURCE variants --------------------------------------------------------------------------

TEST_F(MountTest, SourceAsFirstShardServesOnlyThatSet) {
    copy_case_shards("kvzoo/t7", src_);
    copy_case_shards("notensors/t7", src_);
    const std::string first = src_ + "/kvzoo-00001-of-00007.gguf";
    ASSERT_TRUE(mount({}, first));
    EXPECT_EQ(list_dir(mnt_), std::vector<std::string>{"kvzoo.gguf"});
    auto entry = find_mount(mnt_);
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->source, first);
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), gguf_test::sha256_file(fixture("kvzoo/merged-reference.gguf")));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(MountTest, SourcePathWithCommaAndSpaceIsKeptAsTheFsname) {
    const std::string odd = root_ + "/my models, v2";
    ASSERT_EQ(::mkdir(odd.c_str(), 0755), 0);
    copy_case_shards("notensors/t7", odd);
    ASSERT_TRUE(mount({}, odd));
    auto entry = find_mount(mnt_);
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->source, odd);  // the comma was escaped for libfuse's option parser
    EXPECT_EQ(list_dir(mnt_), std::vector<std::string>{"notensors.gguf"});
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(MountTest, TwoSetsWithTheSameMergedNameServeTheFirstAndReportTheOther) {
    copy_case_shards("kvzoo/t7", src_);       // kvzoo-0000k-of-00007
    copy_case_shards("kvzoo/t7-ntfs", src_);  // kvzoo-0000k-of-00008
    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_), std::vector<std::string>{"kvzoo.gguf"});
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), gguf_test::sha256_file(fixture("kvzoo/merged-reference.gguf")));
    EXPECT_EQ(unmount_and_wait(), 0);
    auto lines = lines_with(log(), "kvzoo-00001-of-00008.gguf");
    ASSERT_EQ(lines.size(), 1u) << log();
    EXPECT_NE(lines[0].find("already served"), std::string::npos) << lines[0];
}

// ---- bad input ----------------------------------------------------------------------------------

enum class Bad { MissingMiddleShard, SplitCountDisagrees, TruncatedShard, NotGguf };

std::string bad_name(Bad b) {
    switch (b) {
        case Bad::MissingMiddleShard: return "MissingMiddleShard";
        case Bad::SplitCountDisagrees: return "SplitCountDisagrees";
        case Bad::TruncatedShard: return "TruncatedShard";
        case Bad::NotGguf: return "NotGguf";
    }
    return "?";
}

/// Rewrites the u16 value of split.count in a shard. The key is located by its serialized
/// form (u64 length 11, "split.count", value type 2 = u16), which occurs exactly once, and the
/// result is checked with the strict reader.
void set_split_count(const std::string& path, uint16_t value) {
    std::string bytes = gguf_test::read_file(path);
    std::string pattern("\x0b\0\0\0\0\0\0\0split.count\x02\0\0\0", 8 + 11 + 4);
    size_t pos = bytes.find(pattern);
    ASSERT_NE(pos, std::string::npos) << path;
    ASSERT_EQ(bytes.find(pattern, pos + 1), std::string::npos) << path;
    bytes[pos + pattern.size()] = static_cast<char>(value & 0xff);
    bytes[pos + pattern.size() + 1] = static_cast<char>(value >> 8);
    gguf_test::write_file(path, bytes);
    gguf::Header h = gguf::read_header(path);
    const gguf::KeyValue* kv = h.find("split.count");
    ASSERT_NE(kv, nullptr);
    ASSERT_EQ(kv->value.as_int(), value);
}

/// Builds a bad kvzoo-like set in `dir` and returns {file the error must name, phrase in it}.
std::pair<std::string, std::string> make_bad_set(Bad kind, const std::string& dir) {
    auto copy_kvzoo = [&] { mount_test::copy_kvzoo(dir); };
    switch (kind) {
        case Bad::MissingMiddleShard:
            copy_kvzoo();
            EXPECT_EQ(::unlink((dir + "/kvzoo-00003-of-00007.gguf").c_str()), 0);
            return {"kvzoo-00003-of-00007.gguf", "missing"};
        case Bad::SplitCountDisagrees:
            copy_kvzoo();
            set_split_count(dir + "/kvzoo-00002-of-00007.gguf", 9);
            return {"kvzoo-00002-of-00007.gguf", "split.count"};
        case Bad::TruncatedShard: {
            copy_kvzoo();
            std::string p = dir + "/kvzoo-00005-of-00007.gguf";
            struct stat st {};
            EXPECT_EQ(::stat(p.c_str(), &st), 0);
            EXPECT_EQ(::truncate(p.c_str(), st.st_size / 2), 0);
            return {"kvzoo-00005-of-00007.gguf", ""};
        }
        case Bad::NotGguf:
            gguf_test::write_file(dir + "/junk-00001-of-00002.gguf", "this is not a GGUF file\n");
            gguf_test::write_file(dir + "/junk-00002-of-00002.gguf", "neither is this one\n");
            return {"junk-00001-of-00002.gguf", ""};
    }
    return {};
}

class BadInput : public MountTest, public ::testing::WithParamInterface<Bad> {};

// A directory SOURCE is a model directory watched for changes: it is mounted even when nothing
// in it is complete yet; the bad set is not shown and its reason is logged once.
TEST_P(BadInput, OnlyBadSetsMountAnEmptyDirectoryAndLogTheReasonOnce) {
    auto [bad_file, phrase] = make_bad_set(GetParam(), src_);
    ASSERT_TRUE(mount());
    EXPECT_TRUE(list_dir(mnt_).empty());
    // Several rescan periods: the problem must not be logged again.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    EXPECT_TRUE(list_dir(mnt_).empty());
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    auto lines = lines_with(log(), bad_file);
    ASSERT_EQ(lines.size(), 1u) << "expected one line naming " << bad_file << ":\n" << log();
    EXPECT_NE(lines[0].find(phrase), std::string::npos) << lines[0];
    // A set that lacks a shard is most likely still being downloaded: said, not as an error
    // (issue 25.10); a set that is wrong as it is, is an error.
    const char* level = GetParam() == Bad::MissingMiddleShard ? ": info: " : ": error: ";
    EXPECT_NE(lines[0].find(level), std::string::npos) << lines[0];
    EXPECT_EQ(lines_with(log(), "nothing to serve yet").size(), 1u) << log();
}

// A first-shard SOURCE names one set: a bad one is an error, nothing is mounted.
TEST_P(BadInput, BadFirstShardSourceExitsNonZeroWithoutMounting) {
    auto [bad_file, phrase] = make_bad_set(GetParam(), src_);
    const std::string first = src_ + "/" + (GetParam() == Bad::NotGguf ? "junk-00001-of-00002.gguf"
                                                                        : "kvzoo-00001-of-00007.gguf");
    ASSERT_TRUE(start({}, first));
    auto code = daemon_.wait_exit();
    ASSERT_TRUE(code) << "gguf-mount did not exit; mounted: " << bool(find_mount(mnt_));
    EXPECT_EQ(*code, 1) << log();
    EXPECT_FALSE(find_mount(mnt_));
    auto lines = lines_with(log(), bad_file);
    ASSERT_GE(lines.size(), 1u) << "expected a line naming " << bad_file << ":\n" << log();
    EXPECT_NE(lines[0].find(phrase), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("error"), std::string::npos) << lines[0];
}

TEST_P(BadInput, GoodSetIsServedNextToABadOne) {
    auto [bad_file, phrase] = make_bad_set(GetParam(), src_);
    copy_case_shards("notensors/t7", src_);
    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_), std::vector<std::string>{"notensors.gguf"});
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/notensors.gguf"),
              gguf_test::sha256_file(fixture("notensors/merged-reference.gguf")));
    EXPECT_EQ(unmount_and_wait(), 0);
    auto lines = lines_with(log(), bad_file);
    ASSERT_EQ(lines.size(), 1u) << log();
    EXPECT_NE(lines[0].find(phrase), std::string::npos) << lines[0];
}

INSTANTIATE_TEST_SUITE_P(Kinds, BadInput,
                         ::testing::Values(Bad::MissingMiddleShard, Bad::SplitCountDisagrees, Bad::TruncatedShard,
                                           Bad::NotGguf),
                         [](const auto& tp) { return bad_name(tp.param); });

TEST_F(MountTest, MissingSourceIsOneLineAndExitOne) {
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), root_ + "/nope", mnt_, "-f"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(lines_with(r.err, root_ + "/nope").size(), 1u) << r.err;
    EXPECT_FALSE(find_mount(mnt_));
}

TEST_F(MountTest, MountPointThatIsNotADirectoryIsOneLineAndExitOne) {
    copy_case_shards("notensors/t7", src_);
    gguf_test::write_file(root_ + "/file", "x");
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), src_, root_ + "/file", "-f"});
    EXPECT_EQ(r.exit_code, 1);
    auto lines = lines_with(r.err, root_ + "/file");
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_NE(lines[0].find("not a directory"), std::string::npos);
}

TEST_F(MountTest, UnknownOptionIsAUsageError) {
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), src_, mnt_, "--no-such-option"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("--help"), std::string::npos) << r.err;
}

// ---- lifecycle --------------------------------------------------------------------------------

// SIGHUP does not unmount: it asks for a rescan (model_dir_test.cpp checks what it does).
TEST_F(MountTest, SigtermAndSigintUnmountCleanlyAndExitZero) {
    copy_case_shards("notensors/t7", src_);
    for (int sig : {SIGTERM, SIGINT}) {
        ASSERT_TRUE(mount()) << strsignal(sig);
        EXPECT_EQ(list_dir(mnt_), std::vector<std::string>{"notensors.gguf"});
        ASSERT_EQ(::kill(daemon_.pid(), sig), 0);
        auto code = daemon_.wait_exit();
        ASSERT_TRUE(code) << "daemon did not exit after " << strsignal(sig);
        EXPECT_EQ(*code, 0) << strsignal(sig) << "\n" << log();
        EXPECT_FALSE(find_mount(mnt_)) << strsignal(sig);
    }
}

TEST_F(MountTest, SingleThreadModeServesTheSameBytes) {
    copy_case_shards("kvzoo/t7", src_);
    ASSERT_TRUE(mount({"-s", "--readahead-kb", "0"}));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), gguf_test::sha256_file(fixture("kvzoo/merged-reference.gguf")));
    EXPECT_EQ(unmount_and_wait(), 0);
}

TEST_F(MountTest, ReadaheadWindowIsRaised) {
    if (::geteuid() != 0) GTEST_SKIP() << "writing /sys/class/bdi/*/read_ahead_kb needs root";
    copy_case_shards("notensors/t7", src_);
    ASSERT_TRUE(mount({"--readahead-kb", "2048"}));
    auto entry = find_mount(mnt_);
    ASSERT_TRUE(entry);
    std::string path = "/sys/class/bdi/" + std::to_string(entry->major) + ":" + std::to_string(entry->minor) +
                       "/read_ahead_kb";
    std::string value;
    // The daemon sets it right after the FUSE INIT handshake; allow it a moment.
    for (int i = 0; i < 200 && value != "2048"; ++i) {
        std::ifstream in(path);
        std::getline(in, value);
        if (value != "2048") std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(value, "2048") << path;
    EXPECT_NE(entry->super_options.find("max_read=1048576"), std::string::npos) << entry->super_options;
    EXPECT_EQ(unmount_and_wait(), 0);
}

// The kernel's defaults (12 queued readahead requests, congested from 9) make it throw away
// part of every 4 MiB readahead window (fs/ops.hpp kMaxBackground); the daemon raises both in
// its INIT reply. The values are read back from the fusectl file system (mounted here for the
// test if the machine has not mounted it, and unmounted again).
TEST_F(MountTest, BackgroundRequestLimitsAreRaised) {
    mount_test::Fusectl fusectl;
    std::string why;
    if (!fusectl.ensure(root_ + "/fusectl", &why)) GTEST_SKIP() << why;
    copy_case_shards("notensors/t7", src_);
    ASSERT_TRUE(mount());
    auto entry = find_mount(mnt_);
    ASSERT_TRUE(entry);
    std::string max_background, congestion_threshold, error;
    ASSERT_TRUE(mount_test::read_first_line(fusectl.file(*entry, "max_background"), &max_background, &error)) << error;
    ASSERT_TRUE(mount_test::read_first_line(fusectl.file(*entry, "congestion_threshold"), &congestion_threshold,
                                            &error))
        << error;
    EXPECT_EQ(max_background, "64");
    EXPECT_EQ(congestion_threshold, "48");
    EXPECT_EQ(unmount_and_wait(), 0);
}

TEST_F(MountTest, DaemonizedViaMountHelperNameWithFstabOptions) {
    copy_case_shards("kvzoo/t7", src_);
    const std::string helper = root_ + "/mount.gguf-mount";
    ASSERT_EQ(::symlink(gguf_test::gguf_mount_binary().c_str(), helper.c_str()), 0);
    // What mount(8) runs for "SRC MNT gguf-mount nofail,_netdev,x-systemd.automount,allow_other 0 0"
    // (and a log file: a host without a syslog daemon would warn otherwise).
    const std::string log_file = root_ + "/fstab-mount.log";
    auto r = gguf_test::run({helper, src_, mnt_, "-o",
                             "rw,nofail,_netdev,noauto,defaults,x-systemd.automount,comment=test,relatime,nodev,allow_other,"
                             "log_file=" + log_file,
                             "-n", "-s"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto entry = find_mount(mnt_);
    ASSERT_TRUE(entry) << r.err;
    EXPECT_EQ(entry->fstype, "fuse.gguf-mount");
    EXPECT_EQ(entry->source, src_);
    EXPECT_NE(entry->super_options.find("allow_other"), std::string::npos) << entry->super_options;
    // Every option above is legitimate in an fstab line: none may cause a warning, and "rw"
    // (which mount(8) adds whenever "ro" is absent) never makes the mount writable.
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
    EXPECT_EQ(entry->mount_options.rfind("ro,", 0), 0u) << entry->mount_options;
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), gguf_test::sha256_file(fixture("kvzoo/merged-reference.gguf")));
    EXPECT_NE(gguf_test::read_file(log_file).find("info: serving kvzoo.gguf"), std::string::npos);

    // The daemon is no child of ours: find it by its unique mount point argument.
    auto pids = mount_test::daemon_pids_with_argument(mnt_);
    ASSERT_EQ(pids.size(), 1u);
    ASSERT_TRUE(mount_test::unmount(mnt_));
    if (!mount_test::wait_gone(pids[0])) {
        ::kill(pids[0], SIGKILL);
        ADD_FAILURE() << "daemon " << pids[0] << " still running after fusermount3 -u";
    }
}

// ---- shard I/O errors while mounted ------------------------------------------------------------

TEST_F(MountTest, ShardTruncatedWhileMountedGivesEioAndTheDaemonKeepsServing) {
    copy_case_shards("kvzoo/t7", src_);
    const std::string first = src_ + "/kvzoo-00001-of-00007.gguf";
    const auto vf = gguf::open_merged(gguf::SplitSet::open(first));
    const std::string whole = render(vf);
    // The last extent served from shard 5 (source index 4).
    const gguf::Extent* victim = nullptr;
    for (const auto& e : vf.layout().extents()) {
        if (e.kind == gguf::Extent::Kind::Source && e.source == 4) victim = &e;
    }
    ASSERT_NE(victim, nullptr);
    ASSERT_TRUE(mount());
    const std::string path = mnt_ + "/kvzoo.gguf";

    // Opened first: once the live-update watcher sees the truncated shard, the set is no longer
    // shown and a later open fails (ENOENT); open files keep the set as it was.
    Fd fd{::open(path.c_str(), O_RDONLY)};
    ASSERT_GE(fd.fd, 0);
    Fd dfd{::open(path.c_str(), O_RDONLY | O_DIRECT)};
    ASSERT_GE(dfd.fd, 0);
    // Truncate shard 5 so that the victim extent is entirely past its end. Nothing of the
    // merged file has been read yet, so no page of it is cached.
    const std::string shard5 = src_ + "/kvzoo-00005-of-00007.gguf";
    ASSERT_EQ(::truncate(shard5.c_str(), static_cast<off_t>(victim->source_offset)), 0);

    const uint64_t bad_off = (victim->start + victim->length / 2) & ~uint64_t{4095};
    char buf[4096];
    errno = 0;
    EXPECT_EQ(::pread(fd.fd, buf, sizeof buf, static_cast<off_t>(bad_off)), -1);
    EXPECT_EQ(errno, EIO);
    // Many more failing reads (O_DIRECT: each one reaches the daemon) are logged only a few times.
    {
        AlignedBuffer abuf(4096);
        ASSERT_TRUE(abuf.get());
        for (int i = 0; i < 30; ++i) {
            errno = 0;
            EXPECT_EQ(::pread(dfd.fd, abuf.get(), 4096, static_cast<off_t>(bad_off)), -1);
            EXPECT_EQ(errno, EIO);
        }
        dfd.close();
    }

    // The daemon still serves: the header and the other shards read fine.
    char head[4096];
    ASSERT_EQ(::pread(fd.fd, head, sizeof head, 0), static_cast<ssize_t>(sizeof head)) << std::strerror(errno);
    EXPECT_EQ(std::memcmp(head, whole.data(), sizeof head), 0);
    // And answers: the set is shown until the watcher has seen the truncated shard, then not
    // (how soon depends on the machine: under a sanitizer it had often seen it by now).
    EXPECT_TRUE(mount_test::time_until([&] { return list_dir(mnt_).empty(); }, std::chrono::seconds(10)).has_value())
        << "still listed: " << log();
    fd.close();

    EXPECT_EQ(unmount_and_wait(), 0) << log();
    auto warnings = lines_with(log(), "kvzoo-00005-of-00007.gguf: read of");
    EXPECT_GE(warnings.size(), 1u) << log();
    EXPECT_LE(warnings.size(), 5u) << "warnings are not rate limited:\n" << log();
    EXPECT_EQ(lines_with(log(), "more shard read errors were not logged").size(), 1u) << log();
    if (!warnings.empty()) {
        EXPECT_NE(warnings[0].find("warn"), std::string::npos) << warnings[0];
        EXPECT_NE(warnings[0].find("EIO"), std::string::npos) << warnings[0];
    }
}

}  // namespace
