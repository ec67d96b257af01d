// The header rules of the libcurl client (remote/http.cpp), without libcurl's transfers: values
// of Content-Range, RateLimit and Retry-After, and the bound of one call. Internal to remote/.
#pragma once

#include <cstdint>
#include <string>

namespace gguf_mount::remote::http_rules {

/// `s` with ASCII letters in lowercase (header names, schemes).
std::string lower(std::string s);
/// `s` without leading and trailing blanks (space, tab, CR, LF).
std::string trim(const std::string& s);
/// Parses "bytes A-B/TOTAL" (RFC 9110 14.4) into *a, *b, *total; false on anything else ("*"
/// totals included, A > B, B >= TOTAL).
bool parse_content_range(const std::string& v, uint64_t* a, uint64_t* b, uint64_t* total);

}  // namespace gguf_mount::remote::http_rules
