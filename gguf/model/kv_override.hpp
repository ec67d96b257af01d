// KV overrides: changing, adding and removing metadata keys of a served or written GGUF file
// without touching its tensor data.
//
// Spelling (as llama.cpp's --override-kv spells it, plus the exact GGUF types):
//   KEY=TYPE:VALUE   set KEY; TYPE is int, float, bool or str (llama.cpp), or one of the exact GGUF
//                    types u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 (bool and str are both);
//                    str:@FILE takes the string from FILE (byte for byte), str:@@TEXT is "@TEXT"
//   -KEY             remove KEY (--remove-kv KEY on the command line)
//   --chat-template-file FILE  is tokenizer.chat_template=str:@FILE
// Sidecar NAME.gguf.kv: one KEY=TYPE:VALUE or -KEY per line; blank lines and lines whose first
// non-blank character is '#' are skipped; a UTF-8 byte order mark at the start of the file,
// leading blanks and a trailing CR are dropped; @FILE is relative to the sidecar's directory. One
// bad line refuses the whole sidecar.
// Blanks around KEY ("KEY =int:1", also on the command line) are refused, not trimmed: such a
// line names a key no model has, and "blanks around the key" says why it did not apply.
//
// The rule (what a rewrite of the file would produce), applied in the order the edits are given:
//  - a key that is in the list keeps its place and its GGUF type: int goes into any integer type
//    (u8..i64) and must fit it, float into f32 or f64 (and must fit f32), bool into bool, str into
//    a string; an exact type must be the key's own type;
//  - a key that is not in the list is appended after the last key; it needs a type that says how
//    to write it: bool, str or an exact type. int and float are refused for new keys: llama.cpp
//    keeps an override as int64/double and converts it to whatever type its loader asks for, but
//    it reads a key FROM A FILE only with its one exact type (a context_length written as i64
//    instead of u32 makes llama.cpp refuse the model: "key ... has wrong type"), so no width
//    could be guessed safely;
//  - a removed key is gone; removing a key that is not there is an error;
//  - general.alignment and split.* describe the layout and are never changed or removed;
//  - arrays cannot be set (there is no spelling for them), only removed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/format/header.hpp"

namespace gguf {

/// File name suffix of a sidecar: "NAME.gguf.kv" holds the overrides of the model NAME.gguf.
inline constexpr std::string_view kKvSidecarSuffix = ".kv";

/// The key --chat-template-file sets (llama.cpp LLM_KV_TOKENIZER_CHAT_TEMPLATE).
inline constexpr std::string_view kKeyChatTemplate = "tokenizer.chat_template";

/// Largest sidecar read_kv_sidecar accepts (16 MiB; long values belong in @FILE).
inline constexpr uint64_t kMaxSidecarBytes = uint64_t{16} << 20;

/// One edit of a KV list: set (override or add) or remove a key.
struct KvEdit {
    enum class Kind : uint8_t { Set, Remove };
    /// How TYPE was spelled: one of llama.cpp's four, or an exact GGUF type (`exact`).
    enum class Spelling : uint8_t { Int, Float, Bool, Str, Exact };

    Kind kind = Kind::Set;
    std::string key;
    /// Where the edit was given, the start of every message about it: "--override-kv",
    /// "--remove-kv", "--chat-template-file" or "DIR/m.gguf.kv:3" (file and 1-based line).
    std::string origin;

    // Set only:
    Spelling spelling = Spelling::Str;
    ValueType exact = ValueType::String;  // Spelling::Exact: the type asked for
    bool negative = false;                // Int, integer Exact: the value is -magnitude
    uint64_t magnitude = 0;               // Int, integer Exact: absolute value
    double real = 0;                      // Float, f32/f64 Exact
    bool boolean = false;                 // Bool
    std::string text;                     // Str: the string; others: the value as written
    std::string from_file;                // str:@FILE: the file the string was read from

    /// The edit as it would be written, for listings: "-KEY", "KEY=int:4096", "KEY=str:@FILE",
    /// a string longer than 60 bytes as "KEY=str:<N bytes>".
    std::string spelled() const;
};

/// An ordered list of edits. Empty: nothing changes (plans and bytes are those without it).
struct KvOverrides {
    std::vector<KvEdit> edits;
    bool empty() const noexcept { return edits.empty(); }
};

/// Parses "KEY=TYPE:VALUE" (see the top of this file). `origin` starts every message;
/// `base_dir` resolves a relative str:@FILE ("" = the working directory). Reads @FILE now
/// (at most 2^30 bytes, the longest GGUF string). Throws gguf::Error(Code::BadArgument)
/// "ORIGIN: ..." for a missing '=' or ':', an empty key, blanks (space, tab) at either end of the
/// key ("ORIGIN: KEY : blanks around the key; write KEY=TYPE:VALUE"), a key with a NUL byte or longer than
/// 65535 bytes, a layout key (general.alignment, split.*), an unknown type, a value that is not
/// an integer / a number / true|false or does not fit the exact type; Code::Io naming FILE when
/// @FILE cannot be read.
KvEdit parse_kv_override(std::string_view spec, const std::string& origin, const std::string& base_dir = "");

/// Parses a removal of `key` (--remove-kv KEY, or a sidecar "-KEY" without the dash). Throws
/// gguf::Error(Code::BadArgument) "ORIGIN: ..." for an empty key or a layout key.
KvEdit parse_kv_removal(std::string_view key, const std::string& origin);

/// --chat-template-file FILE: tokenizer.chat_template=str:@FILE, FILE relative to the working
/// directory. Throws like parse_kv_override.
KvEdit chat_template_edit(const std::string& file);

/// Reads the sidecar at `path` (see the top of this file). Throws gguf::Error(Code::Io) naming
/// it when it cannot be read, Code::TooLarge when it exceeds kMaxSidecarBytes, and for any bad
/// line gguf::Error(Code::BadArgument) "PATH:LINE: ..." (nothing of it applies). Edits are in
/// line order, each with origin "PATH:LINE".
KvOverrides read_kv_sidecar(const std::string& path);

/// The sidecar text `text` read from `path` (a file name or URL, used in origins "PATH:LINE"),
/// parsed as read_kv_sidecar does. `base_dir` resolves a relative str:@FILE; nullptr refuses
/// str:@FILE (a sidecar that is not a local file: its @FILE would name a file of this machine)
/// with gguf::Error(Code::BadArgument) "PATH:LINE: KEY: str:@FILE is not allowed ...", before
/// anything is opened. Throws Code::TooLarge past kMaxSidecarBytes, and like read_kv_sidecar.
KvOverrides parse_kv_sidecar(std::string_view text, const std::string& path, const std::string* base_dir);

/// Applies `overrides` to `kvs` by the rule at the top of this file and returns the new list.
/// Values not edited keep their bytes (shared, not copied). Throws gguf::Error(Code::BadArgument)
/// "ORIGIN: KEY: ..." for a type that does not fit the key ("KEY is u32, str cannot go into
/// it"), a value out of the key's range (naming the range), int/float for a new key, removing a
/// key that is not there, or a layout key; Code::TooLarge when the KV pairs would exceed the
/// 1 GiB a header may hold (kMaxHeaderBytes).
std::vector<KeyValue> apply_kv_overrides(const std::vector<KeyValue>& kvs, const KvOverrides& overrides);

}  // namespace gguf
