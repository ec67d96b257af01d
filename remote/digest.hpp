// Whole-object checks of bytes against a known SHA-256 (the Hub's lfs.oid, an OCI blob's digest),
// computed as the bytes pass (OpenSSL EVP): a mount's reads are hashed behind the reader on a
// thread of the check's own, a whole read (prefetch, merge) on the reading thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>

namespace gguf_mount::remote {

/// Incremental SHA-256 (FIPS 180-4) through OpenSSL's EVP interface.
class Sha256 {
public:
    /// Throws std::runtime_error when OpenSSL cannot set up the digest.
    Sha256();
    ~Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;
    /// Adds `n` bytes. Never throws.
    void update(const void* data, size_t n) noexcept;
    /// The digest of every byte added, as 64 lowercase hex digits; ends the digest (call once).
    std::string hex();

private:
    void* ctx_;  // EVP_MD_CTX*
};

/// Bytes of a read that sit in a buffer shared with their owner (a fetched block kept in
/// memory, remote::SourceBlocks): a check can hash them from there, holding the buffer, instead
/// of from a copy of the reader's. A read names at most kMax such pieces (a FUSE read of at most
/// 1 MiB crosses at most one block boundary); pieces past kMax are not named (they are copied).
struct SharedSpans {
    static constexpr size_t kMax = 4;
    struct Span {
        uint64_t offset = 0;  ///< of the object, bytes
        size_t len = 0;       ///< bytes
        std::shared_ptr<const char[]> bytes;  ///< points at the span's first byte; holds its buffer
    };
    Span span[kMax];
    size_t count = 0;
    /// Names [offset, offset + len), which starts `at` bytes into `buffer` (held), while there
    /// is room. Never throws.
    void add(uint64_t offset, size_t len, const std::shared_ptr<const char[]>& buffer, size_t at) noexcept {
        if (count < kMax) span[count++] = Span{offset, len, std::shared_ptr<const char[]>(buffer, buffer.get() + at)};
    }
};

/// A source whose bytes are checked against a known SHA-256 as they are read (a Hub file's
/// lfs.oid, an OCI blob's digest): what merge and prefetch ask of every source they read whole.
/// Implemented by remote::RemoteSource and remote::oci::LocalBlobSource.
class DigestChecked {
public:
    virtual ~DigestChecked() = default;
    /// The content's SHA-256 (64 lowercase hex) its listing vouched for, "" when none is known.
    virtual const std::string& sha256() const noexcept = 0;
    /// From now on checks the whole object against `sha256` (SequentialCheck with `whole`); call
    /// before the reads start. Throws std::runtime_error when OpenSSL cannot hash.
    virtual void verify_sha256(std::string sha256) = 0;
    /// Hashes the bytes not read yet (reading them) and returns sha256_error(); a read failure
    /// while hashing is returned as the error. Never throws.
    virtual std::string finish_sha256() const noexcept = 0;
    /// The one-line mismatch error ("NAME: sha256 mismatch: ..."), "" while none was found.
    virtual std::string sha256_error() const = 0;
};

/// The check of one object's bytes against a known SHA-256, in offset order. A source calls
/// after_read() with every successful read; the bytes are read for the check through the
/// source's own reader, whose reads on a hashing thread are then passed through unhashed.
/// `whole` (prefetch, merge: every byte is read for the check): each read is hashed on the
/// reading thread before it returns, and a gap before it (bytes no reader asked for) is read
/// and hashed first, whatever its length; the bytes are never read a second time.
/// Otherwise (a mount) only a reader that goes through the object in order is checked (a read
/// more than kWindow past the bytes read in order so far ends the check unchecked), and the
/// hashing is off the reply path: the reader's bytes are copied (a memcpy, never read again)
/// for a thread of the check that hashes them in order, while the reader's read is answered
/// at once; bytes between two reads that no reader asked for (a gap) are read by that thread
/// through the source. Bytes the source names as held in a shared buffer (SharedSpans, a
/// fetched block in memory) are not copied: the queue holds that buffer until they are hashed,
/// at most kMaxPinned buffers at a time (past that they are copied).
/// A reader whose bytes would take the copies and held bytes past kLag waits for that
/// thread, and a read of the last kTail bytes waits for the digest. The thread ends when idle
/// for kIdle and starts again at the next read; ~SequentialCheck joins it.
/// A mismatch is logged (spdlog error) by a check that is not `whole`; a whole check's caller
/// (prefetch, merge, check) reports it in its own one line. Thread-safe: sources call it from
/// every FUSE worker. The owner's reader (Hooks::read) must stay valid until the check is
/// destroyed: an owner destroys the check first.
class SequentialCheck {
public:
    /// A read of the object for the check: returns the bytes read or -errno, like pread(2).
    using Reader = std::function<ssize_t(void* dst, size_t len, uint64_t offset)>;
    struct Hooks {
        Reader read;                                         ///< the source's own pread
        std::function<std::string(const std::string&)> describe;  ///< the mismatch line, given the hash got
        std::function<void()> on_mismatch;                   ///< e.g. drop the object's cached blocks; may be empty
        std::function<void()> on_match;                      ///< e.g. record the check in the cache; may be empty
    };
    /// A read that starts up to this far past the bytes hashed so far has the bytes in between
    /// read and hashed first (requests of one reader arrive out of order from several FUSE
    /// workers, and a shard's header before its tensor data was read at planning); a read
    /// farther ahead ends the check unchecked (a random reader, an mmap).
    static constexpr uint64_t kWindow = uint64_t{32} << 20;
    /// Once the bytes hashed reach this close to the end, the rest (the padding after the last
    /// tensor, which a merged file does not read) is read and the digest compared. A file this
    /// small is checked whole at its first read (a mount's planning: a mismatch hides its model).
    static constexpr uint64_t kTail = uint64_t{1} << 20;
    /// Not `whole`: the bytes of copies waiting for the hashing thread past which a reader's
    /// read waits for it (the memory the check holds, bytes).
    static constexpr uint64_t kLag = uint64_t{16} << 20;
    /// Not `whole`: how long the hashing thread waits for more bytes before it ends (it starts
    /// again at the next read).
    static constexpr std::chrono::seconds kIdle{30};
    /// Not `whole`: the shared buffers (SharedSpans: 4 MiB blocks) the queue may hold at once.
    /// A reader that skips ahead in small reads would otherwise pin a block per read within
    /// kLag's bytes; beyond this its bytes are copied.
    static constexpr size_t kMaxPinned = 6;

