// The block cache against a local attacker and a changed disk: a cache directory (or one of its
// sub-directories) that another user owns or may write is refused; links planted in it make the
// daemon write, create or delete nothing outside it, nor serve what they point to; a block whose
// bytes changed on disk is fetched again; a server without validators never mixes versions.
// Run as root (the chown tests skip otherwise), with real files and real mounts.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <sstream>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "gguf/model/merge_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "mount/mount_fixture.hpp"
#include "remote/store/cache.hpp"
#include "remote/servers.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;
using gguf_mount::remote::BlockCache;
using remote_test::FaultServer;
using remote_test::NginxOptions;
using remote_test::NginxServer;

/// The message BlockCache's constructor throws for `dir`, or "" when it opens the cache.
std::string refusal(const std::string& dir) {
    try {
        BlockCache cache(dir, 0);
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

/// Names of the entries of `dir` (sorted), "" entries when it cannot be read.
std::vector<std::string> entries(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

void set_old_mtime(const std::string& path) {
    struct timespec t[2] = {{1000, 0}, {1000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), t, AT_SYMLINK_NOFOLLOW), 0) << path;
}

class CacheTrust : public ::testing::Test {
protected:
    void SetUp() override {
        cache_ = tmp_ / "c";
        outside_ = tmp_ / "outside";
        ASSERT_EQ(::mkdir(outside_.c_str(), 0755), 0);
    }
    void require_root() {
        if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown to another uid)";
    }
    gguf_test::TempDir tmp_;
    std::string cache_, outside_;
};

TEST_F(CacheTrust, ADirectoryOwnedByAnotherUserIsRefusedNamingItAndTheFix) {
    require_root();
    if (IsSkipped()) return;
    ASSERT_EQ(::mkdir(cache_.c_str(), 0700), 0);
    ASSERT_EQ(::chown(cache_.c_str(), 65534, 65534), 0);
    EXPECT_EQ(refusal(cache_), cache_ + ": the cache directory is owned by uid 65534, not by this daemon's uid 0: "
                                        "refused (its links could point the daemon's writes anywhere); "
                                        "chown 0 " + cache_ + " or give another --cache-dir");
    // The same for a sub-directory (made by a first, trusted start).
    ASSERT_EQ(::chown(cache_.c_str(), 0, 0), 0);
    ASSERT_EQ(refusal(cache_), "");
    const std::string objects = cache_ + "/v1/objects";
    ASSERT_EQ(::chown(objects.c_str(), 65534, 65534), 0);
    EXPECT_NE(refusal(cache_).find(objects + ": the cache directory is owned by uid 65534"), std::string::npos)
        << refusal(cache_);
}

TEST_F(CacheTrust, AGroupOrOtherWritableDirectoryIsRefused) {
    ASSERT_EQ(::mkdir(cache_.c_str(), 0700), 0);
    ASSERT_EQ(::chmod(cache_.c_str(), 0770), 0);
    EXPECT_EQ(refusal(cache_), cache_ + ": the cache directory is writable by its group or others (mode 0770): "
                                        "refused (another user could plant links in it); chmod 0700 " + cache_);
    ASSERT_EQ(::chmod(cache_.c_str(), 0707), 0);
    EXPECT_NE(refusal(cache_).find("(mode 0707)"), std::string::npos);
    ASSERT_EQ(::chmod(cache_.c_str(), 0755), 0);  // readable is fine
    ASSERT_EQ(refusal(cache_), "");
    const std::string meta = cache_ + "/v1/meta";
    ASSERT_EQ(::chmod(meta.c_str(), 0777), 0);
    EXPECT_NE(refusal(cache_).find(meta + ": the cache directory is writable by its group or others (mode 0777)"),
              std::string::npos)
        << refusal(cache_);
}

/// Issue 30, item 8: a user who may write the cache's parent put a link there, and root built
/// v1/ (and evicted, and cleared) inside a root-only folder. The last component is opened with
/// O_NOFOLLOW: refused with one line, nothing made where it points, `cache clear` removes nothing.
TEST_F(CacheTrust, ALinkAsTheCacheDirectoryIsRefusedAndNothingIsMadeOrRemovedWhereItPoints) {
    const std::string victim = tmp_ / "victim";
    ASSERT_EQ(::mkdir(victim.c_str(), 0700), 0);
    ASSERT_EQ(::symlink(victim.c_str(), cache_.c_str()), 0);
    const std::string why = cache_ + ": is a symbolic link: refused (the cache directory must be a directory itself); "
                                     "give the folder it points to as --cache-dir";
    EXPECT_EQ(refusal(cache_), why);
    EXPECT_TRUE(entries(victim).empty()) << "created through the link: " << entries(victim).front();
    // A cache that is there (root's own, in the victim folder): `cache clear` through the link
    // removes none of it.
    {
        BlockCache real(victim + "/c", 0);
        const std::string data(1 << 20, 'a');
        ASSERT_EQ(real.store(BlockCache::object_key("http://h/x.gguf", "\"e1\""), 0, data.data(), data.size()), 0);
    }
    ASSERT_EQ(::unlink(cache_.c_str()), 0);
    ASSERT_EQ(::symlink((victim + "/c").c_str(), cache_.c_str()), 0);
    const auto before = entries(victim + "/c/v1/objects");
    ASSERT_EQ(before.size(), 1u);
    const auto blocks = entries(victim + "/c/v1/objects/" + before[0]);
    ASSERT_NE(std::find(blocks.begin(), blocks.end(), "0"), blocks.end());
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "cache", "clear", "--cache-dir", cache_});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err, "gguf-mount: error: " + why + "\n");
    EXPECT_EQ(entries(victim + "/c/v1/objects"), before);
    EXPECT_EQ(entries(victim + "/c/v1/objects/" + before[0]), blocks);
}

