#include "remote/http.hpp"

#include "remote/http_rules.hpp"
#include "remote/hub.hpp"
#include "remote/url_parts.hpp"
#include "common/text.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include <spdlog/spdlog.h>

namespace gguf_mount::remote {

namespace {

using http_rules::lower;
using http_rules::parse_content_range;
using http_rules::trim;

constexpr long kMaxRedirects = 10;

void global_init() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

/// Transport failures that may go away when asked again: refused or cut connections, time-outs,
/// DNS (a resolver restarting). Not: TLS verification, a redirect loop, a redirect to another
/// protocol (file:), a malformed URL, a refused answer (CURLE_WRITE_ERROR from our callbacks).
bool transient(CURLcode rc) {
    switch (rc) {
        case CURLE_COULDNT_RESOLVE_PROXY:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_CONNECT:
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
        case CURLE_ABORTED_BY_CALLBACK:  // a stall or a rate below the floor
            return true;
        default:
            return false;
    }
}

}  // namespace

/// State of one request, filled by libcurl's callbacks.
struct HttpClient::Attempt {
    CURL* curl = nullptr;
    char errbuf[CURL_ERROR_SIZE] = {0};
    uint64_t offset = 0;
    size_t len = 0;
    char* const* parts = nullptr;  // the body's buffers, part_len bytes each
    size_t part_len = 0;
    size_t part_base = 0;  // the range's first part in the call's numbering
    size_t got = 0;
    const Client::PartHooks* hooks = nullptr;
    char* part = nullptr;        // the buffer of the part being written
    size_t part_index = ~size_t{0};  // which one (of this attempt's range)
    Taking* taking = nullptr;    // hooks->take (parts handed over as they complete)
    size_t handed = 0;           // parts of this attempt's range taken
    bool taking_stopped = false;  // one was refused: no more offers for this answer
    bool head_only = false;
    std::string* page = nullptr;  // a whole page is asked for
    bool checked = false;     // status and Content-Range of the answer looked at
    std::string refused;      // why the body was refused (Range ignored, wrong range)
    int refused_errno = EIO;  // of `refused` (ENOMEM when the page could not be kept)
    std::string content_range, etag, last_modified, retry_after, content_length, link, content_encoding;
    std::string ratelimit, ratelimit_policy, location;
    // The older RateLimit draft's fields, as Docker Hub sends them ("100;w=21600").
    std::string ratelimit_limit, ratelimit_remaining;
    std::string error_code, error_message;  // X-Error-Code / X-Error-Message (the Hub's), bounded
    std::string bucket_region;              // x-amz-bucket-region (S3), bounded
    /// The signer explains failed answers (RequestSigner::explain): the start of a non-2xx
    /// body is kept for it in error_body (at most FailedAnswer::kMaxErrorBody bytes).
    bool keep_error_body = false;
    std::string error_body;
    uint64_t total = 0;
    using Clock = std::chrono::steady_clock;
    Clock::time_point last_data = Clock::now();
    std::chrono::seconds stall_limit{30};
    bool stalled = false;
    // The rate floor: bytes received (headers and body) in the current window, which starts
    // with the first byte of the answer.
    uint64_t floor_bytes = 0;  // the least a window must bring
    bool receiving = false;
    Clock::time_point window_start;
    uint64_t window_bytes = 0;
    bool too_slow = false;
    Clock::time_point deadline = Clock::time_point::max();
    bool past_deadline = false;

    void received(size_t bytes) {
        last_data = Clock::now();
        if (!receiving) {
            receiving = true;
            window_start = last_data;
        }
        window_bytes += bytes;
    }

    /// Aborts a transfer that received nothing for stall_limit, brought less than floor_bytes
    /// in a window of stall_limit, or outlived its deadline. (CURLOPT_LOW_SPEED_TIME averages
    /// the speed over a window of about 5 s, so a burst followed by silence was cut only
    /// seconds after stall_limit.)
    static int on_progress(void* self, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
        auto* a = static_cast<Attempt*>(self);
        const auto now = Clock::now();
        if (now - a->last_data > a->stall_limit) {
            a->stalled = true;
            return 1;
        }
        if (a->receiving && now - a->window_start >= a->stall_limit) {
            if (a->window_bytes < a->floor_bytes) {
                a->too_slow = true;
                return 1;
            }
            a->window_start = now;
            a->window_bytes = 0;
        }
        if (now >= a->deadline) {
            a->past_deadline = true;
            return 1;
        }
        return 0;
    }

