#include "gguf/split_set.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_set>

#include "gguf/error.hpp"
#include "gguf/file_io.hpp"
#include "gguf/reader.hpp"

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

/// Asks the kernel to start reading the first kPrefetchBytes of the regular file at `path` in
/// the background (posix_fadvise POSIX_FADV_WILLNEED queues the readahead and returns), so that
/// loading a set of many shards overlaps their header reads instead of waiting for one disk
/// read per shard in turn. Anything but a regular file (absent, byte-split, FIFO, device) is
/// left alone: it is stat()ed, never opened. Best effort, never throws.
/// Measured (bench/bench.py startup, 1,200 shards, caches dropped): see the README.
constexpr off_t kPrefetchBytes = 16 * 1024;
void prefetch_header(const std::string& path) noexcept {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return;
    ::posix_fadvise(fd, 0, kPrefetchBytes, POSIX_FADV_WILLNEED);
    ::close(fd);
}

/// How many shards ahead of the one being loaded have their headers prefetched.
constexpr uint32_t kPrefetchAhead = 32;

/// The default resolver: the regular file at `path`; nullopt when nothing exists there.
std::optional<LogicalFile> resolve_single(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
    return LogicalFile::single(path);
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
        throw Error(Code::BadSplit, first + ": name does not end in -00001-of-NNNNN.gguf (not a first shard)");
    }
    if (name->index != 1) {
        throw Error(Code::BadSplit, first + ": is shard " + std::to_string(name->index) + ", not the first shard " +
                                        base_name(shard_path(name->prefix, 1, name->count)));
    }
    set.prefix_ = name->prefix;

    // The first shard is the path the user typed: a typo there is "No such file", not a set
    // problem; a later shard that is absent is a missing shard of the set.
    auto missing = [&](const std::string& path, uint32_t i, uint32_t n) {
        if (i == 1) return Error(Code::Io, path + ": cannot open: No such file or directory", ENOENT);
        return Error(Code::BadSplit, path + ": missing shard " + std::to_string(i) + " of " + std::to_string(n));
    };
    auto load = [&](const std::string& path, uint32_t i) {
        std::optional<LogicalFile> file;
        try {
            file = resolve(path);
        } catch (const Error& e) {
            if (e.code() == Code::Io && e.sys_errno() == ENOENT) throw missing(path, i, name->count);
            throw;
        }
        if (!file) throw missing(path, i, name->count);
        try {
            return load_shard(*file);
        } catch (const Error& e) {
            if (e.code() == Code::Io && e.sys_errno() == ENOENT) throw missing(path, i, name->count);
            throw;
        }
    };
    set.shards_.push_back(load(first, 1));
    const Header& h0 = set.shards_[0].header;
    int64_t count = split_key(h0, first, kKeySplitCount, ValueType::U16);
    if (count < 1) throw Error(Code::BadSplit, first + ": key 'split.count' is 0 (not a valid split count)");
    if (static_cast<uint32_t>(count) != name->count) {
        throw Error(Code::BadSplit, first + ": key 'split.count' is " + std::to_string(count) +
                                        " but the file name says " + std::to_string(name->count) + " shards");
    }
    int64_t total = split_key(h0, first, kKeySplitTensorsCount, std::nullopt);
    if (total < 0) throw Error(Code::BadSplit, first + ": key 'split.tensors.count' is negative");

    // Shards are loaded and checked one at a time, so a bad set stops at its first bad shard.
    // split.count (up to 65535) is only a claim: nothing is reserved for it, and a set whose
    // shard 1 is linked under 65534 other names (each a copy of a large header) fails at
    // shard 2 instead of holding 65535 parsed headers in memory.
    std::unordered_set<std::string> names;
    uint64_t seen = 0;
    uint32_t prefetched = 1;  // shards [2, prefetched] have been asked for
    for (uint32_t i = 0; i < static_cast<uint32_t>(count); ++i) {
        for (; prefetched < static_cast<uint32_t>(count) && prefetched < i + 1 + kPrefetchAhead; ++prefetched) {
            prefetch_header(shard_path(set.prefix_, prefetched + 1, name->count));
        }
        if (i > 0) {
            set.shards_.push_back(load(shard_path(set.prefix_, i + 1, name->count), i + 1));
        }
        const Shard& s = set.shards_[i];
        int64_t no = split_key(s.header, s.path, kKeySplitNo, std::nullopt);
        if (no != static_cast<int64_t>(i)) {
            throw Error(Code::BadSplit, s.path + ": key 'split.no' is " + std::to_string(no) + " but the file name says " +
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
        seen += s.header.tensors.size();
    }
    if (seen != static_cast<uint64_t>(total)) {
        throw Error(Code::BadSplit, first + ": key 'split.tensors.count' is " + std::to_string(total) + " but the " +
                                        std::to_string(count) + " shards hold " + std::to_string(seen) + " tensors");
    }
    set.tensor_count_ = seen;
    return set;
}

std::string SplitSet::merged_name() const { return base_name(prefix_) + std::string(kSuffix); }

VirtualLayout plan_merge(const SplitSet& set) {
    const Header& h0 = set.shards().front().header;
    std::vector<KeyValue> kvs;
    kvs.reserve(h0.kvs.size());
    for (const auto& kv : h0.kvs) {
        if (kv.key != kKeySplitCount) kvs.push_back(kv);
    }
    kvs.push_back(KeyValue{std::string(kKeySplitCount), Value::u16(0)});

    std::vector<PlacedTensor> tensors;
    tensors.reserve(set.tensor_count());
    std::vector<LogicalFile> files;
    files.reserve(set.shards().size());
    bool concatenations = false;
    for (uint32_t i = 0; i < set.shards().size(); ++i) {
        const Header& h = set.shards()[i].header;
        for (const auto& ti : h.tensors) {
            tensors.push_back(PlacedTensor{ti, i, h.data_offset + ti.offset});
        }
        files.push_back(set.shards()[i].file);
        concatenations = concatenations || set.shards()[i].file.is_concatenation();
    }
    VirtualLayout logical = plan_gguf_file(kvs, tensors, h0.alignment);
    // Shards of one file each: shard index == part index, nothing to cut.
    if (concatenations) return flatten_sources(std::move(logical), files);
    return logical;  // moved, not copied: the header of a large vocabulary is held once
}

std::vector<FilePart> set_parts(const SplitSet& set) {
    std::vector<FilePart> parts;
    parts.reserve(set.shards().size());
    for (const auto& s : set.shards()) parts.insert(parts.end(), s.file.parts.begin(), s.file.parts.end());
    return parts;
}

std::vector<SetScan> scan_directory(const std::string& dir) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) {
        int e = errno;
        throw Error(Code::Io, dir + ": cannot list directory: " + std::strerror(e), e);
    }
    // (prefix, count) -> whether the first shard is present
    std::map<std::pair<std::string, uint32_t>, bool> groups;
    while (dirent* ent = ::readdir(d)) {
        std::string n = ent->d_name;
        auto sn = parse_shard_name(n);
        if (!sn) continue;
        bool& has_first = groups[{sn->prefix, sn->count}];
        has_first = has_first || sn->index == 1;
    }
    ::closedir(d);

    std::string base = dir;
    if (!base.empty() && base.back() != '/') base += '/';
    std::vector<SetScan> out;
    for (const auto& [key, has_first] : groups) {
        SetScan scan;
        scan.name = key.first + std::string(kSuffix);
        scan.first_shard = shard_path(base + key.first, 1, key.second);
        if (!has_first) {
            scan.error = Error::one_line(scan.first_shard + ": missing shard 1 of " + std::to_string(key.second));
        } else {
            try {
                scan.set = SplitSet::open(scan.first_shard);
            } catch (const Error& e) {
                scan.error = e.what();
            }
        }
        out.push_back(std::move(scan));
    }
    std::stable_sort(out.begin(), out.end(), [](const SetScan& a, const SetScan& b) { return a.name < b.name; });
    return out;
}

}  // namespace gguf
