// Secrets and trust of remote sources, for real against nginx and the Hub emulation on 127.0.0.1:
//   - URL credentials and signed queries never reach the daemon's command line (/proc/PID/cmdline,
//     what `ps` shows every local user), its log or its cache; --source-file gives SOURCE unseen;
//   - a Hub token file rewritten while mounted (a rotated token) is followed;
//   - bytes whose sha256 differs from the Hub's lfs.oid fail prefetch and merge, are not
//     served by a later --offline mount, and stop a full sequential read through a folder or
//     first-shard mount.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gguf/model/split_set.hpp"
#include "mount/mount_fixture.hpp"
#include "remote/nginx_mount_fixture.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;
using remote_test::HubEmulation;
using remote_test::HubRepoFile;
using remote_test::HubRepoSpec;
using remote_test::NginxMountFixture;

/// The NUL-separated command line of process `pid`, NULs shown as ' '.
std::string cmdline_of(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    for (char& c : s) {
        if (c == '\0') c = ' ';
    }
    return s;
}

/// Every file under `dir` whose bytes contain `needle` (relative paths).
std::vector<std::string> files_containing(const std::string& dir, const std::string& needle) {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (!e.is_regular_file()) continue;
        if (gguf_test::read_file(e.path().string()).find(needle) != std::string::npos) {
            out.push_back(fs::relative(e.path(), dir).string());
        }
        if (fs::relative(e.path(), dir).string().find(needle) != std::string::npos) out.push_back(e.path().string());
    }
    return out;
}

const char* const kSecrets[] = {"s3cretPass", "sigS3cret", "tokS3cret"};

class UrlSecrets : public NginxMountFixture {
protected:
    UrlSecrets() : NginxMountFixture(Served::Kvzoo) {}
    void SetUp() override {
        NginxMountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        auto kvzoo = mount_test::manifest_case("kvzoo/t7");
        ASSERT_TRUE(kvzoo);
        want_sha256_ = kvzoo->merged_sha256;
        // nginx serves static files whatever the userinfo and query say.
        const std::string base = nginx_->base_url();
        url_ = "http://reader:s3cretPass@" + base.substr(std::string("http://").size()) + "/" +
               mount_test::kvzoo_shard(1) + "?X-Amz-Signature=sigS3cret&token=tokS3cret";
    }
    /// Checks that no secret is in the daemon's command line, its log and the cache.
    void expect_no_secret_anywhere() {
        const std::string cmdline = cmdline_of(daemon_.pid());
        ASSERT_NE(cmdline.find(mnt_), std::string::npos) << "not the daemon's command line: " << cmdline;
        for (const char* s : kSecrets) {
            EXPECT_EQ(cmdline.find(s), std::string::npos) << s << " in /proc/PID/cmdline: " << cmdline;
            EXPECT_EQ(log().find(s), std::string::npos) << s << " in the log";
            EXPECT_EQ(files_containing(cache_, s), std::vector<std::string>{}) << s << " in the cache";
        }
    }
    std::string url_, want_sha256_;
};

// A URL with user:password and a signed query, given on the command line: served right, and
// the running daemon's /proc/PID/cmdline, its debug log and its cache hold none of the secrets.
TEST_F(UrlSecrets, AreNotInTheDaemonsCommandLineLogOrCache) {
    ASSERT_TRUE(mount({"--cache-dir", cache_, "--net-timeout", "3", "--log-level", "debug"}, url_));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), want_sha256_) << log();
    expect_no_secret_anywhere();
    // The credentials did go to the server (libcurl sends the userinfo as Basic auth).
    bool basic = false;
    for (const auto& e : nginx_->access_log()) basic |= e.authorization.rfind("Basic ", 0) == 0;
    EXPECT_TRUE(basic);
    ASSERT_EQ(unmount_and_wait(), 0) << log();
}

