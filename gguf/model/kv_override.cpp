#include "gguf/model/kv_override.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "gguf/bytes/file_io.hpp"
#include "gguf/error.hpp"
#include "gguf/format/format.hpp"

namespace gguf {

namespace {

/// GGUF keys are at most 65535 bytes (GGUF specification: "keys ... up to 2^16-1 bytes").
constexpr size_t kMaxKeyLength = 65535;

Error bad(const std::string& origin, const std::string& what) {
    return Error(Code::BadArgument, origin + ": " + what);
}

bool is_layout_key(std::string_view key) {
    return key == kKeyAlignment || key.substr(0, 6) == "split.";
}

/// Checks a key given by the user: non-empty, no NUL, not too long, not a layout key.
void check_key(std::string_view key, const std::string& origin) {
    if (key.empty()) throw bad(origin, "empty key");
    if (key.find('\0') != std::string_view::npos) throw bad(origin, "the key contains a NUL byte");
    if (key.size() > kMaxKeyLength) {
        throw bad(origin, "the key is " + std::to_string(key.size()) + " bytes long, more than the 65535 GGUF allows");
    }
    if (is_layout_key(key)) {
        throw bad(origin, std::string(key) + ": describes the file's layout (general.alignment, split.*) and cannot "
                                             "be overridden or removed");
    }
}

bool is_integer_type(ValueType t) {
    switch (t) {
        case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
        case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64: return true;
        default: return false;
    }
}

bool is_float_type(ValueType t) { return t == ValueType::F32 || t == ValueType::F64; }

/// The exact type spelled `name` ("u32", "bool", "str"), or false.
bool exact_type(std::string_view name, ValueType* out) {
    static constexpr std::pair<std::string_view, ValueType> kNames[] = {
        {"u8", ValueType::U8},   {"i8", ValueType::I8},   {"u16", ValueType::U16}, {"i16", ValueType::I16},
        {"u32", ValueType::U32}, {"i32", ValueType::I32}, {"u64", ValueType::U64}, {"i64", ValueType::I64},
        {"f32", ValueType::F32}, {"f64", ValueType::F64},
    };
    for (const auto& [n, t] : kNames) {
        if (n == name) {
            *out = t;
            return true;
        }
    }
    return false;
}

/// Range of an integer type as text and as (lowest magnitude if negative, highest).
struct IntRange {
    uint64_t max_negative;  // largest magnitude a negative value may have (0 for unsigned types)
    uint64_t max_positive;
};

IntRange int_range(ValueType t) {
    switch (t) {
        case ValueType::U8: return {0, UINT8_MAX};
        case ValueType::I8: return {uint64_t{1} << 7, INT8_MAX};
        case ValueType::U16: return {0, UINT16_MAX};
        case ValueType::I16: return {uint64_t{1} << 15, INT16_MAX};
        case ValueType::U32: return {0, UINT32_MAX};
        case ValueType::I32: return {uint64_t{1} << 31, INT32_MAX};
        case ValueType::U64: return {0, UINT64_MAX};
        default: return {uint64_t{1} << 63, INT64_MAX};  // I64
    }
}

std::string range_text(ValueType t) {
    const IntRange r = int_range(t);
    return (r.max_negative == 0 ? std::string("0") : "-" + std::to_string(r.max_negative)) + ".." +
           std::to_string(r.max_positive);
}

bool fits(const KvEdit& e, ValueType t) {
    const IntRange r = int_range(t);
    return e.negative ? e.magnitude <= r.max_negative : e.magnitude <= r.max_positive;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

enum class IntParse { Ok, NotAnInteger, BeyondU64 };

/// Parses a decimal integer with an optional sign into e->negative / e->magnitude.
IntParse parse_int(std::string_view s, KvEdit* e) {
    e->negative = !s.empty() && s.front() == '-';
    if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
    if (s.empty() || s.front() < '0' || s.front() > '9') return IntParse::NotAnInteger;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), e->magnitude, 10);
    if (end != s.data() + s.size()) return IntParse::NotAnInteger;
    if (ec == std::errc::result_out_of_range) return IntParse::BeyondU64;
    if (ec != std::errc()) return IntParse::NotAnInteger;
    if (e->magnitude == 0) e->negative = false;
    return IntParse::Ok;
}

bool parse_real(std::string_view s, double* out) {
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    if (s.empty()) return false;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && end == s.data() + s.size();
}

std::string join_path(const std::string& base_dir, const std::string& path) {
    if (base_dir.empty() || (!path.empty() && path.front() == '/')) return path;
    return base_dir + "/" + path;
}

/// Error `e` with `prefix` in front of its message (same code and errno).
Error prefixed(const std::string& prefix, const Error& e) { return Error(e.code(), prefix + e.what(), e.sys_errno()); }

/// What a failed open of a sidecar or its @FILE means: a symlink or a file that is not regular
/// (a FIFO, a device) is what anyone who may write the folder can plant, so the sidecar does not
/// apply (Code::Untrusted, `untrusted_suffix` added); anything else (a missing file) is `e`.
/// Both with `prefix` in front.
Error planted_or(const std::string& prefix, const Error& e, const char* untrusted_suffix) {
    if (e.code() == Code::Io && (e.sys_errno() == ELOOP || e.sys_errno() == 0)) {
        return Error(Code::Untrusted, prefix + e.what() + untrusted_suffix);
    }
    return prefixed(prefix, e);
}

/// How a str:@FILE is read: a command line's (any path, relative to `base_dir`), or a local
/// sidecar's (beneath its folder `dirfd`, by `rules`). Each file read is appended to `files`.
struct AtFileReader {
    std::string base_dir;
    int dirfd = -1;  // >= 0: a sidecar's folder
    std::string dir;
    const KvSidecarRules* rules = nullptr;
    std::vector<KvSourceFile>* files = nullptr;
};

/// The bytes of the file `name` of a str:@FILE at `origin` for key `key`, by `at`'s rules;
/// `*shown` gets the path it names. Throws as parse_kv_override and read_kv_sidecar say.
std::string read_at_file(const AtFileReader& at, const std::string& name, const std::string& origin,
                         const std::string& key, std::string* shown) {
    const std::string prefix = origin + ": " + key + ": ";
    KvSourceFile f;
    uint64_t limit = kMaxStringLength;
    UniqueFd fd;
    if (at.dirfd < 0) {
        f.path = join_path(at.base_dir, name);
        try {
            fd = open_regular(f.path, true, &f.st);
        } catch (const Error& e) {
            throw prefixed(prefix, e);
        }
    } else {
        if (!is_plain_relative_path(name)) {
            throw bad(origin, key + ": @" + name.substr(0, 200) + " is not in the sidecar's folder: a sidecar's str:@FILE "
                                    "names a file in its folder or below it (relative, no '..')");
        }
        f.path = at.dir + "/" + name;
        f.folder = true;
        try {
            fd = open_regular_beneath(at.dirfd, name, f.path, &f.st);
        } catch (const Error& e) {
            throw planted_or(prefix, e, "; the sidecar is not applied");
        }
        const std::string why = kv_file_trust_problem(f.st, at.rules->model_owner);
        if (!why.empty()) throw Error(Code::Untrusted, prefix + f.path + ": " + why + "; the sidecar is not applied");
        if (at.rules->budget) limit = at.rules->budget->limit(limit);
    }
    *shown = f.path;
    if (static_cast<uint64_t>(f.st.st_size) > limit) {
        const char* bound = " bytes a GGUF string may hold";
        if (limit < kMaxStringLength) {
            bound = at.rules->budget->scan_left < at.rules->budget->model_left ? " bytes left for KV edits in this scan"
                                                                                : " bytes left for this model's KV edits";
        }
        throw Error(Code::TooLarge, prefix + f.path + ": " + std::to_string(f.st.st_size) + " bytes, more than the " +
                                        std::to_string(limit) + bound);
    }
    std::string text;
    try {
        text = read_bounded(fd.get(), limit, f.path);
    } catch (const Error& e) {
        throw prefixed(prefix, e);
    }
    if (at.dirfd >= 0 && at.rules->budget) at.rules->budget->spend(text.size());
    if (at.files) at.files->push_back(std::move(f));
    return text;
}

/// A here-document TAG: letters, digits and '_', not empty.
bool is_heredoc_tag(std::string_view tag) {
    if (tag.empty()) return false;
    for (char c : tag) {
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
    }
    return true;
}

KvEdit parse_edit(std::string_view spec, const std::string& origin, const AtFileReader* at);

template <typename T>
Value scalar_value(ValueType type, T v) {
    std::string bytes(sizeof v, '\0');
    std::memcpy(bytes.data(), &v, sizeof v);  // the host is little-endian (header.cpp asserts it)
    Value out;
    out.type = type;
    out.raw = SharedBytes(std::move(bytes));
    return out;
}

/// The integer of `e` written as type `t` (range already checked).
Value int_value(const KvEdit& e, ValueType t) {
    const uint64_t bits = e.negative ? uint64_t{0} - e.magnitude : e.magnitude;  // two's complement
    switch (t) {
        case ValueType::U8: case ValueType::I8: return scalar_value(t, static_cast<uint8_t>(bits));
        case ValueType::U16: case ValueType::I16: return scalar_value(t, static_cast<uint16_t>(bits));
        case ValueType::U32: case ValueType::I32: return scalar_value(t, static_cast<uint32_t>(bits));
        default: return scalar_value(t, bits);
    }
}

/// The value of `e` written as type `t`, which the caller has matched to the spelling. Throws
/// for a value out of t's range.
Value encode(const KvEdit& e, ValueType t) {
    if (t == ValueType::String) return Value::string(e.text);
    if (t == ValueType::Bool) return scalar_value(t, static_cast<uint8_t>(e.boolean ? 1 : 0));
    if (is_float_type(t)) {
        if (t == ValueType::F64) return scalar_value(t, e.real);
        if (std::isfinite(e.real) && std::fabs(e.real) > static_cast<double>(FLT_MAX)) {
            throw bad(e.origin, e.key + ": " + e.text + " is out of range for f32 (-3.40282e+38..3.40282e+38)");
        }
        return scalar_value(t, static_cast<float>(e.real));
    }
    if (!fits(e, t)) {
        throw bad(e.origin, e.key + ": " + e.text + " is out of range for " + std::string(value_type_name(t)) + " (" +
                                range_text(t) + ")");
    }
    return int_value(e, t);
}

std::string_view spelling_name(const KvEdit& e) {
    switch (e.spelling) {
        case KvEdit::Spelling::Int: return "int";
        case KvEdit::Spelling::Float: return "float";
        case KvEdit::Spelling::Bool: return "bool";
        case KvEdit::Spelling::Str: return "str";
        case KvEdit::Spelling::Exact: return value_type_name(e.exact);
    }
    return "unknown";
}

/// Whether the spelling of `e` may go into an existing key of type `t`.
bool spelling_fits(const KvEdit& e, ValueType t) {
    switch (e.spelling) {
        case KvEdit::Spelling::Int: return is_integer_type(t);
        case KvEdit::Spelling::Float: return is_float_type(t);
        case KvEdit::Spelling::Bool: return t == ValueType::Bool;
        case KvEdit::Spelling::Str: return t == ValueType::String;
        case KvEdit::Spelling::Exact: return t == e.exact;
    }
    return false;
}

/// What to write instead, for the message about a spelling that does not fit type `t`.
std::string suggestion(ValueType t) {
    if (is_integer_type(t)) return "int: or " + std::string(value_type_name(t)) + ":";
    if (is_float_type(t)) return "float: or " + std::string(value_type_name(t)) + ":";
    if (t == ValueType::Bool) return "bool:";
    if (t == ValueType::String) return "str:";
    return "";
}

}  // namespace

