// Known attacks on GGUF readers and split-set loaders that reader_test.cpp's corruption matrix
// does not cover, plus regressions for what fuzzing (fuzz/) and review found during the
// hardening, each marked "fuzz finding" or "review finding". One handcrafted input each.
//
// Every attack runs in a forked child with a 512 MiB address-space limit on top of what the
// test process already maps (skipped under AddressSanitizer, which needs terabytes of virtual
// shadow memory) and a 10 s alarm, so that a crash, a hang or a huge allocation fails the test
// instead of killing or stalling the suite. Each input must be refused with the expected
// gguf::Error code and text in under 1 s (a limit, not a benchmark), and the child's peak RSS
// may grow by less than 512 MiB (asserted in every build).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/model/merge_plan.hpp"
#include "support/scan_directory.hpp"
#include "gguf/format/file_plan.hpp"
#include "gguf/error.hpp"
#include "gguf/bytes/layout.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/model/split_set.hpp"
#include "common/text.hpp"
#include "gguf/model/split_plan.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "support/gguf_builder.hpp"
#include "support/support.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define GGUF_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GGUF_TEST_ASAN 1
#endif
#endif

namespace gguf {
/// Prints a Code by name in failed assertions.
static void PrintTo(Code c, std::ostream* os) {
    static const char* names[] = {"Io",      "Truncated", "BadMagic", "BadVersion", "BigEndian", "BadValue",
                                  "BadTensor", "BadAlignment", "TooLarge", "BadSplit", "Exists", "BadArgument"};
    auto i = static_cast<size_t>(c);
    *os << (i < sizeof names / sizeof names[0] ? names[i] : "?");
}
}  // namespace gguf

namespace {

using gguf::Code;
using gguf_test::Bytes;
using gguf_test::TempDir;

constexpr uint64_t kMemoryBudget = uint64_t{512} << 20;
constexpr double kTimeLimitSeconds = 1.0;

// ---- running an attack in a bounded child --------------------------------------------------

/// What happened to one attack, as reported by the child.
struct Outcome {
    enum class Kind { Accepted, GgufError, OtherException, Died };
    /// Prints a Kind by name in failed assertions.
    friend void PrintTo(Kind k, std::ostream* os) {
        *os << (k == Kind::Accepted ? "Accepted" : k == Kind::GgufError ? "GgufError"
                : k == Kind::OtherException ? "OtherException" : "Died");
    }
    Kind kind = Kind::Died;
    Code code = Code::Io;
    std::string message;    // gguf::Error::what(), or a description of the death
    double seconds = 0;     // wall time of the attack itself
    uint64_t peak_rss = 0;  // growth of the child's peak RSS during the attack, bytes
};

uint64_t proc_status_kib(const char* field) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(field, 0) == 0) return std::stoull(line.substr(std::strlen(field)));
    }
    return 0;
}

void write_all(int fd, const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
        ssize_t n = ::write(fd, s.data() + done, s.size() - done);
        if (n <= 0) return;
        done += static_cast<size_t>(n);
    }
}

