// llama.cpp (node-llama-cpp, tests/clients/llama-tokens.mjs) loading tiny-llama through remote
// mounts (issues 11 and 12). tiny-llama is split into 3 shards by our own `gguf-mount split`,
// served on 127.0.0.1 only, by nginx as a first-shard URL and by the Hub emulation (API + CDN
// nginx, HF_ENDPOINT pointed at it) as hf://ORG/REPO with the shards in a quant folder F32/,
// and mounted with a fresh --cache-dir (mounting fetches each shard whole: one 4 MiB block). The
// greedy token ids and the sha256 of the mounted merged file must equal
// tests/clients/tiny-llama-expected.json (the values the local clients.llama part asserts), cold
// and again after a remount with the server stopped and --offline.
// Skips without FUSE or without node >= 20; fails when the npm packages are missing (ctest runs
// clients.npm first: fixture gguf_node_modules) or nginx is missing (scripts/install-deps.sh).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "mount/mount_fixture.hpp"
#include "remote/hub_emulation.hpp"
#include "remote/servers.hpp"
#include "support/support.hpp"

namespace {

using mount_test::MountFixture;
using remote_test::AccessEntry;
using remote_test::ChildProcess;
using remote_test::HubEmulation;
using remote_test::HubRepoFile;
using remote_test::HubRepoSpec;
using remote_test::NginxOptions;
using remote_test::NginxServer;

/// Longest one llama-tokens.mjs run may take (a run takes seconds; this leaves room for a busy
/// machine) before the test kills that node process (by its PID) and fails.
constexpr std::chrono::seconds kNodeLimit{180};

const std::string kClientsDir = GGUF_CLIENTS_DIR;

/// tests/clients/tiny-llama-expected.json, parsed; fails the current test if unreadable.
nlohmann::json expected() {
    try {
        return nlohmann::json::parse(gguf_test::read_file(kClientsDir + "/tiny-llama-expected.json"));
    } catch (const nlohmann::json::exception& e) {
        ADD_FAILURE() << kClientsDir << "/tiny-llama-expected.json: " << e.what();
        return nlohmann::json::object();
    }
}

/// Token ids one llama-tokens.mjs run printed.
struct Tokens {
    std::vector<int> prompt, generated;
    std::string line;  // the JSON line as printed
};

/// Base names of the 3 shards `gguf-mount split --split-max-tensors 10` makes of tiny-llama.
std::vector<std::string> shard_names() {
    return {"tiny-llama-00001-of-00003.gguf", "tiny-llama-00002-of-00003.gguf", "tiny-llama-00003-of-00003.gguf"};
}

class RemoteLlama : public MountFixture {
protected:
    void SetUp() override {
        MountFixture::SetUp();  // skips without FUSE
        if (IsSkipped() || HasFatalFailure()) return;
        node_ = remote_test::find_program("node");
        if (node_.empty()) GTEST_SKIP() << "node >= 20 is needed and missing: run scripts/install-deps.sh";
        auto version = gguf_test::run({node_, "--version"});
        const int major = std::atoi(version.out.c_str() + (version.out.rfind('v', 0) == 0 ? 1 : 0));
        if (version.exit_code != 0 || major < 20)
            GTEST_SKIP() << "node " << version.out << " is too old: node-llama-cpp 3.22.1 needs node >= 20";
        for (const char* p : {"node-llama-cpp", "@node-llama-cpp/linux-x64"})
            ASSERT_TRUE(mount_test::exists(kClientsDir + "/node_modules/" + p))
                << kClientsDir << "/node_modules/" << p
                << " is missing: run the npm part first (ctest -R clients.npm, or tests/clients/run-clients.sh "
                   "GGUF_MOUNT MMAP_PAGES npm)";
        std::string why;
        ASSERT_TRUE(NginxServer::available(&why)) << why << " (scripts/install-deps.sh installs nginx-light)";
        want_ = expected();
        ASSERT_TRUE(want_.contains("generated_ids")) << "tiny-llama-expected.json lacks generated_ids";
        cache_ = root_ + "/cache";
        ASSERT_NO_FATAL_FAILURE(split_tiny_llama());
    }
    void TearDown() override {
        MountFixture::TearDown();  // unmounts MNT and reaps the daemon, also after a failure
        if (nginx_) nginx_->stop();
        if (hub_) hub_->stop();
        for (const char* v : {"HF_ENDPOINT", "HF_HOME"}) ::unsetenv(v);
    }