std::string KvEdit::spelled() const {
    if (kind == Kind::Remove) return "-" + key;
    std::string out = key + "=" + std::string(spelling_name(*this)) + ":";
    if (!from_file.empty()) return out + "@" + from_file;
    if ((spelling == Spelling::Str || (spelling == Spelling::Exact && exact == ValueType::String)) &&
        text.size() > 60) {
        return out + "<" + std::to_string(text.size()) + " bytes>";
    }
    return out + text;
}

namespace {

KvEdit parse_edit(std::string_view spec, const std::string& origin, const AtFileReader* at) {
    const size_t eq = spec.find('=');
    if (eq == std::string_view::npos) {
        throw bad(origin, "'" + std::string(spec.substr(0, 80)) + "': expected KEY=TYPE:VALUE (no '=')");
    }
    KvEdit e;
    e.kind = KvEdit::Kind::Set;
    e.key = std::string(spec.substr(0, eq));
    e.origin = origin;
    // "KEY =int:1" would otherwise set a new key "KEY " beside KEY (issue 30, item 9).
    if (trim(e.key).size() != e.key.size()) {
        throw bad(origin, e.key.substr(0, 80) + ": blanks around the key; write KEY=TYPE:VALUE");
    }
    check_key(e.key, origin);
    const std::string_view rest = spec.substr(eq + 1);
    const size_t colon = rest.find(':');
    if (colon == std::string_view::npos) {
        throw bad(origin, e.key + ": expected KEY=TYPE:VALUE (no ':' after the type)");
    }
    const std::string_view type = rest.substr(0, colon);
    const std::string_view value = rest.substr(colon + 1);
    ValueType t{};
    if (type == "int") e.spelling = KvEdit::Spelling::Int;
    else if (type == "float") e.spelling = KvEdit::Spelling::Float;
    else if (type == "bool") e.spelling = KvEdit::Spelling::Bool;
    else if (type == "str") e.spelling = KvEdit::Spelling::Str;
    else if (exact_type(type, &t)) {
        e.spelling = KvEdit::Spelling::Exact;
        e.exact = t;
    } else {
        throw bad(origin, e.key + ": unknown type '" + std::string(type.substr(0, 40)) +
                              "' (int, float, bool, str, u8, i8, u16, i16, u32, i32, u64, i64, f32, f64)");
    }
    const bool integer = e.spelling == KvEdit::Spelling::Int || (e.spelling == KvEdit::Spelling::Exact && is_integer_type(t));
    const bool real = e.spelling == KvEdit::Spelling::Float || (e.spelling == KvEdit::Spelling::Exact && is_float_type(t));
    if (e.spelling == KvEdit::Spelling::Str) {
        if (value.substr(0, 2) == "@@") {
            e.text = std::string(value.substr(1));
        } else if (!value.empty() && value.front() == '@') {
            if (!at) {
                // A sidecar that is not a local file: its @FILE would name a file of this machine.
                throw bad(origin, e.key + ": str:@FILE is not allowed in a remote sidecar (write the value itself, "
                                          "a multi-line one as KEY=str:<<TAG ... TAG)");
            }
            e.text = read_at_file(*at, std::string(value.substr(1)), origin, e.key, &e.from_file);
        } else {
            e.text = std::string(value);
        }
        return e;
    }
    e.text = std::string(trim(value));
    if (integer) {
        const IntParse p = parse_int(e.text, &e);
        if (p == IntParse::NotAnInteger) throw bad(origin, e.key + ": '" + e.text.substr(0, 40) + "' is not an integer");
        if (p == IntParse::BeyondU64 && e.spelling == KvEdit::Spelling::Int) {
            throw bad(origin, e.key + ": " + e.text.substr(0, 40) + " is out of range for every GGUF integer type "
                                                                    "(-9223372036854775808..18446744073709551615)");
        }
        if (p == IntParse::BeyondU64 || (e.spelling == KvEdit::Spelling::Exact && !fits(e, t))) {
            throw bad(origin, e.key + ": " + e.text + " is out of range for " + std::string(type) + " (" +
                                  range_text(t) + ")");
        }
    } else if (real) {
        if (!parse_real(e.text, &e.real)) throw bad(origin, e.key + ": '" + e.text.substr(0, 40) + "' is not a number");
        if (e.spelling == KvEdit::Spelling::Exact) (void)encode(e, t);  // range of f32
    } else {  // bool
        if (e.text == "true") e.boolean = true;
        else if (e.text == "false") e.boolean = false;
        else throw bad(origin, e.key + ": '" + e.text.substr(0, 40) + "' is not a bool (true or false)");
    }
    return e;
}

}  // namespace

