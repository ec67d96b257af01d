// libFuzzer target: split sets, from shard files to the bytes of the merged file.
//
// Input format (see fuzz/make_seeds.cpp, which writes seeds in it):
//   byte 0     control bits:
//                bit 0   name the files "-of-(n+1)" so that the last shard is missing
//                bit 1   open the set through its last file (SplitSet::open_any)
//                bit 2   discover the set with scan_directory instead of opening it
//                bit 3   join the shards into one file and open it as a cat-joined set
//                        (SplitSet::open_concatenated; bits 0-2 are then ignored)
//   bytes 1..  up to 4 shard files separated by kDelimiter (more pieces join the last one)
// The shards are written as m-0000k-of-0000n.gguf into a private directory under $TMPDIR (or
// /tmp) created once per process. gguf::Error is an expected outcome; anything else (crash,
// sanitizer report, uncaught exception, violated invariant) is a finding. For a set that opens,
// the merged file is checked: its header must parse and describe every shard tensor, and every
// extent must hold the bytes it claims (header bytes, zeros, or the shard's tensor bytes).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/model/merge_plan.hpp"
#include "support/scan_directory.hpp"
#include "gguf/error.hpp"
#include "gguf/format/reader.hpp"
#include "common/text.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"

namespace {

/// Separates shard files in an input; also used by make_seeds.
constexpr std::string_view kDelimiter = "\n--next-shard--\n";
constexpr size_t kMaxShards = 4;
/// Bytes read from each end of an extent (a hostile alignment can make padding huge).
constexpr uint64_t kProbe = 64 * 1024;

void check(bool ok) {
    if (!ok) __builtin_trap();
}

/// GGUF_FUZZ_VERBOSE=1 prints each input's outcome (to see what the seeds reach).
bool verbose() {
    static const bool v = std::getenv("GGUF_FUZZ_VERBOSE") != nullptr;
    return v;
}

void check_message(const gguf::Error& e) {
    const std::string m = gguf::escape(e.what());  // as every front end prints it
    check(!m.empty() && m.size() <= 8192);
    for (char ch : m) {
        auto u = static_cast<unsigned char>(ch);
        check(u >= 0x20 && u != 0x7f);
    }
}

std::string& work_dir() {
    static std::string dir = [] {
        const char* base = std::getenv("TMPDIR");
        std::string d = std::string(base && *base ? base : "/tmp") + "/gguf-fuzz-split." + std::to_string(::getpid());
        if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) __builtin_trap();
        return d;
    }();
    return dir;
}

/// Paths written by the current input, removed before the next one.
std::vector<std::string>& written() {
    static std::vector<std::string> w;
    return w;
}

void remove_written() {
    for (const auto& p : written()) ::unlink(p.c_str());
    written().clear();
}

void cleanup_at_exit() {
    remove_written();
    ::rmdir(work_dir().c_str());
}

std::string shard_name(size_t index, size_t count) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "/m-%05zu-of-%05zu.gguf", index, count);
    return work_dir() + buf;
}