// `check --json URL` prints one document also when the cache cannot be opened; its "source"
// is the URL without userinfo and query, as in every other message (it held the raw argument
// when the cache failed before the name was cut).
TEST_F(UrlSecrets, CheckJsonOfAFailedSourceNamesTheUrlWithoutSecrets) {
    const std::string blocker = root_ + "/not-a-directory";
    gguf_test::write_file(blocker, "x");
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", "--json", "--cache-dir", blocker + "/cache", url_});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["source"], "http://" + nginx_->base_url().substr(std::string("http://").size()) + "/" +
                               mount_test::kvzoo_shard(1)) << r.out;
    EXPECT_EQ(j["ok"], false);
    for (const char* s : kSecrets) EXPECT_EQ(r.out.find(s), std::string::npos) << s << " in " << r.out;
}

// --source-file FILE: SOURCE from a file (a systemd credential in the unit); MOUNTPOINT is the
// only positional argument. Served right; no secret anywhere either.
TEST_F(UrlSecrets, SourceFileMountsTheUrlItHolds) {
    const std::string file = root_ + "/source-url";
    gguf_test::write_file(file, "  " + url_ + "\n");
    ASSERT_EQ(::chmod(file.c_str(), 0600), 0);
    ASSERT_TRUE(mount({"--cache-dir", cache_, "--net-timeout", "3", "--log-level", "debug"}, "--source-file=" + file));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), want_sha256_) << log();
    expect_no_secret_anywhere();
    ASSERT_EQ(unmount_and_wait(), 0) << log();

    // prefetch and merge take it too.
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "prefetch", "-q", "--cache-dir", cache_, "--source-file",
                             file});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    const std::string out = root_ + "/merged.gguf";
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", "--source-file", file, out});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(gguf_test::sha256_file(out), want_sha256_);
    // An empty file is one line naming it.
    gguf_test::write_file(file, "\n");
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "--source-file", file, mnt_});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("--source-file " + file + ": empty"), std::string::npos) << r.err;
}

/// A Hub emulation of the kvzoo set (Q4_K_M/, 7 LFS shards) and two more LFS files
/// (mmproj-tiny.gguf, extra.bin); the served bytes are the files in local_ (symlinked by the CDN).
class HubTrust : public NginxMountFixture {
protected:
    void SetUp() override {
        NginxMountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        isolate_hub();
        auto kvzoo = mount_test::manifest_case("kvzoo/t7");
        ASSERT_TRUE(kvzoo);
        kvzoo_ = *kvzoo;
    }
    void start_hub(std::optional<std::string> token = std::nullopt) {
        local_ = root_ + "/local";
        fs::create_directories(local_ + "/Q4_K_M");
        HubRepoSpec spec;
        spec.page_size = 3;
        spec.required_token = token;
        for (const auto& s : kvzoo_.shards) {
            const std::string path = "Q4_K_M/" + gguf::base_name(s);
            fs::copy_file(gguf_test::fixture(s), local_ + "/" + path);
            spec.files.push_back(HubRepoFile{path, local_ + "/" + path, true});
        }
        fs::copy_file(gguf_test::fixture("tiny-llama/tiny-llama.gguf"), local_ + "/mmproj-tiny.gguf");
        spec.files.push_back(HubRepoFile{"mmproj-tiny.gguf", local_ + "/mmproj-tiny.gguf", true});
        // Not a GGUF file: nothing of it is read until a reader asks.
        fs::copy_file(gguf_test::fixture("tiny-llama/tiny-llama.gguf"), local_ + "/extra.bin");
        spec.files.push_back(HubRepoFile{"extra.bin", local_ + "/extra.bin", true});
        hub_ = std::make_unique<HubEmulation>(spec);
        std::string error;
        ASSERT_TRUE(hub_->start(&error)) << error;
        ::setenv("HF_ENDPOINT", hub_->endpoint().c_str(), 1);
    }
    std::string source() const { return "hf://" + hub_->spec().org + "/" + hub_->spec().repo; }
    std::vector<std::string> args() const { return {"--cache-dir", cache_, "--net-timeout", "3"}; }
    /// Flips the last byte of the served copy of `path` (same size: the tree keeps the old
    /// lfs.oid, the CDN serves the new bytes). Returns the sha256 of the bytes now served.
    std::string corrupt(const std::string& path) {
        const std::string file = local_ + "/" + path;
        std::string bytes = gguf_test::read_file(file);
        bytes.back() = static_cast<char>(bytes.back() ^ 0x5a);
        gguf_test::write_file(file, bytes);
        return gguf_test::sha256_hex(bytes);
    }
    std::string listed_sha256(const std::string& path) const {
        for (const auto& e : hub_->entries()) {
            if (e.path == path) return e.sha256;
        }
        ADD_FAILURE() << "no entry " << path;
        return "";
    }

