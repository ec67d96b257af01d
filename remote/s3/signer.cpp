#include "remote/s3/signer.hpp"

#include <curl/curl.h>

#include <cerrno>
#include <ctime>

#include "common/text.hpp"
#include "gguf/error.hpp"
#include "remote/s3/list_objects.hpp"
#include "remote/s3/sigv4.hpp"

namespace gguf_mount::remote::s3 {
namespace {

/// `text` percent-decoded once (libcurl's curl_easy_unescape; '+' stays a '+').
std::string decode(const std::string& text) {
    int n = 0;
    char* d = curl_easy_unescape(nullptr, text.c_str(), static_cast<int>(text.size()), &n);
    if (!d) throw std::bad_alloc();
    std::string out(d, static_cast<size_t>(n));
    curl_free(d);
    return out;
}

/// An absolute URL split as the signer built it: "scheme://host/path?query" (no userinfo, no
/// fragment). Hand-split rather than by curl_url, which removes dot segments of the path.
struct SplitUrl {
    std::string scheme, host, path, query;  // path and query still encoded
};

std::optional<SplitUrl> split(const std::string& url) {
    const size_t colon = url.find("://");
    if (colon == std::string::npos) return std::nullopt;
    SplitUrl u;
    u.scheme = gguf::ascii_lower(url.substr(0, colon));
    const size_t host_at = colon + 3;
    const size_t path_at = url.find_first_of("/?#", host_at);
    u.host = gguf::ascii_lower(url.substr(host_at, path_at == std::string::npos ? std::string::npos : path_at - host_at));
    if (u.host.empty() || u.host.find('@') != std::string::npos) return std::nullopt;
    std::string rest = path_at == std::string::npos ? "/" : url.substr(path_at);
    rest = rest.substr(0, rest.find('#'));
    const size_t q = rest.find('?');
    u.path = rest.substr(0, q);
    if (u.path.empty()) u.path = "/";
    if (q != std::string::npos) u.query = rest.substr(q + 1);
    return u;
}

/// The query's pairs, each name and value decoded once.
std::vector<Pair> query_pairs(const std::string& query) {
    std::vector<Pair> pairs;
    size_t from = 0;
    while (from <= query.size() && !query.empty()) {
        size_t amp = query.find('&', from);
        if (amp == std::string::npos) amp = query.size();
        const std::string item = query.substr(from, amp - from);
        if (!item.empty()) {
            const size_t eq = item.find('=');
            pairs.emplace_back(decode(item.substr(0, eq)), eq == std::string::npos ? "" : decode(item.substr(eq + 1)));
        }
        from = amp + 1;
    }
    return pairs;
}

}  // namespace

S3Signer::S3Signer(S3Config config, std::shared_ptr<CredentialSource> credentials)
    : config_(std::move(config)), credentials_(config_.sign ? std::move(credentials) : nullptr) {
    S3Config path_style = config_;
    path_style.addressing = AddressingStyle::Path;
    RequestTarget t = target_for(path_style, "b", "");  // path "BASE/b"
    scheme_ = t.scheme;
    host_ = gguf::ascii_lower(t.host);
    base_path_ = t.path.substr(0, t.path.size() - 2);
}

bool S3Signer::covers(const std::string& url) const noexcept {
    try {
        std::optional<SplitUrl> u = split(url);
        if (!u || u->scheme != scheme_) return false;
        if (u->host == host_) return true;
        return u->host.size() > host_.size() + 1 && u->host.compare(u->host.size() - host_.size(), host_.size(), host_) == 0 &&
               u->host[u->host.size() - host_.size() - 1] == '.';
    } catch (...) {
        return false;
    }
}

bool S3Signer::locate(const std::string& url, std::string* bucket, std::string* key) const {
    std::optional<SplitUrl> u = split(url);
    if (!u) return false;
    std::string path = decode(u->path);
    if (!base_path_.empty() && path.rfind(base_path_, 0) == 0) path = path.substr(base_path_.size());
    if (path.empty() || path[0] != '/') return false;
    if (u->host != host_) {
        if (!covers(url)) return false;
        *bucket = u->host.substr(0, u->host.size() - host_.size() - 1);
        *key = path.substr(1);
    } else {
        const size_t slash = path.find('/', 1);
        *bucket = path.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
        *key = slash == std::string::npos ? "" : path.substr(slash + 1);
    }
    for (const auto& [name, value] : query_pairs(u->query))
        if (name == "prefix") *key = value;
    return !bucket->empty();
}

std::string S3Signer::name_for_message(const std::string& url) const {
    std::string bucket, key;
    if (!locate(url, &bucket, &key)) return url_for_message(url);
    return s3_location(bucket, key);
}

void S3Signer::sign(Request& request) const {
    request.exact_path = true;
    if (!credentials_) return;
    std::optional<SplitUrl> u = split(request.url);
    if (!u) throw HttpError(url_for_message(request.url) + ": not an S3 URL that can be signed", EIO, 0, false);
    std::optional<Credentials> credentials;
    try {
        credentials = credentials_->get();
    } catch (const gguf::Error& e) {
        throw HttpError(name_for_message(request.url) + ": " + e.what(), EACCES, 0, false);
    }
    if (!credentials) return;
    SigningRequest r;
    r.method = request.method;
    r.scheme = u->scheme;
    r.host = u->host;
    r.path = decode(u->path);
    r.query = query_pairs(u->query);
    SignedRequest s;
    try {
        s = s3::sign(r, *credentials, config_.region, std::time(nullptr), "s3", &keys_);
    } catch (const gguf::Error& e) {
        throw HttpError(name_for_message(request.url) + ": cannot sign the request: " + e.what(), EIO, 0, false);
    }
    request.url = s.url;
    for (auto& header : s.headers) request.headers.push_back(std::move(header));
}

bool S3Signer::refresh() const noexcept {
    if (!credentials_) return false;
    try {
        std::optional<Credentials> before = credentials_->get();
        credentials_->invalidate();
        std::optional<Credentials> after = credentials_->get();
        if (!before || !after) return before.has_value() != after.has_value();
        return before->access_key_id != after->access_key_id || before->secret_access_key != after->secret_access_key ||
               before->session_token != after->session_token;
    } catch (...) {
        return false;  // the next sign() reports why no credentials can be had
    }
}

std::optional<HttpError> S3Signer::explain(const FailedAnswer& answer) const {
    if (answer.status == 416) return std::nullopt;
    ErrorContext context;
    if (!locate(answer.url, &context.bucket, &context.key)) return std::nullopt;
    context.http_status = static_cast<int>(answer.status);
    context.bucket_region = answer.bucket_region;
    context.retry_after = answer.retry_after;
    const S3Failure f = explain_failure(answer.body, context);
    int sys_errno = EIO;
    if (f.code == "NoSuchKey" || f.code == "NoSuchBucket" || f.code == "NotFound" || answer.status == 404)
        sys_errno = ENOENT;
    else if (answer.status == 403)
        sys_errno = EACCES;
    HttpError e(f.message, sys_errno, answer.status, f.retryable);
    if (f.credentials_expired) e.set_credentials_expired();
    return e;
}

std::string S3Signer::object_url(const std::string& bucket, const std::string& key) const {
    RequestTarget t = target_for(config_, bucket, key);
    return t.scheme + "://" + t.host + canonical_path(t.path);
}

std::string S3Signer::list_url(const std::string& bucket, const std::string& prefix, const std::string& token) const {
    RequestTarget t = target_for(config_, bucket, "");
    // encoding-type=url: keys come URL-encoded (a key may hold bytes XML 1.0 cannot carry).
    std::vector<Pair> query = {{"list-type", "2"}, {"delimiter", "/"}, {"encoding-type", "url"}, {"prefix", prefix}};
    if (!token.empty()) query.emplace_back("continuation-token", token);
    std::string path = t.path.empty() ? "/" : t.path;
    return t.scheme + "://" + t.host + canonical_path(path) + "?" + canonical_query(query);
}

}  // namespace gguf_mount::remote::s3
