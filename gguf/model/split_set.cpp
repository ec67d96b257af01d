#include "gguf/model/split_set.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <tuple>
#include <unordered_set>

#include "gguf/error.hpp"
#include "gguf/bytes/byte_source.hpp"
#include "gguf/bytes/file_io.hpp"
#include "gguf/format/format.hpp"
#include "gguf/format/reader.hpp"

namespace gguf {

namespace {

constexpr std::string_view kSuffix = ".gguf";

bool parse_5_digits(std::string_view s, uint32_t* out) {
    if (s.size() != 5) return false;
    uint32_t v = 0;
    for (char ch : s) {
        if (ch < '0' || ch > '9') return false;
        v = v * 10 + static_cast<uint32_t>(ch - '0');
    }
    *out = v;
    return true;
}

/// Reads a split key and checks its type; throws naming the file and key. With `want` set, the
/// value must have exactly that type; without, any integer type is accepted (u8 ... i64; a u64
/// above INT64_MAX is refused as out of range).
int64_t split_key(const Header& h, const std::string& path, std::string_view key,
                  std::optional<ValueType> want) {
    const KeyValue* kv = h.find(key);
    if (!kv) {
        throw Error(Code::BadSplit, path + ": key '" + std::string(key) + "' is missing (not a gguf-split shard)");
    }
    std::optional<int64_t> v = kv->value.as_int();
    if (want ? kv->value.type != *want : !v) {
        if (!want && kv->value.type == ValueType::U64) {
            throw Error(Code::BadSplit, path + ": key '" + std::string(key) + "' is out of range");
        }
        throw Error(Code::BadSplit, path + ": key '" + std::string(key) + "' has type " +
                                        std::string(value_type_name(kv->value.type)) + ", expected " +
                                        (want ? std::string(value_type_name(*want)) : std::string("an integer")));
    }
    return *v;
}

/// Reads and validates the header of one shard; the recorded stats are the fstats of the
/// descriptors the header was read through.
Shard load_shard(const LogicalFile& file) {
    OpenLogicalFile open = OpenLogicalFile::open(file);
    Shard s;
    s.path = file.path;
    s.header = read_header(open);
    s.file = open.file();
    return s;
}

/// Bytes at the start of a shard asked for ahead of loading it (its header, mostly).
constexpr uint64_t kPrefetchBytes = 16 * 1024;

/// A shard resolved ahead of loading: the file, nothing (absent), or the error resolving threw.
struct Resolved {
    std::optional<LogicalFile> file;
    std::exception_ptr error;
};

/// How many shards ahead of the one being loaded have their headers prefetched.
constexpr uint32_t kPrefetchAhead = 32;

/// The default resolver: the regular file at `path`; nullopt when nothing exists there.
std::optional<LogicalFile> resolve_single(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
    return LogicalFile::single(path);
}

/// split.count and split.tensors.count of shard 1 (at `path`), checked: count >= 1, total >= 0.
std::pair<int64_t, int64_t> set_totals(const Header& h0, const std::string& path) {
    int64_t count = split_key(h0, path, kKeySplitCount, ValueType::U16);
    if (count < 1) throw Error(Code::BadSplit, path + ": key 'split.count' is 0 (not a valid split count)");
    int64_t total = split_key(h0, path, kKeySplitTensorsCount, std::nullopt);
    if (total < 0) throw Error(Code::BadSplit, path + ": key 'split.tensors.count' is negative");
    return {count, total};
}

/// Checks shard `s`, number i (0-based) of a set whose shard 1 says `count` shards and `total`
/// tensors: its split.* keys, and tensor names not seen in earlier shards (added to `names`).
/// `position` names where i comes from, for the message ("the file name says").
void check_shard(const Shard& s, uint32_t i, int64_t count, int64_t total, const char* position,
                 std::unordered_set<std::string>& names) {
    int64_t no = split_key(s.header, s.path, kKeySplitNo, std::nullopt);
    if (no != static_cast<int64_t>(i)) {
        throw Error(Code::BadSplit, s.path + ": key 'split.no' is " + std::to_string(no) + " but " + position + " " +
                                        std::to_string(i) + " (0-based)");
    }
    int64_t c = split_key(s.header, s.path, kKeySplitCount, ValueType::U16);
    if (c != count) {
        throw Error(Code::BadSplit, s.path + ": key 'split.count' is " + std::to_string(c) + " but shard 1 says " +
                                        std::to_string(count));
    }
    int64_t t = split_key(s.header, s.path, kKeySplitTensorsCount, std::nullopt);
    if (t != total) {
        throw Error(Code::BadSplit, s.path + ": key 'split.tensors.count' is " + std::to_string(t) +
                                        " but shard 1 says " + std::to_string(total));
    }
    for (const auto& ti : s.header.tensors) {
        if (!names.insert(ti.name).second) {
            throw Error(Code::BadSplit, s.path + ": tensor '" + ti.name + "' also appears in an earlier shard");
        }
    }
}

/// Bytes of tensor data in the data section of `h`: the end of the last tensor, unpadded.
uint64_t data_size(const Header& h) {
    uint64_t end = 0;
    for (const auto& ti : h.tensors) end = std::max(end, ti.offset + ti.nbytes);
    return end;
}

/// The same, padded to the alignment (as gguf-split writes it).
uint64_t padded_data_size(const Header& h) { return align_up(data_size(h), h.alignment); }

/// Where the shard whose header is `h` (read from a range starting at the range's byte 0) ends
/// inside a range of `avail` bytes, and whether the next shard starts there: gguf-split writes
/// the header, padding to the alignment, then each tensor's bytes padded to the alignment.
/// The padded end is tried first, then the unpadded one (writers that omit the last padding,
/// or no padding after a header without tensors); an end is accepted when it is the end of the
/// range or "GGUF" follows it (`magic_at`). Returns 0 when neither fits.
uint64_t shard_end(const Header& h, uint64_t avail, const std::function<bool(uint64_t)>& magic_at) {
    const uint64_t unpadded = h.tensors.empty() ? h.header_size : h.data_offset + data_size(h);
    const uint64_t padded = h.data_offset + padded_data_size(h);
    for (uint64_t end : {padded, unpadded}) {
        if (end > 0 && end <= avail && (end == avail || magic_at(end))) return end;
    }
    return 0;
}

}  // namespace

std::optional<ShardName> parse_shard_name(const std::string& path) {
    // "-NNNNN-of-MMMMM.gguf" is 20 characters.
    constexpr size_t kTail = 1 + 5 + 4 + 5 + 5;
    if (path.size() <= kTail) return std::nullopt;
    std::string_view tail(path.data() + path.size() - kTail, kTail);
    if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || tail.substr(15) != kSuffix) return std::nullopt;
    ShardName n;
    if (!parse_5_digits(tail.substr(1, 5), &n.index) || !parse_5_digits(tail.substr(10, 5), &n.count)) {
        return std::nullopt;
    }
    if (n.index < 1 || n.index > n.count) return std::nullopt;
    n.prefix = path.substr(0, path.size() - kTail);
    if (n.prefix.empty() || n.prefix.back() == '/') return std::nullopt;
    return n;
}