uint64_t KvReadBudget::limit(uint64_t own) const noexcept { return std::min({own, scan_left, model_left}); }

void KvReadBudget::spend(uint64_t bytes) noexcept {
    scan_left -= std::min(scan_left, bytes);
    model_left -= std::min(model_left, bytes);
}

std::string kv_file_trust_problem(const struct stat& st, std::optional<uid_t> model_owner) {
    const uid_t me = ::geteuid();
    if (st.st_uid != me && (!model_owner || st.st_uid != *model_owner)) {
        std::string out = "owned by uid " + std::to_string(st.st_uid) + ", not by the daemon's uid " + std::to_string(me);
        if (model_owner && *model_owner != me) out += " or the model's owner " + std::to_string(*model_owner);
        return out;
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        return std::string("writable by group or others (mode ") + mode + ")";
    }
    return "";
}

KvEdit parse_kv_override(std::string_view spec, const std::string& origin, const std::string& base_dir) {
    AtFileReader at;
    at.base_dir = base_dir;
    return parse_edit(spec, origin, &at);
}

KvEdit parse_kv_removal(std::string_view key, const std::string& origin) {
    KvEdit e;
    e.kind = KvEdit::Kind::Remove;
    e.key = std::string(key);
    e.origin = origin;
    check_key(e.key, origin);
    if (e.key.find('=') != std::string::npos) {
        throw bad(origin, "'" + e.key.substr(0, 80) + "': a key to remove has no '=' (give just KEY)");
    }
    return e;
}