    /// Checks an object of `size` bytes named `name` (in messages) against `expected_sha256`
    /// (64 lowercase hex). Throws std::runtime_error when OpenSSL cannot hash.
    SequentialCheck(std::string expected_sha256, bool whole, uint64_t size, std::string name, Hooks hooks);
    /// Stops the hashing thread and waits for it (for the read it is in, at most the HTTP
    /// client's bound).
    ~SequentialCheck();
    SequentialCheck(const SequentialCheck&) = delete;
    SequentialCheck& operator=(const SequentialCheck&) = delete;

    /// The step after a read of [offset, offset + n) into `data` succeeded: hashes what is new
    /// (`whole`), or hands it to the hashing thread. Returns n; -EIO when the digest was found
    /// to differ (this read and every later one), or when a read that settles the check cannot
    /// go on; -EWOULDBLOCK for a read on a gguf::NoNetworkWaitScope thread that would wait (for
    /// another thread's hashing, a gap read that answered -EWOULDBLOCK, or a reader kLag ahead).
    /// A read that reaches the last kTail bytes is never served before the digest was compared.
    /// `shared` (may be null): where the source holds some of these bytes in shared buffers;
    /// an in-order check hashes those from there instead of copying them. Never throws.
    ssize_t after_read(const void* data, uint64_t offset, size_t n, const SharedSpans* shared = nullptr) const noexcept;
    /// Hashes the bytes not hashed yet (reading them) and compares; returns error() or the one
    /// line saying which bytes could not be read. Never throws.
    std::string finish() const noexcept;
    /// The mismatch line once one was found, else "".
    std::string error() const;
    /// True once the digest was found to differ: every read fails with EIO.
    bool failed() const noexcept { return failed_.load(); }
    /// True once the check is over (compared, or given up for a reader out of order).
    bool settled() const noexcept { return settled_.load(); }
    const std::string& expected() const noexcept { return expected_; }

private:
    /// after_read of a `whole` check: hashed on the calling thread.
    ssize_t after_read_whole(const void* data, uint64_t offset, size_t n) const noexcept;
    /// after_read of an in-order check: a copy for the hashing thread, waited for only as documented.
    ssize_t after_read_in_order(const void* data, uint64_t offset, size_t n, const SharedSpans* shared) const noexcept;
    /// Queues [from, end) of a read of `data` at `offset` for the hashing thread: the parts
    /// `shared` names as held pieces, the rest as copies; under mutex_. Throws std::bad_alloc.
    void queue_read(const char* data, uint64_t offset, uint64_t from, uint64_t end, const SharedSpans* shared) const;
    /// queue_read's pieces, pushed one by one (queue_read takes them off again if one throws).
    void queue_pieces(const char* data, uint64_t offset, uint64_t from, uint64_t end, const SharedSpans* shared) const;
    /// Queues [frontier_, end) as a gap for the hashing thread to read; under mutex_.
    void queue_to(uint64_t end) const;
    /// Turns the parts of queued gaps that [offset, offset + n) covers into copies of `data`
    /// (not the gap the hashing thread is reading); under mutex_.
    void fill_gaps(const char* data, uint64_t offset, size_t n) const;
    /// Reads and hashes bytes [hashed_, end); under mutex_ (`whole`). 0, or the failing read's -errno.
    int hash_gap(uint64_t end) const noexcept;
    /// Compares the digest once every byte is hashed; under mutex_.
    void compare() const;
    /// Starts the hashing thread unless it runs; under mutex_. False when no thread can be had.
    bool run_hasher(std::unique_lock<std::mutex>& lock) const noexcept;
    /// run_hasher, or hash_here while gguf::threads_may_start() is false (a mount before its
    /// daemonizing fork: a thread does not survive fork(), and a condition variable it waited
    /// on would hang the child's next notify); under mutex_. False when the
    /// queue can be hashed by neither (no thread, no memory).
    bool hand_on(std::unique_lock<std::mutex>& lock) const noexcept;
    /// The hashing thread: hashes the queued pieces in order (a gap in kGapStep reads) until
    /// the last byte is hashed and compared, the check stops, or it was idle for kIdle.
    void hash_behind() const noexcept;
    /// Hashes the piece at the front of queue_ (a copy, or up to kGapStep of a gap read into
    /// `buf` through Hooks::read), `lock` released meanwhile, and compares once every byte is
    /// hashed. 1: hashed; 0: the check ended or the queue emptied meanwhile; -1: the gap read
    /// failed (failed_kick_ set). Throws what compare() throws.
    int hash_front(std::unique_lock<std::mutex>& lock, char* buf) const;
    /// While no thread may start: hashes the whole queue on the calling thread (one such
    /// thread at a time), until it is empty, the check ends, or a gap read fails; under
    /// mutex_. False when a gap could not be read for want of memory.
    bool hash_here(std::unique_lock<std::mutex>& lock) const noexcept;
    /// Waits (under `lock`) until the digest was compared, the check stopped, the hashing
    /// thread's read failed after kick `kick`, or `done()` holds.
    template <class Done>
    void wait_hasher(std::unique_lock<std::mutex>& lock, uint64_t kick, Done done) const;