    static size_t on_header(char* data, size_t size, size_t n, void* self) {
        auto* a = static_cast<Attempt*>(self);
        a->received(size * n);
        std::string line(data, size * n);
        if (line.rfind("HTTP/", 0) == 0) {  // a new answer (after a redirect or 100): forget the last
            for (std::string* h : {&a->content_range, &a->etag, &a->last_modified, &a->retry_after,
                                   &a->content_length, &a->link, &a->content_encoding, &a->ratelimit,
                                   &a->ratelimit_policy, &a->ratelimit_limit, &a->ratelimit_remaining,
                                   &a->location, &a->error_code, &a->error_message,
                                   &a->bucket_region, &a->error_body}) {
                h->clear();
            }
            return size * n;
        }
        size_t colon = line.find(':');
        if (colon == std::string::npos) return size * n;
        std::string name = lower(line.substr(0, colon));
        std::string value = trim(line.substr(colon + 1));
        if (name == "content-range") a->content_range = value;
        else if (name == "etag") a->etag = value;
        else if (name == "last-modified") a->last_modified = value;
        else if (name == "retry-after") a->retry_after = value;
        else if (name == "content-length") a->content_length = value;
        else if (name == "link") a->link = a->link.empty() ? value : a->link + ", " + value;
        else if (name == "x-error-code") a->error_code = value.substr(0, 64);
        else if (name == "x-error-message") a->error_message = value.substr(0, 512);
        else if (name == "content-encoding") a->content_encoding = value;
        else if (name == "ratelimit") a->ratelimit = value;
        else if (name == "ratelimit-policy") a->ratelimit_policy = value;
        else if (name == "ratelimit-limit") a->ratelimit_limit = value.substr(0, 128);
        else if (name == "ratelimit-remaining") a->ratelimit_remaining = value.substr(0, 128);
        else if (name == "location") a->location = value.substr(0, 8192);
        else if (name == "x-amz-bucket-region") a->bucket_region = value.substr(0, 64);
        return size * n;
    }

    /// Sets `refused` when the answer is encoded (gzip, br, ...): its bytes are not the file's.
    /// True when it is not.
    bool identity() {
        const std::string e = lower(content_encoding);
        if (e.empty() || e == "identity") return true;
        refused = "answer with Content-Encoding '" + content_encoding.substr(0, 64) +
                  "' (gguf-mount asks for none and takes the file's own bytes only)";
        return false;
    }

    /// Keeps the start of an error answer's body for the signer's explanation; always takes
    /// the bytes (the rest is discarded).
    size_t keep_error(const char* data, size_t bytes) {
        if (keep_error_body && error_body.size() < FailedAnswer::kMaxErrorBody)
            error_body.append(data, std::min(bytes, FailedAnswer::kMaxErrorBody - error_body.size()));
        return bytes;
    }

    /// Checks the answer before taking its first byte: only a 206 for exactly the asked range.
    bool check() {
        checked = true;
        long status = 0;
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        if (status != 206) return status != 200 ? true : (refused = std::string(kRangeIgnored) +
                                                                    " (answered 200 with the whole file); "
                                                                    "gguf-mount needs HTTP Range support "
                                                                    "(nginx, Apache and object stores have it)",
                                                          false);
        if (!identity()) return false;
        uint64_t a = 0, b = 0, t = 0;
        if (!parse_content_range(content_range, &a, &b, &t)) {
            refused = "answer 206 without a valid Content-Range ('" + content_range + "')";
            return false;
        }
        const uint64_t want_end = offset + len - 1;
        if (a != offset || (b != want_end && !(b < want_end && b == t - 1))) {
            refused = "answer 206 for '" + content_range + "', asked for bytes " + std::to_string(offset) + "-" +
                      std::to_string(want_end);
            return false;
        }
        total = t;
        return true;
    }

