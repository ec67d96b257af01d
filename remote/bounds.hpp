// Bounds on what a server may make gguf-mount keep or scan: every listing, page and JSON answer
// from the network is server-controlled input. Each bound has a one-line message naming the URL
// (README "Limits on remote listings").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace gguf_mount::remote {

/// Most names one walk of a remote listing keeps (directories and files together): the
/// catalog's model-directory limit (gguf::CatalogOptions::max_entries). A listing stops fetching
/// and opening anything past it, and the catalog reports the cut as one Problem.
inline constexpr size_t kMaxListedNames = 100000;

/// Longest name of one directory entry in bytes (NAME_MAX of Linux file systems): a longer one
/// can be neither looked up nor listed by readdir, so it is a Problem, never an entry.
inline constexpr size_t kMaxNameBytes = 255;

/// Largest file size a listing or an answer may claim: 1 PiB (2^50 bytes). Above it the file is
/// a Problem (a claim of 2^63 bytes would have readers and prefetch plan 2^41 blocks).
inline constexpr uint64_t kMaxRemoteFileSize = uint64_t{1} << 50;

/// Deepest nesting of arrays and objects in a JSON answer (a listing is 3 levels deep).
inline constexpr unsigned kMaxJsonDepth = 64;

/// Most JSON values (scalars, arrays, objects) kept from one answer: 2,000,000, about twice
/// what a 100,000-entry listing holds. Bounds the memory of a parsed page (a 16 MiB page of
/// "{}," would hold 5.6 million objects).
inline constexpr size_t kMaxJsonValues = 2000000;

/// Parses `body` as JSON with the bounds above (nlohmann-json's SAX interface: parsing stops at
/// the first value past a bound, before it is kept). Throws gguf::Error(Code::BadValue) with one
/// line "WHERE: WHAT is not valid JSON (...)" or "WHERE: WHAT is nested deeper than 64 levels",
/// or "... holds more than 2000000 JSON values"; `where` names the URL (without query) or record.
nlohmann::json parse_json_bounded(std::string_view body, const std::string& where, const char* what);

/// Why `name` cannot be one entry of a directory ("" when it can): over kMaxNameBytes, or
/// holding '/' or NUL. The reason quotes no more of the name than name_for_message does.
std::string name_problem(const std::string& name);

/// Why `size` cannot be a file's size ("" when it can): above kMaxRemoteFileSize.
std::string size_problem(uint64_t size);

/// `name` for a message or a Problem's path: as is when at most 120 bytes, else its first 80
/// and last 24 bytes around "...(N bytes)...". NUL bytes are shown as "\0".
std::string name_for_message(const std::string& name);

}  // namespace gguf_mount::remote
