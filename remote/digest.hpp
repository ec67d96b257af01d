// Whole-object checks of remote bytes against a known SHA-256 (the Hub's lfs.oid), computed as
// the bytes pass (OpenSSL EVP), never by reading them a second time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

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

/// The state of one object's check (RemoteSource::verify_sha256): the expected digest, the
/// running hash of bytes [0, hashed), and the outcome.
/// `whole`: every byte is read for the check (prefetch, merge: a gap before a read is read and
/// hashed, whatever its length); otherwise only a reader that goes through the object in order
/// is checked (a mount: a read past RemoteSource::kSequentialWindow ends the check unchecked).
struct SequentialDigest {
    SequentialDigest(std::string expected_sha256, bool whole_object)
        : expected(std::move(expected_sha256)), whole(whole_object) {}
    std::string expected;     ///< 64 lowercase hex
    const bool whole;         ///< see above
    std::atomic<bool> settled{false};  ///< finished (compared or given up): reads skip the mutex
    std::mutex mutex;         ///< held while hashing (and while reading a gap); `whole`: waited for, else tried
    Sha256 hash;              ///< under mutex
    uint64_t hashed = 0;      ///< bytes hashed so far, from offset 0; under mutex
    bool finished = false;    ///< the last byte was hashed and compared; under mutex
    std::string error;        ///< the mismatch line, "" when it matched or is not finished; under mutex
    std::atomic<bool> failed{false};  ///< the digest differs: every read fails (EIO)
};

}  // namespace gguf_mount::remote