    static size_t on_body(char* data, size_t size, size_t n, void* self) {
        auto* a = static_cast<Attempt*>(self);
        const size_t bytes = size * n;
        a->received(bytes);
        long status = 0;
        curl_easy_getinfo(a->curl, CURLINFO_RESPONSE_CODE, &status);
        if (a->page) {
            if (status != 200) return a->keep_error(data, bytes);  // an error page: not the page
            if (a->page->empty() && !a->identity()) return 0;
            if (bytes > HttpClient::kMaxPageBytes - a->page->size()) {
                a->refused = "the page is larger than " + std::to_string(HttpClient::kMaxPageBytes) + " bytes";
                return 0;
            }
            try {  // never an exception through libcurl's frames
                a->page->append(data, bytes);
            } catch (const std::bad_alloc&) {
                a->refused = "out of memory";  // short: kept without allocating
                a->refused_errno = ENOMEM;
                return 0;
            }
            return bytes;
        }
        if (!a->checked && !a->check()) return 0;  // abort the transfer
        if (status != 206) return a->keep_error(data, bytes);  // an error page: not the bytes
        if (bytes > a->len - a->got) {
            a->refused = "the server sent more bytes than the Content-Range it announced";
            return 0;
        }
        for (size_t k = 0; k < bytes;) {
            const size_t in = a->got % a->part_len;
            const size_t take = std::min(bytes - k, a->part_len - in);
            if (a->got / a->part_len != a->part_index && !a->next_part()) return 0;
            std::memcpy(a->part + in, data + k, take);
            a->got += take;
            k += take;
            if (a->taking && !a->taking_stopped) a->offer_parts();
        }
        return bytes;
    }

    /// Finds the buffer of the part `got` is in (the given one, or hooks->buffer's); false
    /// (refused, ENOMEM) when there is none.
    bool next_part() noexcept {
        part_index = got / part_len;
        const size_t i = part_base + part_index;
        part = parts ? parts[i] : nullptr;
        try {  // never an exception through libcurl's frames
            if (!part && hooks && hooks->buffer) part = hooks->buffer(i);
        } catch (...) {
            part = nullptr;
        }
        if (part) return true;
        refused = "out of memory";  // short: kept without allocating
        refused_errno = ENOMEM;
        return false;
    }

    /// The version a 206's headers name (ObjectInfo::validator's rule; no mtime).
    ObjectInfo answer_info() const {
        ObjectInfo info;
        info.size = total;
        info.validator = !etag.empty() ? etag : "lm:" + last_modified + ":" + std::to_string(total);
        return info;
    }

    /// Offers the taker every part whose last byte has arrived and that it was not offered.
    void offer_parts() noexcept {
        const uint64_t want = std::min<uint64_t>(len, total - offset);  // check() saw offset < total
        while (!taking_stopped && handed * part_len < want &&
               got >= std::min<uint64_t>((handed + 1) * part_len, want)) {
            bool took = false;
            try {  // never an exception through libcurl's frames
                ObjectInfo info = answer_info();
                took = taking->hooks->take(taking->taken, info);
                if (took) taking->info = std::move(info);
            } catch (...) {
                took = false;
            }
            if (!took) {
                taking_stopped = true;
                return;
            }
            ++handed;
            ++taking->taken;
        }
    }
};

HttpClient::HttpClient(HttpOptions options) : options_(std::move(options)) { global_init(); }

HttpClient::~HttpClient() {
    for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* HttpClient::acquire() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!idle_.empty()) {
            void* h = idle_.back();
            idle_.pop_back();
            return h;
        }
    }
    CURL* c = curl_easy_init();
    if (!c) throw HttpError("cannot create a libcurl handle", EIO, 0, false);
    return c;
}

void HttpClient::release(void* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(handle);
}