std::string shard_path(const std::string& prefix, uint32_t index, uint32_t count) {
    char tail[64];
    std::snprintf(tail, sizeof tail, "-%05u-of-%05u.gguf", index, count);
    return prefix + tail;
}

SplitSet SplitSet::open_any(const std::string& path) {
    auto name = parse_shard_name(path);
    if (!name) {
        throw Error(Code::BadSplit, path + ": name does not end in -NNNNN-of-NNNNN.gguf (not a gguf-split shard)");
    }
    return open(shard_path(name->prefix, 1, name->count));
}

SplitSet SplitSet::open(const std::string& first) { return open(first, resolve_single); }

SplitSet SplitSet::open(const std::string& first, const ShardResolver& resolve) {
    SplitSet set;
    auto name = parse_shard_name(first);
    if (!name) {
        throw Error(Code::BadSplit, first + ": name does not end in -00001-of-NNNNN.gguf (not a first shard); give the "
                                           "first shard of a gguf-split set");
    }
    if (name->index != 1) {
        throw Error(Code::BadSplit, first + ": is shard " + std::to_string(name->index) + " of " +
                                        std::to_string(name->count) + ", not the first shard; give " +
                                        base_name(shard_path(name->prefix, 1, name->count)) + " instead");
    }
    set.prefix_ = name->prefix;

    // The first shard is the path the user typed: a typo there is "No such file", not a set
    // problem; a later shard that is absent is a missing shard of the set.
    auto missing = [&](const std::string& path, uint32_t i, uint32_t n) {
        if (i == 1) return Error(Code::Io, path + ": cannot open: No such file or directory", ENOENT);
        return Error(Code::BadSplit, path + ": missing shard " + std::to_string(i) + " of " + std::to_string(n));
    };
    auto resolve_now = [&](const std::string& path) {
        Resolved r;
        try {
            r.file = resolve(path);
        } catch (const Error&) {
            r.error = std::current_exception();
        }
        return r;
    };
    auto load = [&](const std::string& path, uint32_t i, Resolved r) {
        try {
            if (r.error) std::rethrow_exception(r.error);
        } catch (const Error& e) {
            if (e.code() == Code::Io && e.sys_errno() == ENOENT) throw missing(path, i, name->count);
            throw;
        }
        if (!r.file) throw missing(path, i, name->count);
        try {
            return load_shard(*r.file);
        } catch (const Error& e) {
            if (e.code() == Code::Io && e.sys_errno() == ENOENT) throw missing(path, i, name->count);
            throw;
        }
    };
    set.shards_.push_back(load(first, 1, resolve_now(first)));
    const auto [count, total] = set_totals(set.shards_[0].header, first);
    if (static_cast<uint32_t>(count) != name->count) {
        throw Error(Code::BadSplit, first + ": key 'split.count' is " + std::to_string(count) +
                                        " but the file name says " + std::to_string(name->count) + " shards");
    }

    // Shards are loaded and checked one at a time, so a bad set stops at its first bad shard.
    // split.count (up to 65535) is only a claim: nothing is reserved for it, and a set whose
    // shard 1 is linked under 65534 other names (each a copy of a large header) fails at
    // shard 2 instead of holding 65535 parsed headers in memory.
    std::unordered_set<std::string> names;
    uint64_t seen = 0;
    // Shards ahead of the one being loaded are resolved early and their first bytes asked for
    // (will_need_part: for a local file, readahead queued in the background), so loading a set
    // of many shards overlaps their header reads instead of waiting for one read per shard in
    // turn. Errors of a shard resolved early surface when it is loaded, in shard order.
    uint32_t asked = 1;          // shards [2, asked] are resolved
    std::deque<Resolved> ahead;  // at step i (i >= 1), front() is shard i + 1
    for (uint32_t i = 0; i < static_cast<uint32_t>(count); ++i) {
        for (; asked < static_cast<uint32_t>(count) && asked < i + 1 + kPrefetchAhead; ++asked) {
            ahead.push_back(resolve_now(shard_path(set.prefix_, asked + 1, name->count)));
            const std::optional<LogicalFile>& f = ahead.back().file;
            if (f && !f->parts.empty()) will_need_part(f->parts.front(), kPrefetchBytes);
        }
        if (i > 0) {
            Resolved r = std::move(ahead.front());
            ahead.pop_front();
            set.shards_.push_back(load(shard_path(set.prefix_, i + 1, name->count), i + 1, std::move(r)));
        }
        check_shard(set.shards_[i], i, count, total, "the file name says", names);
        seen += set.shards_[i].header.tensors.size();
    }
    if (seen != static_cast<uint64_t>(total)) {
        throw Error(Code::BadSplit, first + ": key 'split.tensors.count' is " + std::to_string(total) + " but the " +
                                        std::to_string(count) + " shards hold " + std::to_string(seen) + " tensors");
    }
    set.tensor_count_ = seen;
    return set;
}