    /// A Hub repo of three shards of 6 MiB (ROOT/dense-local/dense-0000K-of-00003.gguf served at
    /// its root); then the last byte of shard 2 (a tensor byte) is changed in the served copy,
    /// the tree keeping the original's lfs.oid.
    struct DenseRepo {
        std::vector<std::string> shards;  ///< the served copies
        std::string reference;            ///< the local merge of the right shards
        std::string want, got;            ///< shard 2's sha256: listed (lfs.oid), served
    };
    void start_dense_hub(DenseRepo* repo) {
        const std::string local = root_ + "/dense-local";
        fs::create_directories(local);
        repo->shards = mount_test::split_dense_model(
            12, [](int) { return int64_t{393216}; }, 4, 11, local + "/dense");
        ASSERT_EQ(repo->shards.size(), 3u);
        const std::string ref_file = root_ + "/reference.gguf";
        auto m = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", repo->shards.front(), ref_file});
        ASSERT_EQ(m.exit_code, 0) << m.err;
        repo->reference = gguf_test::read_file(ref_file);
        HubRepoSpec spec;
        for (const auto& s : repo->shards) spec.files.push_back(HubRepoFile{gguf::base_name(s), s, true});
        hub_ = std::make_unique<HubEmulation>(spec);
        std::string error;
        ASSERT_TRUE(hub_->start(&error)) << error;
        ::setenv("HF_ENDPOINT", hub_->endpoint().c_str(), 1);
        std::string bytes = gguf_test::read_file(repo->shards[1]);
        repo->want = gguf_test::sha256_hex(bytes);
        bytes.back() = static_cast<char>(bytes.back() ^ 0x5a);
        gguf_test::write_file(repo->shards[1], bytes);
        repo->got = gguf_test::sha256_hex(bytes);
    }
    /// Reads `path` in order, 1 MiB at a time, into `served` to its end or its first error;
    /// returns the errno of that error (0 at the end).
    static int read_in_order(const std::string& path, std::string* served) {
        const int fd = ::open(path.c_str(), O_RDONLY);
        if (fd < 0) return errno;
        int read_errno = 0;
        std::vector<char> buf(1 << 20);
        for (;;) {
            const ssize_t r = ::read(fd, buf.data(), buf.size());
            if (r < 0) read_errno = errno;
            if (r <= 0) break;
            served->append(buf.data(), static_cast<size_t>(r));
        }
        ::close(fd);
        return read_errno;
    }

    /// Mounts `mount_source` (start_dense_hub's repo or its first shard), reads MNT/dense.gguf
    /// in order and expects EIO before its end, every byte served right and the log naming
    /// shard 2 and both digests; unmounts. `*served`: the bytes served.
    void expect_read_stops_with_eio(const DenseRepo& repo, const std::string& mount_source, size_t* served) {
        ASSERT_TRUE(mount(args(), mount_source));
        std::string bytes;
        const int read_errno = read_in_order(mnt_ + "/dense.gguf", &bytes);
        *served = bytes.size();
        EXPECT_EQ(read_errno, EIO) << "read " << bytes.size() << " of " << repo.reference.size() << " bytes; "
                                   << log();
        EXPECT_LT(bytes.size(), repo.reference.size());
        EXPECT_TRUE(bytes == repo.reference.substr(0, bytes.size())) << "every byte served is right";
        const std::string name = gguf::base_name(repo.shards[1]);
        EXPECT_NE(log().find(name + ": sha256 mismatch: expected " + repo.want), std::string::npos) << log();
        EXPECT_NE(log().find(repo.got), std::string::npos) << log();
        ASSERT_EQ(unmount_and_wait(), 0) << log();
    }