struct curl_slist* HttpClient::setup(void* handle, Attempt& a, const Request& request, const Ask& ask,
                                     Clock::time_point deadline, char* errbuf) {
    CURL* c = static_cast<CURL*>(handle);
    curl_easy_reset(c);  // keeps the connection cache and DNS cache of the handle
    a.curl = c;
    a.offset = ask.offset;
    a.len = ask.len;
    a.parts = ask.parts;
    a.part_len = ask.part_len;
    a.part_base = ask.part_base;
    a.hooks = ask.taking ? ask.taking->hooks : nullptr;
    a.taking = ask.taking && ask.taking->hooks->take ? ask.taking : nullptr;
    a.head_only = ask.head_only;
    a.page = ask.page;
    if (a.page) a.page->clear();
    const long timeout = static_cast<long>(options_.net_timeout.count());
    curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    // A 512 KiB receive buffer instead of 16 KiB: 32 times fewer recv calls and write callbacks
    // per block (bench/results/remote-design-measurements.md).
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
    // Redirects are followed by once(), which signs a follow-up only on the origin asked for.
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout * 1000);
    // A name lookup that outlasts the timeout is abandoned (its resolver thread ends on its own
    // when getaddrinfo returns). Without this, libcurl's threaded resolver waits for it: a DNS
    // server that never answers held a mount past --net-timeout for glibc's whole
    // timeout x attempts (curl KNOWN_BUGS "threaded resolver blocks").
    curl_easy_setopt(c, CURLOPT_QUICK_EXIT, 1L);
    a.stall_limit = options_.net_timeout;
    a.floor_bytes = options_.min_bytes_per_second * static_cast<uint64_t>(options_.net_timeout.count());
    a.deadline = deadline;
    // A backstop past the deadline that on_progress enforces with its own message.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(1, left.count()) + 5000));
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &Attempt::on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &a);
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, nullptr);  // byte ranges of the identity encoding
    curl_easy_setopt(c, CURLOPT_USERAGENT, "gguf-mount/" GGUF_MOUNT_VERSION);  // RFC 9110 10.1.5
    if (!options_.ca_cert.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, options_.ca_cert.c_str());
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &Attempt::on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &a);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Attempt::on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
    if (ask.head_only) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    // A signed path is sent as signed: libcurl would otherwise remove "." and ".." segments.
    if (request.exact_path) curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    struct curl_slist* headers = nullptr;
    for (const auto& [name, value] : request.headers) {
        const std::string line = name + ": " + value;
        if (name.empty() || line.find_first_of(std::string("\r\n\0", 3)) != std::string::npos) {
            curl_slist_free_all(headers);
            throw HttpError(url_for_message(request.url) + ": refused to send header '" + name.substr(0, 64) +
                                "': an empty name, or CR, LF or NUL in it",
                            EIO, 0, false);
        }
        struct curl_slist* more = curl_slist_append(headers, line.c_str());
        if (!more) {
            curl_slist_free_all(headers);
            throw HttpError(url_for_message(request.url) + ": out of memory", ENOMEM, 0, false);
        }
        headers = more;
    }
    if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    return headers;
}