    const std::string expected_;
    const bool whole_;
    const uint64_t size_;
    const std::string name_;
    const Hooks hooks_;
    mutable std::atomic<bool> settled_{false};  // reads skip the mutex
    mutable std::atomic<bool> failed_{false};
    mutable std::mutex mutex_;  // held while hashing (and reading a gap); `whole`: waited for, else tried
    mutable Sha256 hash_;          // under mutex_ (`whole`), else the hashing thread's alone
    mutable uint64_t hashed_ = 0;  // bytes hashed so far, from offset 0; under mutex_
    mutable bool finished_ = false;  // the last byte was hashed and compared; under mutex_
    mutable std::string error_;      // under mutex_
    // Not `whole` (hashed behind the reader), all under mutex_:
    static constexpr uint64_t kNoKick = ~uint64_t{0};
    mutable std::condition_variable cv_;  // hashed_, finished_, stop_, failed_kick_ changes; new reads
    mutable std::thread hasher_;          // hash_behind; joinable until joined at a restart or ~
    mutable bool hasher_running_ = false;
    mutable bool stop_ = false;           // ~SequentialCheck, or the check ended unchecked
    /// Bytes [offset, offset + len) to hash: a copy of a reader's bytes, bytes held in the
    /// source's buffer, or (both null) a gap to read.
    struct Piece {
        uint64_t offset;
        uint64_t len;
        std::unique_ptr<char[]> bytes;
        std::shared_ptr<const char[]> held = nullptr;
        bool has_bytes() const noexcept { return bytes || held; }
        const char* data() const noexcept { return bytes ? bytes.get() : held.get(); }
    };
    mutable std::deque<Piece> queue_;     // in offset order, from hashed_ to frontier_
    mutable uint64_t copied_ = 0;         // bytes of copies and held pieces queued or being hashed (at most about kLag)
    /// A buffer the held pieces in queue_ hold, and how many of them (an owner, not the bytes:
    /// a weak reference compares owners without holding the buffer).
    struct Pin {
        std::weak_ptr<const char[]> buffer;
        size_t pieces = 0;
    };
    mutable Pin pins_[kMaxPinned];        // the first pinned_ are in use; under mutex_
    mutable size_t pinned_ = 0;
    /// Counts a held piece of `buffer`: false (nothing counted) when that would hold more than
    /// kMaxPinned buffers; under mutex_.
    bool pin(const std::shared_ptr<const char[]>& buffer) const noexcept;
    /// Uncounts a held piece of `buffer` taken off queue_; under mutex_.
    void unpin(const std::shared_ptr<const char[]>& buffer) const noexcept;
    /// queue_ was cleared: nothing is held; under mutex_.
    void unpin_all() const noexcept {
        for (size_t i = 0; i < pinned_; ++i) pins_[i] = Pin{};
        pinned_ = 0;
    }
    mutable bool gap_busy_ = false;       // the hashing thread reads the gap at the front of queue_
    mutable uint64_t frontier_ = 0;       // end of the bytes queued (read in order, or the tail)
    mutable uint64_t kicks_ = 0;          // reads handed to the hashing thread so far
    mutable uint64_t failed_kick_ = kNoKick;  // kicks_ when the hashing thread's last read failed
    mutable int failed_rc_ = 0;           // that read's -errno
};

}  // namespace gguf_mount::remote
