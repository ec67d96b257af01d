#include "remote/listing.hpp"

#include <curl/curl.h>

#include <spdlog/spdlog.h>

#include "gguf/error.hpp"
#include "remote/index.hpp"
#include "remote/url_parts.hpp"

namespace gguf_mount::remote {

namespace {

/// `segment` percent-encoded for a URL path (libcurl's curl_easy_escape).
std::string escape_segment(const std::string& segment) {
    char* e = curl_easy_escape(nullptr, segment.c_str(), static_cast<int>(segment.size()));
    if (!e) throw gguf::Error(gguf::Code::Io, "out of memory escaping a URL", ENOMEM);
    std::string out(e);
    curl_free(e);
    return out;
}

}  // namespace

HttpDirectoryListing::HttpDirectoryListing(std::shared_ptr<RemoteContext> context, std::string root_url)
    : context_(std::move(context)), root_url_(std::move(root_url)) {}

std::string HttpDirectoryListing::root() const {
    std::string r = url_for_message(root_url_);
    while (!r.empty() && r.back() == '/') r.pop_back();
    return r;
}

std::vector<gguf::DirectoryListing::Item> HttpDirectoryListing::list(const std::string& path) {
    const size_t q = root_url_.find_first_of("?#");
    const std::string query = q == std::string::npos ? "" : root_url_.substr(q);
    std::string dir_url = root_url_.substr(0, q);
    size_t from = 0;
    while (from < path.size()) {
        size_t slash = path.find('/', from);
        if (slash == std::string::npos) slash = path.size();
        dir_url += escape_segment(path.substr(from, slash - from)) + "/";
        from = slash + 1;
    }
    std::vector<IndexEntry> entries;
    std::string content_type, final_url;
    try {
        std::string body = context_->http().get_page(dir_url + query, &content_type, &final_url);
        entries = parse_index(body, content_type, final_url);
    } catch (const HttpError& e) {
        throw gguf::Error(gguf::Code::Io, std::string(e.what()) + " (directory index)", e.sys_errno());
    }
    std::vector<std::string> urls;
    for (const auto& e : entries) {
        if (!e.directory && !e.name.empty() && e.name[0] != '.') urls.push_back(dir_url + escape_segment(e.name) + query);
    }
    auto opened = open_sources(context_, urls);
    std::vector<Item> items;
    for (const auto& e : entries) {
        Item item;
        item.name = e.name;
        item.directory = e.directory;
        if (!e.directory) {
            if (e.name.empty() || e.name[0] == '.') continue;
            auto it = opened.find(dir_url + escape_segment(e.name) + query);
            if (it == opened.end() || !it->second.source) {
                spdlog::warn("{}", it == opened.end() ? url_for_message(dir_url) + e.name : it->second.error);
                continue;
            }
            item.part = it->second.source->part();
        }
        items.push_back(std::move(item));
    }
    return items;
}

}  // namespace gguf_mount::remote