ObjectInfo HttpClient::once(void* handle, const std::string& url, const Ask& ask, Clock::time_point deadline,
                            RateLimitHint* hint, std::string* answered_by) {
    const uint64_t offset = ask.offset;
    const size_t len = ask.len;
    const bool head_only = ask.head_only;
    CURL* c = static_cast<CURL*>(handle);
    const RequestSigner* signer = options_.signer.get();
    const bool covered = signer && signer->covers(url);
    const std::string name = covered ? signer->name_for_message(url) : url_for_message(url);
    const long timeout = static_cast<long>(options_.net_timeout.count());
    // An https source never continues in plain http (its bytes and a signed URL would travel
    // in the clear).
    const bool https = lower(url.substr(0, 8)) == "https://";
    std::unique_ptr<Attempt> attempt;
    std::string hop = url;  // the URL of this hop, before signing
    std::string sent;       // the URL this hop was sent to (a signer may replace it)
    bool credentials = false;  // the signer added something to the hop that answered
    CURLcode rc = CURLE_OK;
    long status = 0;
    for (long redirects = 0;; ++redirects) {
        Request request;
        request.method = head_only ? "HEAD" : "GET";
        request.url = hop;
        if (!head_only && !ask.page) {
            request.headers.emplace_back("Range", "bytes=" + std::to_string(offset) + "-" +
                                                      std::to_string(offset + len - 1));
        }
        credentials = false;
        const bool signed_hop = signer && signer->covers(hop) && (redirects == 0 || same_origin(hop, url));
        if (signed_hop) {
            const size_t before = request.headers.size();
            signer->sign(request);
            credentials = request.headers.size() != before || request.url != hop;
        }
        sent = request.url;
        attempt = std::make_unique<Attempt>();
        struct HeaderList {
            struct curl_slist* list;
            ~HeaderList() { curl_slist_free_all(list); }
        } header_list{setup(c, *attempt, request, ask, deadline, attempt->errbuf)};
        attempt->keep_error_body = signed_hop;
        rc = curl_easy_perform(c);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, nullptr);
        status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        const bool redirect = status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
        if (rc != CURLE_OK || !attempt->refused.empty() || !redirect || attempt->location.empty()) break;
        // The Location this hop was sent (relative to the URL that sent it).
        char* follow = nullptr;
        curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &follow);
        auto to = parse_url(attempt->location, sent);
        const std::string target = to ? url_for_message(to->url) : url_for_message(attempt->location);
        if (!to || (to->scheme != "http" && to->scheme != "https")) {
            throw HttpError(name + ": redirected to " + target + ": only http and https redirects are followed", EIO, 0,
                            false);
        }
        if (https && to->scheme == "http") {
            throw HttpError(name + ": redirected to " + target +
                                ", which is plain http: an https source follows https redirects only",
                            EIO, 0, false);
        }
        if (redirects >= kMaxRedirects) {
            throw HttpError(name + ": more than " + std::to_string(kMaxRedirects) + " redirects (a redirect loop?)",
                            EIO, 0, false);
        }
        hop = follow ? std::string(follow) : to->url;
    }
    Attempt& a = *attempt;
    char* errbuf = a.errbuf;
    const char* effective = hop.c_str();  // the URL that answered, before signing
    if (answered_by) *answered_by = hop;
    if (!a.refused.empty()) throw HttpError(name + ": " + a.refused, a.refused_errno, status, false);
    if (rc != CURLE_OK) {
        std::string why = a.stalled ? "no data for " + std::to_string(timeout) + " s (stalled; --net-timeout)"
                          : a.too_slow
                              ? "too slow: less than " + std::to_string(options_.min_bytes_per_second / 1024) +
                                    " KiB/s over " + std::to_string(timeout) + " s (" +
                                    std::to_string(a.window_bytes) + " bytes; the rate floor, --net-timeout)"
                          : a.past_deadline || rc == CURLE_OPERATION_TIMEDOUT
                              ? "no complete answer within the request's deadline (2 x --net-timeout + its size at " +
                                    std::to_string(options_.min_bytes_per_second / 1024) + " KiB/s)"
                          : errbuf[0] ? std::string(errbuf)
                                      : std::string(curl_easy_strerror(rc));
        // TLS verification failures are not retried: they will not go away.
        bool tls = rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE ||
                   rc == CURLE_SSL_CONNECT_ERROR;
        if (tls) why += " (add the server's CA with --ca-cert FILE)";
        if (rc == CURLE_COULDNT_RESOLVE_HOST) why += " (DNS: check the host name and the resolver)";
        curl_off_t looked_up = 0;
        curl_easy_getinfo(c, CURLINFO_NAMELOOKUP_TIME_T, &looked_up);
        if ((a.stalled || rc == CURLE_OPERATION_TIMEDOUT) && looked_up == 0) {
            // The transfer never got past the name lookup: say so (not "stalled").
            char* where = nullptr;
            curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &where);
            auto parts = parse_url(where ? where : url);
            why = "could not resolve host " + (parts ? parts->host : std::string("?")) + " within " +
                  std::to_string(timeout) + " s (DNS: no answer; --net-timeout)";
        }
        throw HttpError(name + ": " + why, EIO, 0, !tls && transient(rc));
    }
    if (status == 429 || status >= 500) {
        // Retry-After on a 503 too (RFC 9110 10.2.3): perform() waits at least that long.
        *hint = parse_rate_limit(status == 429 ? a.ratelimit : "", a.retry_after, std::time(nullptr));
        if (status == 429) hint->policy = a.ratelimit_policy.substr(0, 256);
        if (status == 429 && hint->policy.empty() && !a.ratelimit_limit.empty())
            hint->policy = "limit " + a.ratelimit_limit +
                           (a.ratelimit_remaining.empty() ? "" : ", remaining " + a.ratelimit_remaining);
    }
    if (a.keep_error_body && (status < 200 || status >= 300)) {
        FailedAnswer failed{sent, head_only ? "HEAD" : "GET", status, a.error_body, a.bucket_region, a.retry_after};
        if (std::optional<HttpError> explained = signer->explain(failed)) throw *explained;
    }
    if (status == 429 || status >= 500) {
        std::string what = status == 429 ? "rate limited by the server (HTTP 429)"
                                         : "server error (HTTP " + std::to_string(status) + ")";
        throw HttpError(name + ": " + what, EIO, status, true);
    }
    // An answer with X-Error-Code is the Hub's (or a mirror's): described in its words
    // (remote/hub.hpp); any other server's refusal is not.
    if ((status == 401 || status == 403 || status == 404 || status == 410) && !a.error_code.empty()) {
        throw HttpError(describe_hub_error(status, a.error_code, a.error_message, hop, credentials),
                        status == 401 || status == 403 ? EACCES : ENOENT, status, false, a.error_code);
    }
    if (status == 400 && !ask.page && !head_only && effective && !same_origin(effective, url) &&
        url.find("/resolve/") != std::string::npos) {
        // The Hub's storage (its Xet bridge) refuses ranges of some very large files
        // (xet-core#238, #592): plain HTTP cannot get them.
        throw HttpError(name + ": the Hub's storage refused the range (HTTP 400 from " + url_for_message(effective) +
                            "); some very large files are served only to the Xet protocol: download them with "
                            "'hf download' (huggingface_hub with hf_xet) and mount the local directory",
                        EIO, status, false);
    }
    if (status == 401 || status == 403) {
        throw HttpError(name + ": access denied (HTTP " + std::to_string(status) +
                            "): the server refuses this file (missing or wrong credentials?)",
                        EACCES, status, false);
    }
    if (status == 404 || status == 410) {
        throw HttpError(name + ": not found (HTTP " + std::to_string(status) + ")", ENOENT, status, false);
    }
    if (status == 416) {
        throw HttpError(name + ": range not satisfiable (HTTP 416): the file is shorter than expected "
                               "(it changed on the server?)",
                        EIO, status, false);
    }
    ObjectInfo info;
    if (!a.last_modified.empty()) info.mtime = curl_getdate(a.last_modified.c_str(), nullptr);
    if (info.mtime < 0) info.mtime = 0;
    if (ask.page) {
        if (status != 200) {
            throw HttpError(name + ": unexpected answer HTTP " + std::to_string(status) + " to a GET", EIO, status,
                            false);
        }
        char* type = nullptr;
        curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &type);
        if (ask.content_type) *ask.content_type = type ? type : "";
        if (ask.final_url) *ask.final_url = effective ? effective : url;
        if (ask.link) *ask.link = a.link;
        info.size = a.page->size();
    } else if (head_only) {
        if (status != 200) {
            throw HttpError(name + ": unexpected answer HTTP " + std::to_string(status) + " to HEAD", EIO, status,
                            false);
        }
        if (!a.identity()) throw HttpError(name + ": " + a.refused, EIO, status, false);
        char* end = nullptr;
        unsigned long long n = std::strtoull(a.content_length.c_str(), &end, 10);
        if (a.content_length.empty() || *end) {
            throw HttpError(name + ": HEAD answer without Content-Length", EIO, status, false);
        }
        info.size = n;
    } else {
        if (status != 206 || !a.checked) {
            throw HttpError(name + ": unexpected answer HTTP " + std::to_string(status) + " to a range request", EIO,
                            status, false);
        }
        const uint64_t want = std::min<uint64_t>(len, a.total - offset);
        if (a.got != want) {
            throw HttpError(name + ": answer cut short: " + std::to_string(a.got) + " of " + std::to_string(want) +
                                " bytes at offset " + std::to_string(offset),
                            EIO, status, true);
        }
        info.size = a.total;
        *ask.got = a.got;
        if (ask.final_url) *ask.final_url = effective ? effective : url;
    }
    info.validator = !a.etag.empty() ? a.etag : "lm:" + a.last_modified + ":" + std::to_string(info.size);
    return info;
}