/// Issue 30, item 8: every folder on the way is checked as the cache directory itself is, but
/// owned by the daemon's uid or root, and group/other-writable only when sticky (as /tmp).
TEST_F(CacheTrust, AParentFolderAnotherUserMayWriteIsRefusedNamingItAndWhy) {
    require_root();
    if (IsSkipped()) return;
    const std::string parent = tmp_ / "p", deeper = parent + "/q/c";
    ASSERT_EQ(::mkdir(parent.c_str(), 0755), 0);
    ASSERT_EQ(::chown(parent.c_str(), 65534, 65534), 0);
    EXPECT_EQ(refusal(deeper), deeper + ": its parent folder " + parent + " is owned by uid 65534, neither this "
                                        "daemon's uid 0 nor root: refused (its owner could put a link where the "
                                        "cache directory is); give another --cache-dir");
    EXPECT_TRUE(entries(parent).empty()) << "created in the folder of uid 65534";
    ASSERT_EQ(::chown(parent.c_str(), 0, 0), 0);
    ASSERT_EQ(::chmod(parent.c_str(), 0777), 0);
    EXPECT_EQ(refusal(deeper), deeper + ": its parent folder " + parent + " is writable by its group or others "
                                        "without the sticky bit (mode 0777): refused (another user could put a link "
                                        "where the cache directory is); give another --cache-dir");
    EXPECT_TRUE(entries(parent).empty());
    ASSERT_EQ(::chmod(parent.c_str(), 0775), 0);
    EXPECT_NE(refusal(deeper).find("(mode 0775)"), std::string::npos) << refusal(deeper);
    // Sticky (as /tmp): fine, and the missing folders are made.
    ASSERT_EQ(::chmod(parent.c_str(), 01777), 0);
    EXPECT_EQ(refusal(deeper), "");
    EXPECT_EQ(entries(deeper), std::vector<std::string>{"v1"});
    // A link on the way, in a folder only root may write, is followed (a cache on another disk).
    ASSERT_EQ(::symlink("p/q", (tmp_ / "elsewhere").c_str()), 0);
    EXPECT_EQ(refusal(tmp_ / "elsewhere/c"), "");
    // ... but not out of a folder another user owns.
    ASSERT_EQ(::mkdir((tmp_ / "u").c_str(), 0755), 0);
    ASSERT_EQ(::symlink((tmp_ / "p/q").c_str(), (tmp_ / "u/link").c_str()), 0);
    ASSERT_EQ(::chown((tmp_ / "u").c_str(), 65534, 65534), 0);
    EXPECT_NE(refusal(tmp_ / "u/link/c").find("its parent folder " + (tmp_ / "u") + " is owned by uid 65534"),
              std::string::npos)
        << refusal(tmp_ / "u/link/c");
}

