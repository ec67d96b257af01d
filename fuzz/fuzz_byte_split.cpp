// libFuzzer target: the byte-split piece detector (gguf/model/byte_split.hpp) and the logical file
// that joins the pieces (gguf/bytes/logical_file.hpp).
//
// Input format: directory entry names separated by '\n', then optionally a NUL byte followed by
// a payload. Duplicate names are dropped (a directory has each name once).
// Checked for every input:
//   - parse_byte_split_name and detect_byte_splits agree: every name that parses is in exactly
//     one group, with the group's logical name and style; no group holds a name that does not
//     parse; no name is in two groups;
//   - groups are sorted (logical name, then style, then count / suffix length);
//   - a complete group (empty problem) has its pieces in order: piece k has index k, and a
//     part-of group has exactly Y pieces; an incomplete group's problem names its logical file.
// For the first complete group of at most 16 pieces whose names are usable file names, the
// payload is cut into that many pieces, written to a private directory under $TMPDIR (or /tmp),
// opened as one OpenLogicalFile and read back at every piece boundary and through the strict
// header reader (gguf::Error is an expected outcome). Anything else is a finding.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "gguf/model/byte_split.hpp"
#include "gguf/error.hpp"
#include "gguf/bytes/logical_file.hpp"
#include "gguf/format/reader.hpp"

namespace {

constexpr size_t kMaxNames = 256;
constexpr size_t kMaxPieces = 16;

void check(bool ok) {
    if (!ok) __builtin_trap();
}

const std::string& work_dir() {
    static const std::string dir = [] {
        const char* base = std::getenv("TMPDIR");
        std::string d = std::string(base && *base ? base : "/tmp") + "/gguf-fuzz-bytesplit." + std::to_string(::getpid());
        if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) __builtin_trap();
        std::atexit([] { ::rmdir(work_dir().c_str()); });
        return d;
    }();
    return dir;
}

/// A name that can be created in a directory as it is.
bool usable_file_name(const std::string& n) {
    return !n.empty() && n.size() <= 200 && n != "." && n != ".." && n.find('/') == std::string::npos &&
           n.find('\0') == std::string::npos;
}

/// Sort key of a group, as documented for detect_byte_splits.
std::tuple<std::string, int, uint64_t> group_key(const gguf::ByteSplitGroup& g) {
    auto first = gguf::parse_byte_split_name(g.pieces.front());
    uint64_t k = g.style == gguf::ByteSplitStyle::PartOf ? first->count : first->suffix_length;
    return {g.logical, g.style == gguf::ByteSplitStyle::Letters ? 0 : 1, k};
}

void check_groups(const std::vector<std::string>& names, const std::vector<gguf::ByteSplitGroup>& groups) {
    std::set<std::string> grouped;
    for (const auto& g : groups) {
        check(!g.pieces.empty());
        check(!g.logical.empty());
        auto first = gguf::parse_byte_split_name(g.pieces.front());
        check(first.has_value());
        for (size_t k = 0; k < g.pieces.size(); ++k) {
            auto p = gguf::parse_byte_split_name(g.pieces[k]);
            check(p.has_value());
            check(p->logical == g.logical);
            check(p->style == g.style);
            check(p->count == first->count && p->suffix_length == first->suffix_length);
            check(grouped.insert(g.pieces[k]).second);  // in no other group, not twice here
            if (g.problem.empty()) check(p->index == k);
        }
        if (g.problem.empty()) {
            if (g.style == gguf::ByteSplitStyle::PartOf) check(g.pieces.size() == first->count);
        } else {
            check(g.problem.find(g.logical) != std::string::npos);
        }
    }
    for (size_t i = 1; i < groups.size(); ++i) check(group_key(groups[i - 1]) < group_key(groups[i]));
    for (const auto& n : names) {
        check(gguf::parse_byte_split_name(n).has_value() == (grouped.count(n) == 1));
    }
    check(grouped.size() <= names.size());
}

/// Writes the payload as the pieces of `g`, reads it back through OpenLogicalFile.
void check_logical_file(const gguf::ByteSplitGroup& g, std::string_view payload) {
    const size_t n = g.pieces.size();
    gguf::LogicalFile file;
    file.path = work_dir() + "/" + g.logical;
    std::vector<std::string> written;
    bool ok = true;
    for (size_t k = 0; k < n && ok; ++k) {
        const size_t from = payload.size() * k / n, to = payload.size() * (k + 1) / n;
        const std::string path = work_dir() + "/" + g.pieces[k];
        FILE* f = std::fopen(path.c_str(), "wb");
        if (!f) {
            ok = false;  // e.g. a name too long for this file system
            break;
        }
        written.push_back(path);
        check(std::fwrite(payload.data() + from, 1, to - from, f) == to - from);
        check(std::fclose(f) == 0);
        gguf::FilePart part;
        part.path = path;
        part.size = to - from;
        check(::stat(path.c_str(), &part.st) == 0);
        file.parts.push_back(part);
    }
    if (ok) {
        gguf::OpenLogicalFile open = gguf::OpenLogicalFile::open(file);
        check(open.size() == payload.size());
        check(open.file().size() == payload.size());
        // Every piece boundary, read across; then the whole file.
        std::string buf(64, '\x5a');
        for (size_t k = 0; k <= n; ++k) {
            const uint64_t b = payload.size() * k / n;
            const uint64_t off = b > 32 ? b - 32 : 0;
            ssize_t got = open.pread(buf.data(), buf.size(), off);
            const size_t expect = std::min<uint64_t>(buf.size(), payload.size() - std::min<uint64_t>(off, payload.size()));
            check(got == static_cast<ssize_t>(expect));
            check(std::string_view(buf.data(), expect) == payload.substr(off, expect));
        }
        std::string all(payload.size(), '\x5a');
        check(open.pread(all.data(), all.size(), 0) == static_cast<ssize_t>(all.size()));
        check(all == payload);
        try {
            gguf::Header h = gguf::read_header(open);
            (void)h;
        } catch (const gguf::Error& e) {
            check(e.what()[0] != '\0');
        }
    }
    for (const auto& p : written) ::unlink(p.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    std::string_view payload;
    if (size_t nul = in.find('\0'); nul != std::string_view::npos) {
        payload = in.substr(nul + 1);
        in = in.substr(0, nul);
    }
    std::vector<std::string> names;
    std::set<std::string> seen;
    while (!in.empty() && names.size() < kMaxNames) {
        size_t nl = in.find('\n');
        std::string name(in.substr(0, nl));
        in = nl == std::string_view::npos ? std::string_view{} : in.substr(nl + 1);
        if (seen.insert(name).second) names.push_back(name);
    }

    std::vector<gguf::ByteSplitGroup> groups = gguf::detect_byte_splits(names);
    check_groups(names, groups);
    // Detection does not depend on the order of the directory entries.
    std::vector<std::string> reversed(names.rbegin(), names.rend());
    std::vector<gguf::ByteSplitGroup> again = gguf::detect_byte_splits(reversed);
    check(again.size() == groups.size());
    for (size_t i = 0; i < groups.size(); ++i) {
        check(again[i].logical == groups[i].logical && again[i].pieces == groups[i].pieces &&
              again[i].problem.empty() == groups[i].problem.empty());
    }

    for (const auto& g : groups) {
        if (!g.problem.empty() || g.pieces.size() > kMaxPieces) continue;
        if (!std::all_of(g.pieces.begin(), g.pieces.end(), usable_file_name)) continue;
        check_logical_file(g, payload);
        break;
    }
    return 0;
}
