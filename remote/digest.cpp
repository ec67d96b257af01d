#include "remote/digest.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <iterator>
#include <new>
#include <thread>
#include <stdexcept>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/threads.hpp"
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

ssize_t SequentialCheck::after_read(const void* data, uint64_t offset, size_t n, const SharedSpans* shared) const noexcept {
    if (t_hashing_gap) return static_cast<ssize_t>(n);
    if (settled_.load()) return failed_ ? -EIO : static_cast<ssize_t>(n);
    return whole_ ? after_read_whole(data, offset, n) : after_read_in_order(data, offset, n, shared);
}

ssize_t SequentialCheck::after_read_whole(const void* data, uint64_t offset, size_t n) const noexcept {
    try {
        std::lock_guard<std::mutex> lock(mutex_);
        if (finished_) return failed_ ? -EIO : static_cast<ssize_t>(n);
        // The bytes in between first (when that fails: at finish, or at a later read).
        if (offset > hashed_ && hash_gap(offset) != 0) return static_cast<ssize_t>(n);
        if (offset + n > hashed_) {
            const uint64_t skip = hashed_ - offset;
            hash_.update(static_cast<const char*>(data) + skip, n - static_cast<size_t>(skip));
            hashed_ = offset + n;
        }
        if (hashed_ == size_) compare();
        return failed_ ? -EIO : static_cast<ssize_t>(n);
    } catch (...) {
        return -ENOMEM;
    }
}

template <class Done>
void SequentialCheck::wait_hasher(std::unique_lock<std::mutex>& lock, uint64_t kick, Done done) const {
    cv_.wait(lock, [&] {
        return finished_ || stop_ || (failed_kick_ != kNoKick && failed_kick_ >= kick) || !hasher_running_ || done();
    });
}

bool SequentialCheck::run_hasher(std::unique_lock<std::mutex>&) const noexcept {
    if (hasher_running_) return true;
    try {
        if (hasher_.joinable()) hasher_.join();  // ended idle: it holds nothing any more
        // Stop signals stay with the FUSE loop threads (common/threads.hpp).
        hasher_ = gguf::start_thread_without_termination_signals([this] { hash_behind(); }, "gm-sha256");
        hasher_running_ = true;
        return true;
    } catch (...) {
        return false;
    }
}

bool SequentialCheck::hand_on(std::unique_lock<std::mutex>& lock) const noexcept {
    if (gguf::threads_may_start()) return run_hasher(lock);
    return hash_here(lock);
}

bool SequentialCheck::pin(const std::shared_ptr<const char[]>& buffer) const noexcept {
    for (size_t i = 0; i < pinned_; ++i) {
        if (!pins_[i].buffer.owner_before(buffer) && !buffer.owner_before(pins_[i].buffer)) {
            ++pins_[i].pieces;
            return true;
        }
    }
    if (pinned_ == kMaxPinned) return false;
    pins_[pinned_++] = Pin{buffer, 1};
    return true;
}

void SequentialCheck::unpin(const std::shared_ptr<const char[]>& buffer) const noexcept {
    for (size_t i = 0; i < pinned_; ++i) {
        if (!pins_[i].buffer.owner_before(buffer) && !buffer.owner_before(pins_[i].buffer)) {
            if (--pins_[i].pieces == 0) pins_[i] = std::move(pins_[--pinned_]);
            return;
        }
    }
}

int SequentialCheck::hash_front(std::unique_lock<std::mutex>& lock, char* buf) const {
    if (queue_.front().has_bytes()) {  // a copy of a reader's bytes, or held in the source's buffer
        Piece piece = std::move(queue_.front());
        queue_.pop_front();
        if (piece.held) unpin(piece.held);
        const uint64_t len = piece.len;
        lock.unlock();
        hash_.update(piece.data(), static_cast<size_t>(len));
        piece = Piece{0, 0, nullptr};  // the copy freed, the buffer let go, before the lock is taken
        lock.lock();
        hashed_ += len;
        copied_ -= len;
    } else {  // a gap no reader asked for: read through the source
        const uint64_t at = queue_.front().offset;
        const size_t want = static_cast<size_t>(std::min<uint64_t>(kGapStep, queue_.front().len));
        gap_busy_ = true;  // a late reader of these bytes leaves this piece alone
        lock.unlock();
        const ssize_t r = hooks_.read(buf, want, at);
        if (r > 0) hash_.update(buf, static_cast<size_t>(r));
        lock.lock();
        gap_busy_ = false;
        if (stop_ || finished_ || queue_.empty()) return 0;  // ended meanwhile (unchecked): nothing to take
        if (r <= 0) {
            failed_rc_ = r < 0 ? static_cast<int>(r) : -EIO;
            failed_kick_ = kicks_;  // tried again after the next read
            return -1;
        }
        Piece& gap = queue_.front();  // only the hashing thread takes pieces off
        gap.offset += static_cast<uint64_t>(r);
        gap.len -= static_cast<uint64_t>(r);
        if (gap.len == 0) queue_.pop_front();
        hashed_ += static_cast<uint64_t>(r);
    }
    if (!finished_ && hashed_ == size_) compare();
    return 1;
}

