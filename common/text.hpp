// Text that leaves the program: the one escaping rule for names (file names, paths, KV keys,
// tensor names) in everything a person or a program reads: `check` text and JSON, split/merge
// info lines, the daemon log (stderr or syslog) and error messages.
//
// Inside the program text stays raw (gguf::Error::what(), gguf::Problem::reason, catalog paths
// hold the exact bytes); it is escaped exactly once, where it is printed or logged.
#pragma once

#include <string>
#include <string_view>

namespace gguf {

/// The escaping rule (README, "Names in output"). Each byte of `text` is written as:
///  - itself, when it is part of a valid, shortest-form UTF-8 sequence of a printable code
///    point (not a surrogate, at most U+10FFFF), other than a backslash;
///  - "\\" (two backslashes) for a backslash;
///  - "\xNN" (two lowercase hex digits) otherwise: control characters (U+0000-U+001F, U+007F,
///    U+0080-U+009F), the line and paragraph separators U+2028/U+2029, the bidirectional
///    controls U+200E/U+200F, U+202A-U+202E and U+2066-U+2069 (every byte of their sequence),
///    and every byte that is not part of valid UTF-8.
/// So the result is valid UTF-8, holds no control character (a name can never end a line or
/// drive a terminal), and the rule is injective: reading "\\" as a backslash and "\xNN" as
/// byte NN gives back `text` exactly, so two different names never print the same.
/// Examples: "a\nb" -> "a\x0ab"; "caf\xc3\xa9" (valid "café") -> kept; "x\xff" -> "x\xff"
/// (4 characters after x: backslash, x, f, f); "a\\b" -> "a\\\\b".
std::string escape(std::string_view text);

/// `name` (a file name, path, URL or key) as one POSIX shell word that a shell takes literally,
/// the form of names in log lines: a log line pasted into a shell, or a log file a shell
/// sources, never expands, redirects or runs anything a name holds (issue 30). `name` itself
/// when it is not empty and every byte is one of A-Z a-z 0-9 _ @ % + = : , . / -; else the name
/// in single quotes, each "'" in it written as '"'"' (the rule of Python's shlex.quote; POSIX
/// Shell Command Language 2.2.2: nothing between single quotes is special). The result is raw
/// text, escaped once where it is printed like any other (escape() keeps every quote, so the
/// word stays one inert word and the escaping reversible). Examples: "kvzoo.gguf" -> kept;
/// "$(touch x).gguf" -> "'$(touch x).gguf'"; "it's" -> "'it'\"'\"'s'"; "" -> "''".
std::string quote_name(std::string_view name);

/// True when escape(text) == text (nothing to escape), i.e. `text` is printable UTF-8
/// without a backslash.
bool needs_no_escape(std::string_view text) noexcept;

/// `text` with the ASCII letters A-Z in lowercase and every other byte unchanged (URL schemes
/// and hosts, HTTP header names: case-insensitive in RFC 3986 3.1/3.2.2 and RFC 9110 5.1).
std::string ascii_lower(std::string_view text);

/// True when `text` ends with `suffix` (C++20's std::string_view::ends_with).
bool ends_with(std::string_view text, std::string_view suffix) noexcept;

/// Lowercase hex of every byte of `bytes`, two digits per byte: "a\n" -> "610a".
std::string hex_bytes(std::string_view bytes);

}  // namespace gguf
