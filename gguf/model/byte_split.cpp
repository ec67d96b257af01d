#include "gguf/model/byte_split.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "common/text.hpp"

namespace gguf {

namespace {

constexpr std::string_view kGguf = ".gguf";
constexpr std::string_view kLetters = "-split-";
constexpr std::string_view kPart = ".part";
constexpr size_t kMaxLetters = 4;
constexpr size_t kMaxDigits = 6;

/// A valid logical name: "X.gguf" with X non-empty.
bool valid_logical(std::string_view s) { return s.size() > kGguf.size() && ends_with(s, kGguf); }

/// Parses 1..kMaxDigits decimal digits.
std::optional<uint64_t> parse_digits(std::string_view s) {
    if (s.empty() || s.size() > kMaxDigits) return std::nullopt;
    uint64_t v = 0;
    for (char ch : s) {
        if (ch < '0' || ch > '9') return std::nullopt;
        v = v * 10 + static_cast<uint64_t>(ch - '0');
    }
    return v;
}

std::optional<ByteSplitName> parse_letters(std::string_view name) {
    size_t at = name.rfind(kLetters);
    if (at == std::string_view::npos) return std::nullopt;
    std::string_view logical = name.substr(0, at);
    std::string_view letters = name.substr(at + kLetters.size());
    if (!valid_logical(logical) || letters.empty() || letters.size() > kMaxLetters) return std::nullopt;
    uint64_t index = 0;
    for (char ch : letters) {
        if (ch < 'a' || ch > 'z') return std::nullopt;
        index = index * 26 + static_cast<uint64_t>(ch - 'a');
    }
    ByteSplitName out;
    out.logical = std::string(logical);
    out.style = ByteSplitStyle::Letters;
    out.index = index;
    out.suffix_length = static_cast<uint32_t>(letters.size());
    return out;
}

std::optional<ByteSplitName> parse_part_of(std::string_view name) {
    size_t at = name.rfind(kPart);
    if (at == std::string_view::npos) return std::nullopt;
    std::string_view logical = name.substr(0, at);
    std::string_view rest = name.substr(at + kPart.size());  // "XofY"
    size_t of = rest.find("of");
    if (!valid_logical(logical) || of == std::string_view::npos) return std::nullopt;
    auto x = parse_digits(rest.substr(0, of));
    auto y = parse_digits(rest.substr(of + 2));
    if (!x || !y || *x < 1 || *x > *y) return std::nullopt;
    ByteSplitName out;
    out.logical = std::string(logical);
    out.style = ByteSplitStyle::PartOf;
    out.index = *x - 1;
    out.count = *y;
    return out;
}

/// "-a", "-b", ... for an index and a suffix length (for messages).
std::string letters_of(uint64_t index, uint32_t length) {
    std::string s(length, 'a');
    for (uint32_t i = length; i-- > 0;) {
        s[i] = static_cast<char>('a' + index % 26);
        index /= 26;
    }
    return s;
}

}  // namespace

std::optional<ByteSplitName> parse_byte_split_name(std::string_view name) {
    if (name.find('/') != std::string_view::npos) return std::nullopt;
    if (auto n = parse_letters(name)) return n;
    return parse_part_of(name);
}

std::vector<ByteSplitGroup> detect_byte_splits(const std::vector<std::string>& names) {
    // (logical, style, count or suffix length) -> index -> piece names with that index
    using Key = std::tuple<std::string, ByteSplitStyle, uint64_t>;
    std::map<Key, std::map<uint64_t, std::vector<std::string>>> groups;
    for (const auto& n : names) {
        auto p = parse_byte_split_name(n);
        if (!p) continue;
        uint64_t k = p->style == ByteSplitStyle::PartOf ? p->count : p->suffix_length;
        groups[Key{p->logical, p->style, k}][p->index].push_back(n);
    }

    std::vector<ByteSplitGroup> out;
    out.reserve(groups.size());
    for (auto& [key, by_index] : groups) {
        ByteSplitGroup g;
        g.logical = std::get<0>(key);
        g.style = std::get<1>(key);
        const uint64_t k = std::get<2>(key);
        for (auto& [index, list] : by_index) {
            std::sort(list.begin(), list.end());
            g.pieces.insert(g.pieces.end(), list.begin(), list.end());
        }
        // Problems, the first one found wins (one line per group).
        for (const auto& [index, list] : by_index) {
            if (list.size() > 1) {
                g.problem = g.logical + ": byte-split pieces " + list[0] + " and " + list[1] + " both claim position " +
                            std::to_string(index + 1);
                break;
            }
        }
        if (g.problem.empty()) {
            uint64_t expect_count = g.style == ByteSplitStyle::PartOf ? k : by_index.rbegin()->first + 1;
            for (uint64_t i = 0; i < expect_count; ++i) {
                if (by_index.count(i)) continue;
                if (g.style == ByteSplitStyle::PartOf) {
                    g.problem = g.logical + ": byte-split part " + std::to_string(i + 1) + " of " + std::to_string(k) +
                                " (" + g.logical + ".part" + std::to_string(i + 1) + "of" + std::to_string(k) +
                                ") is missing";
                } else {
                    g.problem = g.logical + ": byte-split piece " + g.logical + "-split-" +
                                letters_of(i, static_cast<uint32_t>(k)) + " is missing";
                }
                break;
            }
        }
        out.push_back(std::move(g));
    }
    return out;
}

}  // namespace gguf