TEST_F(CacheTrust, ALinkedLockCreatesNothingThroughTheLink) {
    ASSERT_EQ(::mkdir(cache_.c_str(), 0700), 0);
    ASSERT_EQ(::mkdir((cache_ + "/v1").c_str(), 0700), 0);
    const std::string target = outside_ + "/created-through-the-lock";
    ASSERT_EQ(::symlink(target.c_str(), (cache_ + "/v1/lock").c_str()), 0);
    EXPECT_EQ(refusal(cache_), cache_ + "/v1/lock: is not a regular file of this daemon's uid 0 (a symbolic link): "
                                        "refused; remove it");
    EXPECT_FALSE(mount_test::exists(target)) << "a file was created through the planted lock link";
}

TEST_F(CacheTrust, ALinkedObjectDirectoryIsNeitherWrittenNorEmptied) {
    const uint64_t block = 1u << 20;
    auto cache = std::make_unique<BlockCache>(cache_, 3 * block);
    const std::string key = BlockCache::object_key("http://h/x.gguf", "\"e1\"");
    // Files of the victim directory that eviction (old mtime) and the start-up sweep (old dot-file) would take.
    gguf_test::write_file(outside_ + "/0", std::string(block, 'v'));
    gguf_test::write_file(outside_ + "/.profile", "keep");
    set_old_mtime(outside_ + "/0");
    set_old_mtime(outside_ + "/.profile");
    ASSERT_EQ(::symlink(outside_.c_str(), (cache_ + "/v1/objects/" + key).c_str()), 0);
    const std::string data(block, 'a');
    EXPECT_NE(cache->store(key, 1, data.data(), data.size()), 0) << "stored through the link";
    // Fill the cache over its bound: eviction walks every object directory.
    const std::string other = BlockCache::object_key("http://h/y.gguf", "\"e1\"");
    for (uint64_t b = 0; b < 4; ++b) ASSERT_EQ(cache->store(other, b, data.data(), data.size()), 0);
    EXPECT_EQ(entries(outside_), (std::vector<std::string>{".profile", "0"}));
    cache.reset();
    // A later start refuses the cache and sweeps nothing through the link.
    EXPECT_NE(refusal(cache_).find(cache_ + "/v1/objects/" + key + ": is not a directory of this daemon's uid"),
              std::string::npos)
        << refusal(cache_);
    EXPECT_EQ(entries(outside_), (std::vector<std::string>{".profile", "0"}));
}

