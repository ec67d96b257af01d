#include "gguf/model/kv_override.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

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

/// Reads the whole regular file `path`, at most `limit` bytes. Throws Io / TooLarge naming it.
std::string read_whole_file(const std::string& path, uint64_t limit, const std::string& what) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        throw Error(Code::Io, what + path + ": " + std::strerror(e), e);
    }
    struct stat st {};
    std::string out;
    int err = 0;
    if (::fstat(fd, &st) != 0) {
        err = errno;
    } else if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(Code::Io, what + path + ": not a regular file");
    } else if (static_cast<uint64_t>(st.st_size) > limit) {
        ::close(fd);
        throw Error(Code::TooLarge, what + path + ": " + std::to_string(st.st_size) + " bytes, more than the " +
                                        std::to_string(limit) + " allowed");
    } else {
        char buf[65536];
        for (;;) {
            const ssize_t n = ::read(fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) err = errno;
            if (n <= 0) break;
            out.append(buf, static_cast<size_t>(n));
            if (out.size() > limit) {
                ::close(fd);
                throw Error(Code::TooLarge, what + path + ": grew past the " + std::to_string(limit) + " bytes allowed");
            }
        }
    }
    ::close(fd);
    if (err != 0) throw Error(Code::Io, what + path + ": " + std::strerror(err), err);
    return out;
}

std::string join_path(const std::string& base_dir, const std::string& path) {
    if (base_dir.empty() || (!path.empty() && path.front() == '/')) return path;
    return base_dir + "/" + path;
}

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

KvEdit parse_kv_override(std::string_view spec, const std::string& origin, const std::string& base_dir) {
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
            e.from_file = join_path(base_dir, std::string(value.substr(1)));
            e.text = read_whole_file(e.from_file, kMaxStringLength, origin + ": " + e.key + ": ");
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

KvOverrides read_kv_sidecar(const std::string& path) {
    const std::string text = read_whole_file(path, kMaxSidecarBytes, "");
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? std::string() : (slash == 0 ? "/" : path.substr(0, slash));
    return parse_kv_sidecar(text, path, &dir);
}

KvOverrides parse_kv_sidecar(std::string_view text, const std::string& path, const std::string* base_dir) {
    if (text.size() > kMaxSidecarBytes) {
        throw Error(Code::TooLarge, path + ": " + std::to_string(text.size()) + " bytes, more than the " +
                                        std::to_string(kMaxSidecarBytes) + " allowed");
    }
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // a UTF-8 BOM (Windows editors)
    KvOverrides out;
    size_t line_no = 0;
    for (size_t at = 0; at < text.size();) {
        size_t end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        std::string_view line(text.data() + at, end - at);
        at = end + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
        if (line.empty() || line.front() == '#') continue;
        const std::string origin = path + ":" + std::to_string(line_no);
        if (line.front() == '-') {
            out.edits.push_back(parse_kv_removal(trim(line.substr(1)), origin));
            continue;
        }
        if (!base_dir) {
            // Refused before parse_kv_override would open anything: a remote sidecar naming a
            // local file would otherwise publish that file's bytes.
            const size_t eq = line.find('=');
            const std::string_view value = eq == std::string_view::npos ? line : line.substr(eq + 1);
            if (value.substr(0, 5) == "str:@" && value.substr(0, 6) != "str:@@") {
                throw bad(origin, std::string(line.substr(0, std::min(eq, size_t{80}))) +
                                      ": str:@FILE is not allowed in a remote sidecar (write the value itself)");
            }
        }
        out.edits.push_back(parse_kv_override(line, origin, base_dir ? *base_dir : std::string()));
    }
    return out;
}

std::vector<KeyValue> apply_kv_overrides(const std::vector<KeyValue>& kvs, const KvOverrides& overrides) {
    std::vector<KeyValue> out = kvs;
    for (const KvEdit& e : overrides.edits) {
        check_key(e.key, e.origin);
        auto it = out.begin();
        while (it != out.end() && it->key != e.key) ++it;
        if (e.kind == KvEdit::Kind::Remove) {
            if (it == out.end()) throw bad(e.origin, e.key + ": not in the file, nothing to remove");
            out.erase(it);
            continue;
        }
        if (it != out.end()) {
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
