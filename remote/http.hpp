// HTTP(S) on libcurl: the Client (remote/client.hpp) that talks to servers (206 + Content-Range
// check, 200 whole-body answers refused, stalls, redirects, extra CA).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "remote/client.hpp"

struct curl_slist;  // <curl/curl.h>

namespace gguf_mount::remote {

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
    /// A 200 with the whole object to a ranged GET (Range ignored) is asked again, not failed at
    /// once: after 4 s, then every 8 s, not counted as attempts, while the call's deadline
    /// allows; meanwhile the client's other requests for that URL wait, and one of them asks at
    /// a time (each answer cut short costs the mirror's upstream what was on its way, MBs: few
    /// asks matter more than a quick one). A registry's pull-through cache answers so while it fetches the blob from
    /// upstream, and with ranges once it holds it (the distribution registry's proxy mode:
    /// registry/proxy/proxyblobstore.go, ServeBlob), each such answer costing the upstream what
    /// was on its way when it was cut. Set for registry sources (oci://, ollama://).
    bool retry_whole_answers = false;
    /// Signs every request the client sends to the URLs it covers (RequestSigner): the Hub's
    /// bearer token (BearerSigner, remote/token.hpp), AWS Signature V4. Redirect follow-ups are
    /// signed only while they stay on the origin of the URL asked for. Null: nothing is signed.
    std::shared_ptr<const RequestSigner> signer;
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
    /// RateLimit-Policy as sent, else "limit L, remaining R" of the older draft's RateLimit-Limit
    /// and RateLimit-Remaining (Docker Hub's "100;w=21600"); set by the client, not parsed, for
    /// the log and the message of a call that waited too long.
    std::string policy;
};
/// Parses the two headers as sent ("" when absent) at time `now` (for an HTTP-date). Fields are
/// read up to 1 KiB; anything unparsable is ignored. Never throws but std::bad_alloc.
RateLimitHint parse_rate_limit(const std::string& ratelimit, const std::string& retry_after, time_t now);

/// The libcurl Client: a pool of easy handles (each keeps its connections alive, so sequential
/// requests reuse them; HTTP/2 over TLS when the server offers it). TLS peers are verified
/// against the system store, plus HttpOptions::ca_cert. Redirects (301, 302, 303, 307, 308) are
/// followed by the client itself, at most 10, http(s) only, an https source to https only; each
/// follow-up is signed (HttpOptions::signer) only while it stays on the origin asked for.
class HttpClient final : public Client {
public:
    explicit HttpClient(HttpOptions options);
    ~HttpClient() override;
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    /// Client::get_range. A 200 (Range ignored) and an answer with a Content-Encoding other
    /// than identity are aborted after their first bytes, never copied (no Accept-Encoding is
    /// sent). Retries retryable failures (5xx, cut or refused connections, time-outs) with
    /// doubling backoff while net_timeout has not passed, waits out 429s (rate_limit_patience),
    /// all within `deadline`, then throws HttpError (one line: redacted URL, status, advice;
    /// "(after N attempts)" only when it was retried).
    ObjectInfo get_range(const std::string& url, uint64_t offset, size_t len, char* dst, size_t* got,
                         std::string* final_url = nullptr, Clock::time_point deadline = {}) override;
    /// Client::get_range_parts: get_range, its body copied into the parts as it arrives.
    ObjectInfo get_range_parts(const std::string& url, uint64_t offset, size_t len, char* const* parts,
                               size_t part_len, size_t* got, std::string* final_url = nullptr,
                               Clock::time_point deadline = {}, const PartHooks* hooks = nullptr) override;
    /// Client::head. Retries and throws like get_range.
    ObjectInfo head(const std::string& url) override;
    /// Client::get_page. Retries and throws like get_range (also for a larger body, or a status
    /// other than 200).
    std::string get_page(const std::string& url, std::string* content_type, std::string* final_url,
                         std::string* link = nullptr) override;
    /// remote::request_deadline(options(), bytes).
    std::chrono::milliseconds request_deadline(uint64_t bytes) const noexcept override;
    /// Client::name_for_message: the signer's name for the URLs it covers.
    std::string name_for_message(const std::string& url) const override;

    const HttpOptions& options() const noexcept { return options_; }

private:
    struct Attempt;
    /// The parts of one get_range_parts call its hooks took: parts [0, taken) are done, and
    /// `info` is the answer that brought the last of them.
    struct Taking {
        const PartHooks* hooks = nullptr;
        size_t taken = 0;
        ObjectInfo info;
    };
    void* acquire();
    void release(void* handle);
    /// What one request asks: a byte range (page == nullptr, !head_only), HEAD, or a whole
    /// page into *page.
    struct Ask {
        uint64_t offset = 0;
        size_t len = 0;
        char* const* parts = nullptr;  ///< where the body goes: part_len bytes per part
        size_t part_len = 0;
        size_t part_base = 0;  ///< the range starts at part part_base of the call (after taken ones)
        size_t* got = nullptr;
        bool head_only = false;
        std::string* page = nullptr;
        std::string* content_type = nullptr;
        std::string* final_url = nullptr;
        std::string* link = nullptr;
        /// get_range_parts' hooks, and what they took (over the attempts of one call).
        Taking* taking = nullptr;
    };
    ObjectInfo perform(const std::string& url, const Ask& ask, Clock::time_point deadline);
    /// One attempt: the request and its redirect follow-ups.
    ObjectInfo once(void* handle, const std::string& url, const Ask& ask, Clock::time_point deadline,
                    RateLimitHint* hint, std::string* answered_by);
    /// Sets up `handle` for one hop of `ask` to request.url (headers included). Returns the
    /// header list to free after the transfer.
    struct curl_slist* setup(void* handle, Attempt& a, const Request& request, const Ask& ask,
                             Clock::time_point deadline, char* errbuf);
    /// Waits while `url`'s origin is rate limited (a 429 said until when), up to `limit`.
    void wait_for_origin(const std::string& url, Clock::time_point limit);
    /// Records that `origin` is rate limited until `until`; logs once per limited period.
    void note_rate_limited(const std::string& origin, Clock::time_point until, const RateLimitHint& hint);

    HttpOptions options_;
    std::mutex mutex_;
    std::vector<void*> idle_;  // CURL* handles not in use
    std::map<std::string, Clock::time_point> limited_until_;  // under mutex_: origin -> end of its 429s
    std::atomic<bool> whole_answer_noted_{false};  // retry_whole_answers: said once
    /// retry_whole_answers: a URL last answered with the whole object (a mirror filling it).
    struct Filling {
        Clock::time_point next;                  // nobody asks before this
        std::chrono::milliseconds delay{4000};   // the wait after the next whole answer
        bool asking = false;                     // one request of this client is on its way
    };
    /// Returns at once unless `url` is filling; then waits until this thread may ask (no other
    /// one is asking, and its next time came) or `limit`.
    void wait_while_filling(const std::string& url, Clock::time_point limit);
    /// Records the answer to a request of `url`: `whole` schedules the next ask (returns how
    /// long from now), otherwise the URL is no longer filling and its waiters go on.
    std::chrono::milliseconds note_filling(const std::string& url, bool whole);
    std::map<std::string, Filling> filling_;    // under mutex_
    std::condition_variable filling_changed_;  // with mutex_
};

}  // namespace gguf_mount::remote