    /// Mounts `mount_source` with `extra`, expects MNT/`merged` to be kvzoo's reference merge
    /// with no sha256 mismatch logged, and unmounts.
    void expect_serves_kvzoo(const std::vector<std::string>& extra, const std::string& mount_source,
                             const std::string& merged) {
        ASSERT_TRUE(mount(extra, mount_source));
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + merged), kvzoo_.merged_sha256) << log();
        EXPECT_EQ(log().find("sha256 mismatch"), std::string::npos) << log();
        ASSERT_EQ(unmount_and_wait(), 0) << log();
    }

    std::string local_;
    gguf_test::ManifestCase kvzoo_;
};

// The CDN serves shard 3 with one byte changed (its lfs.oid is the original's): merge exits 1
// with one line naming the file and both digests and leaves nothing in its directory; prefetch
// exits 1 the same way and drops the file's blocks, so a following --offline mount does not
// serve the merged file.
TEST_F(HubTrust, WrongCdnBytesFailPrefetchAndMergeAndAreNotServedOffline) {
    ASSERT_NO_FATAL_FAILURE(start_hub());
    const std::string shard3 = "Q4_K_M/" + mount_test::kvzoo_shard(3);
    const std::string want = listed_sha256(shard3);
    const std::string got = corrupt(shard3);
    ASSERT_NE(want, got);

    const std::string out = root_ + "/out";
    fs::create_directories(out);
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", "--cache-dir", cache_ + "2", "--net-timeout",
                        "3", source() + "/Q4_K_M/" + mount_test::kvzoo_shard(1), out + "/kvzoo.gguf"});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find(mount_test::kvzoo_shard(3) + ": sha256 mismatch: expected " + want), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find(got), std::string::npos) << r.err;
    EXPECT_EQ(mount_test::list_dir(out), std::vector<std::string>{}) << "nothing is left behind";

    r = gguf_test::run({gguf_test::gguf_mount_binary(), "prefetch", "-q", "--cache-dir", cache_, "--net-timeout",
                             "3", source()});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find(mount_test::kvzoo_shard(3) + ": sha256 mismatch: expected " + want), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find(got), std::string::npos) << r.err;

    // Offline, the set whose shard 3 was wrong is not served (its blocks are gone); the other
    // files are served right.
    hub_->stop();
    auto offline = args();
    offline.push_back("--offline");
    ASSERT_TRUE(mount(offline, source()));
    EXPECT_FALSE(mount_test::exists(mnt_ + "/Q4_K_M/kvzoo.gguf")) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/mmproj-tiny.gguf"),
              gguf_test::sha256_file(gguf_test::fixture("tiny-llama/tiny-llama.gguf")))
        << log();
    ASSERT_EQ(unmount_and_wait(), 0) << log();
}

// A full sequential read through a mount (as cat, sha256sum or cp read) of the whole merged
// file gives the fixture's reference merge, each shard checked against its lfs.oid as its bytes
// pass. The kvzoo shards are smaller than RemoteSource::kSequentialTail: each is checked whole at
// planning, so with one byte of shard 3 changed on the CDN the set is not shown and the log
// names the shard and both digests.
TEST_F(HubTrust, AFullSequentialReadThroughAMountIsCheckedAgainstLfsOid) {
    ASSERT_NO_FATAL_FAILURE(start_hub());
    ASSERT_NO_FATAL_FAILURE(expect_serves_kvzoo(args(), source(), "Q4_K_M/kvzoo.gguf"));

    const std::string shard3 = "Q4_K_M/" + mount_test::kvzoo_shard(3);
    const std::string want = listed_sha256(shard3);
    const std::string got = corrupt(shard3);
    fs::remove_all(cache_);
    ASSERT_TRUE(mount(args(), source()));
    EXPECT_FALSE(mount_test::exists(mnt_ + "/Q4_K_M/kvzoo.gguf")) << log();
    EXPECT_NE(log().find(mount_test::kvzoo_shard(3) + ": sha256 mismatch: expected " + want), std::string::npos)
        << log();
    EXPECT_NE(log().find(got), std::string::npos) << log();
    ASSERT_EQ(unmount_and_wait(), 0) << log();
}

