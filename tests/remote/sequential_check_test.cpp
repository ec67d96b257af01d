// remote::SequentialCheck without a server or a mount: a mount's in-order check hashes behind
// the reader on a thread of its own (the reader's reads are answered without waiting for the
// hash, but never the last kTail bytes before the digest is compared); a whole check hashes on
// the reading thread.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gguf/bytes/byte_source.hpp"
#include "common/threads.hpp"
#include "remote/digest.hpp"

namespace {

using gguf_mount::remote::SequentialCheck;
using gguf_mount::remote::Sha256;

std::string sha256_hex(const std::string& bytes) {
    Sha256 h;
    h.update(bytes.data(), bytes.size());
    return h.hex();
}

std::string random_bytes(size_t n) {
    std::mt19937_64 rng(42);
    std::string out(n, '\0');
    for (size_t i = 0; i < n; i += 8) {
        const uint64_t v = rng();
        std::memcpy(&out[i], &v, std::min<size_t>(8, n - i));
    }
    return out;
}

/// An object in memory read through a check, counting the check's own reads and the threads
/// they come from; `gate` (when closed) holds the check's reads until opened.
struct Object {
    explicit Object(std::string b) : bytes(std::move(b)) {}
    std::string bytes;
    std::atomic<uint64_t> check_reads{0};
    std::atomic<uint64_t> check_bytes{0};
    std::atomic<uint64_t> check_reads_on_reader_thread{0};
    std::thread::id reader = std::this_thread::get_id();
    std::mutex gate_mutex;
    std::condition_variable gate_cv;
    bool gate_open = true;
    std::atomic<bool> matched{false};
    std::atomic<bool> mismatched{false};