/// Runs `attack` in a forked child under the memory and time limits described at the top.
Outcome run_bounded(const std::function<void()>& attack) {
    int p[2];
    if (::pipe(p) != 0) return {};
    pid_t pid = ::fork();
    if (pid == 0) {
        ::close(p[0]);
#ifndef GGUF_TEST_ASAN
        rlimit rl{};
        rl.rlim_cur = rl.rlim_max = proc_status_kib("VmSize:") * 1024 + kMemoryBudget;
        ::setrlimit(RLIMIT_AS, &rl);
#endif
        // Reset the peak RSS so that VmHWM - VmRSS measures the attack, not the test process.
        { std::ofstream("/proc/self/clear_refs") << "5"; }
        const uint64_t rss_before = proc_status_kib("VmRSS:") * 1024;
        ::alarm(10);
        std::string kind = "A", code = "0", message;
        auto t0 = std::chrono::steady_clock::now();
        try {
            attack();
        } catch (const gguf::Error& e) {
            kind = "E";
            code = std::to_string(static_cast<int>(e.code()));
            message = gguf::escape(e.what());  // as every front end prints it
        } catch (const std::exception& e) {
            kind = "X";
            message = e.what();
        }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        write_all(p[1], kind + "\n" + code + "\n" + std::to_string(s) + "\n" +
                            std::to_string(proc_status_kib("VmHWM:") * 1024 - rss_before) + "\n" + message);
        ::_exit(0);
    }
    ::close(p[1]);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    ::close(p[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    Outcome o;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || out.empty()) {
        o.message = WIFSIGNALED(status) ? std::string("child killed by signal ") + strsignal(WTERMSIG(status))
                                        : "child exited with status " + std::to_string(WEXITSTATUS(status));
        return o;
    }
    size_t a = out.find('\n'), b = out.find('\n', a + 1), c = out.find('\n', b + 1), d = out.find('\n', c + 1);
    char k = out[0];
    o.kind = k == 'A' ? Outcome::Kind::Accepted : k == 'E' ? Outcome::Kind::GgufError : Outcome::Kind::OtherException;
    o.code = static_cast<Code>(std::stoi(out.substr(a + 1, b - a - 1)));
    o.seconds = std::stod(out.substr(b + 1, c - b - 1));
    o.peak_rss = std::stoull(out.substr(c + 1, d - c - 1));
    o.message = out.substr(d + 1);
    return o;
}

/// Asserts that `attack` is refused with `code`, a one-line message starting with `file`
/// and containing `text`, within the time and memory limits.
void expect_refused(const std::function<void()>& attack, Code code, const std::string& file, const std::string& text) {
    Outcome o = run_bounded(attack);
    ASSERT_EQ(o.kind, Outcome::Kind::GgufError) << "not a gguf::Error: " << o.message;
    EXPECT_EQ(o.code, code) << o.message;
    EXPECT_EQ(o.message.rfind(file, 0), 0u) << "message must start with the file name: " << o.message;
    EXPECT_NE(o.message.find(text), std::string::npos) << o.message;
    for (char ch : o.message) {
        ASSERT_TRUE(static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f) << "control character in: " << o.message;
    }
    EXPECT_LT(o.message.size(), 1024u) << o.message;
    EXPECT_LT(o.seconds, kTimeLimitSeconds) << o.message;
    EXPECT_LT(o.peak_rss, kMemoryBudget) << o.message;
}

/// parse_header on `bytes` (file size = its length), under expect_refused.
void expect_header_refused(const std::string& bytes, Code code, const std::string& text) {
    expect_refused([&] { gguf::parse_header(bytes, bytes.size(), "evil.gguf"); }, code, "evil.gguf: ", text);
}

// ---- building shards ------------------------------------------------------------------------

gguf::KeyValue u16_kv(const std::string& key, uint16_t v) { return {key, gguf::Value::u16(v)}; }
gguf::KeyValue i32_kv(const std::string& key, int32_t v) { return {key, gguf::Value::i32(v)}; }
gguf::KeyValue u32_kv(const std::string& key, uint32_t v) { return {key, gguf::Value::u32(v)}; }

/// A valid gguf-split shard: `extra` KVs, then split.no, split.tensors.count, split.count.
std::string shard(uint16_t no, uint16_t count, int32_t total, const std::vector<gguf_test::TestTensor>& tensors,
                  std::vector<gguf::KeyValue> extra = {}) {
    extra.push_back(u16_kv("split.no", no));
    extra.push_back(i32_kv("split.tensors.count", total));
    extra.push_back(u16_kv("split.count", count));
    return gguf_test::build_gguf(extra, tensors, 32, 7u + no);
}

/// Writes shards 1..n of "m-0000k-of-0000n.gguf" into `dir`; returns the first path.
std::string write_set(const TempDir& dir, const std::vector<std::string>& shards, uint32_t name_count = 0) {
    uint32_t n = name_count ? name_count : static_cast<uint32_t>(shards.size());
    for (uint32_t i = 0; i < shards.size(); ++i) {
        gguf_test::write_file(gguf::shard_path(dir / "m", i + 1, n), shards[i]);
    }
    return gguf::shard_path(dir / "m", 1, n);
}

/// Two good shards of one f32 tensor each: "a" [8] and "b" [16].
std::vector<std::string> good_pair() {
    return {shard(0, 2, 2, {{"a", {8}, 0}}, {{"general.name", gguf::Value::string("m")}}),
            shard(1, 2, 2, {{"b", {16}, 0}})};
}

void open_set(const std::string& first) { gguf::SplitSet::open(first); }

// ---- header attacks -------------------------------------------------------------------------

// Four dimensions of 2^16: the element count is exactly 2^64, which an unchecked int64 multiply
// wraps to 0, turning a "huge" tensor into an empty one whose offsets then look valid.
TEST(Attack, DimsWhoseProductWrapsToZero) {
    Bytes b;
    b.preamble(3, 1, 0).str("t").u32(4).i64(65536).i64(65536).i64(65536).i64(65536).u32(0).u64(0).pad(32);
    expect_header_refused(b.str(), Code::BadTensor, "element count overflows int64");
}

// ne0 = 2^63 - 3 (f32): the element count fits in int64, the byte count (x4) does not.
TEST(Attack, Ne0NearInt64MaxOverflowsTheByteSize) {
    Bytes b;
    b.preamble(3, 1, 0).str("t").u32(1).i64(INT64_MAX - 2).u32(0).u64(0).pad(32);
    expect_header_refused(b.str(), Code::BadTensor, "byte size overflows");
}

// [2^30, 2^30] i8: 2^60 bytes, no overflow anywhere, but far past the end of a 128-byte file.
TEST(Attack, ExabyteTensorInATinyFile) {
    Bytes b;
    b.preamble(3, 1, 0).str("t").u32(2).i64(int64_t{1} << 30).i64(int64_t{1} << 30).u32(24).u64(0).pad(32);
    b.raw(std::string(64, '\0'));
    expect_header_refused(b.str(), Code::Truncated,
                          "tensor 't' data ends at offset 1152921504606847072 but the file has 160 bytes");
}

// Counts that could never fit: an allocation sized by them would be 2^62 entries.
TEST(Attack, KvCount2p62) {
    expect_header_refused(Bytes().preamble(3, 0, int64_t{1} << 62).str(), Code::Truncated,
                          "KV count 4611686018427387904 cannot fit in the 0 bytes left");
}

TEST(Attack, TensorCount2p62) {
    Bytes b;
    b.preamble(3, int64_t{1} << 62, 0).raw(std::string(4096, '\0'));
    expect_header_refused(b.str(), Code::Truncated, "tensor count 4611686018427387904 cannot fit in the 4096 bytes");
}

// String length 2^64 - 1: "+ 1" for a terminator would wrap to 0.
TEST(Attack, KeyLengthUint64Max) {
    Bytes b;
    b.preamble(3, 0, 1).u64(UINT64_MAX).raw(std::string(32, 'k'));
    expect_header_refused(b.str(), Code::TooLarge, "key length 18446744073709551615 exceeds the limit of 2^30");
}

TEST(Attack, StringValueLengthUint64Max) {
    Bytes b;
    b.preamble(3, 0, 1).str("k").u32(8).u64(UINT64_MAX).raw("v");
    expect_header_refused(b.str(), Code::TooLarge, "string value of 'k' length 18446744073709551615");
}

// Array counts under the 2^30 cap but beyond the file: 2^29 u64 would be 4 GiB.
TEST(Attack, ArrayCountBeyondTheFile) {
    Bytes b;
    b.preamble(3, 0, 1).str("k").u32(9).u32(10).u64(uint64_t{1} << 29).raw(std::string(64, '\0'));
    expect_header_refused(b.str(), Code::Truncated, "key 'k': array of 536870912 u64 exceeds the 64 bytes left");
}

TEST(Attack, StringArrayCountBeyondTheFile) {
    Bytes b;
    b.preamble(3, 0, 1).str("tokens").u32(9).u32(8).u64((uint64_t{1} << 30) - 1).str("a").str("b");
    expect_header_refused(b.str(), Code::Truncated, "key 'tokens': array of 1073741823 string exceeds");
}

// ---- split-set attacks ----------------------------------------------------------------------

TEST(Attack, GitLfsPointerAsShard) {
    TempDir dir;
    auto shards = good_pair();
    shards[1] = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 4000000000\n";
    std::string first = write_set(dir, shards);
    expect_refused([&] { open_set(first); }, Code::BadMagic, dir / "m-00002-of-00002.gguf: ", "git-lfs pointer");
}

TEST(Attack, BigEndianShard) {
    TempDir dir;
    auto shards = good_pair();
    shards[1].replace(4, 4, std::string("\x00\x00\x00\x03", 4));  // version 3, big-endian
    std::string first = write_set(dir, shards);
    expect_refused([&] { open_set(first); }, Code::BigEndian, dir / "m-00002-of-00002.gguf: ", "big-endian");
}

// Decision: a set whose shards have different GGUF versions (2 and 3) is ACCEPTED when every
// shard parses. Versions 2 and 3 share one encoding (v3 only added big-endian files, which are
// refused separately), ggml reads both, and gguf-split's merge accepts the mix; the merged file
// is written as version 3, so nothing of the mix reaches the reader of the merged file.
TEST(Attack, MixedVersionsV2AndV3AreAccepted) {
    TempDir dir;
    auto shards = good_pair();
    shards[1][4] = 2;  // shard 2 claims version 2
    std::string first = write_set(dir, shards);
    auto set = gguf::SplitSet::open(first);
    EXPECT_EQ(set.shards()[0].header.version, 3u);
    EXPECT_EQ(set.shards()[1].header.version, 2u);
    auto vf = gguf::open_merged(set);
    std::string merged(vf.size(), '\0');
    ASSERT_EQ(vf.read(0, merged.size(), merged.data()), static_cast<ssize_t>(merged.size()));
    auto h = gguf::parse_header(merged, merged.size(), "merged.gguf");
    EXPECT_EQ(h.version, 3u);
    EXPECT_EQ(h.tensors.size(), 2u);
}

TEST(Attack, SplitNoDisagreesWithFileName) {
    TempDir dir;
    auto shards = good_pair();
    shards[1] = shard(5, 2, 2, {{"b", {16}, 0}});
    std::string first = write_set(dir, shards);
    expect_refused([&] { open_set(first); }, Code::BadSplit, dir / "m-00002-of-00002.gguf: ",
                   "key 'split.no' is 5 but the file name says 1 (0-based)");
}

// 70,000 shards cannot be announced in a u16: a u32 split.count is a type error.
TEST(Attack, SplitCount70000AsU32) {
    TempDir dir;
    std::vector<gguf::KeyValue> kvs = {u16_kv("split.no", 0), i32_kv("split.tensors.count", 1),
                                       u32_kv("split.count", 70000)};
    std::string first = dir / "m-00001-of-70000.gguf";
    gguf_test::write_file(first, gguf_test::build_gguf(kvs, {{"a", {8}, 0}}));
    expect_refused([&] { open_set(first); }, Code::BadSplit, first + ": ",
                   "key 'split.count' has type u32, expected u16");
}

// split.count 65535 with shard 2 missing: the error names shard 2 at once; nothing is sized by
// the claimed count (no 65535-entry reservation, no further open attempts).
TEST(Attack, SplitCount65535WithShard2Missing) {
    TempDir dir;
    std::string first = dir / "m-00001-of-65535.gguf";
    gguf_test::write_file(first, shard(0, 65535, 1, {{"a", {8}, 0}}));
    expect_refused([&] { open_set(first); }, Code::BadSplit, dir / "m-00002-of-65535.gguf: ",
                   "missing shard 2 of 65535");
}

// Review finding: shard 1 (with a 4 MiB header) linked under the names of shards 2..3000. The
// loader parsed and kept every shard before checking any split key: 3000 copies of the header,
// 12 GB. Each shard is now checked as soon as it is read, so this stops at shard 2.
TEST(Attack, FirstShardLinkedAsEveryOtherShard) {
    TempDir dir;
    std::string first = dir / "m-00001-of-03000.gguf";
    gguf_test::write_file(first, shard(0, 3000, 1, {{"a", {8}, 0}},
                                       {{"tokenizer.blob", gguf::Value::string(std::string(4 << 20, 'x'))}}));
    for (uint32_t i = 2; i <= 3000; ++i) {
        ASSERT_EQ(::symlink(first.c_str(), gguf::shard_path(dir / "m", i, 3000).c_str()), 0);
    }
    expect_refused([&] { open_set(first); }, Code::BadSplit, dir / "m-00002-of-03000.gguf: ",
                   "key 'split.no' is 0 but the file name says 1");
}

TEST(Attack, DuplicateTensorNameAcrossShards) {
    TempDir dir;
    std::string first = write_set(dir, {shard(0, 2, 2, {{"a", {8}, 0}}), shard(1, 2, 2, {{"a", {8}, 0}})});
    expect_refused([&] { open_set(first); }, Code::BadSplit, dir / "m-00002-of-00002.gguf: ",
                   "tensor 'a' also appears in an earlier shard");
}

TEST(Attack, TensorPastTheEndOfItsShard) {
    TempDir dir;
    auto shards = good_pair();
    shards[1].resize(shards[1].size() - 40);  // "b" is 64 bytes at the end of the file
    std::string first = write_set(dir, shards);
    expect_refused([&] { open_set(first); }, Code::Truncated, dir / "m-00002-of-00002.gguf: ",
                   "truncated: tensor 'b' data ends at offset");
}

TEST(Attack, SplitTensorsCountMismatch) {
    TempDir dir;
    std::string first = write_set(dir, {shard(0, 2, 3, {{"a", {8}, 0}}), shard(1, 2, 3, {{"b", {16}, 0}})});
    expect_refused([&] { open_set(first); }, Code::BadSplit, first + ": ",
                   "key 'split.tensors.count' is 3 but the 2 shards hold 2 tensors");
}

TEST(Attack, SplitCountTypeMismatchInALaterShard) {
    TempDir dir;
    std::vector<gguf::KeyValue> kvs = {u16_kv("split.no", 1), i32_kv("split.tensors.count", 2),
                                       u32_kv("split.count", 2)};
    std::string first = write_set(dir, {good_pair()[0], gguf_test::build_gguf(kvs, {{"b", {16}, 0}})});
    expect_refused([&] { open_set(first); }, Code::BadSplit, dir / "m-00002-of-00002.gguf: ",
                   "key 'split.count' has type u32, expected u16");
}

// ---- regressions: fuzz findings (fuzz/fuzz_reader, fuzz/fuzz_split_set) and review findings --

// fuzz_reader and fuzz_split_set (their first findings, within seconds): keys went into messages
// raw. The split-set finding, minimized: key "zoo.arra\x10\x10\x10\x10" with an unknown type.
TEST(Attack, FuzzFindingKeyWithControlBytes) {
    Bytes b;
    b.preamble(3, 0, 1).str("zoo.arra\x10\x10\x10\x10").u32(0x10101010).raw(std::string(32, '\0'));
    expect_header_refused(b.str(), Code::BadValue,
                          "key 'zoo.arra\\x10\\x10\\x10\\x10': unknown value type 269488144");
}

// The same family: a key holding "\n" or an ANSI escape split the "one-line" error or drove the
// terminal. Keys and tensor names are now quoted with non-printable bytes as \xNN.
TEST(Attack, ControlCharactersInAKeyAreEscaped) {
    std::string key = "evil\n\x1b[31mkey";
    Bytes b;
    b.preamble(3, 0, 2).str(key).u32(0).u8(1).str(key).u32(0).u8(2).pad(32);
    expect_header_refused(b.str(), Code::BadValue, "duplicate key 'evil\\x0a\\x1b[31mkey'");
}

TEST(Attack, ControlCharactersInATensorNameAreEscaped) {
    Bytes b;
    b.preamble(3, 1, 0).str("t\r\x07").u32(1).i64(8).u32(99).u64(0).pad(32);
    expect_header_refused(b.str(), Code::BadTensor, "tensor 't\\x0d\\x07': unknown or removed ggml type 99");
}

// Review finding: a 1 MiB key repeated made a 1 MiB message; it now quotes 64 bytes of it.
TEST(Attack, HugeKeyIsElidedInTheMessage) {
    std::string key(1 << 20, 'k');
    Bytes b;
    b.preamble(3, 0, 2).str(key).u32(0).u8(1).str(key).u32(0).u8(2).pad(32);
    expect_header_refused(b.str(), Code::BadValue, "duplicate key '" + std::string(64, 'k') + "...'");
}

// Review finding: file names went into messages raw too (paths come from readdir), so a shard
// named "m\n\x1b[2J-00002-of-00002.gguf" put a newline and a clear-screen into the log.
TEST(Attack, ControlCharactersInAShardPathAreEscaped) {
    TempDir dir;
    std::string prefix = dir / "m\n\x1b[2J";
    gguf_test::write_file(gguf::shard_path(prefix, 2, 2), good_pair()[1]);
    auto scans = gguf::scan_directory(dir.path());
    ASSERT_EQ(scans.size(), 1u);
    EXPECT_NE(gguf::escape(scans[0].error).find("m\\x0a\\x1b[2J-00001-of-00002.gguf: missing shard 1 of 2"), std::string::npos)
        << scans[0].error;
    gguf_test::write_file(gguf::shard_path(prefix, 1, 2), "NOPE" + std::string(60, '\0'));
    expect_refused([&] { open_set(gguf::shard_path(prefix, 1, 2)); }, Code::BadMagic,
                   dir / "m\\x0a\\x1b[2J-00001-of-00002.gguf: ", "not a GGUF file");
}

// Review finding, same family: every element of a string array rebuilt the message
// "array element of '<key>'" up front, so a 4 MiB key over 1M empty strings (a 12 MiB file)
// cost 4 TB of copying. Messages are now built only on failure; the file is valid and must be
// parsed (and accepted) in well under a second.
TEST(Attack, LongKeyOverAHugeStringArrayIsLinear) {
    const uint64_t n = uint64_t{1} << 20;
    Bytes b;
    b.preamble(3, 0, 1).str(std::string(4 << 20, 'k')).u32(9).u32(8).u64(n);
    std::string bytes = b.str();
    bytes.append(n * 8, '\0');  // n empty strings
    bytes.resize(gguf::align_up(bytes.size(), 32), '\0');
    Outcome o = run_bounded([&] { gguf::parse_header(bytes, bytes.size(), "big.gguf"); });
    ASSERT_EQ(o.kind, Outcome::Kind::Accepted) << o.message;
    EXPECT_LT(o.seconds, kTimeLimitSeconds);
}

// Review finding: open() on a FIFO blocks until a writer shows up, so a FIFO named like a shard
// hung the loader (and the daemon's start) forever. Non-regular files are now refused unopened.
TEST(Attack, FifoAsShardDoesNotHang) {
    TempDir dir;
    std::string first = write_set(dir, {good_pair()[0]}, 2);
    std::string second = dir / "m-00002-of-00002.gguf";
    ASSERT_EQ(::mkfifo(second.c_str(), 0600), 0);
    expect_refused([&] { open_set(first); }, Code::Io, second + ": ", "not a regular file");
}

// Review finding: shard 1 may declare general.alignment up to 2^31 (it has no tensors, so its
// own data never needs it). The merged header was padded to that alignment in memory: a 2 GiB
// allocation per open. The padding is now a Zeros extent; the bytes are unchanged.
TEST(Attack, HugeAlignmentOfShard1DoesNotAllocateThePadding) {
    TempDir dir;
    const uint64_t a = uint64_t{1} << 31;
    std::string first = write_set(dir, {shard(0, 2, 1, {}, {u32_kv("general.alignment", static_cast<uint32_t>(a))}),
                                        shard(1, 2, 1, {{"b", {16}, 0}})});
    std::string b_bytes = gguf_test::read_file(dir / "m-00002-of-00002.gguf");
    Outcome o = run_bounded([&] {
        auto vf = gguf::open_merged(gguf::SplitSet::open(first));
        if (vf.size() != 2 * a) throw std::runtime_error("size " + std::to_string(vf.size()));
        if (vf.layout().header().size() >= gguf::kMaxHeaderPadding) throw std::runtime_error("padding in memory");
        auto h = gguf::parse_header(vf.layout().header(), vf.size(), "merged.gguf");
        if (h.data_offset != a || h.tensors.size() != 1) throw std::runtime_error("bad merged header");
        std::string data(64, '\0'), zeros(64, '\1');
        if (vf.read(a, 64, data.data()) != 64 || data != b_bytes.substr(b_bytes.size() - 64)) {
            throw std::runtime_error("wrong tensor bytes");
        }
        if (vf.read(a - 64, 64, zeros.data()) != 64 || zeros != std::string(64, '\0')) {
            throw std::runtime_error("padding is not zero");
        }
    });
    EXPECT_EQ(o.kind, Outcome::Kind::Accepted) << o.message;
    EXPECT_LT(o.seconds, kTimeLimitSeconds);
    EXPECT_LT(o.peak_rss, kMemoryBudget);
}

// Review finding: a merge sums tensor sizes of several files of up to 2^63 - 1 bytes each. The
// planner's running offset wrapped past 2^64 and produced a header with wrong offsets and a
// wrong size (wrong bytes); it now refuses a plan larger than the largest file.
TEST(Attack, MergedSizePast2p63IsRefused) {
    gguf::TensorInfo t;
    t.name = "t";
    t.type = 24;  // i8
    t.ne = {int64_t{1} << 62, 1, 1, 1};
    t.nbytes = uint64_t{1} << 62;
    std::vector<gguf::PlacedTensor> tensors;
    for (uint32_t i = 0; i < 4; ++i) {  // 4 x 2^62 = 2^64: the sum wraps to exactly 0
        t.name = "t" + std::to_string(i);
        tensors.push_back({t, i, 32});
    }
    try {
        gguf::plan_gguf_file({}, tensors, 32);
        FAIL() << "a plan of 2^64 bytes was accepted";
    } catch (const gguf::Error& e) {
        EXPECT_EQ(e.code(), Code::TooLarge);
        EXPECT_NE(std::string(e.what()).find("larger than 2^63 - 1 bytes"), std::string::npos) << e.what();
    }
    tensors.pop_back();  // 3 x 2^62 fits in a u64 but not in a file (off_t)
    EXPECT_THROW(gguf::plan_gguf_file({}, tensors, 32), gguf::Error);
    tensors.pop_back();  // 2^63 + header: still too large
    EXPECT_THROW(gguf::plan_gguf_file({}, tensors, 32), gguf::Error);
    tensors.pop_back();  // 2^62 + header: fine
    EXPECT_EQ(gguf::plan_gguf_file({}, tensors, 32).size() % 32, 0u);
}

}  // namespace