void SequentialCheck::hash_behind() const noexcept {
    std::unique_ptr<char[]> buf(new (std::nothrow) char[kGapStep]);
    t_hashing_gap = true;  // this thread's reads through the source are not handed back here
    std::unique_lock<std::mutex> lock(mutex_);
    try {
        while (buf) {
            const bool work = cv_.wait_for(lock, kIdle, [&] {
                return stop_ || finished_ || (!queue_.empty() && kicks_ != failed_kick_);
            });
            if (!work || stop_ || finished_) break;
            if (hash_front(lock, buf.get()) == 0) break;
            cv_.notify_all();
        }
    } catch (...) {  // compare's line could not be made: the check ends unchecked
        finished_ = true;
        settled_ = true;
    }
    hasher_running_ = false;
    cv_.notify_all();
    t_hashing_gap = false;
}

bool SequentialCheck::hash_here(std::unique_lock<std::mutex>& lock) const noexcept {
    // Another reading thread hashes the queue: it takes this read's bytes too.
    cv_.wait(lock, [&] { return !hasher_running_; });
    std::unique_ptr<char[]> buf;  // for a gap only: planning's reads are mostly copies
    hasher_running_ = true;
    const bool was_hashing = t_hashing_gap;
    t_hashing_gap = true;
    bool started = true;
    try {
        while (!stop_ && !finished_ && !queue_.empty()) {
            if (!queue_.front().has_bytes() && !buf) buf.reset(new (std::nothrow) char[kGapStep]);
            if (!queue_.front().has_bytes() && !buf) {
                started = false;  // no memory to read the gap
                break;
            }
            if (hash_front(lock, buf.get()) != 1) break;
        }
    } catch (...) {  // as hash_behind: unchecked
        finished_ = true;
        settled_ = true;
    }
    t_hashing_gap = was_hashing;
    hasher_running_ = false;
    cv_.notify_all();
    return started;
}

void SequentialCheck::fill_gaps(const char* data, uint64_t offset, size_t n) const {
    const uint64_t end = offset + n;
    for (size_t i = gap_busy_ ? 1 : 0; i < queue_.size(); ++i) {
        Piece& p = queue_[i];
        if (p.offset >= end) break;
        if (p.has_bytes() || p.offset + p.len <= offset) continue;
        const uint64_t a = std::max(p.offset, offset);
        const uint64_t b = std::min(p.offset + p.len, end);
        std::unique_ptr<char[]> bytes(new char[b - a]);
        std::memcpy(bytes.get(), data + (a - offset), b - a);
        const uint64_t p_end = p.offset + p.len;
        // [p.offset, a) stays a gap, [a, b) is the copy, [b, p_end) a gap again.
        std::vector<Piece> parts;
        if (a > p.offset) parts.push_back(Piece{p.offset, a - p.offset, nullptr});
        parts.push_back(Piece{a, b - a, std::move(bytes)});
        if (p_end > b) parts.push_back(Piece{b, p_end - b, nullptr});
        copied_ += b - a;
        queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
        queue_.insert(queue_.begin() + static_cast<std::ptrdiff_t>(i), std::make_move_iterator(parts.begin()),
                      std::make_move_iterator(parts.end()));
        i += parts.size() - 1;
    }
}

void SequentialCheck::queue_to(uint64_t end) const {
    if (end > frontier_) {
        queue_.push_back(Piece{frontier_, end - frontier_, nullptr});
        frontier_ = end;
    }
}

void SequentialCheck::queue_read(const char* data, uint64_t offset, uint64_t from, uint64_t end,
                                 const SharedSpans* shared) const {
    const size_t before = queue_.size();
    try {
        queue_pieces(data, offset, from, end, shared);
    } catch (...) {  // nothing of this read stays queued
        while (queue_.size() > before) {
            if (queue_.back().held) unpin(queue_.back().held);
            queue_.pop_back();
        }
        throw;
    }
}