void HttpClient::wait_for_origin(const std::string& url, Clock::time_point limit) {
    auto parts = parse_url(url);
    if (!parts) return;
    Clock::time_point until;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = limited_until_.find(parts->scheme + "://" + parts->host + ":" + parts->port);
        if (it == limited_until_.end()) return;
        until = it->second;
    }
    // Another request of this client was told to wait: do not ask before then.
    const auto now = Clock::now();
    if (until > now) std::this_thread::sleep_until(std::min(until, limit));
}

void HttpClient::note_rate_limited(const std::string& origin, Clock::time_point until, const RateLimitHint& hint) {
    bool fresh = false;
    const auto now = Clock::now();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = limited_until_.find(origin);
        // A new limited period: not limited in the last minute (a window answered by several
        // 429s in a row, or by many requests at once, is one).
        fresh = it == limited_until_.end() || it->second + std::chrono::seconds(60) < now;
        Clock::time_point& u = limited_until_[origin];
        u = std::max(u, until);
    }
    if (!fresh) return;
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(until - now + std::chrono::milliseconds(500)).count();
    spdlog::warn("{}: rate limited (HTTP 429{}{}): waiting {} s before asking again (at most {} s in all per request)",
                 gguf::quote_name(origin), hint.bucket.empty() ? "" : ", bucket \"" + hint.bucket + "\"",
                 hint.policy.empty() ? "" : ", policy " + hint.policy, std::max<int64_t>(secs, 0),
                 options_.rate_limit_patience.count());
}