// The same for shards of 6 MiB (checked as the read passes, not at planning): with the last
// byte of shard 2 (a tensor byte) changed on the CDN, a full sequential read through the mount
// stops with EIO where shard 2 ends; every byte served before is right, none after is served,
// and the log names the shard and both digests.
TEST_F(HubTrust, AFullSequentialReadStopsWithEioWhereAShardsBytesDoNotMatchLfsOid) {
    DenseRepo repo;
    ASSERT_NO_FATAL_FAILURE(start_dense_hub(&repo));
    size_t served = 0;
    expect_read_stops_with_eio(repo, source(), &served);
}

// A first-shard mount of an hf:// file (hf://ORG/REPO/PATH/NAME-00001-of-N.gguf) checks its
// shards as a folder mount does: a full sequential read gives the fixture's reference merge;
// with one byte of shard 3 changed on the CDN (kvzoo shards are smaller than
// RemoteSource::kSequentialTail: checked whole at planning) the mount exits 1, the error
// naming the shard and both digests.
TEST_F(HubTrust, AFullSequentialReadOfAFirstShardMountIsCheckedAgainstLfsOid) {
    ASSERT_NO_FATAL_FAILURE(start_hub());
    const std::string first = source() + "/Q4_K_M/" + mount_test::kvzoo_shard(1);
    ASSERT_NO_FATAL_FAILURE(expect_serves_kvzoo(args(), first, "kvzoo.gguf"));

    const std::string shard3 = "Q4_K_M/" + mount_test::kvzoo_shard(3);
    const std::string want = listed_sha256(shard3);
    const std::string got = corrupt(shard3);
    ASSERT_NE(want, got);
    fs::remove_all(cache_);
    ASSERT_TRUE(start(args(), first));
    EXPECT_EQ(daemon_.wait_exit(), std::optional<int>(1)) << log();  // TearDown unmounts a mount
    EXPECT_NE(log().find(mount_test::kvzoo_shard(3) + ": sha256 mismatch: expected " + want), std::string::npos)
        << log();
    EXPECT_NE(log().find(got), std::string::npos) << log();
}

// The same for shards of 6 MiB, checked as the read passes: with the last byte of shard 2
// changed on the CDN, a full sequential read of the first-shard mount stops with EIO where
// shard 2 ends (past shard 1, before shard 3); every byte served before is right, and the log
// names the shard and both digests.
TEST_F(HubTrust, AFullSequentialReadOfAFirstShardMountStopsWithEioAtAWrongShardsEnd) {
    DenseRepo repo;
    ASSERT_NO_FATAL_FAILURE(start_dense_hub(&repo));
    size_t served = 0;
    expect_read_stops_with_eio(repo, source() + "/" + gguf::base_name(repo.shards[0]), &served);
    EXPECT_GT(served, fs::file_size(repo.shards[0])) << "shard 1 is served whole";
    EXPECT_LT(served + fs::file_size(repo.shards[2]) / 2, repo.reference.size()) << "nothing of shard 3";
}