void write_all(const std::string& path, std::string_view bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    check(f != nullptr);
    check(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
    check(std::fclose(f) == 0);
    written().push_back(path);
}

std::vector<std::string_view> split_input(std::string_view in) {
    std::vector<std::string_view> parts;
    while (parts.size() + 1 < kMaxShards) {
        size_t at = in.find(kDelimiter);
        if (at == std::string_view::npos) break;
        parts.push_back(in.substr(0, at));
        in.remove_prefix(at + kDelimiter.size());
    }
    parts.push_back(in);
    return parts;
}

/// Checks the bytes [from, from + len) of the merged file against what the extent claims.
void check_range(const gguf::VirtualFile& vf, const gguf::Extent& e, uint64_t skip, uint64_t len,
                 const std::vector<std::string_view>& shards) {
    std::string buf(static_cast<size_t>(len), '\x5a');
    ssize_t n = vf.read(e.start + skip, buf.size(), buf.data());
    check(n == static_cast<ssize_t>(len));
    switch (e.kind) {
        case gguf::Extent::Kind::Header:
            check(std::string_view(buf) == std::string_view(vf.layout().header()).substr(e.source_offset + skip, len));
            break;
        case gguf::Extent::Kind::Zeros:
            check(std::all_of(buf.begin(), buf.end(), [](char c) { return c == 0; }));
            break;
        case gguf::Extent::Kind::Source: {
            check(e.source < shards.size());
            std::string_view shard = shards[e.source];
            check(e.source_offset + skip + len <= shard.size());
            check(std::string_view(buf) == shard.substr(e.source_offset + skip, len));
            break;
        }
    }
}

void check_merged(const gguf::SplitSet& set, const std::vector<std::string_view>& shards) {
    gguf::VirtualFile vf = gguf::open_merged(set);
    const gguf::VirtualLayout& layout = vf.layout();

    // The merged header must be a valid GGUF header describing every tensor of the set.
    gguf::Header merged;
    try {
        merged = gguf::parse_header(layout.header(), vf.size(), "merged.gguf");
    } catch (const gguf::Error&) {
        __builtin_trap();
    }
    check(merged.tensors.size() == set.tensor_count());
    const gguf::KeyValue* count = merged.find("split.count");
    check(count != nullptr && count->value.as_int() == 0);
    size_t t = 0;
    for (const auto& s : set.shards()) {
        for (const auto& ti : s.header.tensors) {
            check(merged.tensors[t].name == ti.name && merged.tensors[t].nbytes == ti.nbytes);
            ++t;
        }
    }
    uint64_t data = 0;
    if (!merged.tensors.empty()) {
        const gguf::TensorInfo& last = merged.tensors.back();
        data = gguf::align_up(last.offset + last.nbytes, merged.alignment);
    }
    check(merged.data_offset + data == vf.size());

    // Extents tile [0, size) and hold the bytes they claim: probe both ends of each.
    uint64_t pos = 0;
    for (const auto& e : layout.extents()) {
        check(e.start == pos && e.length > 0);
        pos += e.length;
        check_range(vf, e, 0, std::min(e.length, kProbe), shards);
        if (e.length > kProbe) check_range(vf, e, e.length - kProbe, kProbe, shards);
    }
    check(pos == vf.size());

    // Small files: one read of the whole file equals the piecewise view, and reads past the
    // end return nothing.
    if (vf.size() <= (uint64_t{1} << 22)) {
        std::string whole(static_cast<size_t>(vf.size()), '\0');
        check(vf.read(0, whole.size(), whole.data()) == static_cast<ssize_t>(whole.size()));
        check(whole.compare(0, layout.header().size(), layout.header()) == 0);
    }
    char c = 0;
    check(vf.read(vf.size(), 1, &c) == 0);
    if (verbose()) {
        std::fprintf(stderr, "merged %zu shards, %zu tensors, %llu bytes\n", set.shards().size(),
                     static_cast<size_t>(set.tensor_count()), static_cast<unsigned long long>(vf.size()));
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    work_dir();
    std::atexit(cleanup_at_exit);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const uint8_t control = data[0];
    std::vector<std::string_view> parts =
        split_input(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
    size_t n = parts.size() + (control & 1);
    for (size_t i = 0; i < parts.size(); ++i) write_all(shard_name(i + 1, n), parts[i]);

    try {
        if (control & 8) {
            // The parts joined with cat into one file (SplitSet::open_concatenated): every
            // extent's source is that file, at file offsets.
            std::string joined;
            for (const auto& p : parts) joined.append(p);
            const std::string path = work_dir() + "/joined.gguf";
            write_all(path, joined);
            gguf::SplitSet set = gguf::SplitSet::open_concatenated(gguf::LogicalFile::single(path));
            check(set.shards().size() >= 2);
            std::vector<std::string_view> sources(set.shards().size(), joined);
            check_merged(set, sources);
        } else if (control & 4) {
            for (const auto& scan : gguf::scan_directory(work_dir())) {
                check(scan.set.has_value() != !scan.error.empty());
                if (scan.set) check_merged(*scan.set, parts);
                for (char ch : gguf::escape(scan.error)) check(static_cast<unsigned char>(ch) >= 0x20);
            }
        } else {
            std::string path = shard_name((control & 2) ? parts.size() : 1, n);
            gguf::SplitSet set = (control & 2) ? gguf::SplitSet::open_any(path) : gguf::SplitSet::open(path);
            check(set.shards().size() == n && n == parts.size());
            check_merged(set, parts);
        }
    } catch (const gguf::Error& e) {
        check_message(e);
        if (verbose()) std::fprintf(stderr, "error: %s\n", e.what());
    }
    remove_written();
    return 0;
}