ObjectInfo HttpClient::perform(const std::string& url, const Ask& ask, Clock::time_point deadline) {
    const uint64_t bytes = ask.page ? kMaxPageBytes : ask.len;
    auto start = Clock::now();
    if (deadline == Clock::time_point{}) deadline = start + remote::request_deadline(options_, bytes);
    const auto patience_end = start + options_.rate_limit_patience;
    auto retry_until = start + options_.net_timeout;  // no retry starts after this
    auto delay = options_.backoff;
    bool token_reread = false;
    auto limited_delay = std::chrono::milliseconds(1000);  // a 429 that does not say how long
    const bool whole_retried = options_.retry_whole_answers && !ask.page && !ask.head_only;
    unsigned whole_answers = 0;
    // The parts a taker took are never asked for (nor written) again: each attempt asks for
    // what follows them.
    Taking* taking = ask.taking && ask.taking->hooks->take && ask.part_len ? ask.taking : nullptr;
    auto all_taken = [&] {
        return taking && taking->taken > 0 &&
               uint64_t{taking->taken} * ask.part_len >= std::min<uint64_t>(ask.len, taking->info.size - ask.offset);
    };
    auto finish_taken = [&] {
        *ask.got = static_cast<size_t>(std::min<uint64_t>(ask.len, taking->info.size - ask.offset));
        return taking->info;
    };
    for (unsigned attempt = 1;;) {
        wait_for_origin(url, patience_end);
        if (whole_retried) wait_while_filling(url, deadline);
        Ask rest = ask;
        size_t rest_got = 0;
        const size_t skip = taking ? taking->taken * ask.part_len : 0;
        if (taking) {
            rest.offset += skip;
            rest.len -= skip;
            rest.part_base = taking->taken;
            rest.got = &rest_got;
        }
        void* h = acquire();
        RateLimitHint hint;
        std::string answered_by;
        try {
            ObjectInfo info = once(h, url, rest, deadline, &hint, &answered_by);
            release(h);
            if (whole_retried) note_filling(url, false);
            if (taking) *ask.got = skip + rest_got;
            return info;
        } catch (const HttpError& e) {
            release(h);
            // Cut after the range's last byte arrived (and was taken): nothing to ask again.
            if (all_taken()) return finish_taken();
            const bool whole = whole_retried && e.status() == 200 && std::strstr(e.what(), kRangeIgnored) != nullptr;
            const auto whole_wait = whole_retried ? note_filling(url, whole) : std::chrono::milliseconds(0);
            // A refused token may have been rotated, expired credentials refreshed: re-read them
            // once and ask again (not an attempt).
            const bool refreshable = e.status() == 401 || e.credentials_expired();
            if (refreshable && !token_reread && options_.signer && options_.signer->covers(url)) {
                token_reread = true;
                if (options_.signer->refresh()) continue;
                if (e.credentials_expired())
                    throw HttpError(std::string(e.what()) + " (refreshed: the credentials are the same)", e.sys_errno(),
                                    e.status(), false);
            }
            if (e.credentials_expired()) {
                throw HttpError(std::string(e.what()) + " (the credentials were refreshed and the request sent again)",
                                e.sys_errno(), e.status(), false);
            }
            const auto now = Clock::now();
            if (e.status() == 429) {
                // Waited out (within the patience), not counted as an attempt.
                const auto wait = hint.wait_seconds >= 0
                                      ? std::chrono::milliseconds(std::max(1L, hint.wait_seconds) * 1000)
                                      : limited_delay;
                if (now + wait > patience_end) {
                    throw HttpError(std::string(e.what()) + (hint.bucket.empty() ? "" : " (bucket \"" + hint.bucket + "\")") +
                                        (hint.policy.empty() ? "" : " (policy " + hint.policy + ")") +
                                        ": still limited after waiting " +
                                        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - start).count()) +
                                        " s (the wait is bounded at " + std::to_string(options_.rate_limit_patience.count()) +
                                        " s per request)",
                                    e.sys_errno(), e.status(), true);
                }
                auto parts = parse_url(answered_by.empty() ? url : answered_by);
                if (parts) note_rate_limited(parts->scheme + "://" + parts->host + ":" + parts->port, now + wait, hint);
                std::this_thread::sleep_for(wait);
                if (hint.wait_seconds < 0) limited_delay = std::min(limited_delay * 2, std::chrono::milliseconds(30000));
                // The time spent waiting is not the server's failing: the other bounds start again.
                const auto resumed = Clock::now();
                deadline = std::max(deadline, resumed + remote::request_deadline(options_, bytes));
                retry_until = resumed + options_.net_timeout;
                continue;
            }
            if (whole) {
                // A pull-through cache filling its copy: asked again until it serves ranges
                // (wait_while_filling waits out whole_wait, one request of this client at a time).
                if (now + whole_wait > deadline) {
                    throw HttpError(std::string(e.what()) + " (asked " + std::to_string(whole_answers + 1) +
                                        " times over " +
                                        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - start).count()) +
                                        " s: a registry mirror still fetching the blob, or one without Range)",
                                    e.sys_errno(), e.status(), false);
                }
                if (!whole_answer_noted_.exchange(true)) {
                    spdlog::warn("{}: the registry answered a Range request with the whole blob (a pull-through "
                                 "cache fetching it from upstream?); asking again until it serves ranges",
                                 url_for_message(url));
                }
                ++whole_answers;
                continue;
            }
            if (!e.retryable() || attempt >= options_.attempts || now + delay > std::min(retry_until, deadline)) {
                std::string tail = attempt > 1 ? " (after " + std::to_string(attempt) + " attempts)" : "";
                throw HttpError(e.what() + tail, e.sys_errno(), e.status(), e.retryable(), e.hub_code());
            }
            // A 503 that says when to come back (Retry-After) is asked no sooner.
            if (hint.wait_seconds > 0 && now + std::chrono::seconds(hint.wait_seconds) <= std::min(retry_until, deadline))
                delay = std::max<std::chrono::milliseconds>(delay, std::chrono::seconds(hint.wait_seconds));
            std::this_thread::sleep_for(delay);
            delay *= 2;
            ++attempt;
        }
    }
}