KvEdit chat_template_edit(const std::string& file) {
    return parse_kv_override(std::string(kKeyChatTemplate) + "=str:@" + file, "--chat-template-file");
}

namespace {

/// The sidecar text `text` from `path` (see parse_kv_sidecar); @FILEs through `at` (nullptr:
/// refused).
KvOverrides parse_sidecar_text(std::string_view text, const std::string& path, const AtFileReader* at) {
    if (text.size() > kMaxSidecarBytes) {
        throw Error(Code::TooLarge, path + ": " + std::to_string(text.size()) + " bytes, more than the " +
                                        std::to_string(kMaxSidecarBytes) + " allowed");
    }
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // a UTF-8 BOM (Windows editors)
    KvOverrides out;
    size_t line_no = 0;
    auto next_line = [&](size_t* at_pos, std::string_view* line) {
        size_t end = text.find('\n', *at_pos);
        if (end == std::string::npos) end = text.size();
        *line = std::string_view(text.data() + *at_pos, end - *at_pos);
        *at_pos = end + 1;
        ++line_no;
        if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    };
    for (size_t pos = 0; pos < text.size();) {
        std::string_view line;
        next_line(&pos, &line);
        while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
        if (line.empty() || line.front() == '#') continue;
        const std::string origin = path + ":" + std::to_string(line_no);
        if (line.front() == '-') {
            out.edits.push_back(parse_kv_removal(trim(line.substr(1)), origin));
            continue;
        }
        const size_t eq = line.find('=');
        if (eq != std::string_view::npos && line.substr(eq + 1, 6) == "str:<<" &&
            is_heredoc_tag(trim(line.substr(eq + 7)))) {
            // KEY=str:<<TAG, the lines up to one that is exactly TAG, joined with "\n".
            const std::string_view tag = trim(line.substr(eq + 7));
            KvEdit e = parse_edit(std::string(line.substr(0, eq)) + "=str:", origin, at);
            bool closed = false;
            bool first = true;
            while (pos < text.size()) {
                std::string_view body;
                next_line(&pos, &body);
                if (body == tag) {
                    closed = true;
                    break;
                }
                if (!first) e.text += '\n';
                e.text.append(body.data(), body.size());
                first = false;
            }
            if (!closed) {
                throw bad(origin, e.key + ": the here-document <<" + std::string(tag) + " has no closing line " +
                                      std::string(tag));
            }
            if (e.text.size() > kMaxStringLength) throw bad(origin, e.key + ": the string is longer than GGUF allows");
            out.edits.push_back(std::move(e));
            continue;
        }
        out.edits.push_back(parse_edit(line, origin, at));
    }
    return out;
}

}  // namespace

