// s3:// sources end to end: gguf-mount mounts, checks, prefetches and merges s3://BUCKET/PREFIX/
// and s3://BUCKET/KEY-00001-of-N.gguf from s3rver behind the SigV4-verifying proxy (S3Server),
// byte-exact against the fixtures' MANIFEST, with every request's signature checked by AWS's own
// signer.
#include <signal.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <thread>

#include "gguf/bytes/file_io.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "gguf/model/merge_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "mount/mount_harness.hpp"
#include "remote/s3/listing.hpp"
#include "remote/s3_fixture.hpp"

namespace {

using s3_test::kOddPrefix;
using s3_test::S3Fixture;

/// "kvzoo/t7" -> "sets/kvzoo/t7/": where a case's shards are in the bucket.
std::string case_prefix(const gguf_test::ManifestCase& c) { return "sets/" + c.id + "/"; }

/// The merged file's name of a set whose first shard is `first` ("kvzoo-00001-of-00007.gguf").
std::string merged_name(const std::string& first) {
    auto n = gguf::parse_shard_name(gguf::base_name(first));
    return n ? gguf::base_name(n->prefix) + ".gguf" : "";
}

class S3Mount : public S3Fixture {
protected:
    /// A dense model of 12 tensors of 1.5 MiB in 3 shards under "dense/" (two cache blocks per
    /// shard); want_ is its local merge.
    void put_dense() {
        std::filesystem::create_directories(root_ + "/dense");
        auto shards = mount_test::split_dense_model(12, [](int) { return int64_t{393216}; }, 4, 11, root_ + "/dense/dense");
        ASSERT_EQ(shards.size(), 3u);
        gguf::VirtualFile vf = gguf::open_merged(gguf::SplitSet::open(shards.front()));
        want_.assign(vf.size(), '\0');
        ASSERT_EQ(vf.read(0, want_.size(), want_.data()), static_cast<ssize_t>(want_.size()));
        for (const auto& s : shards) put("dense/" + gguf::base_name(s), gguf_test::read_file(s));
    }
    std::string want_;
};

TEST_F(S3Mount, EveryManifestSetIsByteExactThroughAPrefixInPagesOfTwoKeysAndThroughItsFirstShard) {
    const auto cases = gguf_test::manifest_cases();
    ASSERT_FALSE(cases.empty());
    for (const auto& c : cases) put_case(c, case_prefix(c));
    put_case(cases.front(), kOddPrefix);
    ASSERT_NO_FATAL_FAILURE(start_server(/*list_max_keys=*/2));
    s3_test::S3Fixture::use_keys();

    // The prefix as a model directory: nested prefixes are folders, each set merged.
    ASSERT_TRUE(mount(s3_args(), "s3://models/sets/")) << log();
    for (const auto& c : cases) {
        SCOPED_TRACE(c.id);
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + c.id + "/" + merged_name(c.shards.front())), c.merged_sha256)
            << log();
    }
    auto entry = mount_test::find_mount(mnt_);
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->source, "s3://models/sets/");  // the fsname: the SOURCE, not the endpoint URL
    EXPECT_EQ(log().find("127.0.0.1"), std::string::npos) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    // ListObjectsV2 came in pages of 2 entries, following the continuation tokens.
    size_t continued = 0;
    for (const auto& e : server_->access_log()) continued += e.entry.uri.find("continuation-token=") != std::string::npos;
    EXPECT_GE(continued, 4u);
    EXPECT_TRUE(every_request("verified"));

    // The odd prefix (space, '+', '=', non-ASCII), as a folder and as a first shard.
    ASSERT_TRUE(mount(s3_args(), "s3://models/" + kOddPrefix)) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + merged_name(cases.front().shards.front())), cases.front().merged_sha256);
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    ASSERT_TRUE(mount(s3_args(), "s3://models/" + kOddPrefix + gguf::base_name(cases.front().shards.front()))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + merged_name(cases.front().shards.front())), cases.front().merged_sha256);
    EXPECT_EQ(unmount_and_wait(), 0) << log();

    // Each set through its first shard's key.
    for (const auto& c : cases) {
        SCOPED_TRACE(c.id);
        const std::string first = gguf::base_name(c.shards.front());
        ASSERT_TRUE(mount(s3_args(), "s3://models/" + case_prefix(c) + first)) << log();
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + merged_name(first)), c.merged_sha256) << log();
        EXPECT_EQ(unmount_and_wait(), 0) << log();
    }
    EXPECT_TRUE(every_request("verified"));
}