void HttpClient::wait_while_filling(const std::string& url, Clock::time_point limit) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        auto it = filling_.find(url);
        if (it == filling_.end()) return;
        const auto now = Clock::now();
        if (!it->second.asking && it->second.next <= now) {
            it->second.asking = true;
            return;
        }
        if (now >= limit) return;  // the caller's bound: its own answer decides
        filling_changed_.wait_until(lock, it->second.asking ? limit : std::min(it->second.next, limit));
    }
}

std::chrono::milliseconds HttpClient::note_filling(const std::string& url, bool whole) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = filling_.find(url);
    if (!whole) {
        if (it == filling_.end()) return std::chrono::milliseconds(0);
        filling_.erase(it);
        filling_changed_.notify_all();
        return std::chrono::milliseconds(0);
    }
    const auto now = Clock::now();
    Filling& f = filling_[url];
    // Requests sent together (read-ahead) answer whole together: one schedule for them.
    if (!f.asking && f.next > now)
        return std::chrono::duration_cast<std::chrono::milliseconds>(f.next - now);
    f.asking = false;
    f.next = now + f.delay;
    const auto wait = f.delay;
    f.delay = std::min(f.delay * 2, std::chrono::milliseconds(8000));
    filling_changed_.notify_all();
    return wait;
}

ObjectInfo HttpClient::get_range(const std::string& url, uint64_t offset, size_t len, char* dst, size_t* got,
                                 std::string* final_url, Clock::time_point deadline) {
    char* const parts[1] = {dst};
    return get_range_parts(url, offset, len, parts, len, got, final_url, deadline);
}

ObjectInfo HttpClient::get_range_parts(const std::string& url, uint64_t offset, size_t len, char* const* parts,
                                       size_t part_len, size_t* got, std::string* final_url,
                                       Clock::time_point deadline, const PartHooks* hooks) {
    if (part_len == 0) throw HttpError(url_for_message(url) + ": a ranged GET into parts of 0 bytes", EINVAL, 0, false);
    if (!parts && !(hooks && hooks->buffer))
        throw HttpError(url_for_message(url) + ": a ranged GET into parts without buffers", EINVAL, 0, false);
    Taking taking;
    taking.hooks = hooks;
    Ask ask;
    ask.taking = hooks ? &taking : nullptr;
    ask.final_url = final_url;
    ask.offset = offset;
    ask.len = len;
    ask.parts = parts;
    ask.part_len = part_len;
    ask.got = got;
    return perform(url, ask, deadline);
}

std::chrono::milliseconds HttpClient::request_deadline(uint64_t bytes) const noexcept {
    return remote::request_deadline(options_, bytes);
}

std::string HttpClient::name_for_message(const std::string& url) const {
    if (options_.signer && options_.signer->covers(url)) return options_.signer->name_for_message(url);
    return url_for_message(url);
}

ObjectInfo HttpClient::head(const std::string& url) {
    Ask ask;
    ask.head_only = true;
    return perform(url, ask, {});
}

std::string HttpClient::get_page(const std::string& url, std::string* content_type, std::string* final_url,
                                 std::string* link) {
    std::string body;
    Ask ask;
    ask.link = link;
    ask.page = &body;
    ask.content_type = content_type;
    ask.final_url = final_url;
    perform(url, ask, {});
    return body;
}

}  // namespace gguf_mount::remote
