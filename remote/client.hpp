// The seam between the block logic and a transport: sources, listings and the block store ask a
// Client for bytes, headers and pages; remote/http.hpp is the libcurl implementation. Every
// request a client sends passes its RequestSigner first (a bearer token, remote/token.hpp; AWS
// Signature V4, remote/s3/), so signing plugs in without touching the block logic.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "remote/url_parts.hpp"

namespace gguf_mount::remote {

/// True for "http://..." and "https://..." (case-insensitive scheme).
bool is_http_url(const std::string& s);

/// What identifies one version of a remote object, from the headers of a 206 answer (or HEAD).
struct ObjectInfo {
    uint64_t size = 0;       ///< total bytes (Content-Range "/TOTAL", or Content-Length of HEAD)
    std::string validator;   ///< ETag as sent, else "lm:" + Last-Modified + ":" + size
    time_t mtime = 0;        ///< Last-Modified as seconds since the epoch, 0 when absent
};

/// A failed request: one line naming the URL (url_for_message, remote/url_parts.hpp: no
/// credentials, query or fragment) and what a user can do about it.
/// `sys_errno` is what a read reports (EIO for everything but ENOENT for 404/410, EACCES for
/// 401/403); `status` the HTTP status (0 for transport errors); `hub_code` the answer's
/// X-Error-Code header (the Hub's error kind: "GatedRepo", "RepoNotFound", ...; "" when absent).
/// The words of the error a server that ignores Range requests gets (answered 200 with the whole
/// file): every file of that server fails the same way, so listings say it once (listing.cpp).
inline constexpr const char* kRangeIgnored = "the server ignored the Range request";

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
    /// True when the server said the credentials expired (S3 ExpiredToken): the client
    /// refreshes them (RequestSigner::refresh) and sends the request again once.
    bool credentials_expired() const noexcept { return credentials_expired_; }
    void set_credentials_expired() noexcept { credentials_expired_ = true; }

private:
    int sys_errno_;
    long status_;
    bool retryable_;
    std::string hub_code_;
    bool credentials_expired_ = false;
};

/// One request as it is about to be sent, for a RequestSigner to amend.
struct Request {
    std::string method;  ///< "GET" or "HEAD"
    /// The absolute URL to send. A signer may replace it (AWS SigV4 sends the canonical URL it
    /// signed); the client sends it unchanged, and resolves a redirect's Location against it.
    std::string url;
    /// Headers to send besides the client's own (User-Agent), name and value as sent. A ranged
    /// GET holds {"Range", "bytes=FIRST-LAST"} before sign() is called. A name or value holding
    /// CR, LF or NUL fails the request (HttpError naming the URL), never reaches the wire.
    std::vector<std::pair<std::string, std::string>> headers;
    /// Send the URL's path exactly as it is (no removal of "." and ".." segments, no merging
    /// of "//"): a signer that signed the path sets it (S3 keys may hold "//" and "..").
    bool exact_path = false;
};

/// A non-2xx answer to a covered URL, for RequestSigner::explain.
struct FailedAnswer {
    std::string url;     ///< the URL the request was sent to (after signing)
    std::string method;  ///< "GET" or "HEAD"
    long status = 0;     ///< the HTTP status
    /// The start of the body (at most kMaxErrorBody bytes; "" for HEAD): an error document.
    std::string body;
    std::string bucket_region;  ///< the x-amz-bucket-region header, "" when absent
    std::string retry_after;    ///< the Retry-After header, "" when absent
    static constexpr size_t kMaxErrorBody = size_t{64} << 10;
};

/// The request-signing hook of a Client: called for every request the client sends (each
/// attempt of a ranged GET, HEAD and page GET, retries included) whose URL it covers(), and for
/// each redirect follow-up to the origin (scheme, host, port) of the URL the call was given;
/// never for a follow-up to another origin (a CDN a resolve URL redirects to gets no
/// credentials). Implementations are shared by the client's threads: const and thread-safe.
class RequestSigner {
public:
    virtual ~RequestSigner() = default;
    /// True when requests to `url` are to be signed (typically: it has the signer's origin).
    /// Never throws.
    virtual bool covers(const std::string& url) const noexcept = 0;
    /// Adds headers to `request` and/or replaces its URL. Throws HttpError (one line, naming
    /// the URL without query, never a secret) when it cannot sign; the call then fails with it.
    virtual void sign(Request& request) const = 0;
    /// Called once per call after a covered URL answered 401: re-reads the credentials; true
    /// when they changed, and the request is sent again (not counted as an attempt). Never
    /// throws.
    virtual bool refresh() const noexcept { return false; }
    /// Called for every answer to a covered URL whose status is not 2xx (and not a redirect
    /// that is followed), before the client's own interpretation: the HttpError to fail the
    /// attempt with (one line, never a secret; retryable() and credentials_expired() steer the
    /// client's retries), or nullopt to let the client describe it. Never throws but
    /// std::bad_alloc.
    virtual std::optional<HttpError> explain(const FailedAnswer&) const { return std::nullopt; }
    /// The name of a covered URL in messages and logs (e.g. "s3://BUCKET/KEY" for an S3
    /// object). Default: url_for_message(url). Never throws but std::bad_alloc.
    virtual std::string name_for_message(const std::string& url) const { return url_for_message(url); }
};

