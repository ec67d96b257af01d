// Failures of remote sources at mount time (issues 11 and 12): a bad mount point is refused
// before any request is sent, and host names that do not resolve (tested in a private mount
// namespace whose /etc/resolv.conf names 127.0.0.1, where nothing answers, and whose /etc/hosts
// the test writes: no DNS query ever leaves the machine).
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gguf/model/merge_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "mount/mount_fixture.hpp"
#include "remote/nginx_mount_fixture.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;
using remote_test::HubEmulation;
using remote_test::HubRepoFile;
using remote_test::HubRepoSpec;
using remote_test::NginxMountFixture;
using remote_test::NginxOptions;
using remote_test::NginxServer;

/// Every mount point a remote SOURCE must be refused on before any request: (name, path).
class RemoteMountPoint : public NginxMountFixture {
protected:
    void SetUp() override {
        NginxMountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        isolate_hub();
    }
    /// Runs `gguf-mount SOURCE MOUNTPOINT` (foreground) and expects exit 1 with one error line
    /// holding `reason`.
    void expect_refused(const std::string& source, const std::string& mountpoint, const std::string& reason) {
        SCOPED_TRACE(source + " on " + mountpoint);
        const auto t0 = std::chrono::steady_clock::now();
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), source, mountpoint, "-f", "--cache-dir", cache_,
                                 "--net-timeout", "3"});
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
        const std::string all = r.out + r.err;
        EXPECT_NE(all.find(reason), std::string::npos) << all;
        EXPECT_EQ(mount_test::lines_with(all, "nothing mounted").size(), 1u) << all;
        std::printf("[ refused  ] %s on %s in %lld ms: %s", source.c_str(), mountpoint.c_str(),
                    static_cast<long long>(ms), all.c_str());
    }
};

TEST_F(RemoteMountPoint, ABadMountPointIsRefusedBeforeAnyRequestIsSent) {
    mount_test::copy_kvzoo(src_);
    // The remote sources: a first-shard URL, a directory URL (nginx) and a Hub repo and file.
    NginxServer nginx(NginxOptions{src_});
    std::string error;
    ASSERT_TRUE(nginx.start(&error)) << error;
    HubRepoSpec spec;
    for (int i = 1; i <= 7; ++i) {
        const std::string name = mount_test::kvzoo_shard(i);
        spec.files.push_back(HubRepoFile{"Q4_K_M/" + name, src_ + "/" + name, true});
    }
    HubEmulation hub(spec);
    ASSERT_TRUE(hub.start(&error)) << error;
    ::setenv("HF_ENDPOINT", hub.endpoint().c_str(), 1);
    const std::vector<std::string> sources = {
        nginx.base_url() + "/" + mount_test::kvzoo_shard(1), nginx.base_url() + "/html/",
        "hf://test-org/test-repo", "hf://test-org/test-repo/Q4_K_M/" + mount_test::kvzoo_shard(1)};

    // Missing, non-empty, and a live mount (a local mount of the same shards on mnt_).
    const std::string full = root_ + "/full";
    ASSERT_EQ(::mkdir(full.c_str(), 0755), 0);
    gguf_test::write_file(full + "/keep.txt", "mine\n");
    ASSERT_TRUE(mount());
    for (const auto& source : sources) {
        expect_refused(source, root_ + "/missing", "No such file or directory");
        expect_refused(source, full, "not empty");
        expect_refused(source, mnt_, "already mounted");
    }
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(gguf_test::read_file(full + "/keep.txt"), "mine\n");
    // Not one request reached any server.
    EXPECT_TRUE(nginx.access_log().empty()) << nginx.access_log().front().request_line;
    EXPECT_TRUE(hub.api().access_log().empty()) << hub.api().access_log().front().request_line;
    EXPECT_TRUE(hub.cdn().access_log().empty()) << hub.cdn().access_log().front().request_line;
    nginx.stop();
    hub.stop();
}

/// A host name that is in no hosts file the tests write and that no DNS resolver may ever be
/// asked about outside the machine (".invalid" is reserved, RFC 6761).
constexpr const char* kNoSuchHost = "no-such-host.invalid";

/// The resolver that never answers, for the timeout case: binds UDP 127.0.0.1:53 (inside a
/// private network namespace), creates argv[1] once bound, appends a line to argv[2] per query
/// received, never answers, and exits once its parent (the command under test) is gone.
constexpr const char* kSilentResolver = R"(
import os, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
s.settimeout(0.2)
open(sys.argv[1], "w").close()
parent = os.getppid()
while os.getppid() == parent:
    try:
        s.recvfrom(4096)
    except socket.timeout:
        continue
    with open(sys.argv[2], "a") as log:
        log.write("query\n")
)";

