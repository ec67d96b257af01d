// The Hub token of a running process, kept current: since huggingface_hub 1.20 the default login
// writes tokens that are refreshed by rewriting the token file (HF_TOKEN_PATH, $HF_HOME/token,
// or the systemd credential), so a daemon that reads the file once fails hours later.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>

#include "remote/client.hpp"
#include "remote/hub.hpp"

namespace gguf_mount::remote {

/// The current bearer token: the value find_hub_token gave at start-up, re-read (find_hub_token
/// again) when the token file's inode, size or modification time changed (one stat(2), at most
/// once per `check_every`), and at once on refresh() (a 401 answer). A token from HF_TOKEN or
/// HUGGING_FACE_HUB_TOKEN never changes. A re-read that finds no token or fails (a file being
/// rewritten, unreadable) keeps the last good value and logs once at debug level; the value is
/// never logged. Thread-safe.
class TokenSupply {
public:
    /// `first`: what find_hub_token(env) returned; `env` is looked up again for each re-read.
    TokenSupply(HubToken first, EnvLookup env, std::chrono::milliseconds check_every = std::chrono::seconds(1));

    /// The token to send now (re-read first when the file changed). Never throws.
    std::string current();
    /// Re-reads the token file now (after the server refused the token). Returns true when the
    /// value changed (a retry with it makes sense). Never throws.
    bool refresh();

private:
    /// Re-reads the file when forced or when its state changed; returns true when the value
    /// changed. Called with mutex_ held.
    bool reload(bool force);

    EnvLookup env_;
    std::string path_;  // the token file ("" when the token came from the environment)
    std::chrono::milliseconds check_every_;
    std::mutex mutex_;
    std::string value_;
    std::chrono::steady_clock::time_point last_check_;
    ino_t ino_ = 0;
    off_t size_ = -1;
    timespec mtime_{};
};

/// The RequestSigner of a bearer token (the Hub's): adds "Authorization: Bearer TOKEN" to the
/// requests whose URL has the origin (scheme, host, port) of `origin_url`, and to nothing else
/// (a CDN the Hub redirects to never gets it). The token sent is supply->current() when a
/// supply is given (a token file rewritten while running is followed), else `token`; a 401
/// re-reads it once (refresh()). The token is never logged nor part of a message.
class BearerSigner final : public RequestSigner {
public:
    BearerSigner(std::string origin_url, std::string token, std::shared_ptr<TokenSupply> supply = nullptr);
    bool covers(const std::string& url) const noexcept override;
    /// Adds the header when the token is not empty. Never throws but std::bad_alloc.
    void sign(Request& request) const override;
    /// TokenSupply::refresh (false without a supply).
    bool refresh() const noexcept override;

private:
    std::string origin_;
    std::string token_;
    std::shared_ptr<TokenSupply> supply_;
};

}  // namespace gguf_mount::remote