TEST_F(S3Mount, APrefixOfManyShardsFetchesTheirHeadersOnManyConnectionsAtOnce) {
    // 48 one-tensor shards; every GetObject held 300 ms by the proxy, so the requests a
    // mount has in flight together are all seen at once (8 before: batches of kParallelOpens).
    std::filesystem::create_directories(root_ + "/many");
    auto shards = mount_test::split_dense_model(48, [](int) { return int64_t{256}; }, 1, 12, root_ + "/many/many");
    ASSERT_EQ(shards.size(), 48u);
    gguf::VirtualFile vf = gguf::open_merged(gguf::SplitSet::open(shards.front()));
    std::string want(vf.size(), '\0');
    ASSERT_EQ(vf.read(0, want.size(), want.data()), static_cast<ssize_t>(want.size()));
    for (const auto& s : shards) put("many/" + gguf::base_name(s), gguf_test::read_file(s));
    ASSERT_NO_FATAL_FAILURE(start_server());
    s3_test::S3Fixture::use_keys();
    remote_test::S3Fault hold;
    hold.match = "/models/many/";
    hold.method = "GET";
    hold.status = 0;
    hold.delay_ms = 300;
    server_->set_faults({hold});

    ASSERT_TRUE(mount(s3_args(), "s3://models/many/")) << log();
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/many.gguf"), want) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    int most = 0;
    size_t gets = 0;
    std::set<uint16_t> connections;
    for (const auto& e : server_->access_log()) {
        if (e.entry.uri.rfind("/models/many/", 0) != 0) continue;
        ++gets;
        most = std::max(most, e.in_flight);
        connections.insert(e.client_port);
    }
    EXPECT_GE(gets, 48u);
    EXPECT_GE(most, 24) << "GetObject requests in flight at once";
    EXPECT_LE(most, static_cast<int>(gguf_mount::remote::s3::kListingFetches) + 1);
    // Signed requests reuse their connections: at most one per fetch slot (and the reads after).
    EXPECT_LE(connections.size(), gguf_mount::remote::s3::kListingFetches + 4) << gets << " requests";
    EXPECT_TRUE(every_request("verified"));
}

TEST_F(S3Mount, MergeOfAFirstShardIsByteExactAndCheckNamesTheS3Source) {
    const auto cases = gguf_test::manifest_cases();
    for (const auto& c : cases) put_case(c, case_prefix(c));
    ASSERT_NO_FATAL_FAILURE(start_server());
    use_keys();
    for (const auto& c : cases) {
        SCOPED_TRACE(c.id);
        const std::string source = "s3://models/" + case_prefix(c) + gguf::base_name(c.shards.front());
        const std::string out = root_ + "/" + std::to_string(std::hash<std::string>{}(c.id)) + ".gguf";
        std::vector<std::string> args = {"merge", source, out};
        for (const auto& a : s3_args()) args.push_back(a);
        auto r = gm(args);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(gguf_test::sha256_file(out), c.merged_sha256);
        EXPECT_EQ(r.err.find("127.0.0.1"), std::string::npos) << r.err;
    }
    // check shows the set under its s3:// name
    std::vector<std::string> args = {"check", "s3://models/sets/"};
    for (const auto& a : s3_args()) args.push_back(a);
    auto r = gm(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("s3://models/sets"), std::string::npos) << r.out;
    // The prefix as given, with its trailing slash (issue 30, item 11: it was dropped).
    EXPECT_EQ(r.out.rfind("source s3://models/sets/\n", 0), 0u) << r.out;
    EXPECT_EQ(r.out.find("127.0.0.1"), std::string::npos) << r.out;
    EXPECT_TRUE(every_request("verified"));
}

TEST_F(S3Mount, AKilledDaemonMidFetchThenARemountServesTheRightBytes) {
    ASSERT_NO_FATAL_FAILURE(put_dense());
    ASSERT_NO_FATAL_FAILURE(start_server());
    use_keys();
    ASSERT_TRUE(mount(s3_args(), "s3://models/dense/")) << log();
    {
        // A reader in the middle of fetching (read-ahead in flight), then kill -9.
        std::thread reader([&] { (void)gguf_test::read_file(mnt_ + "/dense.gguf"); });
        auto fetching = mount_test::time_until([&] { return server_->access_log().size() >= 6; },
                                               std::chrono::seconds(10));
        EXPECT_TRUE(fetching) << "no block request was seen";
        ASSERT_EQ(::kill(daemon_.pid(), SIGKILL), 0);
        reader.join();
    }
    mount_test::unmount(mnt_);
    EXPECT_EQ(daemon_.wait_exit(), 128 + SIGKILL);
    ASSERT_TRUE(mount(s3_args(), "s3://models/dense/")) << log();
    EXPECT_EQ(gguf_test::sha256_hex(gguf_test::read_file(mnt_ + "/dense.gguf")), gguf_test::sha256_hex(want_));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_TRUE(every_request("verified"));
}

TEST_F(S3Mount, OfflineAfterPrefetchServesThePrefixWithoutTheServer) {
    ASSERT_NO_FATAL_FAILURE(put_dense());
    ASSERT_NO_FATAL_FAILURE(start_server(/*list_max_keys=*/2));
    use_keys();
    std::vector<std::string> args = {"prefetch", "s3://models/dense/"};
    for (const auto& a : s3_args()) args.push_back(a);
    auto r = gm(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(every_request("verified"));
    server_->stop();  // nothing answers from now on
    ASSERT_TRUE(mount(s3_args({"--offline"}), "s3://models/dense/")) << log();
    EXPECT_EQ(gguf_test::sha256_hex(gguf_test::read_file(mnt_ + "/dense.gguf")), gguf_test::sha256_hex(want_));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(S3Mount, FstabOptionsGiveTheEndpointAndRegion) {
    // mount(8) passes fstab's options as -o: endpoint_url=, region= (no --endpoint-url here).
    const auto c = gguf_test::manifest_cases().front();
    put_case(c, "m/");
    ASSERT_NO_FATAL_FAILURE(start_server());
    use_keys();
    const std::string first = gguf::base_name(c.shards.front());
    ASSERT_TRUE(mount({"--cache-dir", cache_, "--net-timeout", "3", "-o",
                       "ro,nofail,_netdev,endpoint_url=" + server_->endpoint_url() + ",region=us-east-1"},
                      "s3://models/m/" + first))
        << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + merged_name(first)), c.merged_sha256) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_TRUE(every_request("verified"));
}

}  // namespace
