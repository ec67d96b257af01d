#include "remote/token.hpp"

#include <sys/stat.h>

#include <utility>

#include <spdlog/spdlog.h>

#include "remote/url_parts.hpp"
#include "common/text.hpp"

namespace gguf_mount::remote {

namespace {

bool from_environment(const std::string& source) { return source == "HF_TOKEN" || source == "HUGGING_FACE_HUB_TOKEN"; }

}  // namespace

TokenSupply::TokenSupply(HubToken first, EnvLookup env, std::chrono::milliseconds check_every)
    : env_(std::move(env)),
      path_(from_environment(first.source) ? "" : first.source),
      check_every_(check_every),
      value_(std::move(first.value)),
      last_check_(std::chrono::steady_clock::now()) {
    struct stat st {};
    if (!path_.empty() && ::stat(path_.c_str(), &st) == 0) {
        ino_ = st.st_ino;
        size_ = st.st_size;
        mtime_ = st.st_mtim;
    }
}

bool TokenSupply::reload(bool force) {
    if (path_.empty()) return false;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_check_ < check_every_) return false;
    last_check_ = now;
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) return false;  // gone for now: keep the last value
    const bool same = st.st_ino == ino_ && st.st_size == size_ && st.st_mtim.tv_sec == mtime_.tv_sec &&
                      st.st_mtim.tv_nsec == mtime_.tv_nsec;
    if (same && !force) return false;
    ino_ = st.st_ino;
    size_ = st.st_size;
    mtime_ = st.st_mtim;
    try {
        auto token = find_hub_token(env_);
        if (!token || token->value.empty()) {
            spdlog::debug("Hugging Face token file {} holds no token now; keeping the last one",
                          gguf::quote_name(path_));
            return false;
        }
        if (token->value == value_) return false;
        value_ = std::move(token->value);
        spdlog::info("Hugging Face token re-read from {} (it changed)", gguf::quote_name(token->source));
        return true;
    } catch (const std::exception& e) {
        spdlog::debug("{}; keeping the last token", e.what());
        return false;
    }
}

std::string TokenSupply::current() {
    std::lock_guard<std::mutex> lock(mutex_);
    reload(false);
    return value_;
}

bool TokenSupply::refresh() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reload(true);
}

BearerSigner::BearerSigner(std::string origin_url, std::string token, std::shared_ptr<TokenSupply> supply)
    : origin_(std::move(origin_url)), token_(std::move(token)), supply_(std::move(supply)) {}

bool BearerSigner::covers(const std::string& url) const noexcept {
    try {
        return same_origin(url, origin_);
    } catch (...) {
        return false;
    }
}

void BearerSigner::sign(Request& request) const {
    const std::string token = supply_ ? supply_->current() : token_;
    if (!token.empty()) request.headers.emplace_back("Authorization", "Bearer " + token);
}

bool BearerSigner::refresh() const noexcept { return supply_ && supply_->refresh(); }

}  // namespace gguf_mount::remote