KvOverrides read_kv_sidecar(const std::string& path, const KvSidecarRules& rules) {
    const std::string dir = dir_name(path);
    const std::string name = base_name(path);
    // The folder as the walk reached it (links above it followed, as the walk follows them);
    // the sidecar and its @FILEs beneath it, following none.
    const int dfd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        const int e = errno;
        throw Error(Code::Io, path + ": " + std::strerror(e), e);
    }
    UniqueFd folder(dfd);
    KvSourceFile own;
    own.path = path;
    own.folder = true;
    UniqueFd fd;
    try {
        fd = open_regular_beneath(folder.get(), name, path, &own.st);
    } catch (const Error& e) {
        throw planted_or("", e, "; not applied");
    }
    const std::string why = kv_file_trust_problem(own.st, rules.model_owner);
    if (!why.empty()) throw Error(Code::Untrusted, path + ": " + why + "; not applied");
    const uint64_t limit = rules.budget ? rules.budget->limit(kMaxSidecarBytes) : kMaxSidecarBytes;
    if (static_cast<uint64_t>(own.st.st_size) > limit) {
        throw Error(Code::TooLarge, path + ": " + std::to_string(own.st.st_size) + " bytes, more than the " +
                                        std::to_string(limit) +
                                        (limit < kMaxSidecarBytes ? " bytes left for KV edits in this scan"
                                                                  : " a sidecar may have"));
    }
    const std::string text = read_bounded(fd.get(), limit, path);
    if (rules.budget) rules.budget->spend(text.size());
    AtFileReader at;
    at.dirfd = folder.get();
    at.dir = dir;
    at.rules = &rules;
    std::vector<KvSourceFile> files;
    files.push_back(std::move(own));
    at.files = &files;
    KvOverrides out = parse_sidecar_text(text, path, &at);
    out.files = std::move(files);
    return out;
}

