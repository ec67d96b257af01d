// KV overrides through a real mount (issue 22): the flags on every model served, NAME.gguf.kv
// sidecars beside a set's first shard or a single file (never shown themselves), a bad sidecar
// hiding its model with the file and line logged, refused flags mounting nothing, and a sidecar
// edited while a descriptor is open (same length, other bytes: the old descriptor keeps the old
// bytes, a new open gets the new ones). Expected bytes come from the independent writer in
// support/gguf_rewrite.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include <gtest/gtest.h>

#include "mount/mount_fixture.hpp"
#include "support/gguf_rewrite.hpp"
#include "support/support.hpp"

namespace {

using gguf_test::cut_gguf;
using gguf_test::fixture;
using gguf_test::join_gguf;
using gguf_test::kv_index;
using gguf_test::RawGguf;
using mount_test::copy_kvzoo;
using mount_test::exists;
using mount_test::Fd;
using mount_test::kLiveUpdateLimit;
using mount_test::lines_with;
using mount_test::list_dir;
using mount_test::time_until;

/// The merged kvzoo set (gguf-split --merge) cut into pieces.
RawGguf kvzoo_merged() { return cut_gguf(gguf_test::read_file(fixture("kvzoo/merged-reference.gguf"))); }

/// Reads all of `fd` from offset 0 with pread (through the page cache).
std::string read_fd(int fd) {
    std::string out;
    char buf[65536];
    for (;;) {
        const ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(out.size()));
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    return out;
}

class KvMountTest : public mount_test::MountFixture {};

TEST_F(KvMountTest, FlagsApplyToTheMergedSetAndASingleFile) {
    copy_kvzoo(src_);
    gguf_test::copy_file(fixture("tiny-llama/tiny-llama.gguf"), src_ + "/tiny.gguf");
    gguf_test::write_file(src_ + "/README.md", "not a model\n");
    ASSERT_TRUE(mount({"--override-kv", "general.url=str:https://example.invalid/x", "--remove-kv", "general.name"}));

    RawGguf set = kvzoo_merged();
    set.kvs.erase(set.kvs.begin() + static_cast<long>(kv_index(set, "general.name")));
    set.kvs.push_back(gguf_test::raw_string("general.url", "https://example.invalid/x"));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), gguf_test::sha256_hex(join_gguf(set)));

    RawGguf tiny = cut_gguf(gguf_test::read_file(fixture("tiny-llama/tiny-llama.gguf")));
    tiny.kvs.erase(tiny.kvs.begin() + static_cast<long>(kv_index(tiny, "general.name")));
    tiny.kvs.push_back(gguf_test::raw_string("general.url", "https://example.invalid/x"));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/tiny.gguf"), gguf_test::sha256_hex(join_gguf(tiny)));
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/README.md"), "not a model\n");  // not a GGUF name: as it is
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(KvMountTest, SidecarAppliesToItsModelAndIsNotShown) {
    copy_kvzoo(src_);
    gguf_test::write_file(src_ + "/tmpl.jinja", "{{ messages }}");
    gguf_test::write_file(src_ + "/kvzoo.gguf.kv", "# fixed metadata\n"
                                                   "llama.context_length=int:8192\n"
                                                   "\n"
                                                   "tokenizer.chat_template=str:@tmpl.jinja\n");
    ASSERT_TRUE(mount());
    RawGguf want = kvzoo_merged();
    want.kvs[kv_index(want, "llama.context_length")] = gguf_test::raw_u32("llama.context_length", 8192);
    want.kvs.push_back(gguf_test::raw_string("tokenizer.chat_template", "{{ messages }}"));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/kvzoo.gguf"), gguf_test::sha256_hex(join_gguf(want)));
    EXPECT_EQ(list_dir(mnt_), (std::vector<std::string>{"kvzoo.gguf", "tmpl.jinja"}));
    EXPECT_FALSE(exists(mnt_ + "/kvzoo.gguf.kv"));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(KvMountTest, SingleFileSourceWithFlagsIsServedEdited) {
    gguf_test::copy_file(fixture("tiny-llama/tiny-llama.gguf"), src_ + "/tiny.gguf");
    ASSERT_TRUE(mount({"--override-kv", "tokenizer.ggml.add_eos_token=bool:true"}, src_ + "/tiny.gguf"));
    RawGguf want = cut_gguf(gguf_test::read_file(fixture("tiny-llama/tiny-llama.gguf")));
    want.kvs[kv_index(want, "tokenizer.ggml.add_eos_token")] = gguf_test::raw_bool("tokenizer.ggml.add_eos_token", true);
    EXPECT_EQ(list_dir(mnt_), (std::vector<std::string>{"tiny.gguf"}));
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/tiny.gguf"), gguf_test::sha256_hex(join_gguf(want)));
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(KvMountTest, BadSidecarHidesItsModelAndTheLogNamesFileAndLine) {
    copy_kvzoo(src_);
    gguf_test::copy_file(fixture("tiny-llama/tiny-llama.gguf"), src_ + "/tiny.gguf");
    gguf_test::write_file(src_ + "/kvzoo.gguf.kv", "general.name=str:ok\nllama.context_length=str:big\n");
    ASSERT_TRUE(mount());
    EXPECT_EQ(list_dir(mnt_), (std::vector<std::string>{"tiny.gguf"}));  // tiny is served as it is
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/tiny.gguf"),
              gguf_test::sha256_file(fixture("tiny-llama/tiny-llama.gguf")));
    EXPECT_EQ(lines_with(log(), src_ + "/kvzoo.gguf.kv:2: llama.context_length: the key is u32, str cannot go into it")
                  .size(),
              1u)
        << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

TEST_F(KvMountTest, FlagThatDoesNotFitAModelMountsNothing) {
    copy_kvzoo(src_);
    ASSERT_TRUE(start({"--override-kv", "zoo.scalar.u8=int:256"}));
    EXPECT_EQ(daemon_.wait_exit(std::chrono::seconds(20)), 1) << log();
    EXPECT_EQ(lines_with(log(), "kvzoo.gguf: --override-kv: zoo.scalar.u8: 256 is out of range for u8 (0..255); "
                                "nothing mounted")
                  .size(),
              1u)
        << log();
    EXPECT_FALSE(mount_test::find_mount(mnt_));

    ASSERT_TRUE(start({"--remove-kv", "general.license"}));
    EXPECT_EQ(daemon_.wait_exit(std::chrono::seconds(20)), 1) << log();
    EXPECT_EQ(lines_with(log(), "--remove-kv: general.license: not in the file, nothing to remove; nothing mounted").size(),
              1u)
        << log();

    ASSERT_TRUE(start({"--override-kv", "split.count=int:1"}));
    EXPECT_EQ(daemon_.wait_exit(std::chrono::seconds(20)), 2) << log();
    EXPECT_NE(log().find("--override-kv: split.count: describes the file's layout"), std::string::npos) << log();
    EXPECT_FALSE(mount_test::find_mount(mnt_));
}

// Issue 22, the trap: a sidecar edited to a value of the same length gives a file of the same
// size from the same shards. The served file must still get a new identity (inode), or the
// kernel keeps the old header pages (keep_cache) and the daemon the old plan.
TEST_F(KvMountTest, SidecarEditedUnderAnOpenDescriptorGivesNewBytesToNewOpensOnly) {
    copy_kvzoo(src_);
    const std::string sidecar = src_ + "/kvzoo.gguf.kv";
    gguf_test::write_file(sidecar, "general.name=str:AAAA\n");
    ASSERT_TRUE(mount());
    const std::string path = mnt_ + "/kvzoo.gguf";
    RawGguf old_model = kvzoo_merged();
    old_model.kvs[kv_index(old_model, "general.name")] = gguf_test::raw_string("general.name", "AAAA");
    RawGguf new_model = kvzoo_merged();
    new_model.kvs[kv_index(new_model, "general.name")] = gguf_test::raw_string("general.name", "BBBB");
    const std::string old_sha = gguf_test::sha256_hex(join_gguf(old_model));
    const std::string new_sha = gguf_test::sha256_hex(join_gguf(new_model));

    Fd held{::open(path.c_str(), O_RDONLY)};
    ASSERT_GE(held.fd, 0) << std::strerror(errno);
    ASSERT_EQ(gguf_test::sha256_hex(read_fd(held.fd)), old_sha);  // its pages are now in the page cache

    gguf_test::write_file(sidecar, "general.name=str:BBBB\n");  // in place: same length
    auto seen = time_until([&] { return gguf_test::sha256_file(path) == new_sha; });
    ASSERT_TRUE(seen) << "a new open still reads the old header 5 s after the sidecar changed\n" << log();
    std::cout << "[ measured ] edited sidecar seen by a new open after " << seen->count() << " ms\n";
    EXPECT_LE(*seen, kLiveUpdateLimit);
    EXPECT_EQ(gguf_test::sha256_hex(read_fd(held.fd)), old_sha);
    held.close();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
}

}  // namespace
