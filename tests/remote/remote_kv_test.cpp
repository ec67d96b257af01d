// KV overrides on a remote first shard (issue 22), for real: the kvzoo set served by nginx on
// 127.0.0.1 (an http:// first-shard URL) and by the Hub emulation (an hf:// first-shard path).
// --override-kv, --remove-kv and --chat-template-file edit the served merged header by the same
// rule as for a local set; the expected bytes come from the independent writer in
// support/gguf_rewrite. `check` shows the overrides, `merge URL OUT` with the same flags writes
// the same bytes, and an override that does not fit mounts nothing with one line.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "mount/mount_fixture.hpp"
#include "remote/nginx_mount_fixture.hpp"
#include "support/gguf_rewrite.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::kv_index;
using gguf_test::RawGguf;
using remote_test::NginxMountFixture;

const char* const kTemplate = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}\n";

class RemoteKv : public NginxMountFixture {
protected:
    void SetUp() override {
        NginxMountFixture::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        mount_test::copy_kvzoo(src_);
        template_ = root_ + "/chat.jinja";
        gguf_test::write_file(template_, kTemplate);
    }
    /// The edits under test, as command-line options.
    std::vector<std::string> edits() const {
        return {"--override-kv", "zoo.scalar.u16=int:7", "--remove-kv", "zoo.array.string", "--override-kv",
                "general.url=str:https://example.invalid/x", "--chat-template-file", template_};
    }
    /// The merged kvzoo set with edits() applied, by the independent writer: an int into the
    /// u16 key stays u16 in its place, the removed key is gone, new keys are appended in order.
    static std::string want_bytes() {
        RawGguf want = gguf_test::cut_gguf(gguf_test::read_file(gguf_test::fixture("kvzoo/merged-reference.gguf")));
        want.kvs[kv_index(want, "zoo.scalar.u16")] = gguf_test::RawKv{"zoo.scalar.u16", 2, std::string("\x07\x00", 2)};
        want.kvs.erase(want.kvs.begin() + static_cast<long>(kv_index(want, "zoo.array.string")));
        want.kvs.push_back(gguf_test::raw_string("general.url", "https://example.invalid/x"));
        want.kvs.push_back(gguf_test::raw_string("tokenizer.chat_template", kTemplate));
        return gguf_test::join_gguf(want);
    }
    std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) const {
        a.insert(a.end(), more.begin(), more.end());
        return a;
    }
    std::vector<std::string> remote_args() const { return {"--cache-dir", cache_, "--net-timeout", "3"}; }
    /// Mounts `first_url` with edits(), checks the served bytes, `check` and `merge`.
    void served_edited(const std::string& first_url) {
        const std::string want = want_bytes();
        ASSERT_TRUE(mount(with(remote_args(), edits()), first_url));
        const std::string got = gguf_test::read_file(mnt_ + "/kvzoo.gguf");
        EXPECT_EQ(got.size(), want.size());
        EXPECT_EQ(gguf_test::sha256_hex(got), gguf_test::sha256_hex(want)) << log();
        ASSERT_EQ(unmount_and_wait(), 0) << log();

        auto r = gguf_test::run(with({gguf_test::gguf_mount_binary(), "check", "--cache-dir", cache_, first_url}, edits()));
        EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
        for (const char* shown : {"override zoo.scalar.u16=int:7", "override -zoo.array.string",
                                  "override general.url=str:https://example.invalid/x"}) {
            EXPECT_NE(r.out.find(shown), std::string::npos) << shown << " not in:\n" << r.out;
        }

        const std::string out = root_ + "/merged-edited.gguf";
        r = gguf_test::run(with({gguf_test::gguf_mount_binary(), "merge", "-q", "--cache-dir", cache_, first_url, out},
                                edits()));
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(gguf_test::sha256_file(out), gguf_test::sha256_hex(want));
    }
    std::string template_;
};

TEST_F(RemoteKv, OverridesApplyToAnHttpFirstShardMountCheckAndMerge) {
    ASSERT_NO_FATAL_FAILURE(serve());
    served_edited(nginx_->base_url() + "/" + mount_test::kvzoo_shard(1));
}

TEST_F(RemoteKv, OverridesApplyToAnHfFirstShardMount) {
    std::string why;
    if (!remote_test::HubEmulation::available(&why)) GTEST_SKIP() << why;
    remote_test::HubRepoSpec spec;
    for (int i = 1; i <= 7; ++i) {
        const std::string name = mount_test::kvzoo_shard(i);
        spec.files.push_back(remote_test::HubRepoFile{"Q4_K_M/" + name, src_ + "/" + name, true});
    }
    isolate_hub();
    hub_ = std::make_unique<remote_test::HubEmulation>(spec);
    ASSERT_TRUE(hub_->start(&why)) << why;
    ::setenv("HF_ENDPOINT", hub_->endpoint().c_str(), 1);
    served_edited("hf://" + spec.org + "/" + spec.repo + "/Q4_K_M/" + mount_test::kvzoo_shard(1));
}

// An override that does not fit the set mounts nothing: exit 1, one line naming the model and
// the key, as for a local set.
TEST_F(RemoteKv, AnOverrideThatDoesNotFitARemoteFirstShardMountsNothing) {
    ASSERT_NO_FATAL_FAILURE(serve());
    ASSERT_TRUE(start(with(remote_args(), {"--override-kv", "zoo.scalar.u8=int:256"}),
                      nginx_->base_url() + "/" + mount_test::kvzoo_shard(1)));
    EXPECT_EQ(daemon_.wait_exit(std::chrono::seconds(20)), 1) << log();
    EXPECT_EQ(mount_test::lines_with(log(), "kvzoo.gguf: --override-kv: zoo.scalar.u8: 256 is out of range for u8 "
                                            "(0..255); nothing mounted")
                  .size(),
              1u)
        << log();
    EXPECT_FALSE(mount_test::find_mount(mnt_));
}

}  // namespace