/// A thread-safe transport of whole-object reads in ranges, HEADs and small pages. The block
/// logic holds a Client& and never learns the transport. Errors are HttpError (one line).
class Client {
public:
    using Clock = std::chrono::steady_clock;
    /// get_range_parts' hooks for a run of parts handed over one by one (both optional).
    struct PartHooks {
        /// The buffer of part i (part_len bytes), asked for when the part's first byte arrives
        /// (parts null, or parts[i] null): a run's buffers are taken only as its bytes come.
        /// May be asked again for the same part (a retry): it returns the same buffer. A throw
        /// aborts the call (HttpError, ENOMEM).
        std::function<char*(size_t part)> buffer;
        /// Called as part i's last byte arrives, in order, with the info of the answer (a 206
        /// for the asked range) that brought it. True takes the part: the client never writes
        /// to it again, and a retry asks only for the bytes after the taken parts (a reader can
        /// use a block while the rest of its run is on its way). False, or a throw, takes none
        /// of the rest of that answer.
        std::function<bool(size_t part, const ObjectInfo& answer)> take;
    };
    virtual ~Client() = default;

    /// GET bytes [offset, offset + len) of `url` into `dst` (len > 0): a 206 whose
    /// Content-Range starts at `offset` and ends at offset + len - 1 or at the object's last
    /// byte, nothing else. Returns the object's info and sets `*got` to the bytes written
    /// (== len unless the object ends first). `*final_url` (if given) receives the URL that
    /// answered, after redirects. Retries within `deadline` (default: now +
    /// request_deadline(len); a caller asking a second URL for the same bytes passes the first
    /// call's), then throws HttpError. Never keeps more than `len` bytes in memory.
    virtual ObjectInfo get_range(const std::string& url, uint64_t offset, size_t len, char* dst, size_t* got,
                                 std::string* final_url = nullptr, Clock::time_point deadline = {}) = 0;
    /// get_range with the bytes scattered over consecutive buffers: byte i of the range goes to
    /// part i / part_len at i % part_len (part_len > 0; parts holds ceil(len / part_len)
    /// buffers of part_len bytes, the last one may be shorter; null with hooks->buffer). One request for several blocks:
    /// a sequential reader's read-ahead asks for a run of blocks at once, since every request
    /// costs a server (S3, a registry) more than the bytes (bench/README.md, "Read-ahead runs").
    /// Same answers, retries, deadline and errors as get_range.
    /// `hooks` (if given; PartHooks): buffers asked for as the parts begin, parts handed
    /// over as they end. Both run on the calling thread inside the transfer: they must be quick
    /// and may not call the client. When the call throws, the parts taken keep their bytes.
    virtual ObjectInfo get_range_parts(const std::string& url, uint64_t offset, size_t len, char* const* parts,
                                       size_t part_len, size_t* got, std::string* final_url = nullptr,
                                       Clock::time_point deadline = {}, const PartHooks* hooks = nullptr) = 0;
    /// HEAD `url`: size (Content-Length) and validator without a data request.
    virtual ObjectInfo head(const std::string& url) = 0;
    /// The most bytes get_page takes.
    static constexpr size_t kMaxPageBytes = size_t{16} << 20;
    /// A whole small resource (a directory index page, a listing), GET without Range, at most
    /// kMaxPageBytes, answered 200. Returns the body; `*content_type` gets the Content-Type,
    /// `*final_url` the URL after redirects, `*link` (if given) the Link header (pagination).
    virtual std::string get_page(const std::string& url, std::string* content_type, std::string* final_url,
                                 std::string* link = nullptr) = 0;
    /// The bound of one call for a body of `bytes` bytes (rate-limit waits not included), as
    /// get_range applies it by default. Never throws.
    virtual std::chrono::milliseconds request_deadline(uint64_t bytes) const noexcept = 0;
    /// The name of `url` in messages and logs: the signer's name for the URLs it covers (an S3
    /// object is "s3://BUCKET/KEY"), else url_for_message(url). Never throws but std::bad_alloc.
    virtual std::string name_for_message(const std::string& url) const { return url_for_message(url); }
};

}  // namespace gguf_mount::remote
