// Whole-object checks of bytes against a known SHA-256 (the Hub's lfs.oid, an OCI blob's digest),
// computed as the bytes pass (OpenSSL EVP), never by reading them a second time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

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

/// The check of one object's bytes against a known SHA-256, computed as a source's readers get
/// them (in offset order), never by reading them a second time. A source calls after_read()
/// with every successful read; the check reads the bytes no reader asked for (a gap) through
/// the source's own reader, whose reads on that thread are then passed through unhashed.
/// `whole`: every byte is read for the check (prefetch, merge: a gap before a read is read and
/// hashed, whatever its length); otherwise only a reader that goes through the object in order
/// is checked (a mount: a read more than kWindow past the hashed bytes ends the check unchecked).
/// A mismatch is logged (spdlog error) by a check that is not `whole`; a whole check's caller
/// (prefetch, merge, check) reports it in its own one line. Thread-safe: sources call it from
/// every FUSE worker.
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

    /// Checks an object of `size` bytes named `name` (in messages) against `expected_sha256`
    /// (64 lowercase hex). Throws std::runtime_error when OpenSSL cannot hash.
    SequentialCheck(std::string expected_sha256, bool whole, uint64_t size, std::string name, Hooks hooks);

    /// The step after a read of [offset, offset + n) into `data` succeeded: hashes what is new.
    /// Returns n; -EIO when the digest was found to differ (this read and every later one), or
    /// when a read that settles the check cannot go on; -EWOULDBLOCK for such a read on a
    /// gguf::NoNetworkWaitScope thread that would wait for another one's hashing or a gap read
    /// that answered -EWOULDBLOCK. A read that reaches the last kTail bytes is never served
    /// before the digest was compared. Never throws.
    ssize_t after_read(const void* data, uint64_t offset, size_t n) const noexcept;
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
    /// Reads and hashes bytes [hashed_, end); under mutex_. 0, or the failing read's -errno.
    int hash_gap(uint64_t end) const noexcept;
    /// Compares the digest once every byte is hashed; under mutex_.
    void compare() const;

    const std::string expected_;
    const bool whole_;
    const uint64_t size_;
    const std::string name_;
    const Hooks hooks_;
    mutable std::atomic<bool> settled_{false};  // reads skip the mutex
    mutable std::atomic<bool> failed_{false};
    mutable std::mutex mutex_;  // held while hashing (and reading a gap); `whole`: waited for, else tried
    mutable Sha256 hash_;          // under mutex_
    mutable uint64_t hashed_ = 0;  // bytes hashed so far, from offset 0; under mutex_
    mutable bool finished_ = false;  // the last byte was hashed and compared; under mutex_
    mutable std::string error_;      // under mutex_
};

}  // namespace gguf_mount::remote
