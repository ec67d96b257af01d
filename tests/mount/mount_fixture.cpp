#include "mount/mount_fixture.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "gguf/bytes/file_io.hpp"
#include "support/dense_model.hpp"

namespace mount_test {

void Fd::close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

AlignedBuffer::AlignedBuffer(size_t size) {
    void* p = nullptr;
    if (::posix_memalign(&p, 4096, size) == 0) data_.reset(static_cast<char*>(p));
}

std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
    std::vector<std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.find(needle) != std::string::npos) out.push_back(line);
    }
    return out;
}

void clean_up_daemonized_mount(const std::string& mnt) {
    auto pids = daemon_pids_with_argument(mnt);
    if (find_mount(mnt)) unmount(mnt);
    for (pid_t pid : pids) {
        if (!wait_gone(pid)) ::kill(pid, SIGKILL);
    }
}

std::optional<milliseconds> time_until(const std::function<bool()>& done, milliseconds limit) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    while (Clock::now() - t0 < limit) {
        if (done()) return std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
        std::this_thread::sleep_for(milliseconds(10));
    }
    return std::nullopt;
}

bool exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

std::string kvzoo_shard(int i, int n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "kvzoo-%05d-of-%05d.gguf", i, n);
    return buf;
}

void copy_kvzoo(const std::string& dir, int skip) {
    for (int i = 1; i <= 7; ++i) {
        if (i != skip) gguf_test::copy_file(gguf_test::fixture("kvzoo/t7/" + kvzoo_shard(i)), dir + "/" + kvzoo_shard(i));
    }
}

std::optional<gguf_test::ManifestCase> manifest_case(const std::string& id) {
    for (auto& c : gguf_test::manifest_cases()) {
        if (c.id == id) return c;
    }
    return std::nullopt;
}

void copy_shards(const gguf_test::ManifestCase& c, const std::string& dir) {
    for (const auto& s : c.shards) gguf_test::copy_file(gguf_test::fixture(s), dir + "/" + gguf::base_name(s));
}

std::vector<std::string> split_dense_model(int tensor_count, const std::function<int64_t(int)>& elements,
                                           int tensors_per_shard, uint64_t seed, const std::string& out_prefix) {
    std::vector<std::pair<std::string, int64_t>> tensors;
    for (int i = 0; i < tensor_count; ++i) tensors.emplace_back("blk." + std::to_string(i) + ".weight", elements(i));
    gguf_test::TempDir scratch;
    const std::string model = scratch / "model.gguf";
    gguf_test::write_dense_model(model, tensors, seed);
    std::vector<std::string> shards;
    if (::testing::Test::HasFatalFailure()) return shards;
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "split", "--split-max-tensors",
                             std::to_string(tensors_per_shard), "-q", model, out_prefix});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const int n = (tensor_count + tensors_per_shard - 1) / tensors_per_shard;
    for (int k = 1; k <= n; ++k) {
        char suffix[32];
        std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", k, n);
        if (exists(out_prefix + suffix)) {
            shards.push_back(out_prefix + suffix);
        } else {
            ADD_FAILURE() << "split wrote no " << out_prefix + suffix;
        }
    }
    return shards;
}

ChunkTally read_in_chunks(int fd, const std::string& whole, size_t chunk) {
    ChunkTally t;
    AlignedBuffer buf(chunk);
    for (uint64_t off = 0; off < whole.size(); off += chunk) {
        const size_t expect = std::min<size_t>(chunk, whole.size() - off);
        std::memset(buf.get(), 0x5a, chunk);
        ssize_t n = ::pread(fd, buf.get(), chunk, static_cast<off_t>(off));
        if (n < 0) {
            ++t.errors;
            t.error_offsets.push_back(off);
            if (errno != EIO && t.first_wrong.empty()) t.first_wrong = "errno " + std::to_string(errno);
        } else if (static_cast<size_t>(n) == expect && std::memcmp(buf.get(), whole.data() + off, expect) == 0) {
            ++t.ok;
        } else {
            ++t.wrong;
            if (t.first_wrong.empty()) t.first_wrong = "offset " + std::to_string(off) + " got " + std::to_string(n);
        }
    }
    return t;
}