SplitSet SplitSet::open_first_or_joined(const std::string& path) {
    if (!parse_shard_name(path)) {
        LogicalFile file = LogicalFile::single(path);
        bool joined = false;
        try {
            joined = has_split_count_above_one(read_header(OpenLogicalFile::open(file)));
        } catch (const Error&) {
            // not a readable GGUF file: open() below reports the name
        }
        if (joined) return open_concatenated(file);
    }
    return open(path);
}

bool has_split_count_above_one(const Header& header) {
    const KeyValue* kv = header.find(kKeySplitCount);
    if (!kv) return false;
    auto v = kv->value.as_int();
    return v && *v > 1;
}

SplitSet SplitSet::open_concatenated(const LogicalFile& file) {
    const std::string& path = file.path;
    if (file.parts.size() != 1 || file.parts.front().offset != 0) {
        throw Error(Code::BadArgument, path + ": a cat-joined set must be one whole file");
    }
    OpenLogicalFile open = OpenLogicalFile::open(file);
    const uint64_t size = open.size();
    auto magic_at = [&](uint64_t at) {
        char m[4] = {};
        return open.pread(m, sizeof m, at) == 4 && std::memcmp(m, "GGUF", 4) == 0;
    };
    const std::string fix = "; llama.cpp cannot load it and a mount does not serve it: merge the shards with "
                            "'gguf-mount merge PREFIX-00001-of-NNNNN.gguf OUTPUT', or give them their shard names "
                            "and mount their directory";
    SplitSet set;
    set.prefix_ = path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0 ? path.substr(0, path.size() - 5)
                                                                                    : path;
    std::unordered_set<std::string> names;
    int64_t count = 1, total = 0;
    uint64_t seen = 0, at = 0;
    for (uint32_t i = 0; i < static_cast<uint32_t>(count); ++i) {
        const std::string where = path + ": shard " + std::to_string(i + 1) + " at byte " + std::to_string(at);
        if (at >= size) {
            throw Error(Code::Truncated, path + ": holds " + std::to_string(i) + " of the " + std::to_string(count) +
                                             " shards its key 'split.count' announces (it ends at byte " +
                                             std::to_string(size) + ")" + fix);
        }
        LogicalFile range;
        range.path = where;  // messages name the shard and where it starts
        FilePart part = open.file().parts.front();
        part.offset = at;
        part.size = size - at;
        range.parts.push_back(part);
        Shard s;
        try {
            s = load_shard(range);
            if (i == 0) std::tie(count, total) = set_totals(s.header, where);
            check_shard(s, i, count, total, "its position in the file says", names);
        } catch (const Error& e) {
            throw Error(e.code(), std::string(e.what()) + fix, e.sys_errno());
        }
        if (count < 2) throw Error(Code::BadArgument, path + ": key 'split.count' is not above 1 (not a set)");
        uint64_t end = shard_end(s.header, size - at, [&](uint64_t off) { return magic_at(at + off); });
        const bool last = i + 1 == static_cast<uint32_t>(count);
        if (end == 0 && last) end = std::min(size - at, s.header.data_offset + padded_data_size(s.header));
        if (end == 0) {
            throw Error(Code::BadSplit, where + ": no GGUF header of shard " + std::to_string(i + 2) +
                                            " follows its data (expected at byte " +
                                            std::to_string(at + s.header.data_offset + padded_data_size(s.header)) +
                                            ")" + fix);
        }
        s.file.parts.front().size = end;
        s.file.path = path;
        s.path = path;
        s.header.file_size = end;
        seen += s.header.tensors.size();
        set.shards_.push_back(std::move(s));
        at += end;
    }
    if (at != size) {
        throw Error(Code::BadSplit, path + ": " + std::to_string(size - at) + " bytes after the last of its " +
                                        std::to_string(count) + " shards (byte " + std::to_string(at) + " on)" + fix);
    }
    if (seen != static_cast<uint64_t>(total)) {
        throw Error(Code::BadSplit, path + ": key 'split.tensors.count' is " + std::to_string(total) + " but the " +
                                        std::to_string(count) + " shards hold " + std::to_string(seen) + " tensors" +
                                        fix);
    }
    set.tensor_count_ = seen;
    return set;
}

std::string SplitSet::merged_name() const { return base_name(prefix_) + std::string(kSuffix); }

}  // namespace gguf
