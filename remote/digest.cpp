#include "remote/digest.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <new>
#include <stdexcept>
#include <utility>

#include <spdlog/spdlog.h>

#include "gguf/bytes/byte_source.hpp"

namespace gguf_mount::remote {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) {
        EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
        throw std::runtime_error("OpenSSL: cannot set up a SHA-256 digest");
    }
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(const void* data, size_t n) noexcept {
    if (n > 0) EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n);
}

std::string Sha256::hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &len);
    static const char* const digits = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
        out += digits[md[i] >> 4];
        out += digits[md[i] & 15];
    }
    return out;
}

namespace {

/// Set while this thread reads a gap for a check: the source's own reads are not hashed again.
thread_local bool t_hashing_gap = false;

/// Bytes read per step while hashing a gap.
constexpr size_t kGapStep = size_t{1} << 20;

}  // namespace

SequentialCheck::SequentialCheck(std::string expected_sha256, bool whole, uint64_t size, std::string name,
                                 Hooks hooks)
    : expected_(std::move(expected_sha256)),
      whole_(whole),
      size_(size),
      name_(std::move(name)),
      hooks_(std::move(hooks)) {}

std::string SequentialCheck::error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
}

void SequentialCheck::compare() const {
    finished_ = true;
    settled_ = true;
    const std::string got = hash_.hex();
    if (got == expected_) {
        if (hooks_.on_match) hooks_.on_match();
        return;
    }
    error_ = hooks_.describe(got);
    failed_ = true;
    if (hooks_.on_mismatch) hooks_.on_mismatch();
    if (!whole_) spdlog::error("{}", error_);  // a whole check's caller reports it (one line)
}

int SequentialCheck::hash_gap(uint64_t end) const noexcept {
    std::unique_ptr<char[]> buf(new (std::nothrow) char[kGapStep]);
    if (!buf) return -ENOMEM;
    t_hashing_gap = true;
    while (hashed_ < end) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(kGapStep, end - hashed_));
        const ssize_t r = hooks_.read(buf.get(), want, hashed_);
        if (r <= 0) {
            t_hashing_gap = false;
            return r < 0 ? static_cast<int>(r) : -EIO;
        }
        hash_.update(buf.get(), static_cast<size_t>(r));
        hashed_ += static_cast<uint64_t>(r);
    }
    t_hashing_gap = false;
    return 0;
}

ssize_t SequentialCheck::after_read(const void* data, uint64_t offset, size_t n) const noexcept {
    if (t_hashing_gap) return static_cast<ssize_t>(n);
    if (settled_.load()) return failed_ ? -EIO : static_cast<ssize_t>(n);
    try {
        // A read that reaches the last kTail bytes settles the check: it is never served before
        // the digest was compared (else a reader could get a wrong last byte, and a check whose
        // deciding reads all went unhashed would never end). Any other read is left to the gap
        // of a later one when another thread hashes (a mount's reader never waits for another
        // one's hashing, which may wait on the network).
        const bool settles = !whole_ && offset + n + kTail >= size_;
        // Where the check cannot go on without the network, a FUSE worker hands the read to a
        // thread that may wait (gguf::NoNetworkWaitScope): -EWOULDBLOCK; elsewhere -EIO.
        auto cannot_settle = [](int rc) -> ssize_t { return rc == -EWOULDBLOCK ? -EWOULDBLOCK : -EIO; };
        std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
        if (whole_) {
            lock.lock();
        } else if (!lock.try_lock()) {
            if (!settles) return static_cast<ssize_t>(n);
            if (gguf::NoNetworkWaitScope::on()) return -EWOULDBLOCK;
            lock.lock();
        }
        if (finished_) return failed_ ? -EIO : static_cast<ssize_t>(n);
        if (offset > hashed_) {
            if (!whole_ && offset - hashed_ > kWindow) {  // not an in-order reader: unchecked
                finished_ = true;
                settled_ = true;
                return static_cast<ssize_t>(n);
            }
            // The bytes in between first (when that fails: at finish, or at a later read).
            if (const int rc = hash_gap(offset); rc != 0) return settles ? cannot_settle(rc) : static_cast<ssize_t>(n);
        }
        if (offset + n > hashed_) {
            const uint64_t skip = hashed_ - offset;
            hash_.update(static_cast<const char*>(data) + skip, n - static_cast<size_t>(skip));
            hashed_ = offset + n;
        }
        // An in-order reader near the end: the bytes it does not read (padding) complete the check.
        if (!whole_ && size_ - hashed_ <= kTail) {
            if (const int rc = hash_gap(size_); rc != 0) return settles ? cannot_settle(rc) : static_cast<ssize_t>(n);
        }
        if (hashed_ == size_) compare();
        return failed_ ? -EIO : static_cast<ssize_t>(n);
    } catch (...) {
        return -ENOMEM;
    }
}

std::string SequentialCheck::finish() const noexcept {
    try {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!finished_) {
            if (hash_gap(size_) != 0) {
                return name_ + ": could not read bytes " + std::to_string(hashed_) + "-" + std::to_string(size_ - 1) +
                       " to check its sha256";
            }
            compare();
        }
        return error_;
    } catch (...) {
        return name_ + ": out of memory while checking its sha256";
    }
}

}  // namespace gguf_mount::remote
