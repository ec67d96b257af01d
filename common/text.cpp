#include "common/text.hpp"

#include <cstdint>

namespace gguf {

namespace {

const char* const kHex = "0123456789abcdef";

void put_hex_escape(std::string& out, unsigned char u) {
    out += "\\x";
    out += kHex[u >> 4];
    out += kHex[u & 15];
}

/// Code points that are valid UTF-8 but must not reach a terminal or a log as they are.
bool unprintable(uint32_t cp) {
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 || cp == 0x200e ||
           cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/// Length of the valid, shortest-form UTF-8 sequence of a printable code point at the start of
/// `s` (1 to 4), or 0 when the first byte must be escaped.
size_t printable_sequence(std::string_view s) {
    auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char c = b(0);
    if (c < 0x80) return unprintable(c) ? 0 : 1;
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
    uint32_t cp = 0;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
        if (c == 0xe0) lo = 0xa0;  // overlong
        if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
        if (c == 0xf0) lo = 0x90;  // overlong
        if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
    } else {
        return 0;
    }
    if (s.size() < len) return 0;
    for (size_t i = 1; i < len; ++i) {
        const unsigned char t = b(i);
        if (i == 1 ? (t < lo || t > hi) : (t < 0x80 || t > 0xbf)) return 0;
        cp = (cp << 6) | (t & 0x3f);
    }
    return unprintable(cp) ? 0 : len;
}

}  // namespace

std::string escape(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
        if (text[i] == '\\') {
            out += "\\\\";
            ++i;
            continue;
        }
        const size_t n = printable_sequence(text.substr(i));
        if (n == 0) {
            // Only this byte: the next one may start a valid sequence of its own.
            put_hex_escape(out, static_cast<unsigned char>(text[i]));
            ++i;
        } else {
            out.append(text.data() + i, n);
            i += n;
        }
    }
    return out;
}

bool needs_no_escape(std::string_view text) noexcept {
    size_t i = 0;
    while (i < text.size()) {
        if (text[i] == '\\') return false;
        const size_t n = printable_sequence(text.substr(i));
        if (n == 0) return false;
        i += n;
    }
    return true;
}

std::string ascii_lower(std::string_view text) {
    std::string out(text);
    for (char& c : out)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return out;
}

bool ends_with(std::string_view text, std::string_view suffix) noexcept {
    return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string hex_bytes(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char ch : bytes) {
        auto u = static_cast<unsigned char>(ch);
        out += kHex[u >> 4];
        out += kHex[u & 15];
    }
    return out;
}

std::string quote_name(std::string_view name) {
    auto plain = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '@' ||
               c == '%' || c == '+' || c == '=' || c == ':' || c == ',' || c == '.' || c == '/' || c == '-';
    };
    bool all_plain = !name.empty();
    for (char c : name) all_plain = all_plain && plain(c);
    if (all_plain) return std::string(name);
    std::string out = "'";
    for (char c : name) {
        if (c == '\'') out += "'\"'\"'";
        else out += c;
    }
    return out + "'";
}

}  // namespace gguf
