// The GoogleTest fixture every mount test derives from, and the small helpers they share:
// a temporary ROOT with SOURCE and MNT directories, starting gguf-mount on them and waiting for
// the mount, copying fixture shards, descriptors and O_DIRECT buffers that clean up after
// themselves, and chunked reads checked against the expected bytes. TearDown always unmounts
// and reaps the daemon the test started (and no other process), also when the test failed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "mount/mount_harness.hpp"
#include "support/support.hpp"

namespace mount_test {

/// The README's promise: a change in SOURCE shows in the mount within two seconds.
inline constexpr milliseconds kLiveUpdateLimit{2000};

/// sha256 of tests/fixtures/kvzoo/merged-reference.gguf (gguf-split --merge of kvzoo/t7).
inline constexpr const char* kKvzooMergedSha256 = "188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f";

/// An open file descriptor, closed on destruction. Aggregate: `Fd fd{::open(...)}`.
struct Fd {
    int fd = -1;
    ~Fd() { close(); }
    /// Closes now (idempotent): an open descriptor keeps the mount busy, so fusermount3 -u fails.
    void close();
};

/// A heap buffer of `size` bytes aligned to 4096, as O_DIRECT reads need. get() is nullptr if
/// the allocation failed.
class AlignedBuffer {
public:
    explicit AlignedBuffer(size_t size);
    char* get() const { return data_.get(); }

private:
    std::unique_ptr<char, decltype(&std::free)> data_{nullptr, &std::free};
};

/// The lines of `text` (split on '\n') that contain `needle`, in order.
std::vector<std::string> lines_with(const std::string& text, const std::string& needle);

/// Unmounts `mnt` if something is mounted there and waits for every process with `mnt` in its
/// command line (a daemonized mount is no child of the test); SIGKILLs those PIDs (all started
/// by the test) after kTimeout. For the TearDown of tests that daemonize.
void clean_up_daemonized_mount(const std::string& mnt);

/// Polls `done` every 10 ms; returns how long it took to become true, or nullopt once `limit`
/// has passed.
std::optional<milliseconds> time_until(const std::function<bool()>& done, milliseconds limit = std::chrono::seconds(5));

/// True when `path` exists (stat(2) succeeds, following links).
bool exists(const std::string& path);

/// Name of shard `i` of an `n`-shard kvzoo set: kvzoo_shard(3) == "kvzoo-00003-of-00007.gguf".
std::string kvzoo_shard(int i, int n = 7);

/// Copies the 7 shards of tests/fixtures/kvzoo/t7 into the existing directory `dir`, all but
/// shard number `skip` (1-based; 0 copies all). Fails the current test on I/O errors.
void copy_kvzoo(const std::string& dir, int skip = 0);

/// The case `id` ("kvzoo/t7") of tests/fixtures/MANIFEST.json, or nullopt if there is none.
std::optional<gguf_test::ManifestCase> manifest_case(const std::string& id);

/// Copies every shard of manifest case `c` into `dir`, under its own base name.
void copy_shards(const gguf_test::ManifestCase& c, const std::string& dir);

/// Writes a dense model (support/dense_model.hpp: pseudo-random bytes from `seed`) of
/// `tensor_count` F32 tensors "blk.I.weight", tensor I holding elements(I) floats, in a scratch
/// directory, and splits it with `gguf-mount split --split-max-tensors tensors_per_shard` into
/// `out_prefix`-0000K-of-0000N.gguf. Returns the shard paths in order; fails the current test
/// (and returns what exists) if the model cannot be written or split.
std::vector<std::string> split_dense_model(int tensor_count, const std::function<int64_t(int)>& elements,
                                           int tensors_per_shard, uint64_t seed, const std::string& out_prefix);

/// Outcome of read_in_chunks(): every chunk is exact, an error, or wrong.
struct ChunkTally {
    size_t ok = 0, errors = 0, wrong = 0;
    std::vector<uint64_t> error_offsets;  // offsets of the chunks whose pread failed
    std::string first_wrong;              // the first wrong chunk, or an errno other than EIO
};

/// Reads [0, whole.size()) of `fd` in `chunk`-byte preads (chunk a multiple of 4096, so `fd`
/// may be O_DIRECT). A chunk is ok when it equals `whole` there, an error when pread fails
/// (errno recorded in first_wrong if it is not EIO), wrong otherwise (a short read is wrong).
ChunkTally read_in_chunks(int fd, const std::string& whole, size_t chunk);

/// as_user()'s results that are not an errno.
inline constexpr int kDropFailed = -1000;
inline constexpr int kTimedOut = -1001;

/// Runs `fn` in a forked child whose uid and gid are `uid`/`gid`, with the supplementary groups
/// `groups` (none by default), and returns what it returned: 0 for success or an errno value (or
/// another code of the caller's). Returns kDropFailed if the child could not switch users,
/// kTimedOut (after killing it) if it did not answer within 20 s. Only async-signal-safe work
/// and plain file I/O happen in the child. Needs root.
int as_user(uid_t uid, gid_t gid, const std::function<int()>& fn, const std::vector<gid_t>& groups = {});

/// Base fixture for real mounts: ROOT (a fresh, symlink-free temporary directory), SOURCE
/// (ROOT/src unless the subclass names another relative path), MNT (ROOT/mnt) and the daemon log
/// ROOT/daemon.log. Skips the test when FUSE is unavailable. TearDown unmounts MNT and reaps the
/// daemon if it still runs, and fails the test if a mount is left behind.
class MountFixture : public ::testing::Test {
protected:
    /// `source_relative`: SOURCE below ROOT ("src", "data/src"; parents are created too).
    explicit MountFixture(std::string source_relative = "src") : source_relative_(std::move(source_relative)) {}

    void SetUp() override;
    void TearDown() override;

    /// Starts `gguf-mount SOURCE MNT -f extra...` (SOURCE = `source`, or src_ when empty) without
    /// waiting for the mount, with RLIMIT_NOFILE set to `nofile` if given (Daemon::start). The
    /// daemon's stdout and stderr go to log_. False if it cannot start.
    bool start(const std::vector<std::string>& extra = {}, const std::string& source = "",
               const std::optional<rlimit>& nofile = std::nullopt);

    /// start(), then waits (kTimeout) until MNT is in the mount table and its root answers a
    /// stat. The failure message carries the daemon's exit status and its log.
    ::testing::AssertionResult mount(const std::vector<std::string>& extra = {}, const std::string& source = "",
                                     const std::optional<rlimit>& nofile = std::nullopt);

    /// Unmounts MNT (fusermount3 -u) and returns the daemon's exit status, or -1 if it did not
    /// exit within kTimeout (it is then killed).
    int unmount_and_wait();

    /// The daemon's log so far ("" if none).
    std::string log() const;

    /// Copies the shards of manifest case `case_id` into `dir`; fails the test if there is none.
    void copy_case_shards(const std::string& case_id, const std::string& dir);

    gguf_test::TempDir tmp_;
    std::string root_, src_, mnt_, log_;
    Daemon daemon_;

private:
    std::string source_relative_;
};

}  // namespace mount_test
