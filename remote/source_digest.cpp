// RemoteSource's whole-object SHA-256 check (verify_sha256, expect_sha256): the bytes readers
// get, hashed in offset order (remote::SequentialCheck): as they pass for a whole read, a copy
// behind the reader for a mount's.
#include <cerrno>
#include <memory>
#include <optional>
#include <utility>

#include <spdlog/spdlog.h>

#include "remote/source.hpp"

namespace gguf_mount::remote {

void RemoteSource::arm_check(std::string sha256, bool whole) {
    SequentialCheck::Hooks hooks;
    if (whole) {
        hooks.read = [this](void* dst, size_t len, uint64_t offset) { return pread(dst, len, offset); };
    } else {  // the hashing thread reads a gap behind a reader: not a move of the reader
        hooks.read = [this](void* dst, size_t len, uint64_t offset) -> ssize_t {
            if (digest_ && digest_->failed()) return -EIO;
            return blocks_->read(dst, len, offset, SourceBlocks::Access::check);
        };
    }
    hooks.describe = [this](const std::string& got) {
        return name_ + ": sha256 mismatch: expected " + digest_->expected() + " (" + vouched_by_ + "), the " +
               std::to_string(size()) + " bytes received hash to " + got +
               " (wrong bytes from the server or its CDN); its cached blocks were dropped";
    };
    hooks.on_mismatch = [this] { drop_cached(); };
    hooks.on_match = [this] { context_->cache().save_listing(kVerifiedRecord + blocks_->key(), digest_->expected()); };
    digest_ = std::make_unique<SequentialCheck>(std::move(sha256), whole, size(), name_, std::move(hooks));
}

void RemoteSource::verify_sha256(std::string sha256) { arm_check(std::move(sha256), true); }

void RemoteSource::expect_sha256(std::string sha256) {
    sha256_ = std::move(sha256);
    if (sha256_.empty()) return;
    if (verified_before()) {
        spdlog::debug("{}: every block cached and checked against its sha256 before: not hashed again", name_);
        return;
    }
    arm_check(sha256_, false);
}

bool RemoteSource::verified_before() const noexcept {
    try {
        const std::optional<std::string> record = context_->cache().load_listing(kVerifiedRecord + blocks_->key());
        return record && *record == sha256_ && first_uncached_block() == block_count();
    } catch (...) {
        return false;
    }
}

std::string RemoteSource::sha256_error() const { return digest_ ? digest_->error() : std::string(); }

std::string RemoteSource::failure_reason() const {
    if (!digest_ || !digest_->failed()) return "";
    const std::string e = sha256_error();
    return e.rfind(name_ + ": ", 0) == 0 ? e.substr(name_.size() + 2) : e;
}

std::string RemoteSource::finish_sha256() const noexcept { return digest_ ? digest_->finish() : std::string(); }

}  // namespace gguf_mount::remote
