#include "remote/index.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <set>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "gguf/error.hpp"
#include "remote/bounds.hpp"
#include "remote/url_parts.hpp"
#include "remote/xml.hpp"

namespace gguf_mount::remote {

namespace {

using gguf::Code;
using gguf::Error;

/// False for the names a listing holds that are no entry at all: "", "." and ".." (the page's
/// own and parent links).
bool names_an_entry(const std::string& name) { return !name.empty() && name != "." && name != ".."; }

std::string attribute(xmlNode* node, const char* name) {
    xmlChar* v = xmlGetProp(node, reinterpret_cast<const xmlChar*>(name));
    if (v == nullptr) return "";
    std::string out(reinterpret_cast<const char*>(v));
    xmlFree(v);
    return out;
}

/// Longest text after a link that can hold nginx's date and size: nginx pads the name to 50
/// columns, then writes 17 bytes of date and the size right-aligned in 20 (about 90 bytes). A
/// longer text (a hostile run of blanks) gives no size; nothing past this is copied or scanned.
constexpr size_t kMaxSizeLine = 160;

/// What the page walk collects: every link, with the text node that follows it when the link
/// sits in nginx's layout, and whether the page has features nginx's autoindex never emits.
struct Link {
    std::string href;
    std::string text_after;  // text right after </a>, only for links in a <pre> that follows an <hr>
};
struct PageScan {
    std::vector<Link> links;
    bool foreign_layout = false;  // <img>, <table>, <address> or a "?..." link: Apache (or other) layout
};

bool is_element(const xmlNode* n, const char* tag) {
    return n != nullptr && n->type == XML_ELEMENT_NODE && gguf::ascii_lower(reinterpret_cast<const char*>(n->name)) == tag;
}

/// nginx writes "<h1>Index of P</h1><hr><pre><a href=...>" (ngx_http_autoindex_module.c), while
/// Apache's <pre> listing puts its <hr> inside the <pre>: a link is on an nginx line when its
/// parent is a <pre> whose previous element sibling is an <hr>.
bool on_nginx_line(const xmlNode* a) {
    const xmlNode* pre = a->parent;
    if (!is_element(pre, "pre")) return false;
    const xmlNode* prev = pre->prev;
    while (prev != nullptr && prev->type != XML_ELEMENT_NODE) prev = prev->prev;
    return is_element(prev, "hr");
}

/// Visits every element below `root` in document order, without recursion (a hostile page may
/// nest elements arbitrarily deep).
void scan(xmlNode* root, PageScan& page) {
    xmlNode* n = root;
    while (n != nullptr) {
        if (n->type == XML_ELEMENT_NODE) {
            if (is_element(n, "img") || is_element(n, "table") || is_element(n, "address")) page.foreign_layout = true;
            if (is_element(n, "a") && xmlHasProp(n, reinterpret_cast<const xmlChar*>("href")) != nullptr) {
                Link link{attribute(n, "href"), ""};
                if (!link.href.empty() && link.href[0] == '?') page.foreign_layout = true;
                if (on_nginx_line(n) && n->next != nullptr && n->next->type == XML_TEXT_NODE && n->next->content != nullptr) {
                    // At most one byte more than a size line can be (nginx_size refuses it then).
                    const char* text = reinterpret_cast<const char*>(n->next->content);
                    link.text_after.assign(text, ::strnlen(text, kMaxSizeLine + 1));
                }
                page.links.push_back(std::move(link));
            }
            if (n->children != nullptr) {
                n = n->children;
                continue;
            }
        }
        while (n != nullptr && n != root && n->next == nullptr) n = n->parent;
        if (n == nullptr || n == root) break;
        n = n->next;
    }
}

/// The size nginx's autoindex prints after a link: "   30-Nov-2026 06:00    12345\r\n"
/// (ngx_http_autoindex_module.c: date as %02d-%s-%d %02d:%02d, then the size right-aligned, or
/// "-" for directories). Exact sizes only: "1K"/"12M" (autoindex_exact_size off) give nothing.
/// A hand-written scanner, one pass over at most kMaxSizeLine bytes (no regex: std::regex
/// recursed once per character and overflowed the stack on a long run of blanks).
std::optional<uint64_t> nginx_size(std::string_view text) {
    if (text.size() > kMaxSizeLine) return std::nullopt;
    size_t i = 0;
    auto blanks = [&] {
        const size_t from = i;
        while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
        return i - from;
    };
    auto digits = [&](size_t n) {
        for (size_t k = 0; k < n; ++k, ++i)
            if (i >= text.size() || !std::isdigit(static_cast<unsigned char>(text[i]))) return false;
        return true;
    };
    auto letters = [&](size_t n) {
        for (size_t k = 0; k < n; ++k, ++i)
            if (i >= text.size() || !std::isalpha(static_cast<unsigned char>(text[i]))) return false;
        return true;
    };
    auto byte = [&](char c) {
        if (i >= text.size() || text[i] != c) return false;
        ++i;
        return true;
    };
    if (blanks() == 0) return std::nullopt;
    if (!digits(2) || !byte('-') || !letters(3) || !byte('-') || !digits(4) || !byte(' ') || !digits(2) ||
        !byte(':') || !digits(2))
        return std::nullopt;
    if (blanks() == 0) return std::nullopt;
    uint64_t v = 0;
    size_t n = 0;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++n) {
        auto d = static_cast<uint64_t>(text[i] - '0');
        if (n >= 20 || v > (std::numeric_limits<uint64_t>::max() - d) / 10) return std::nullopt;
        v = v * 10 + d;
    }
    if (n == 0) return std::nullopt;
    blanks();
    if (i != text.size()) return std::nullopt;
    return v;
}

/// Marks `e` as a Problem when its name or size cannot be served (bounds.hpp).
void judge(IndexEntry& e) {
    std::string why = name_problem(e.name);
    if (why.empty() && e.size) why = size_problem(*e.size);
    if (!why.empty()) e.problem = why;
}

}  // namespace