/// Commands run in a private mount namespace (`unshare --mount`, root only) in which
/// /etc/resolv.conf names 127.0.0.1 only (where nothing listens: a query is refused on the
/// machine), /etc/hosts is the test's file hosts_ (rewritten in place to make kNoSuchHost
/// resolve) and /etc/nsswitch.conf resolves hosts by "files dns". With `silent_resolver`, also in
/// a private network namespace (loopback only, up) whose 127.0.0.1:53 is kSilentResolver. So no
/// DNS query ever leaves the machine. The daemon's FUSE mount lives in that namespace: the test
/// looks at it through `nsenter --mount`.
class DnsFailure : public NginxMountFixture {
protected:
    void SetUp() override {
        NginxMountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        if (::geteuid() != 0) GTEST_SKIP() << "private mount namespaces need root";
        for (const char* p : {"unshare", "nsenter", "ip", "python3"}) {
            if (remote_test::find_program(p).empty()) GTEST_SKIP() << p << " not found";
        }
        sandbox_ = root_ + "/sandbox";
        ASSERT_EQ(::mkdir(sandbox_.c_str(), 0755), 0);
        gguf_test::write_file(sandbox_ + "/resolv.conf", "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n");
        gguf_test::write_file(sandbox_ + "/resolv-slow.conf", "nameserver 127.0.0.1\noptions timeout:30 attempts:3\n");
        hosts_ = sandbox_ + "/hosts";
        gguf_test::write_file(hosts_, "127.0.0.1 localhost\n::1 localhost ip6-localhost\n");
        gguf_test::write_file(sandbox_ + "/nsswitch.conf", "hosts: files dns\n");
    }
    void TearDown() override {
        if (sandboxed_.running()) sandboxed_.stop();
        NginxMountFixture::TearDown();
    }
    /// `argv` wrapped so that it runs in the sandbox described above.
    std::vector<std::string> sandboxed(const std::vector<std::string>& argv, bool silent_resolver = false) const {
        std::string script = "set -e\n";
        if (silent_resolver) {
            script += "ip link set lo up\n"
                      "python3 -c \"$RESOLVER\" '" + sandbox_ + "/ready' '" + sandbox_ + "/queries' &\n"
                      "while [ ! -e '" + sandbox_ + "/ready' ]; do sleep 0.05; done\n";
        }
        // The silent resolver case gives glibc a long wait (30 s x 3), so --net-timeout is what cuts it.
        const std::string resolv = sandbox_ + (silent_resolver ? "/resolv-slow.conf" : "/resolv.conf");
        script += "mount --bind '" + resolv + "' /etc/resolv.conf\n"
                  "mount --bind '" + hosts_ + "' /etc/hosts\n"
                  "mount --bind '" + sandbox_ + "/nsswitch.conf' /etc/nsswitch.conf\n"
                  "exec \"$@\"\n";
        std::vector<std::string> out = {remote_test::find_program("env"), std::string("RESOLVER=") + kSilentResolver,
                                        remote_test::find_program("unshare"), "--mount"};
        if (silent_resolver) out.push_back("--net");
        for (const std::string a : {"--", "/bin/sh", "-c"}) out.push_back(a);
        out.push_back(script);
        out.push_back("sh");
        out.insert(out.end(), argv.begin(), argv.end());
        return out;
    }
    /// Runs `argv` in the sandbox; returns its result and sets *seconds to its wall time.
    gguf_test::RunResult run_sandboxed(const std::vector<std::string>& argv, double* seconds,
                                       bool silent_resolver = false) const {
        const auto t0 = std::chrono::steady_clock::now();
        auto r = gguf_test::run(sandboxed(argv, silent_resolver));
        *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return r;
    }
    /// `argv` run with nsenter in the mount namespace of the sandboxed daemon.
    gguf_test::RunResult in_daemon_namespace(const std::vector<std::string>& argv) {
        std::vector<std::string> a = {remote_test::find_program("nsenter"), "--target",
                                      std::to_string(sandboxed_.pid()), "--mount", "--"};
        a.insert(a.end(), argv.begin(), argv.end());
        return gguf_test::run(a);
    }
    /// Checks the one-line DNS error of a failed command: exit 1, one line naming `shown_url`
    /// and saying its host could not be resolved, no query string, within the timeout.
    void expect_dns_error(const gguf_test::RunResult& r, double seconds, const std::string& shown_url,
                          double limit_seconds) {
        const std::string all = r.out + r.err;
        EXPECT_EQ(r.exit_code, 1) << all;
        auto lines = mount_test::lines_with(all, shown_url);
        ASSERT_EQ(lines.size(), 1u) << all;
        EXPECT_NE(lines[0].find(std::string("Could not resolve host: ") + kNoSuchHost), std::string::npos) << all;
        EXPECT_EQ(all.find("secret"), std::string::npos) << all;
        EXPECT_LT(seconds, limit_seconds) << all;
        std::printf("[ dns      ] %.2f s, exit %d: %s", seconds, r.exit_code, all.c_str());
    }
    std::string sandbox_, hosts_;
    remote_test::ChildProcess sandboxed_;
};

