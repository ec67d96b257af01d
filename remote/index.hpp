// Directory listings of HTTP servers: the index page a server returns for a directory URL
// ("http://host/models/"), parsed into entry names, kinds and (where exact) sizes.
// Formats (as nginx's ngx_http_autoindex_module and Apache's mod_autoindex write them):
//   - nginx `autoindex on` HTML: <pre> lines `<a href="NAME">TEXT</a>  DD-Mon-YYYY HH:MM  SIZE`,
//     NAME URL-encoded, TEXT HTML-escaped and cut when long, SIZE exact bytes or "-";
//   - nginx `autoindex_format json`: [{"name", "type": "file"|"directory", "mtime", "size"}];
//   - Apache mod_autoindex HTML (FancyIndexing <pre>, HTMLTable <table>, or a plain <ul>):
//     sizes rounded ("1.2M"), so never taken.
// Pure: no network. HTML through libxml2's HTML parser, URLs through remote/url_parts (libcurl's
// URL API), JSON through nlohmann-json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gguf_mount::remote {

/// One entry of a directory listing.
struct IndexEntry {
    IndexEntry() = default;
    IndexEntry(std::string entry_name, bool is_directory, std::optional<uint64_t> entry_size, std::string why = "")
        : name(std::move(entry_name)), directory(is_directory), size(entry_size), problem(std::move(why)) {}

    std::string name;              // decoded name: never empty, "." or ".."
    bool directory = false;        // a sub-directory (its URL is the page URL + URL-encoded name + "/")
    std::optional<uint64_t> size;  // exact size in bytes when the listing states it (nginx), else empty
    /// Non-empty: why this entry cannot be served (remote/bounds.hpp: a name over 255 bytes or
    /// holding '/' or NUL, a size above 1 PiB). The listing makes it a Problem, never an entry,
    /// and requests nothing for it.
    std::string problem;

    bool operator==(const IndexEntry& o) const {
        return name == o.name && directory == o.directory && size == o.size && problem == o.problem;
    }
};

/// Parses an HTML directory index (nginx autoindex, Apache mod_autoindex) fetched from
/// `page_url` (the final URL after redirects; a path without a trailing '/' is taken as the
/// directory itself). Entries are the <a href> links that resolve (relative to the page) to a
/// direct child of the page's directory on the same scheme, host and port, without a query:
/// parent links, sort links ("?C=N;O=D"), fragments, links to other hosts or outside the directory
/// and deeper paths are skipped. Names come from the href, URL-decoded (never from the link
/// text, which nginx cuts); a trailing '/' marks a directory. Sizes are set only for files
/// listed in nginx's layout ("<hr><pre><a href=..>..</a>  DD-Mon-YYYY HH:MM  BYTES", as
/// ngx_http_autoindex_module writes it) with an exact byte count (`autoindex_exact_size on`, the
/// default), on a page without <img>, <table>, <address> or "?" links (Apache's markers), so
/// Apache's rounded sizes ("1.2M") are never taken. Duplicate names keep the first. Entries
/// keep page order. Entries whose name is over 255 bytes or whose stated size is above 1 PiB
/// carry IndexEntry::problem. A link whose decoded name holds '/' or NUL is skipped (it is not a
/// direct child). Sizes are scanned from at most 160 bytes after the link, without regex.
/// Throws gguf::Error(Code::BadValue) naming the page URL (without query) when the page is
/// not HTML that libxml2 can parse or `page_url` is not an absolute http(s) URL; std::bad_alloc
/// when libxml2 runs out of memory (the caller names the URL).
std::vector<IndexEntry> parse_index_html(std::string_view body, const std::string& page_url);

/// Parses nginx's `autoindex_format json` listing: a JSON array of objects with "name"
/// (string, not URL-encoded), "type" ("file", "directory"; other types such as "other" are
/// skipped) and, for files, "size" (unsigned bytes). "", "." and ".." are skipped; names holding
/// '/' or NUL or over 255 bytes, and sizes above 1 PiB, carry IndexEntry::problem. Parsed with
/// parse_json_bounded (at most 64 levels, 2,000,000 values). Throws gguf::Error(Code::BadValue)
/// naming `page_url` (for the message only) when the body is not such an array (bad or too deep
/// JSON, an entry that is not an object, a missing or non-string name, a size that is not an
/// unsigned integer).
std::vector<IndexEntry> parse_index_json(std::string_view body, const std::string& page_url = "");

/// Chooses the parser: by `content_type` ("application/json" or "+json" -> JSON; "text/html" or
/// "application/xhtml+xml" -> HTML; parameters such as "; charset=utf-8" ignored), else by the
/// first non-blank byte of the body ('[' JSON, '<' HTML). Throws gguf::Error(Code::BadValue)
/// naming the page URL when neither applies.
std::vector<IndexEntry> parse_index(std::string_view body, std::string_view content_type, const std::string& page_url);

}  // namespace gguf_mount::remote
