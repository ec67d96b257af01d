// HTTP(S) ranged reads on libcurl: the only place gguf-mount talks to a server.
// Facts used: shared/docs/remote-facts.md (206 + Content-Range check, 200 whole-body answers,
// stalls, redirects, extra CA).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace gguf_mount::remote {

class TokenSupply;  // remote/token.hpp

/// True for "http://..." and "https://..." (case-insensitive scheme).
bool is_http_url(const std::string& s);

/// What identifies one version of a remote object, from the headers of a 206 answer (or HEAD).
struct ObjectInfo {
    uint64_t size = 0;       ///< total bytes (Content-Range "/TOTAL", or Content-Length of HEAD)
    std::string validator;   ///< ETag as sent, else "lm:" + Last-Modified + ":" + size
    time_t mtime = 0;        ///< Last-Modified as seconds since the epoch, 0 when absent
};

/// A failed request: one line naming the URL (url_for_message, remote/index.hpp: no credentials,
/// query or fragment) and what a user can do about it.
/// `sys_errno` is what a read reports (EIO for everything but ENOENT for 404/410, EACCES for
/// 401/403); `status` the HTTP status (0 for transport errors); `hub_code` the answer's
/// X-Error-Code header (the Hub's error kind: "GatedRepo", "RepoNotFound", ...; "" when absent).
class HttpError : public std::runtime_error {
public:
    HttpError(const std::string& message, int sys_errno, long status, bool retryable, std::string hub_code = "")
        : std::runtime_error(message),
          sys_errno_(sys_errno),
          status_(status),
          retryable_(retryable),
          hub_code_(std::move(hub_code)) {}
    int sys_errno() const noexcept { return sys_errno_; }
    long status() const noexcept { return status_; }
    bool retryable() const noexcept { return retryable_; }
    const std::string& hub_code() const noexcept { return hub_code_; }

private:
    int sys_errno_;
    long status_;
    bool retryable_;
    std::string hub_code_;
};

/// Client settings (command line: --net-timeout, --ca-cert).
struct HttpOptions {
    /// Connect timeout, and a transfer that receives nothing for this long is a stall.
    /// Also the window of the rate floor (min_bytes_per_second) and the time after which no
    /// retry is started (request_deadline gives the whole bound of one call).
    std::chrono::seconds net_timeout{30};
    /// Rate floor: from the first byte of an answer on, every window of net_timeout must bring
    /// at least min_bytes_per_second * net_timeout bytes, else the transfer is cut as too slow
    /// (a server dripping a byte a second held a read for weeks). 32 KiB/s: a 4 MiB block in
    /// 128 s.
    uint64_t min_bytes_per_second = 32 * 1024;
    /// How long one call may wait in all for rate limits to pass: 429 answers are waited out
    /// (RateLimit "t=" or Retry-After, else doubling delays up to 30 s) and asked again, not
    /// counted as attempts, until this much waiting would be passed. The Hub's windows are 5
    /// minutes (a fleet behind one NAT address sees whole windows of 429s).
    std::chrono::seconds rate_limit_patience{300};
    std::string ca_cert;     ///< extra CA file (PEM) added to the system store; "" for none
    unsigned attempts = 4;   ///< tries per call for retryable failures (5xx, 429, transport)
    std::chrono::milliseconds backoff{250};  ///< first retry delay, doubled per retry
    /// A bearer token (the Hugging Face token, remote/hub.hpp), sent as "Authorization: Bearer
    /// TOKEN" only to requests whose URL has the origin (scheme, host, port) of bearer_origin.
    /// libcurl (>= 7.83) does not pass this header on when a redirect leaves that origin, so a
    /// CDN a resolve URL redirects to never gets it (tests/remote hub tests check the logs).
    /// Never logged, never part of a message or a cache key. "" for none.
    std::string bearer_token;
    std::string bearer_origin;  ///< URL of the origin that may receive bearer_token
    /// When set, the token sent is bearer_supply->current() instead of bearer_token (a token
    /// file rewritten while running is followed), and a 401 from bearer_origin re-reads it
    /// once (TokenSupply::refresh); when the value changed, the request is sent again with it.
    std::shared_ptr<TokenSupply> bearer_supply;
};

/// The bound of one call for a body of `bytes` bytes (a range, or a page's limit), rate-limit
/// waits not included: 2 * net_timeout + bytes / min_bytes_per_second (for a 4 MiB block with
/// the default 30 s: 188 s). An answer that keeps the rate floor ends within it (its first byte
/// within net_timeout, then at least the floor per window); retries share it. Never throws.
std::chrono::milliseconds request_deadline(const HttpOptions& options, uint64_t bytes) noexcept;