TEST_F(DnsFailure, AFirstShardUrlWhoseHostDoesNotResolveExitsWithinTheTimeoutForMountAndCheck) {
    const std::string shown = std::string("http://") + kNoSuchHost + ":8080/m/x-00001-of-00002.gguf";
    const std::string url = shown + "?X-Signature=secret";
    double seconds = 0;
    auto r = run_sandboxed({gguf_test::gguf_mount_binary(), url, mnt_, "-f", "--cache-dir", cache_, "--net-timeout",
                            "3"},
                           &seconds);
    expect_dns_error(r, seconds, shown, 3.5);
    EXPECT_FALSE(mount_test::find_mount(mnt_));
    r = run_sandboxed({gguf_test::gguf_mount_binary(), "check", "--cache-dir", cache_, "--net-timeout", "3", url},
                      &seconds);
    expect_dns_error(r, seconds, shown, 3.5);
    r = run_sandboxed({gguf_test::gguf_mount_binary(), "prefetch", "-q", "--cache-dir", cache_, "--net-timeout", "3",
                       url},
                      &seconds);
    expect_dns_error(r, seconds, shown, 3.5);
}

TEST_F(DnsFailure, AResolverThatNeverAnswersIsCutAtTheNetTimeout) {
    const std::string shown = std::string("http://") + kNoSuchHost + "/m/x-00001-of-00002.gguf";
    double seconds = 0;
    auto r = run_sandboxed({gguf_test::gguf_mount_binary(), shown, mnt_, "-f", "--cache-dir", cache_, "--net-timeout",
                            "2"},
                           &seconds, true);
    const std::string all = r.out + r.err;
    EXPECT_EQ(r.exit_code, 1) << all;
    auto lines = mount_test::lines_with(all, shown);
    ASSERT_EQ(lines.size(), 1u) << all;
    EXPECT_NE(lines[0].find(std::string("could not resolve host ") + kNoSuchHost + " within 2 s"), std::string::npos)
        << all;
    EXPECT_GE(seconds, 1.9) << all;
    EXPECT_LT(seconds, 3.5) << all;
    // check takes the same --net-timeout.
    double check_seconds = 0;
    auto c = run_sandboxed({gguf_test::gguf_mount_binary(), "check", "--cache-dir", cache_, "--net-timeout", "2", shown},
                           &check_seconds, true);
    EXPECT_EQ(c.exit_code, 1) << c.out << c.err;
    EXPECT_EQ(mount_test::lines_with(c.out + c.err, std::string("could not resolve host ") + kNoSuchHost + " within 2 s")
                  .size(),
              1u)
        << c.out << c.err;
    EXPECT_LT(check_seconds, 3.5) << c.out << c.err;
    // The queries went to the silent resolver on the sandbox's loopback (and nowhere else: the
    // namespace has no other interface).
    EXPECT_GE(mount_test::lines_with(gguf_test::read_file(sandbox_ + "/queries"), "query").size(), 1u);
    std::printf("[ dns      ] %.2f s, exit %d, %zu queries: %s", seconds, r.exit_code,
                mount_test::lines_with(gguf_test::read_file(sandbox_ + "/queries"), "query").size(), all.c_str());
}