    /// `gguf-mount split --split-max-tensors N` of the fixture into src_; every shard must be
    /// llama.cpp's reference shard (sha256 from the expectations file).
    void split_tiny_llama() {
        const std::string n = std::to_string(want_.at("split_max_tensors").get<int>());
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "split", "--split-max-tensors", n, "-q",
                                 gguf_test::fixture("tiny-llama/tiny-llama.gguf"), src_ + "/tiny-llama"});
        ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
        const auto& shas = want_.at("shard_sha256");
        ASSERT_EQ(shas.size(), shard_names().size());
        for (size_t i = 0; i < shas.size(); ++i)
            ASSERT_EQ(gguf_test::sha256_file(src_ + "/" + shard_names()[i]), shas[i].get<std::string>())
                << shard_names()[i] << ": our split differs from llama.cpp's reference shard";
    }

    /// Runs `node llama-tokens.mjs MODEL` (killed by its PID after kNodeLimit) and parses the
    /// JSON line it prints. Fails the current test when node fails or prints no such line.
    Tokens llama_tokens(const std::string& model) {
        const std::string out_path = root_ + "/node.log";
        std::remove(out_path.c_str());
        ChildProcess node;
        std::string error;
        Tokens t;
        if (!node.start({node_, kClientsDir + "/llama-tokens.mjs", model}, out_path, &error)) {
            ADD_FAILURE() << "cannot start node: " << error;
            return t;
        }
        const auto deadline = std::chrono::steady_clock::now() + kNodeLimit;
        while (node.running() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        const bool timed_out = node.running();
        const auto code = node.stop(std::chrono::milliseconds(1000));
        const std::string out = gguf_test::read_file(out_path);
        if (timed_out || !code || *code != 0) {
            ADD_FAILURE() << "node llama-tokens.mjs " << model << ": "
                          << (timed_out ? "did not finish in time" : "exit " + std::to_string(code.value_or(-1)))
                          << "\n" << out << "\n--- daemon log ---\n" << log();
            return t;
        }
        std::istringstream lines(out);
        for (std::string line; std::getline(lines, line);) {
            if (line.rfind("{", 0) != 0 || line.find("\"generated\"") == std::string::npos) continue;
            auto j = nlohmann::json::parse(line, nullptr, false);
            if (j.is_discarded()) continue;
            t.prompt = j.value("prompt", std::vector<int>{});
            t.generated = j.value("generated", std::vector<int>{});
            t.line = line;
        }
        if (t.line.empty()) ADD_FAILURE() << "node llama-tokens.mjs " << model << " printed no token line:\n" << out;
        return t;
    }

    /// llama.cpp on MNT/`path` gives the expected token ids, then the whole file has the
    /// expected sha256 (node reads first, so its reads are the first after the mount).
    void expect_expected_model(const std::string& step, const std::string& path = "tiny-llama.gguf") {
        const std::string model = mnt_ + "/" + path;
        Tokens t = llama_tokens(model);
        std::cout << "[ tokens   ] " << step << ": " << t.line << std::endl;
        EXPECT_EQ(t.prompt, want_.at("prompt_ids").get<std::vector<int>>()) << step;
        EXPECT_EQ(t.generated, want_.at("generated_ids").get<std::vector<int>>()) << step << "\n" << log();
        EXPECT_EQ(gguf_test::sha256_file(model), want_.at("merged_sha256").get<std::string>()) << step;
    }

    std::vector<std::string> args(bool offline = false) const {
        std::vector<std::string> a = {"--cache-dir", cache_, "--net-timeout", "5"};
        if (offline) a.push_back("--offline");
        return a;
    }

    std::string node_, cache_;
    nlohmann::json want_;
    std::unique_ptr<NginxServer> nginx_;
    std::unique_ptr<HubEmulation> hub_;
};