TEST_F(CacheTrust, ALinkedBlockFileIsNotServedNorFollowed) {
    BlockCache cache(cache_, 0);
    const std::string key = BlockCache::object_key("http://h/x.gguf", "\"e1\"");
    const std::string data = std::string(5000, 'a');
    ASSERT_EQ(cache.store(key, 0, data.data(), data.size()), 0);
    const std::string file = cache_ + "/v1/objects/" + key + "/0";
    struct stat st {};
    ASSERT_EQ(::stat(file.c_str(), &st), 0);
    // A secret of the same size as the block file, linked in its place.
    const std::string secret = outside_ + "/secret";
    gguf_test::write_file(secret, std::string(static_cast<size_t>(st.st_size), 'S'));
    ASSERT_EQ(::unlink(file.c_str()), 0);
    ASSERT_EQ(::symlink(secret.c_str(), file.c_str()), 0);
    char out[100];
    EXPECT_LT(cache.read(key, 0, 5000, 0, sizeof out, out), 0) << "the link's target was served";
    EXPECT_FALSE(cache.has(key, 0, 5000));
    // Storing the block again replaces the link itself; the secret is neither written nor removed.
    ASSERT_EQ(cache.store(key, 0, data.data(), data.size()), 0);
    struct stat now {};
    ASSERT_EQ(::lstat(file.c_str(), &now), 0);
    EXPECT_TRUE(S_ISREG(now.st_mode));
    ASSERT_EQ(cache.read(key, 0, 5000, 0, sizeof out, out), static_cast<ssize_t>(sizeof out));
    EXPECT_EQ(std::string(out, sizeof out), data.substr(0, sizeof out));
    EXPECT_EQ(gguf_test::read_file(secret), std::string(static_cast<size_t>(st.st_size), 'S'));
}

/// Captures spdlog's default logger while alive.
struct LogCapture {
    std::ostringstream out;
    std::shared_ptr<spdlog::logger> before = spdlog::default_logger();
    LogCapture() {
        auto l = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
        l->set_level(spdlog::level::info);
        spdlog::set_default_logger(l);
    }
    ~LogCapture() { spdlog::set_default_logger(before); }
};

TEST_F(CacheTrust, ABlockChangedOnDiskIsDroppedWithOneLineNamingItsFile) {
    BlockCache cache(cache_, 0);
    const std::string key = BlockCache::object_key("http://h/x.gguf", "\"e1\"");
    const std::string data = gguf_test::sha256_hex("x") + std::string(5000, 'a');
    ASSERT_EQ(cache.store(key, 2, data.data(), data.size()), 0);
    const std::string file = cache_ + "/v1/objects/" + key + "/2";
    int fd = ::open(file.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "b", 1, 3000), 1);  // one byte flipped, far from the part read below
    ::close(fd);
    LogCapture log;
    char out[10];
    EXPECT_EQ(cache.read(key, 2, data.size(), 0, sizeof out, out), -ENOENT);
    EXPECT_FALSE(cache.has(key, 2, data.size())) << "the bad block is dropped, so it is fetched again";
    EXPECT_EQ(mount_test::lines_with(log.out.str(), file + ": cached block changed on disk (checksum mismatch)").size(),
              1u)
        << log.out.str();
    ASSERT_EQ(cache.store(key, 2, data.data(), data.size()), 0);
    ASSERT_EQ(cache.read(key, 2, data.size(), 0, sizeof out, out), static_cast<ssize_t>(sizeof out));
    EXPECT_EQ(std::string(out, sizeof out), data.substr(0, sizeof out));
}