TEST_F(DnsFailure, ADirectoryUrlWhoseHostDoesNotResolveMountsEmptyAndShowsItsSetOnceItResolves) {
    auto shards = mount_test::split_dense_model(
        12, [](int) { return int64_t{393216}; }, 4, 11, src_ + "/dense");
    ASSERT_EQ(shards.size(), 3u);
    NginxServer nginx(NginxOptions{src_});
    std::string error;
    ASSERT_TRUE(nginx.start(&error)) << error;
    const std::string shown = std::string("http://") + kNoSuchHost + ":" + std::to_string(nginx.port()) + "/html/";
    ASSERT_TRUE(sandboxed_.start(sandboxed({gguf_test::gguf_mount_binary(), shown, mnt_, "-f", "--cache-dir", cache_,
                                            "--net-timeout", "2", "--revalidate", "1"}),
                                 log_, &error))
        << error;
    // Mounted (in the sandbox), empty, with one line naming the page and the host.
    auto listed = [&] { return in_daemon_namespace({remote_test::find_program("ls"), "-A", mnt_}); };
    ASSERT_TRUE(mount_test::time_until(
        [&] {
            auto r = listed();
            return r.exit_code == 0 && !mount_test::lines_with(log(), "nothing to serve yet").empty();
        },
        std::chrono::seconds(10)))
        << log();
    EXPECT_EQ(listed().out, "") << log();
    EXPECT_FALSE(mount_test::lines_with(log(), std::string("Could not resolve host: ") + kNoSuchHost).empty()) << log();
    EXPECT_TRUE(nginx.access_log().empty());
    for (const auto& l : mount_test::lines_with(log(), kNoSuchHost)) std::printf("[ dns      ] %s\n", l.c_str());
    // The name resolves (to 127.0.0.1) from now on: the set shows at the next revalidation.
    {
        std::ofstream hosts(hosts_, std::ios::app);  // in place: the bind mount keeps the inode
        hosts << "127.0.0.1 " << kNoSuchHost << "\n";
    }
    EXPECT_TRUE(mount_test::time_until([&] { return listed().out == "dense.gguf\n"; }, std::chrono::seconds(10)))
        << log();
    gguf::VirtualFile vf = gguf::open_merged(gguf::SplitSet::open(shards.front()));
    std::string want(vf.size(), '\0');
    ASSERT_EQ(vf.read(0, want.size(), want.data()), static_cast<ssize_t>(want.size()));
    auto sum = in_daemon_namespace({remote_test::find_program("sha256sum"), mnt_ + "/dense.gguf"});
    EXPECT_EQ(sum.out.substr(0, 64), gguf_test::sha256_hex(want)) << sum.err << log();
    EXPECT_FALSE(nginx.access_log().empty());
    EXPECT_EQ(sandboxed_.stop(), 0) << log();  // SIGTERM: the daemon unmounts and exits 0
    nginx.stop();
}

// A sub-directory whose index page redirects to a host that does not resolve (a listing's own
// links to other hosts are never followed: remote/index.hpp): the rest of the tree is served, the
// sub-directory's set shows once the name resolves.
TEST_F(DnsFailure, ASubDirectoryRedirectedToAHostThatDoesNotResolveIsLeftOutUntilItResolves) {
    auto shards = mount_test::split_dense_model(
        12, [](int) { return int64_t{393216}; }, 4, 11, src_ + "/dense");
    ASSERT_EQ(shards.size(), 3u);
    ASSERT_EQ(::mkdir((src_ + "/a").c_str(), 0755), 0);
    mount_test::copy_kvzoo(src_ + "/a");
    auto kvzoo = mount_test::manifest_case("kvzoo/t7");
    ASSERT_TRUE(kvzoo);
    NginxOptions o{src_};
    o.extra_server_config = std::string("    location /html/a/ {\n      if ($host != \"") + kNoSuchHost +
                            "\") { return 302 http://" + kNoSuchHost + ":$server_port$request_uri; }\n      alias " +
                            src_ + "/a/; autoindex on; autoindex_exact_size on;\n    }\n";
    NginxServer nginx(o);
    std::string error;
    ASSERT_TRUE(nginx.start(&error)) << error;
    ASSERT_TRUE(sandboxed_.start(sandboxed({gguf_test::gguf_mount_binary(), nginx.base_url() + "/html/", mnt_, "-f",
                                            "--cache-dir", cache_, "--net-timeout", "2", "--revalidate", "1"}),
                                 log_, &error))
        << error;
    auto find = [&] {
        return in_daemon_namespace({remote_test::find_program("find"), mnt_, "-type", "f", "-printf", "%P\n"}).out;
    };
    ASSERT_TRUE(mount_test::time_until([&] { return find() == "dense.gguf\n"; }, std::chrono::seconds(10)))
        << find() << log();
    const auto dns_lines = mount_test::lines_with(log(), std::string("Could not resolve host: ") + kNoSuchHost);
    ASSERT_FALSE(dns_lines.empty()) << log();
    EXPECT_NE(dns_lines[0].find("/html/a/"), std::string::npos) << dns_lines[0];
    std::printf("[ dns      ] %s\n", dns_lines[0].c_str());
    {
        std::ofstream hosts(hosts_, std::ios::app);  // in place: the bind mount keeps the inode
        hosts << "127.0.0.1 " << kNoSuchHost << "\n";
    }
    EXPECT_TRUE(mount_test::time_until([&] { return find() == "a/kvzoo.gguf\ndense.gguf\n" ||
                                                    find() == "dense.gguf\na/kvzoo.gguf\n"; },
                                       std::chrono::seconds(10)))
        << find() << log();
    auto sum = in_daemon_namespace({remote_test::find_program("sha256sum"), mnt_ + "/a/kvzoo.gguf"});
    EXPECT_EQ(sum.out.substr(0, 64), kvzoo->merged_sha256) << sum.err << log();
    EXPECT_EQ(sandboxed_.stop(), 0) << log();
    nginx.stop();
}

}  // namespace