void SequentialCheck::queue_pieces(const char* data, uint64_t offset, uint64_t from, uint64_t end,
                                   const SharedSpans* shared) const {
    uint64_t at = from;
    const size_t spans = shared ? shared->count : 0;
    for (size_t i = 0; i <= spans && at < end; ++i) {
        // Copied: the bytes before the next held span (all that are left when none is named).
        uint64_t copy_to = end;
        if (i < spans) copy_to = std::min(end, std::max(at, shared->span[i].offset));
        if (copy_to > at) {
            std::unique_ptr<char[]> bytes(new char[copy_to - at]);
            std::memcpy(bytes.get(), data + (at - offset), copy_to - at);
            queue_.push_back(Piece{at, copy_to - at, std::move(bytes)});
            at = copy_to;
        }
        if (i == spans) break;
        // Held: the part of span i from `at` on, unless it would pin one buffer more than
        // kMaxPinned (a reader that skips ahead in small reads: then copied, next time round).
        const SharedSpans::Span& s = shared->span[i];
        const uint64_t s_end = std::min(end, s.offset + s.len);
        if (s.bytes && s_end > at && at >= s.offset) {
            if (!pin(s.bytes)) continue;
            try {
                queue_.push_back(Piece{at, s_end - at, nullptr,
                                       std::shared_ptr<const char[]>(s.bytes, s.bytes.get() + (at - s.offset))});
            } catch (...) {  // not queued: not counted (queue_read undoes the pieces queued)
                unpin(s.bytes);
                throw;
            }
            at = s_end;
        }
    }
}

ssize_t SequentialCheck::after_read_in_order(const void* data, uint64_t offset, size_t n,
                                            const SharedSpans* shared) const noexcept {
    try {
        // A read that reaches the last kTail bytes settles the check: it is never served before
        // the digest was compared (else a reader could get a wrong last byte).
        const bool settles = offset + n + kTail >= size_;
        const uint64_t end = offset + n;
        std::unique_lock<std::mutex> lock(mutex_);  // never held while reading or hashing here
        for (;;) {
            if (finished_) return failed_ ? -EIO : static_cast<ssize_t>(n);
            if (offset > frontier_ && offset - frontier_ > kWindow) {  // not an in-order reader: unchecked
                finished_ = true;
                settled_ = true;
                stop_ = true;
                queue_.clear();
                unpin_all();
                cv_.notify_all();
                return static_cast<ssize_t>(n);
            }
            // Bytes of a gap queued by a read that came first (FUSE workers answer a reader's
            // read-ahead out of order): hashed from this copy, not read again.
            if (offset < frontier_) fill_gaps(static_cast<const char*>(data), offset, n);
            if (end <= frontier_) break;  // queued or hashed already
            const uint64_t from = std::max(offset, frontier_);
            if (copied_ == 0 || copied_ + (end - from) <= kLag) {
                queue_to(offset);  // the bytes in between, for the hashing thread to read
                queue_read(static_cast<const char*>(data), offset, from, end, shared);
                copied_ += end - from;
                frontier_ = end;
                break;
            }
            // kLag of copies wait for the hashing thread: a FUSE worker hands the read on (it
            // never waits for another thread, which may wait for the network on a gap).
            if (gguf::NoNetworkWaitScope::on()) return -EWOULDBLOCK;
            const uint64_t kick = ++kicks_;
            if (!hand_on(lock)) break;
            cv_.notify_all();
            wait_hasher(lock, kick, [&] { return end <= frontier_ || copied_ + (end - std::max(offset, frontier_)) <= kLag; });
            if (failed_kick_ != kNoKick && failed_kick_ >= kick) return static_cast<ssize_t>(n);  // unhashed: later
            if (!hasher_running_) break;  // the thread ended (no memory): these bytes stay a gap for a later read
        }
        // The bytes an in-order reader does not read near the end (padding) complete the check.
        if (size_ - frontier_ <= kTail) queue_to(size_);
        const uint64_t kick = ++kicks_;
        if (!hand_on(lock)) {
            finished_ = true;  // no thread: unchecked, as a random reader's bytes are
            settled_ = true;
            queue_.clear();
            unpin_all();
            spdlog::warn("{}: no thread to check its sha256: served unchecked", name_);
            return static_cast<ssize_t>(n);
        }
        cv_.notify_all();
        if (!settles) return static_cast<ssize_t>(n);
        // Waiting may mean waiting for the network (the hashing thread reads a gap): a FUSE
        // worker hands the read to a thread that may wait (gguf::NoNetworkWaitScope).
        if (gguf::NoNetworkWaitScope::on()) return -EWOULDBLOCK;
        wait_hasher(lock, kick, [] { return false; });
        if (finished_) return failed_ ? -EIO : static_cast<ssize_t>(n);
        return -EIO;  // the bytes that settle the check could not be read
    } catch (...) {
        return -ENOMEM;
    }
}

SequentialCheck::~SequentialCheck() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    if (hasher_.joinable()) hasher_.join();
}

std::string SequentialCheck::finish() const noexcept {
    try {
        std::unique_lock<std::mutex> lock(mutex_);
        if (!finished_ && !whole_) {
            queue_to(size_);
            const uint64_t kick = ++kicks_;
            if (hand_on(lock)) {
                cv_.notify_all();
                wait_hasher(lock, kick, [] { return false; });
            }
            if (!finished_) {
                return name_ + ": could not read bytes " + std::to_string(hashed_) + "-" + std::to_string(size_ - 1) +
                       " to check its sha256";
            }
        }
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
