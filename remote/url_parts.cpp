#include "remote/url_parts.hpp"

#include <curl/curl.h>

#include <cctype>
#include <memory>

#include "common/text.hpp"
#include "gguf/error.hpp"

namespace gguf_mount::remote {

namespace {

struct CurlUrlFree {
    void operator()(CURLU* u) const { curl_url_cleanup(u); }
};
using UrlHandle = std::unique_ptr<CURLU, CurlUrlFree>;

constexpr unsigned kParseFlags = CURLU_NON_SUPPORT_SCHEME | CURLU_ALLOW_SPACE;

std::string part(CURLU* u, CURLUPart which, unsigned flags = 0) {
    char* value = nullptr;
    if (curl_url_get(u, which, &value, flags) != CURLUE_OK || value == nullptr) return "";
    std::string out(value);
    curl_free(value);
    return out;
}

}  // namespace

std::optional<UrlParts> parse_url(const std::string& reference, const std::string& base) {
    UrlHandle u(curl_url());
    if (!u) return std::nullopt;
    if (!base.empty() && curl_url_set(u.get(), CURLUPART_URL, base.c_str(), kParseFlags) != CURLUE_OK)
        return std::nullopt;
    if (curl_url_set(u.get(), CURLUPART_URL, reference.c_str(), kParseFlags) != CURLUE_OK) return std::nullopt;
    UrlParts p;
    p.url = part(u.get(), CURLUPART_URL);
    p.scheme = gguf::ascii_lower(part(u.get(), CURLUPART_SCHEME));
    p.user = part(u.get(), CURLUPART_USER);
    p.host = gguf::ascii_lower(part(u.get(), CURLUPART_HOST));
    p.port = part(u.get(), CURLUPART_PORT, CURLU_DEFAULT_PORT);
    p.path = part(u.get(), CURLUPART_PATH);
    p.path_decoded = part(u.get(), CURLUPART_PATH, CURLU_URLDECODE);
    p.query = part(u.get(), CURLUPART_QUERY);
    p.fragment = part(u.get(), CURLUPART_FRAGMENT);
    if (p.path.empty()) p.path = p.path_decoded = "/";
    return p;
}

std::string url_for_message(const std::string& url) {
    UrlHandle u(curl_url());
    if (u && curl_url_set(u.get(), CURLUPART_URL, url.c_str(), kParseFlags) == CURLUE_OK) {
        curl_url_set(u.get(), CURLUPART_USER, nullptr, 0);
        curl_url_set(u.get(), CURLUPART_PASSWORD, nullptr, 0);
        curl_url_set(u.get(), CURLUPART_QUERY, nullptr, 0);
        curl_url_set(u.get(), CURLUPART_FRAGMENT, nullptr, 0);
        std::string out = part(u.get(), CURLUPART_URL);
        if (!out.empty()) return out;
    }
    return url.substr(0, url.find_first_of("?#"));
}

std::string url_quote(std::string_view text, bool keep_slash) {
    std::string out;
    size_t start = 0;
    while (start <= text.size()) {
        size_t end = keep_slash ? text.find('/', start) : std::string_view::npos;
        std::string_view seg = text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
        // curl_easy_escape reads a length of 0 as "up to the NUL": an empty segment (a leading,
        // trailing or doubled '/') would encode the whole rest of the text. It has nothing to encode.
        if (!seg.empty()) {
            char* escaped = curl_easy_escape(nullptr, seg.data(), static_cast<int>(seg.size()));
            if (escaped == nullptr) throw gguf::Error(gguf::Code::BadValue, "cannot URL-encode a path segment");
            out += escaped;
            curl_free(escaped);
        }
        if (end == std::string_view::npos) break;
        out += '/';
        start = end + 1;
    }
    return out;
}

bool same_origin(const std::string& a, const std::string& b) {
    auto pa = parse_url(a), pb = parse_url(b);
    return pa && pb && pa->scheme == pb->scheme && pa->host == pb->host && pa->port == pb->port;
}

}  // namespace gguf_mount::remote