namespace {

// Issue 14.10 (d): gguf-split --merge never reads split.no or split.tensors.count, and copies
// them into the merged header as they are (gguf_set_kv). Sets from other tools that store them
// as i32 / u32 are merged, and the merged header keeps their types and values.
TEST(Attack, SplitKeysOfOtherIntegerTypesAreAcceptedAndCopied) {
    TempDir dir;
    auto other_tool = [](uint32_t no, const std::vector<gguf_test::TestTensor>& t, std::vector<gguf::KeyValue> kvs) {
        kvs.push_back({"split.no", gguf::Value::i32(static_cast<int32_t>(no))});
        kvs.push_back(u32_kv("split.tensors.count", 2));
        kvs.push_back(u16_kv("split.count", 2));
        return gguf_test::build_gguf(kvs, t, 32, 3 + no);
    };
    std::string first = write_set(dir, {other_tool(0, {{"a", {8}, 0}}, {{"general.name", gguf::Value::string("m")}}),
                                        other_tool(1, {{"b", {16}, 0}}, {})});
    auto set = gguf::SplitSet::open(first);
    EXPECT_EQ(set.tensor_count(), 2u);
    auto vf = gguf::open_merged(set);
    auto h = gguf::parse_header(vf.layout().header(), vf.size(), "merged.gguf");
    ASSERT_NE(h.find("split.no"), nullptr);
    EXPECT_EQ(h.find("split.no")->value.type, gguf::ValueType::I32);
    EXPECT_EQ(*h.find("split.no")->value.as_int(), 0);
    EXPECT_EQ(h.find("split.tensors.count")->value.type, gguf::ValueType::U32);
    EXPECT_EQ(*h.find("split.tensors.count")->value.as_int(), 2);
    EXPECT_EQ(h.kvs.back().key, "split.count");
    EXPECT_EQ(*h.kvs.back().value.as_int(), 0);
    // A value that is no integer at all is still refused, naming the file and key.
    TempDir bad;
    std::vector<gguf::KeyValue> kvs = {{"split.no", gguf::Value::string("0")}, i32_kv("split.tensors.count", 1),
                                       u16_kv("split.count", 1)};
    std::string only = write_set(bad, {gguf_test::build_gguf(kvs, {{"a", {8}, 0}})});
    expect_refused([&] { open_set(only); }, Code::BadSplit, only + ": ",
                   "key 'split.no' has type string, expected an integer");
}

// Issue 14.10 (e): a file without tensors has no data section. general.alignment = 2^28 made the
// merge (and the mount, and split) write 256 MiB of zeros; the header is now padded to 32 as
// ggml's writer in gguf-split does (the notensors fixtures stay byte-identical).
TEST(Attack, HugeAlignmentWithoutTensorsWritesNoDataSection) {
    TempDir dir;
    const auto a = static_cast<uint32_t>(uint64_t{1} << 28);
    std::string first = write_set(dir, {shard(0, 1, 0, {}, {u32_kv("general.alignment", a)})});
    auto vf = gguf::open_merged(gguf::SplitSet::open(first));
    auto h = gguf::parse_header(vf.layout().header(), vf.size(), "merged.gguf");
    EXPECT_EQ(vf.size(), gguf::align_up(h.header_size, 32));
    EXPECT_LT(vf.size(), 4096u);
    // The split plan of such a file: every shard is its header padded to 32.
    auto plans = gguf::plan_split(h, gguf::SplitOptions{});
    ASSERT_EQ(plans.size(), 1u);
    EXPECT_EQ(plans[0].layout.size() % 32, 0u);
    EXPECT_LT(plans[0].layout.size(), 4096u);
}

}  // namespace