/// Distinct URIs (query cut off) that `log` shows answered with bytes (200/206 GETs).
std::set<std::string> data_uris(const std::vector<AccessEntry>& log) {
    std::set<std::string> out;
    for (const auto& e : log)
        if (e.method == "GET" && (e.status == 200 || e.status == 206) && e.body_bytes_sent > 0)
            out.insert(e.uri.substr(0, e.uri.find('?')));
    return out;
}

TEST_F(RemoteLlama, FirstShardUrlGivesTheLocalTokensColdThenOfflineWithTheServerStopped) {
    NginxOptions o;
    o.root = src_;
    nginx_ = std::make_unique<NginxServer>(o);
    std::string error;
    ASSERT_TRUE(nginx_->start(&error)) << error;
    const std::string url = nginx_->base_url() + "/" + shard_names()[0];

    ASSERT_TRUE(mount(args(), url));
    ASSERT_NO_FATAL_FAILURE(expect_expected_model("http cold cache"));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    // Every shard's bytes came from nginx.
    std::set<std::string> want_uris;
    for (const auto& n : shard_names()) want_uris.insert("/" + n);
    EXPECT_EQ(data_uris(nginx_->access_log()), want_uris);

    nginx_->stop();
    ASSERT_TRUE(mount(args(true), url));
    ASSERT_NO_FATAL_FAILURE(expect_expected_model("http --offline, nginx stopped"));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(RemoteLlama, HfRepoGivesTheLocalTokensColdThenOfflineWithTheHubStopped) {
    HubRepoSpec spec;
    spec.page_size = 2;  // 5 entries (F32/, its 3 shards, README.md): three tree pages
    for (const auto& n : shard_names()) spec.files.push_back(HubRepoFile{"F32/" + n, src_ + "/" + n, true});
    spec.files.push_back(HubRepoFile{"README.md", gguf_test::fixture("tiny-llama/README.md"), false});
    hub_ = std::make_unique<HubEmulation>(spec);
    std::string error;
    ASSERT_TRUE(hub_->start(&error)) << error;
    for (const char* v : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"}) ::unsetenv(v);
    ::setenv("HF_ENDPOINT", hub_->endpoint().c_str(), 1);
    ::setenv("HF_HOME", (root_ + "/hf-home").c_str(), 1);  // no token file of this machine is read
    const std::string source = "hf://" + spec.org + "/" + spec.repo;

    ASSERT_TRUE(mount(args(), source));
    ASSERT_NO_FATAL_FAILURE(expect_expected_model("hf:// cold cache", "F32/tiny-llama.gguf"));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    // The shards' bytes came from the CDN port (one blob per shard), after a resolve each.
    std::set<std::string> blobs;
    for (const auto& e : hub_->entries())
        if (e.lfs) blobs.insert("/blobs/" + e.sha256);
    EXPECT_EQ(blobs.size(), 3u);
    EXPECT_EQ(data_uris(hub_->cdn().access_log()), blobs);
    size_t tree_pages = 0;
    for (const auto& e : hub_->api().access_log()) tree_pages += e.uri.find("/tree/") != std::string::npos;
    EXPECT_EQ(tree_pages, 3u);
    EXPECT_EQ(hub_->page_count(""), 3u);

    hub_->stop();
    ASSERT_TRUE(mount(args(true), source));
    ASSERT_NO_FATAL_FAILURE(expect_expected_model("hf:// --offline, Hub stopped", "F32/tiny-llama.gguf"));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

}  // namespace
