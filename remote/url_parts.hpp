// URLs as values: one place where remote/ parses, resolves and redacts URLs (libcurl's URL API,
// never hand-parsed).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gguf_mount::remote {

/// The parts of an absolute URL as libcurl's URL API (curl_url) splits them.
struct UrlParts {
    std::string url;           // the whole URL, normalized by libcurl ("http://h:80/a%20b?q")
    std::string scheme;        // lowercase: "http", "https"
    std::string user;          // userinfo user, "" when absent (password is never kept)
    std::string host;          // lowercase; IPv6 in brackets ("[::1]")
    std::string port;          // explicit port, else the scheme's default ("80", "443")
    std::string path;          // as escaped in the URL ("/a%20b/"), at least "/"
    std::string path_decoded;  // percent-decoded ("/a b/"); %2F becomes '/'
    std::string query;         // without '?', "" when absent
    std::string fragment;      // without '#', "" when absent
};

/// Parses `reference` as an absolute URL, or, with a non-empty `base`, resolves it against the
/// absolute URL `base` (RFC 3986 reference resolution: "../x", "/x", "x?y", "//host/x").
/// Spaces are accepted and encoded; schemes other than http(s) parse too (callers check).
/// nullopt when libcurl cannot parse it (or `base`).
std::optional<UrlParts> parse_url(const std::string& reference, const std::string& base = "");

/// `url` without userinfo, query and fragment, for messages and logs ("a query string may hold
/// a signature"): "https://u:p@h/x?sig=1#f" -> "https://h/x". A string libcurl cannot parse as a
/// URL is cut at the first '?' or '#'.
std::string url_for_message(const std::string& url);

/// Percent-encodes every byte except RFC 3986 unreserved characters (letters, digits, "-._~");
/// with `keep_slash`, '/' is kept too (Python's quote(s) vs quote(s, safe='')).
std::string url_quote(std::string_view text, bool keep_slash);

/// True when both parse and have the same scheme, host and port (the port defaulted by scheme).
bool same_origin(const std::string& a, const std::string& b);

}  // namespace gguf_mount::remote