    SequentialCheck::Hooks hooks() {
        SequentialCheck::Hooks h;
        h.read = [this](void* dst, size_t len, uint64_t offset) -> ssize_t {
            {
                std::unique_lock<std::mutex> lock(gate_mutex);
                gate_cv.wait(lock, [&] { return gate_open; });
            }
            ++check_reads;
            if (std::this_thread::get_id() == reader) ++check_reads_on_reader_thread;
            if (offset >= bytes.size()) return 0;
            const size_t n = std::min<size_t>(len, bytes.size() - offset);
            check_bytes += n;
            std::memcpy(dst, bytes.data() + offset, n);
            return static_cast<ssize_t>(n);
        };
        h.describe = [](const std::string& got) { return "object: sha256 mismatch: got " + got; };
        h.on_match = [this] { matched = true; };
        h.on_mismatch = [this] { mismatched = true; };
        return h;
    }
    void set_gate(bool open) {
        {
            std::lock_guard<std::mutex> lock(gate_mutex);
            gate_open = open;
        }
        gate_cv.notify_all();
    }
    /// A reader's read of [offset, offset + n) followed by the check's step, as a source does.
    ssize_t read(const SequentialCheck& check, uint64_t offset, size_t n) {
        n = std::min<size_t>(n, bytes.size() - offset);
        return check.after_read(bytes.data() + offset, offset, n);
    }
};

constexpr size_t kStep = 128 << 10;  // a FUSE read

/// The bytes the check reads itself past an in-order reader of kStep reads once it is within
/// SequentialCheck::kTail of the end (the rest, padding to a merged file's reader).
uint64_t tail_read(uint64_t size, uint64_t step = kStep) {
    for (uint64_t at = 0;; at += step) {
        const uint64_t end = std::min<uint64_t>(at + step, size);
        if (size - end <= SequentialCheck::kTail) return size - end;
    }
}

TEST(SequentialCheck, AnInOrderReaderIsHashedOnAnotherThreadAndItsLastReadWaitsForTheDigest) {
    Object o(random_bytes((10 << 20) + 12345));
    SequentialCheck check(sha256_hex(o.bytes), false, o.bytes.size(), "object", o.hooks());
    for (uint64_t at = 0; at < o.bytes.size(); at += kStep) {
        if (at == 3 * kStep) continue;  // a gap no reader asks for
        ASSERT_EQ(o.read(check, at, kStep), static_cast<ssize_t>(std::min<uint64_t>(kStep, o.bytes.size() - at))) << at;
    }
    // The last read returned only once the digest was compared.
    EXPECT_TRUE(check.settled());
    EXPECT_FALSE(check.failed());
    EXPECT_TRUE(o.matched);
    EXPECT_EQ(check.error(), "");
    // The readers' bytes are hashed from copies, never read again; the gap and the bytes past
    // the last read are read by the check, never on the reader's thread.
    EXPECT_EQ(o.check_bytes.load(), kStep + tail_read(o.bytes.size())) << "only the gap and the tail";
    EXPECT_GT(o.check_reads.load(), 0u);
    EXPECT_EQ(o.check_reads_on_reader_thread.load(), 0u) << "never on the reader's thread";
}

TEST(SequentialCheck, AReadThatArrivesAfterOneBeyondItIsHashedFromItsCopyNotReadAgain) {
    // FUSE workers answer a reader's read-ahead out of order: a read beyond queues the bytes
    // before it as a gap, and the late read of those bytes fills it.
    Object o(random_bytes(6 << 20));
    SequentialCheck check(sha256_hex(o.bytes), false, o.bytes.size(), "object", o.hooks());
    o.set_gate(false);  // the hashing thread stops at its first gap
    ASSERT_EQ(o.read(check, kStep, kStep), static_cast<ssize_t>(kStep));          // gap [0, kStep): read
    ASSERT_EQ(o.read(check, 3 * kStep, kStep), static_cast<ssize_t>(kStep));      // gap [2, 3) kStep
    ASSERT_EQ(o.read(check, 2 * kStep, kStep), static_cast<ssize_t>(kStep));      // ... filled by this copy
    o.set_gate(true);
    for (uint64_t at = 4 * kStep; at < o.bytes.size(); at += kStep) ASSERT_GT(o.read(check, at, kStep), 0) << at;
    EXPECT_TRUE(o.matched);
    EXPECT_EQ(o.check_bytes.load(), kStep + tail_read(o.bytes.size())) << "the late read's bytes are not read again";
}

TEST(SequentialCheck, BytesTheSourceHoldsInSharedBuffersAreHashedFromThemAndLetGoOnceHashed) {
    // The source's blocks (2 MiB buffers here) hold the object's bytes; each read names the parts
    // it copied from a block. The reader's own bytes are all wrong except the first 64 KiB of
    // each read, which no block names: the digest matches only if the named parts were hashed
    // from the blocks and the rest from the reader's copy.
    using gguf_mount::remote::SharedSpans;
    Object o(random_bytes((6 << 20) + 777));
    constexpr size_t kBlock = 2 << 20;
    std::vector<std::shared_ptr<const char[]>> blocks;
    for (size_t at = 0; at < o.bytes.size(); at += kBlock) {
        const size_t n = std::min(kBlock, o.bytes.size() - at);
        std::shared_ptr<char[]> b(new char[n]);
        std::memcpy(b.get(), o.bytes.data() + at, n);
        blocks.push_back(b);
    }
    SequentialCheck check(sha256_hex(o.bytes), false, o.bytes.size(), "object", o.hooks());
    constexpr size_t kRead = 1 << 20;
    constexpr size_t kCopied = 64 << 10;
    std::string reply(kRead, '\0');
    for (uint64_t at = 0; at < o.bytes.size(); at += kRead) {
        const size_t n = std::min<size_t>(kRead, o.bytes.size() - at);
        std::memset(&reply[0], 0x5a, n);
        std::memcpy(&reply[0], o.bytes.data() + at, std::min(n, kCopied));
        SharedSpans shared;
        // Named per block, as SourceBlocks::read does: the read's bytes past its first 64 KiB.
        for (uint64_t p = at + kCopied; p < at + n;) {
            const uint64_t block = p / kBlock;
            const uint64_t piece = std::min<uint64_t>(at + n, (block + 1) * kBlock) - p;
            shared.add(p, piece, blocks[block], p % kBlock);
            p += piece;
        }
        ASSERT_EQ(check.after_read(reply.data(), at, n, &shared), static_cast<ssize_t>(n)) << at;
    }
    EXPECT_TRUE(check.settled());
    EXPECT_FALSE(check.failed()) << check.error();
    EXPECT_TRUE(o.matched);
    EXPECT_EQ(o.check_bytes.load(), tail_read(o.bytes.size(), kRead)) << "only the tail past the settling read";
    // Hashed: the check holds no block any more.
    for (const auto& b : blocks) EXPECT_EQ(b.use_count(), 1);
}

TEST(SequentialCheck, AReaderThatSkipsAheadInSmallReadsPinsAtMostKMaxPinnedBuffersTheRestIsCopied) {
    // 4 KiB read from each 64 KiB block in turn, while the hashing thread is held at the first
    // gap: every read would pin a block of its own.
    using gguf_mount::remote::SharedSpans;
    constexpr size_t kBlock = 64 << 10;
    Object o(random_bytes(4 << 20));
    std::vector<std::shared_ptr<const char[]>> blocks;
    for (size_t at = 0; at < o.bytes.size(); at += kBlock) {
        std::shared_ptr<char[]> b(new char[kBlock]);
        std::memcpy(b.get(), o.bytes.data() + at, kBlock);
        blocks.push_back(b);
    }
    SequentialCheck check(sha256_hex(o.bytes), false, o.bytes.size(), "object", o.hooks());
    o.set_gate(false);
    for (size_t k = 0; k < 32; ++k) {  // the first 2 MiB: far from the tail
        const uint64_t at = k * kBlock;
        SharedSpans shared;
        shared.add(at, 4096, blocks[k], 0);
        ASSERT_EQ(check.after_read(o.bytes.data() + at, at, 4096, &shared), 4096) << at;
    }
    size_t pinned = 0;
    for (const auto& b : blocks) pinned += b.use_count() > 1 ? 1 : 0;
    EXPECT_GE(pinned, 1u);
    EXPECT_LE(pinned, SequentialCheck::kMaxPinned);
    o.set_gate(true);
    EXPECT_EQ(check.finish(), "");
    EXPECT_TRUE(o.matched);
    for (const auto& b : blocks) EXPECT_EQ(b.use_count(), 1);
}

TEST(SequentialCheck, WrongBytesFailTheLastReadAndEveryLaterOneWithEio) {
    Object o(random_bytes((6 << 20) + 7));
    const std::string wrong = sha256_hex(o.bytes + "x");
    SequentialCheck check(wrong, false, o.bytes.size(), "object", o.hooks());
    ssize_t last = 0;
    for (uint64_t at = 0; at < o.bytes.size(); at += kStep) last = o.read(check, at, kStep);
    EXPECT_EQ(last, -EIO);
    EXPECT_TRUE(check.failed());
    EXPECT_TRUE(o.mismatched);
    EXPECT_FALSE(o.matched);
    EXPECT_EQ(check.error(), "object: sha256 mismatch: got " + sha256_hex(o.bytes));
    EXPECT_EQ(o.read(check, 0, kStep), -EIO);
}

TEST(SequentialCheck, ARandomReaderEndsTheCheckUncheckedAndNothingIsReadForIt) {
    Object o(random_bytes(SequentialCheck::kWindow * 3));
    SequentialCheck check(sha256_hex(o.bytes + "x"), false, o.bytes.size(), "object", o.hooks());
    o.set_gate(false);  // the hashing thread is held in its read of the first gap
    ASSERT_EQ(o.read(check, kStep, kStep), static_cast<ssize_t>(kStep));
    const uint64_t far = SequentialCheck::kWindow * 2;
    ASSERT_EQ(o.read(check, far, kStep), static_cast<ssize_t>(kStep));
    EXPECT_TRUE(check.settled());
    EXPECT_FALSE(check.failed());
    o.set_gate(true);
    // Even the last bytes are served: a check that ended unchecked fails nothing.
    EXPECT_EQ(o.read(check, o.bytes.size() - kStep, kStep), static_cast<ssize_t>(kStep));
    EXPECT_FALSE(o.mismatched);
    EXPECT_FALSE(o.matched);
}

TEST(SequentialCheck, AReaderIsAnsweredWhileTheHashingThreadIsHeldUpToKLagOfCopies) {
    Object o(random_bytes(SequentialCheck::kLag * 2 + (3 << 20)));
    SequentialCheck check(sha256_hex(o.bytes), false, o.bytes.size(), "object", o.hooks());
    o.set_gate(false);  // the hashing thread is held in its read of the first gap
    uint64_t at = kStep;
    {
        // A FUSE worker: it never waits for the hashing thread; up to kLag of copies its reads
        // are answered at once, past it they are handed on (-EWOULDBLOCK).
        gguf::NoNetworkWaitScope no_wait;
        ssize_t r = 0;
        for (; at < o.bytes.size(); at += kStep) {
            r = o.read(check, at, kStep);
            if (r != static_cast<ssize_t>(kStep)) break;
        }
        EXPECT_EQ(r, -EWOULDBLOCK);
        EXPECT_EQ(at - kStep, SequentialCheck::kLag) << "kLag of copies queued";
    }
    // A thread that may wait: the same read returns once the hashing thread caught up.
    std::thread opener([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        o.set_gate(true);
    });
    EXPECT_EQ(o.read(check, at, kStep), static_cast<ssize_t>(kStep));
    opener.join();
    for (at += kStep; at < o.bytes.size(); at += kStep) ASSERT_GT(o.read(check, at, kStep), 0) << at;
    EXPECT_TRUE(o.matched);
    EXPECT_EQ(o.check_bytes.load(), kStep + tail_read(o.bytes.size())) << "only the first gap and the tail";
}

TEST(SequentialCheck, ASettlingReadOnAFuseWorkerIsHandedOnUntilTheDigestIsCompared) {
    Object o(random_bytes(SequentialCheck::kTail / 2));  // small: its first read settles it
    SequentialCheck check(sha256_hex(o.bytes), false, o.bytes.size(), "object", o.hooks());
    {
        gguf::NoNetworkWaitScope no_wait;
        EXPECT_EQ(o.read(check, 0, 4096), -EWOULDBLOCK);
    }
    EXPECT_EQ(o.read(check, 0, 4096), 4096);
    EXPECT_TRUE(o.matched);
    EXPECT_TRUE(check.settled());
}

TEST(SequentialCheck, FinishHashesWhatNoReaderReadAndDestroyingAHeldCheckWaitsForItsThread) {
    Object o(random_bytes(5 << 20));
    {
        SequentialCheck check(sha256_hex(o.bytes), false, o.bytes.size(), "object", o.hooks());
        ASSERT_EQ(o.read(check, 0, kStep), static_cast<ssize_t>(kStep));
        EXPECT_EQ(check.finish(), "");
        EXPECT_TRUE(o.matched);
    }
    Object held(random_bytes(5 << 20));
    held.set_gate(false);
    auto check = std::make_unique<SequentialCheck>(sha256_hex(held.bytes), false, held.bytes.size(), "object",
                                                   held.hooks());
    ASSERT_EQ(held.read(*check, kStep, kStep), static_cast<ssize_t>(kStep));  // its gap holds the thread
    std::thread opener([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        held.set_gate(true);
    });
    check.reset();  // waits for the read the thread is held in, then ends it
    opener.join();
    EXPECT_FALSE(held.matched) << "a stopped check compares nothing";
}

TEST(SequentialCheck, AWholeCheckHashesOnTheReadingThreadAndReadsAGapItself) {
    Object o(random_bytes(3 << 20));
    SequentialCheck check(sha256_hex(o.bytes), true, o.bytes.size(), "object", o.hooks());
    ASSERT_EQ(o.read(check, 0, kStep), static_cast<ssize_t>(kStep));
    ASSERT_EQ(o.read(check, 1 << 20, kStep), static_cast<ssize_t>(kStep));  // a gap: read here
    EXPECT_GT(o.check_reads_on_reader_thread.load(), 0u);
    EXPECT_EQ(check.finish(), "");
    EXPECT_TRUE(o.matched);
    EXPECT_EQ(o.check_reads.load(), o.check_reads_on_reader_thread.load());
}

}  // namespace

