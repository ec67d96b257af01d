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
// leading blanks and a trailing CR are dropped. One bad
// line refuses the whole sidecar. A sidecar is the contents of a folder, so it speaks for whoever
// can write that folder, not for the daemon (which often runs as root):
//  - it is opened without following a symlink (a link named NAME.gguf.kv is refused), and only a
//    regular file is opened at all (a FIFO or device node is refused before open);
//  - its str:@FILE names a regular file in the sidecar's own folder or below it: a relative name
//    with no "." or ".." component, opened beneath that folder following no symlink
//    (open_regular_beneath); an absolute name, "..", or a link anywhere on the way is refused;
//  - it and every @FILE apply only when owned by the daemon's euid or by the model's owner (its
//    first shard's) and not writable by group or others (ssh's rule for its files,
//    Code::Untrusted otherwise: the model is then served without the sidecar's edits);
//  - the bytes read for edits are bounded per model and per scan (KvReadBudget), while reading;
//  - the served mode of the edited model is judged over the sidecar and its @FILEs too
//    (catalog rule 8), and its mtime is the newest of all of them.
// Command-line edits (--override-kv str:@FILE, --chat-template-file) are the operator's own and
// may name any path (symlinks followed); they too open only regular files.
// A multi-line string fits on a sidecar line as a here-document: a line "KEY=str:<<TAG" (TAG:
// letters, digits, '_') takes the lines after it up to one that is exactly TAG (leading blanks
// and a trailing CR are not dropped there, except the CR of a CRLF line), joined with "\n"; no
// newline follows the last one (end the body with an empty line to have one). Works in remote
// sidecars too, where str:@FILE is refused.
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

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/format/header.hpp"

namespace gguf {
class ByteSource;
}

namespace gguf {

/// File name suffix of a sidecar: "NAME.gguf.kv" holds the overrides of the model NAME.gguf.
inline constexpr std::string_view kKvSidecarSuffix = ".kv";

/// The key --chat-template-file sets (llama.cpp LLM_KV_TOKENIZER_CHAT_TEMPLATE).
inline constexpr std::string_view kKeyChatTemplate = "tokenizer.chat_template";

/// Largest sidecar read_kv_sidecar accepts (16 MiB; long values belong in @FILE).
inline constexpr uint64_t kMaxSidecarBytes = uint64_t{16} << 20;

/// Most bytes of sidecars and str:@FILEs read for one model (64 MiB) and for one scan of a
/// SOURCE in all (256 MiB): what one user with a writable model folder can make the daemon hold.
inline constexpr uint64_t kMaxKvModelBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxKvScanBytes = uint64_t{256} << 20;

/// The bytes left to read for KV edits in one scan (kMaxKvScanBytes) and for the model being
/// planned (kMaxKvModelBytes; start_model() resets it). Reads are bounded by what is left while
/// they read, not checked after.
struct KvReadBudget {
    uint64_t scan_left = kMaxKvScanBytes;
    uint64_t model_left = kMaxKvModelBytes;
    /// A new model is being planned: its own bound starts again.
    void start_model() noexcept { model_left = kMaxKvModelBytes; }
    /// The most a read may take now: `own` (its file's limit), or less when the budget is lower.
    uint64_t limit(uint64_t own) const noexcept;
    /// `bytes` were read.
    void spend(uint64_t bytes) noexcept;
};

/// A local file that KV edits were read from, as fstat(2) saw the descriptor read: a sidecar, or
/// a str:@FILE (`folder` true: the model's folder holds it, so it is judged by catalog rule 8),
/// or a command line's str:@FILE (`folder` false: the operator's own).
struct KvSourceFile {
    std::string path;
    struct stat st {};
    bool folder = false;
    /// A sidecar of a remote listing: its ByteSource (path is then its URL); null for local files.
    std::shared_ptr<const ByteSource> source;
};

/// Who a local sidecar (and its @FILEs) may belong to, to be applied (see the top of this file).
struct KvSidecarRules {
    /// The model's owner (its first shard's st_uid), besides the daemon's euid, which is always
    /// allowed. Unset: only the euid.
    std::optional<uid_t> model_owner;
    /// Bounds the bytes read (nullptr: only the per-file limits).
    KvReadBudget* budget = nullptr;
};

/// The reason `st` (of a sidecar or an @FILE, not followed) may not speak for a model owned by
/// `model_owner` (unset: only the euid counts), or "" when it may: owned by the euid or by
/// model_owner, and not writable by group or others. E.g. "owned by uid 1001, not by the
/// daemon's uid 0 or the model's owner 1000" or "writable by group or others (mode 0666)".
std::string kv_file_trust_problem(const struct stat& st, std::optional<uid_t> model_owner);

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
    /// The local files the edits were read from (sidecars and str:@FILEs), in reading order.
    std::vector<KvSourceFile> files;
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

/// Reads the local sidecar at `path` by the rules at the top of this file: opened beneath its
/// directory without following a link, its @FILEs beneath the same directory, both checked with
/// kv_file_trust_problem(rules.model_owner) before a byte is parsed, and bounded by
/// rules.budget. Returns the edits in line order, each with origin "PATH:LINE", and in `files`
/// the sidecar then each @FILE (folder true). Throws gguf::Error(Code::Untrusted) "PATH: ...;
/// not applied" for a sidecar or @FILE that may not speak for the model (the caller serves the
/// model without it); Code::Io naming it when it cannot be read, is a symlink or not a regular
/// file; Code::TooLarge past kMaxSidecarBytes or the budget; for any bad line
/// gguf::Error(Code::BadArgument) "PATH:LINE: ..." (nothing of it applies; the bytes of an
/// @FILE are never quoted).
KvOverrides read_kv_sidecar(const std::string& path, const KvSidecarRules& rules = {});

/// The text `text` of a sidecar that is not a local file (a file of a remote listing), from
/// `path` (a URL, used in origins "PATH:LINE"), parsed as read_kv_sidecar does except that a
/// str:@FILE is refused (it would name a file of this machine) with gguf::Error(
/// Code::BadArgument) "PATH:LINE: KEY: str:@FILE is not allowed in a remote sidecar ...", before
/// anything is opened; here-documents work. Throws Code::TooLarge past kMaxSidecarBytes.
KvOverrides parse_kv_sidecar(std::string_view text, const std::string& path);

/// Applies `overrides` to `kvs` by the rule at the top of this file and returns the new list.
/// Values not edited keep their bytes (shared, not copied). Throws gguf::Error(Code::BadArgument)
/// "ORIGIN: KEY: ..." for a type that does not fit the key ("KEY is u32, str cannot go into
/// it"), a value out of the key's range (naming the range), int/float for a new key, removing a
/// key that is not there, or a layout key; Code::TooLarge when the KV pairs would exceed the
/// 1 GiB a header may hold (kMaxHeaderBytes).
std::vector<KeyValue> apply_kv_overrides(const std::vector<KeyValue>& kvs, const KvOverrides& overrides);

}  // namespace gguf