// An --offline first-shard mount of an hf:// file serves the set with the server gone: checked
// with the tree the cache recorded online, and served unchecked (one line) from a cache without
// that record.
TEST_F(HubTrust, AnOfflineFirstShardMountServesTheSetWithOrWithoutTheTreeRecord) {
    ASSERT_NO_FATAL_FAILURE(start_hub());
    const std::string first = source() + "/Q4_K_M/" + mount_test::kvzoo_shard(1);
    ASSERT_NO_FATAL_FAILURE(expect_serves_kvzoo(args(), first, "kvzoo.gguf"));
    hub_->stop();
    auto offline = args();
    offline.push_back("--offline");
    ASSERT_NO_FATAL_FAILURE(expect_serves_kvzoo(offline, first, "kvzoo.gguf"));
    EXPECT_EQ(log().find("not checked"), std::string::npos) << log();

    size_t removed = 0;  // the tree records (the commit records stay)
    for (const auto& e : fs::recursive_directory_iterator(cache_)) {
        if (!e.is_regular_file() || e.path().parent_path().filename() != "listings") continue;
        if (gguf_test::read_file(e.path().string()).find("\"tree\"") == std::string::npos) continue;
        fs::remove(e.path());
        ++removed;
    }
    ASSERT_GE(removed, 1u);
    ASSERT_TRUE(mount(offline, first));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    EXPECT_NE(log().find("is not in the cache (--offline): its shards' sha256 is not checked"), std::string::npos)
        << log();
    ASSERT_EQ(unmount_and_wait(), 0) << log();
}

// Right bytes: prefetch and merge of the same repo pass (the check does not refuse good files).
TEST_F(HubTrust, RightBytesPassTheCheck) {
    ASSERT_NO_FATAL_FAILURE(start_hub());
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "prefetch", "--cache-dir", cache_, "--net-timeout", "3",
                             source() + "/Q4_K_M/" + mount_test::kvzoo_shard(1)});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    const std::string out = root_ + "/kvzoo.gguf";
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", "--cache-dir", cache_, "--net-timeout", "3",
                        source() + "/Q4_K_M/" + mount_test::kvzoo_shard(1), out});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(gguf_test::sha256_file(out), kvzoo_.merged_sha256);
}

// The token file is rewritten while mounted (huggingface_hub refreshes tokens that way) and the
// Hub accepts only the new token from then on: revalidation (every second here, a HEAD of each
// shard's resolve URL) and reads of the running mount keep succeeding, with the new token.
TEST_F(HubTrust, ARotatedTokenFileKeepsARunningMountWorking) {
    ASSERT_NO_FATAL_FAILURE(start_hub(std::string("hf_tokenA")));
    const std::string token_file = root_ + "/token";
    gguf_test::write_file(token_file, "hf_tokenA\n");
    ::setenv("HF_TOKEN_PATH", token_file.c_str(), 1);
    auto a = args();
    a.insert(a.end(), {"--revalidate", "1"});
    // A first-shard source: each revalidation sends a HEAD per shard to its resolve URL (token).
    ASSERT_TRUE(mount(a, source() + "/Q4_K_M/" + mount_test::kvzoo_shard(1)));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), kvzoo_.merged_sha256) << log();

    ASSERT_TRUE(hub_->accept_tokens({"hf_tokenB"}));
    gguf_test::write_file(token_file + ".new", "hf_tokenB\n");
    ASSERT_EQ(::rename((token_file + ".new").c_str(), token_file.c_str()), 0);
    hub_->api().clear_access_log();
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));  // revalidations with the new token
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), kvzoo_.merged_sha256) << log();
    size_t accepted = 0;
    std::string seen;
    const auto api = hub_->api().wait_access_log(1);
    for (const auto& e : api) {
        accepted += e.authorization == "Bearer hf_tokenB" && e.status < 400;
        seen += e.request_line + " " + std::to_string(e.status) + " [" + e.authorization + "]\n";
    }
    EXPECT_GE(accepted, 1u) << seen;
    ASSERT_FALSE(api.empty());
    EXPECT_LT(api.back().status, 400) << seen;
    EXPECT_EQ(log().find("hf_token"), std::string::npos) << "a token value in the log";
    ASSERT_EQ(unmount_and_wait(), 0) << log();
}

}  // namespace