std::vector<IndexEntry> parse_index_html(std::string_view body, const std::string& page_url) {
    const std::string where = url_for_message(page_url);
    auto page = parse_url(page_url);
    if (!page) throw Error(Code::BadValue, where + ": not an absolute URL");
    if (page->scheme != "http" && page->scheme != "https") throw Error(Code::BadValue, where + ": not an http(s) URL");
    // The directory the page lists: the page's path when it ends with '/', else that path plus
    // '/' (a directory URL without its trailing slash).
    std::string dir_raw = page->path;
    if (dir_raw.back() != '/') dir_raw += '/';
    auto base = parse_url(dir_raw, page_url);
    if (!base) throw Error(Code::BadValue, where + ": not an absolute URL");
    const std::string& dir_path = base->path_decoded;

    if (body.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
        throw Error(Code::BadValue, where + ": index page of " + std::to_string(body.size()) + " bytes is too large");
    // UTF-8 unless the page says otherwise: nginx sends no charset, names are UTF-8 bytes.
    OwnedHtmlParser parser(htmlNewParserCtxt());
    if (!parser) throw std::bad_alloc();  // libxml2 could not allocate it
    OwnedXmlDoc doc(htmlCtxtReadMemory(
        parser.get(), body.data(), static_cast<int>(body.size()), base->url.c_str(), "UTF-8",
        HTML_PARSE_RECOVER | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING | HTML_PARSE_NONET | HTML_PARSE_COMPACT));
    // Recoverable HTML errors are normal on index pages; a fatal one (e.g. "Excessive depth in
    // document") stops libxml2 mid-page, and a partial listing must not pass for the whole one.
    if (parser->lastError.code == XML_ERR_NO_MEMORY) throw std::bad_alloc();  // the caller names the URL
    if (parser->lastError.level == XML_ERR_FATAL) {
        std::string why = parser->lastError.message != nullptr ? parser->lastError.message : "fatal parser error";
        while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
        throw Error(Code::BadValue, where + ": index page cannot be parsed: " + why);
    }
    if (!doc || xmlDocGetRootElement(doc.get()) == nullptr)
        throw Error(Code::BadValue, where + ": index page is not HTML (" + std::to_string(body.size()) + " bytes)");
    PageScan scanned;
    scan(xmlDocGetRootElement(doc.get()), scanned);

    std::vector<IndexEntry> out;
    std::set<std::string> seen;
    for (const Link& link : scanned.links) {
        auto target = parse_url(link.href, base->url);
        if (!target) continue;  // not a URL at all
        if (target->scheme != base->scheme || target->host != base->host || target->port != base->port ||
            !target->query.empty())
            continue;
        const std::string& path = target->path_decoded;
        if (path.size() <= dir_path.size() || path.compare(0, dir_path.size(), dir_path) != 0) continue;
        std::string name = path.substr(dir_path.size());
        bool directory = name.back() == '/';
        if (directory) name.pop_back();
        // A link whose decoded name holds '/' or NUL ("a%2Fb", "%00") points elsewhere: skipped.
        if (!names_an_entry(name) || name.find('/') != std::string::npos || name.find('\0') != std::string::npos ||
            !seen.insert(name).second)
            continue;
        IndexEntry e{name, directory, std::nullopt};
        if (!directory && !scanned.foreign_layout) e.size = nginx_size(link.text_after);
        judge(e);
        out.push_back(std::move(e));
    }
    return out;
}

std::vector<IndexEntry> parse_index_json(std::string_view body, const std::string& page_url) {
    const std::string where = page_url.empty() ? std::string("JSON index") : url_for_message(page_url);
    const nlohmann::json j = parse_json_bounded(body, where, "index");
    if (!j.is_array()) throw Error(Code::BadValue, where + ": JSON index is not an array");
    std::vector<IndexEntry> out;
    std::set<std::string> seen;
    for (size_t i = 0; i < j.size(); ++i) {
        const auto& item = j[i];
        const std::string at = where + ": entry " + std::to_string(i);
        if (!item.is_object()) throw Error(Code::BadValue, at + " is not an object");
        auto name = item.find("name");
        if (name == item.end() || !name->is_string()) throw Error(Code::BadValue, at + " has no string \"name\"");
        auto type = item.find("type");
        if (type == item.end() || !type->is_string()) throw Error(Code::BadValue, at + " has no string \"type\"");
        IndexEntry e{name->get<std::string>(), *type == "directory", std::nullopt};
        if (*type != "file" && *type != "directory") continue;
        if (!names_an_entry(e.name) || !seen.insert(e.name).second) continue;
        auto size = item.find("size");
        if (size != item.end() && !e.directory) {
            if (!size->is_number_unsigned())
                throw Error(Code::BadValue, at + " (\"" + name_for_message(e.name) +
                                                "\"): \"size\" is not an unsigned integer");
            e.size = size->get<uint64_t>();
        }
        judge(e);
        out.push_back(std::move(e));
    }
    return out;
}

std::vector<IndexEntry> parse_index(std::string_view body, std::string_view content_type, const std::string& page_url) {
    std::string type = gguf::ascii_lower(content_type.substr(0, content_type.find(';')));
    while (!type.empty() && std::isspace(static_cast<unsigned char>(type.back()))) type.pop_back();
    while (!type.empty() && std::isspace(static_cast<unsigned char>(type.front()))) type.erase(0, 1);
    const bool json_type = type == "application/json" || (type.size() > 5 && type.rfind("+json") == type.size() - 5);
    if (json_type) return parse_index_json(body, page_url);
    if (type == "text/html" || type == "application/xhtml+xml") return parse_index_html(body, page_url);
    auto first = std::find_if(body.begin(), body.end(), [](char c) { return !std::isspace(static_cast<unsigned char>(c)); });
    if (first != body.end() && *first == '[') return parse_index_json(body, page_url);
    if (first != body.end() && *first == '<') return parse_index_html(body, page_url);
    throw Error(Code::BadValue, url_for_message(page_url) + ": not a directory index (content type \"" +
                                    std::string(content_type) + "\")");
}

}  // namespace gguf_mount::remote
