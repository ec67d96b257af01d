// RemoteSource's whole-object SHA-256 check (verify_sha256): the bytes readers get, hashed in
// offset order as they pass.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include <spdlog/spdlog.h>

#include "remote/source.hpp"

namespace gguf_mount::remote {

namespace {

/// Set while this thread reads a gap for the digest: its own reads are not hashed again.
thread_local bool t_hashing_gap = false;

/// Bytes read per step while hashing a gap.
constexpr size_t kGapStep = size_t{1} << 20;

}  // namespace

void RemoteSource::verify_sha256(std::string sha256) { digest_ = std::make_unique<SequentialDigest>(std::move(sha256)); }

std::string RemoteSource::sha256_error() const {
    if (!digest_) return "";
    std::lock_guard<std::mutex> lock(digest_->mutex);
    return digest_->error;
}

void RemoteSource::compare_digest() const {
    SequentialDigest& d = *digest_;
    d.finished = true;
    const std::string got = d.hash.hex();
    if (got == d.expected) return;
    d.error = name_ + ": sha256 mismatch: expected " + d.expected + " (the Hub's lfs.oid), the " +
              std::to_string(size()) + " bytes received hash to " + got +
              " (wrong bytes from the server or its CDN); its cached blocks were dropped";
    d.failed = true;
    drop_cached();
    spdlog::error("{}", d.error);
}

bool RemoteSource::hash_gap(uint64_t end) const noexcept {
    SequentialDigest& d = *digest_;
    std::unique_ptr<char[]> buf(new (std::nothrow) char[kGapStep]);
    if (!buf) return false;
    t_hashing_gap = true;
    while (d.hashed < end) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(kGapStep, end - d.hashed));
        const ssize_t r = pread(buf.get(), want, d.hashed);
        if (r <= 0) {
            t_hashing_gap = false;
            return false;
        }
        d.hash.update(buf.get(), static_cast<size_t>(r));
        d.hashed += static_cast<uint64_t>(r);
    }
    t_hashing_gap = false;
    return true;
}

ssize_t RemoteSource::hash_read(const void* data, uint64_t offset, size_t n) const noexcept {
    if (t_hashing_gap) return static_cast<ssize_t>(n);
    SequentialDigest& d = *digest_;
    try {
        std::lock_guard<std::mutex> lock(d.mutex);
        if (d.finished) return d.failed ? -EIO : static_cast<ssize_t>(n);
        // A read past the hashed part: the bytes in between first (not when this read failed).
        if (offset > d.hashed && !hash_gap(offset)) return static_cast<ssize_t>(n);  // hashed later (finish)
        if (offset + n > d.hashed) {
            const uint64_t skip = d.hashed - offset;
            d.hash.update(static_cast<const char*>(data) + skip, n - static_cast<size_t>(skip));
            d.hashed = offset + n;
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
            if (!hash_gap(size())) {
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
