#include "remote/http_rules.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "remote/http.hpp"

namespace gguf_mount::remote {

namespace {

using http_rules::lower;
using http_rules::trim;

/// The value of parameter `name` ("t") in a structured-field item list ("\"api\";r=0;t=3"),
/// or "" when absent.
std::string sf_param(const std::string& v, const std::string& name) {
    size_t i = 0;
    while (i < v.size()) {
        size_t end = v.find_first_of(";,", i);
        if (end == std::string::npos) end = v.size();
        std::string item = trim(v.substr(i, end - i));
        size_t eq = item.find('=');
        if (eq != std::string::npos && lower(trim(item.substr(0, eq))) == name) return trim(item.substr(eq + 1));
        i = end + 1;
    }
    return "";
}

/// A non-negative count of seconds ("3"), else -1 (at most 9 digits: a day is 5).
long seconds_value(const std::string& v) {
    if (v.empty() || v.size() > 9) return -1;
    long n = 0;
    for (char c : v) {
        if (c < '0' || c > '9') return -1;
        n = n * 10 + (c - '0');
    }
    return n;
}

}  // namespace

namespace http_rules {

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t\r\n");
    if (a == std::string::npos) return "";
    size_t b = s.find_last_not_of(" \t\r\n");
    return s.substr(a, b - a + 1);
}

bool parse_content_range(const std::string& v, uint64_t* a, uint64_t* b, uint64_t* total) {
    unsigned long long x = 0, y = 0, t = 0;
    char tail = 0;
    if (std::sscanf(v.c_str(), "bytes %llu-%llu/%llu%c", &x, &y, &t, &tail) != 3) return false;
    if (x > y || y >= t) return false;
    *a = x;
    *b = y;
    *total = t;
    return true;
}

}  // namespace http_rules

std::chrono::milliseconds request_deadline(const HttpOptions& o, uint64_t bytes) noexcept {
    const uint64_t rate = std::max<uint64_t>(1, o.min_bytes_per_second);
    return std::chrono::duration_cast<std::chrono::milliseconds>(o.net_timeout) * 2 +
           std::chrono::milliseconds(bytes / rate * 1000 + (bytes % rate) * 1000 / rate);
}

RateLimitHint parse_rate_limit(const std::string& ratelimit, const std::string& retry_after, time_t now) {
    RateLimitHint h;
    const std::string rl = ratelimit.substr(0, 1024);
    if (!rl.empty() && rl[0] == '"') {
        size_t close = rl.find('"', 1);
        if (close != std::string::npos) h.bucket = rl.substr(1, close - 1);
    }
    long t = seconds_value(sf_param(rl, "t"));
    if (t < 0) t = seconds_value(sf_param(rl, "reset"));
    long ra = -1;
    const std::string r = trim(retry_after.substr(0, 1024));
    if (!r.empty()) {
        ra = seconds_value(r);
        if (ra < 0) {
            const time_t at = curl_getdate(r.c_str(), nullptr);
            if (at > 0) ra = at > now ? static_cast<long>(at - now) : 0;
        }
    }
    h.wait_seconds = std::max(t, ra);
    return h;
}

bool is_http_url(const std::string& s) {
    std::string l = lower(s.substr(0, 8));
    return l.rfind("http://", 0) == 0 || l.rfind("https://", 0) == 0;
}

}  // namespace gguf_mount::remote