/// When a 429 answer says to ask again: `RateLimit: "NAME";r=R;t=T` (IETF
/// draft-ietf-httpapi-ratelimit-headers, as the Hub sends it; huggingface_hub reads `t=`; also
/// the older "reset=T") and `Retry-After` (seconds or an HTTP-date, RFC 9110 10.2.3). The later
/// of the two wins.
struct RateLimitHint {
    long wait_seconds = -1;  ///< -1: neither header says
    std::string bucket;      ///< the RateLimit policy name ("api"), "" when absent
    std::string policy;      ///< RateLimit-Policy as sent (set by the client, not parsed), for the log
};
/// Parses the two headers as sent ("" when absent) at time `now` (for an HTTP-date). Fields are
/// read up to 1 KiB; anything unparsable is ignored. Never throws but std::bad_alloc.
RateLimitHint parse_rate_limit(const std::string& ratelimit, const std::string& retry_after, time_t now);

/// A thread-safe HTTP client: a pool of libcurl easy handles (each keeps its connections alive,
/// so sequential requests reuse them; HTTP/2 over TLS when the server offers it). TLS peers are
/// verified against the system store, plus HttpOptions::ca_cert. Redirects are followed
/// (libcurl drops credentials on a host change).
class HttpClient {
public:
    explicit HttpClient(HttpOptions options);
    ~HttpClient();
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    /// GET bytes [offset, offset + len) of `url` into `dst` (len > 0). Accepts only a 206 whose
    /// Content-Range starts at `offset` and ends at offset + len - 1 or at the last byte of the
    /// object; a 200 (Range ignored) and an answer with a Content-Encoding other than identity
    /// are aborted after their first bytes, never copied (no Accept-Encoding is sent). Returns
    /// the object's info and sets `*got` to the bytes written (== len unless the object ends
    /// first). Retries retryable failures (5xx, cut or refused connections, time-outs) with
    /// doubling backoff while net_timeout has not passed, waits out 429s (rate_limit_patience),
    /// all within `deadline` (default: now + request_deadline(len) — a caller asking a second
    /// URL for the same bytes passes the first call's), then throws HttpError (one line:
    /// redacted URL, status, advice; "(after N attempts)" only when it was retried).
    /// Never keeps more than `len` bytes in memory.
    /// `*final_url` (if given) receives the URL that answered, after redirects.
    using Clock = std::chrono::steady_clock;
    ObjectInfo get_range(const std::string& url, uint64_t offset, size_t len, char* dst, size_t* got,
                         std::string* final_url = nullptr, Clock::time_point deadline = {});

    /// HEAD `url`: size (Content-Length) and validator without a data request. Retries and
    /// throws like get_range.
    ObjectInfo head(const std::string& url);

    /// A whole small resource (a directory index page), GET without Range, at most
    /// kMaxPageBytes. Returns the body; `*content_type` gets the Content-Type and `*final_url`
    /// the URL after redirects, `*link` (if given) the Link header (pagination). Retries and
    /// throws like get_range (also for a larger body, or a status other than 200).
    static constexpr size_t kMaxPageBytes = size_t{16} << 20;
    std::string get_page(const std::string& url, std::string* content_type, std::string* final_url,
                         std::string* link = nullptr);

    const HttpOptions& options() const noexcept { return options_; }

private:
    struct Attempt;
    void* acquire();
    void release(void* handle);
    /// What one request asks: a byte range (page == nullptr, !head_only), HEAD, or a whole
    /// page into *page.
    struct Ask {
        uint64_t offset = 0;
        size_t len = 0;
        char* dst = nullptr;
        size_t* got = nullptr;
        bool head_only = false;
        std::string* page = nullptr;
        std::string* content_type = nullptr;
        std::string* final_url = nullptr;
        std::string* link = nullptr;
    };
    ObjectInfo perform(const std::string& url, const Ask& ask, Clock::time_point deadline);
    ObjectInfo once(void* handle, const std::string& url, const Ask& ask, Clock::time_point deadline,
                    RateLimitHint* hint, std::string* answered_by);
    /// Waits while `url`'s origin is rate limited (a 429 said until when), up to `limit`.
    void wait_for_origin(const std::string& url, Clock::time_point limit);
    /// Records that `origin` is rate limited until `until`; logs once per limited period.
    void note_rate_limited(const std::string& origin, Clock::time_point until, const RateLimitHint& hint);

    HttpOptions options_;
    std::mutex mutex_;
    std::vector<void*> idle_;  // CURL* handles not in use
    std::map<std::string, Clock::time_point> limited_until_;  // under mutex_: origin -> end of its 429s
};

}  // namespace gguf_mount::remote
