// RemoteSource's whole-object SHA-256 check (verify_sha256): the bytes readers get, hashed in
// offset order as they pass.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include <spdlog/spdlog.h>

#include "gguf/bytes/byte_source.hpp"
#include "remote/source.hpp"

namespace gguf_mount::remote {

namespace {

/// Set while this thread reads a gap for the digest: its own reads are not hashed again.
thread_local bool t_hashing_gap = false;

/// Bytes read per step while hashing a gap.
constexpr size_t kGapStep = size_t{1} << 20;

}  // namespace

void RemoteSource::verify_sha256(std::string sha256) {
    digest_ = std::make_unique<SequentialDigest>(std::move(sha256), true);
}

void RemoteSource::expect_sha256(std::string sha256) {
    sha256_ = std::move(sha256);
    if (!sha256_.empty()) digest_ = std::make_unique<SequentialDigest>(sha256_, false);
}

std::string RemoteSource::sha256_error() const {
    if (!digest_) return "";
    std::lock_guard<std::mutex> lock(digest_->mutex);
    return digest_->error;
}

std::string RemoteSource::failure_reason() const {
    if (!digest_ || !digest_->failed.load()) return "";
    const std::string e = sha256_error();
    return e.rfind(name_ + ": ", 0) == 0 ? e.substr(name_.size() + 2) : e;
}

void RemoteSource::compare_digest() const {
    SequentialDigest& d = *digest_;
    d.finished = true;
    d.settled = true;
    const std::string got = d.hash.hex();
    if (got == d.expected) return;
    d.error = name_ + ": sha256 mismatch: expected " + d.expected + " (" + vouched_by_ + "), the " +
              std::to_string(size()) + " bytes received hash to " + got +
              " (wrong bytes from the server or its CDN); its cached blocks were dropped";
    d.failed = true;
    drop_cached();
    spdlog::error("{}", d.error);
}

int RemoteSource::hash_gap(uint64_t end) const noexcept {
    SequentialDigest& d = *digest_;
    std::unique_ptr<char[]> buf(new (std::nothrow) char[kGapStep]);
    if (!buf) return -ENOMEM;
    t_hashing_gap = true;
    while (d.hashed < end) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(kGapStep, end - d.hashed));
        const ssize_t r = pread(buf.get(), want, d.hashed);
        if (r <= 0) {
            t_hashing_gap = false;
            return r < 0 ? static_cast<int>(r) : -EIO;
        }
        d.hash.update(buf.get(), static_cast<size_t>(r));
        d.hashed += static_cast<uint64_t>(r);
    }
    t_hashing_gap = false;
    return 0;
}

ssize_t RemoteSource::hash_read(const void* data, uint64_t offset, size_t n) const noexcept {
    if (t_hashing_gap) return static_cast<ssize_t>(n);
    SequentialDigest& d = *digest_;
    if (d.settled.load()) return d.failed ? -EIO : static_cast<ssize_t>(n);
    try {
        // A read that reaches the last kSequentialTail bytes settles the check: it is never
        // served before the digest was compared (else a reader could get a wrong last byte, and
        // a check whose deciding reads all went unhashed would never end). Any other read is
        // left to the gap of a later one when another thread hashes (a mount's reader never
        // waits for another one's hashing, which may wait on the network).
        const bool settles = !d.whole && offset + n + kSequentialTail >= size();
        // Where the check cannot go on without the network, a FUSE worker hands the read to a
        // thread that may wait (gguf::NoNetworkWaitScope): -EWOULDBLOCK; elsewhere -EIO.
        auto cannot_settle = [](int rc) -> ssize_t { return rc == -EWOULDBLOCK ? -EWOULDBLOCK : -EIO; };
        std::unique_lock<std::mutex> lock(d.mutex, std::defer_lock);
        if (d.whole) {
            lock.lock();
        } else if (!lock.try_lock()) {
            if (!settles) return static_cast<ssize_t>(n);
            if (gguf::NoNetworkWaitScope::on()) return -EWOULDBLOCK;
            lock.lock();
        }
        if (d.finished) return d.failed ? -EIO : static_cast<ssize_t>(n);
        if (offset > d.hashed) {
            if (!d.whole && offset - d.hashed > kSequentialWindow) {  // not an in-order reader: unchecked
                d.finished = true;
                d.settled = true;
                return static_cast<ssize_t>(n);
            }
            // The bytes in between first (when that fails: at finish, or at a later read).
            if (const int rc = hash_gap(offset); rc != 0) return settles ? cannot_settle(rc) : static_cast<ssize_t>(n);
        }
        if (offset + n > d.hashed) {
            const uint64_t skip = d.hashed - offset;
            d.hash.update(static_cast<const char*>(data) + skip, n - static_cast<size_t>(skip));
            d.hashed = offset + n;
        }
        // An in-order reader near the end: the bytes it does not read (padding) complete the check.
        if (!d.whole && size() - d.hashed <= kSequentialTail) {
            if (const int rc = hash_gap(size()); rc != 0) return settles ? cannot_settle(rc) : static_cast<ssize_t>(n);
        }
        if (d.hashed == size()) compare_digest();
        return d.failed ? -EIO : static_cast<ssize_t>(n);
    } catch (...) {
        return -ENOMEM;
    }
}

std::string RemoteSource::finish_sha256() const noexcept {
    if (!digest_) return "";
    SequentialDigest& d = *digest_;
    try {
        std::lock_guard<std::mutex> lock(d.mutex);
        if (!d.finished) {
            if (hash_gap(size()) != 0) {
                return name_ + ": could not read bytes " + std::to_string(d.hashed) + "-" +
                       std::to_string(size() - 1) + " to check its sha256";
            }
            compare_digest();
        }
        return d.error;
    } catch (...) {
        return name_ + ": out of memory while checking its sha256";
    }
}

}  // namespace gguf_mount::remote