void MountFixture::SetUp() {
    std::string why;
    if (!fuse_available(&why)) GTEST_SKIP() << why;
    // The mount point must be symlink-free to match /proc/self/mountinfo.
    std::unique_ptr<char, decltype(&std::free)> real(::realpath(tmp_.path().c_str(), nullptr), &std::free);
    ASSERT_TRUE(real) << tmp_.path() << ": " << std::strerror(errno);
    root_ = real.get();
    src_ = root_ + "/" + source_relative_;
    mnt_ = root_ + "/mnt";
    log_ = root_ + "/daemon.log";
    for (size_t slash = source_relative_.find('/'); slash != std::string::npos;
         slash = source_relative_.find('/', slash + 1)) {
        const std::string parent = root_ + "/" + source_relative_.substr(0, slash);
        ASSERT_EQ(::mkdir(parent.c_str(), 0755), 0) << parent << ": " << std::strerror(errno);
    }
    ASSERT_EQ(::mkdir(src_.c_str(), 0755), 0) << src_ << ": " << std::strerror(errno);
    ASSERT_EQ(::mkdir(mnt_.c_str(), 0755), 0) << mnt_ << ": " << std::strerror(errno);
}

void MountFixture::TearDown() {
    if (mnt_.empty()) return;  // skipped before SetUp got that far
    if (daemon_.running() || find_mount(mnt_)) daemon_.stop(mnt_);
    EXPECT_FALSE(find_mount(mnt_)) << "left a mount behind on " << mnt_;
}

bool MountFixture::start(const std::vector<std::string>& extra, const std::string& source,
                         const std::optional<rlimit>& nofile) {
    std::vector<std::string> argv = {gguf_test::gguf_mount_binary(), source.empty() ? src_ : source, mnt_, "-f"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return daemon_.start(argv, log_, nofile);
}

::testing::AssertionResult MountFixture::mount(const std::vector<std::string>& extra, const std::string& source,
                                               const std::optional<rlimit>& nofile) {
    if (!start(extra, source, nofile)) return ::testing::AssertionFailure() << "cannot start the daemon";
    if (!daemon_.wait_mounted(mnt_)) {
        return ::testing::AssertionFailure() << "not mounted within " << kTimeout.count() << " ms (exit "
                                             << (daemon_.exit_code() ? *daemon_.exit_code() : -1) << "); log:\n"
                                             << log();
    }
    // The mount is in the table before the FUSE INIT is answered; wait for the root to answer.
    struct stat st {};
    ::stat(mnt_.c_str(), &st);
    return ::testing::AssertionSuccess();
}

int MountFixture::unmount_and_wait() {
    auto code = daemon_.stop(mnt_);
    return code ? *code : -1;
}

std::string MountFixture::log() const {
    std::ifstream in(log_);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void MountFixture::copy_case_shards(const std::string& case_id, const std::string& dir) {
    auto c = manifest_case(case_id);
    ASSERT_TRUE(c) << "no manifest case " << case_id;
    copy_shards(*c, dir);
}

int as_user(uid_t uid, gid_t gid, const std::function<int()>& fn, const std::vector<gid_t>& groups) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return kDropFailed;
    pid_t pid = ::fork();
    if (pid < 0) return kDropFailed;
    if (pid == 0) {
        ::close(p[0]);
        int r = kDropFailed;
        if (::setgroups(groups.size(), groups.empty() ? nullptr : groups.data()) == 0 && ::setgid(gid) == 0 &&
            ::setuid(uid) == 0 && ::geteuid() == uid && ::getegid() == gid) {
            r = fn();
        }
        if (::write(p[1], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) ::_exit(2);
        ::_exit(0);
    }
    ::close(p[1]);
    int r = kTimedOut;
    pollfd pf{p[0], POLLIN, 0};
    if (::poll(&pf, 1, 20000) == 1 && ::read(p[0], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) r = kDropFailed;
    ::close(p[0]);
    if (r == kTimedOut) ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return r;
}

}  // namespace mount_test