namespace {

/// Threads of this process (/proc/self/status), -1 when it cannot be read.
int thread_count() {
    FILE* f = std::fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    int n = -1;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "Threads: %d", &n) == 1) break;
    std::fclose(f);
    return n;
}

}  // namespace

// A mount plans, then forks into the background (a thread does not survive fork(), and a
// condition variable a lost thread waited on hangs the child's next notify of it): while threads
// are not allowed the reading thread hashes, no thread starts, and a child forked then reads the
// object to its end with a thread of its own, the digest compared.
TEST(SequentialCheck, BeforeThreadsAreAllowedTheReaderHashesAndAForkedChildReadsToTheEnd) {
    Object o(random_bytes((8 << 20) + 999));
    auto owned = std::make_unique<SequentialCheck>(sha256_hex(o.bytes), false, o.bytes.size(), "object", o.hooks());
    const SequentialCheck& check = *owned;
    const int threads = thread_count();
    ASSERT_GT(threads, 0);
    struct Held {  // as a mount holds threads before it plans; let go also when an assertion fails
        Held() { gguf::hold_threads_until_fork(); }
        ~Held() { gguf::release_threads_after_fork(); }
    } held;
    // Planning: the first bytes of the object, then a read past a gap of kStep.
    ASSERT_EQ(o.read(check, 0, 4096), 4096);
    ASSERT_EQ(o.read(check, 4096 + kStep, kStep), static_cast<ssize_t>(kStep));
    EXPECT_EQ(thread_count(), threads) << "no thread started before threads are allowed";
    EXPECT_EQ(o.check_bytes.load(), kStep) << "the gap was read";
    EXPECT_EQ(o.check_reads.load(), o.check_reads_on_reader_thread.load()) << "on the reader's thread";
    EXPECT_FALSE(check.settled());

    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // the daemon: reads on, threads allowed; killed by the alarm if it hangs
        ::alarm(30);
        gguf::release_threads_after_fork();  // as the session does once it has daemonized
        o.reader = std::thread::id();  // the child's threads are all "other" threads now
        for (uint64_t at = 4096 + 2 * kStep; at < o.bytes.size(); at += kStep)
            if (o.read(check, at, kStep) <= 0) ::_exit(2);
        const bool ok = o.matched && !check.failed();
        owned.reset();  // its thread joined (a sanitizer counts a thread left at exit)
        ::_exit(ok ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                   << " (hung past 30 s?)";
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0) << "1: no match, 2: a read failed";
}