KvOverrides parse_kv_sidecar(std::string_view text, const std::string& path) {
    return parse_sidecar_text(text, path, nullptr);
}

std::vector<KeyValue> apply_kv_overrides(const std::vector<KeyValue>& kvs, const KvOverrides& overrides) {
    // Keys are found through an index (a list scan per edit made 80,000 new keys take seconds
    // and a 16 MiB sidecar most of an hour); a removed pair is marked and dropped at the end.
    std::vector<KeyValue> out = kvs;
    std::vector<bool> removed(out.size(), false);
    std::unordered_map<std::string, size_t> index;
    index.reserve(out.size() + overrides.edits.size());
    for (size_t i = 0; i < out.size(); ++i) index.emplace(out[i].key, i);  // the first of a key wins
    for (const KvEdit& e : overrides.edits) {
        check_key(e.key, e.origin);
        auto found = index.find(e.key);
        const bool present = found != index.end();
        if (e.kind == KvEdit::Kind::Remove) {
            if (!present) throw bad(e.origin, e.key + ": not in the file, nothing to remove");
            removed[found->second] = true;
            index.erase(found);
            continue;
        }
        if (present) {
            KeyValue* it = &out[found->second];
            const ValueType t = it->value.type;
            if (!spelling_fits(e, t)) {
                const std::string instead = suggestion(t);
                throw bad(e.origin, e.key + ": the key is " + std::string(value_type_name(t)) + ", " +
                                        std::string(spelling_name(e)) + " cannot go into it (an override keeps the "
                                        "key's type" + (instead.empty() ? std::string(")") : "; use " + instead + ")"));
            }
            it->value = encode(e, t);
            continue;
        }
        if (e.spelling == KvEdit::Spelling::Int || e.spelling == KvEdit::Spelling::Float) {
            throw bad(e.origin, e.key + ": not in the file, and " + std::string(spelling_name(e)) +
                                    " does not say which type to write: give " +
                                    (e.spelling == KvEdit::Spelling::Int ? "u8, i8, u16, i16, u32, i32, u64 or i64"
                                                                         : "f32 or f64") +
                                    " (llama.cpp reads a key from a file only with its exact type)");
        }
        const ValueType t = e.spelling == KvEdit::Spelling::Bool  ? ValueType::Bool
                            : e.spelling == KvEdit::Spelling::Str ? ValueType::String
                                                                  : e.exact;
        out.push_back(KeyValue{e.key, encode(e, t)});
        removed.push_back(false);
        index.emplace(e.key, out.size() - 1);
    }
    if (std::find(removed.begin(), removed.end(), true) != removed.end()) {
        size_t kept = 0;
        for (size_t i = 0; i < out.size(); ++i) {
            if (removed[i]) continue;
            if (kept != i) out[kept] = std::move(out[i]);
            ++kept;
        }
        out.resize(kept);
    }
    uint64_t bytes = 24;
    for (const auto& kv : out) bytes += 12 + kv.key.size() + kv.value.raw.size();
    if (bytes > kMaxHeaderBytes) {
        throw Error(Code::TooLarge, "the metadata with the overrides would take " + std::to_string(bytes) +
                                        " bytes, more than the 1 GiB a GGUF header may hold here");
    }
    return out;
}

}  // namespace gguf