/// The merged bytes of the local set whose first shard is `first`.
std::string local_merge(const std::string& first) {
    gguf::VirtualFile vf = gguf::open_merged(gguf::SplitSet::open(first));
    std::string out(vf.size(), '\0');
    EXPECT_EQ(vf.read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    return out;
}

/// Remote mounts of a dense set of 3 shards (two 4 MiB blocks each) with a cache under ROOT.
class CacheTrustMount : public mount_test::MountFixture {
protected:
    void SetUp() override {
        MountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        cache_ = root_ + "/cache";
    }
    void TearDown() override {
        MountFixture::TearDown();
        nginx_.reset();
        fault_.reset();
    }
    /// Writes the dense set (tensor bytes from `seed`) into src_, replacing what is there; returns its merged bytes.
    std::string dense_set(uint64_t seed) {
        for (const auto& e : fs::directory_iterator(src_)) fs::remove(e.path());
        auto shards = mount_test::split_dense_model(
            12, [](int) { return int64_t{393216}; }, 4, seed, src_ + "/dense");
        EXPECT_EQ(shards.size(), 3u);
        first_name_ = gguf::base_name(shards.front());
        return local_merge(shards.front());
    }
    std::vector<std::string> args() { return {"--cache-dir", cache_, "--net-timeout", "3"}; }
    std::string read_merged() { return gguf_test::read_file(mnt_ + "/dense.gguf"); }
    std::string cache_, first_name_;
    std::unique_ptr<NginxServer> nginx_;
    std::unique_ptr<FaultServer> fault_;
};

TEST_F(CacheTrustMount, ABlockFlippedOnDiskIsFetchedAgainAndTheServedBytesAreTheOrigins) {
    std::string why;
    if (!NginxServer::available(&why)) GTEST_SKIP() << why;
    const std::string want = dense_set(11);
    nginx_ = std::make_unique<NginxServer>(NginxOptions{src_});
    ASSERT_TRUE(nginx_->start(&why)) << why;
    const std::string url = nginx_->base_url() + "/" + first_name_;
    ASSERT_TRUE(mount(args(), url));
    ASSERT_EQ(gguf_test::sha256_hex(read_merged()), gguf_test::sha256_hex(want));
    ASSERT_EQ(unmount_and_wait(), 0) << log();
    // Flip a byte in the middle of every block 1 (the mount itself reads only blocks 0).
    std::vector<std::string> flipped;
    for (const auto& o : fs::directory_iterator(cache_ + "/v1/objects")) {
        const std::string f = o.path().string() + "/1";
        if (!fs::exists(f)) continue;
        int fd = ::open(f.c_str(), O_RDWR);
        ASSERT_GE(fd, 0);
        char c = 0;
        ASSERT_EQ(::pread(fd, &c, 1, 1 << 20), 1);
        c = static_cast<char>(c ^ 0x5a);
        ASSERT_EQ(::pwrite(fd, &c, 1, 1 << 20), 1);
        ::close(fd);
        flipped.push_back(f);
    }
    ASSERT_EQ(flipped.size(), 3u);
    nginx_->clear_access_log();
    ASSERT_TRUE(mount(args(), url));
    EXPECT_EQ(gguf_test::sha256_hex(read_merged()), gguf_test::sha256_hex(want));
    EXPECT_EQ(remote_test::count_data_requests(nginx_->access_log()), 3u) << "each flipped block is fetched again";
    for (const auto& f : flipped) {
        EXPECT_EQ(mount_test::lines_with(log(), f + ": cached block changed on disk").size(), 1u) << log();
    }
}

TEST_F(CacheTrustMount, WithoutEtagOrLastModifiedARemountServesTheNewFileNeverAMix) {
    std::string why;
    if (!FaultServer::available(&why)) GTEST_SKIP() << why;
    const std::string first = dense_set(11);
    fault_ = std::make_unique<FaultServer>(src_);
    fault_->set_rules(nlohmann::json::array({{{"path", "*"}, {"fault", "no_validators"}}}));
    ASSERT_TRUE(fault_->start(&why)) << why;
    const std::string url = fault_->base_url() + "/" + first_name_;
    ASSERT_TRUE(mount(args(), url));
    ASSERT_EQ(gguf_test::sha256_hex(read_merged()), gguf_test::sha256_hex(first));
    ASSERT_EQ(unmount_and_wait(), 0) << log();
    const std::string note = fault_->base_url() + " sends neither ETag nor Last-Modified";
    EXPECT_EQ(mount_test::lines_with(log(), note).size(), 1u) << "one line for the server, not one per file\n" << log();
    // Replaced on the server by a file of the same size, other bytes.
    const std::string second = dense_set(12);
    ASSERT_EQ(second.size(), first.size());
    ASSERT_NE(second, first);
    ASSERT_TRUE(mount(args(), url));
    EXPECT_EQ(gguf_test::sha256_hex(read_merged()), gguf_test::sha256_hex(second));
}

}  // namespace
