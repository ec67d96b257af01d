#include "remote/listing.hpp"

#include <curl/curl.h>

#include <algorithm>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "gguf/error.hpp"
#include "remote/bounds.hpp"
#include "remote/index.hpp"
#include "remote/url_parts.hpp"
#include "common/text.hpp"

namespace gguf_mount::remote {

namespace {

/// A server that ignores Range requests fails every file the same way: the first such file
/// keeps its line, saying how many others of the folder failed with it; those are left out
/// (one problem per server, not one per shard).
void fold_range_refusals(std::vector<gguf::DirectoryListing::Item>* items) {
    size_t first = items->size(), others = 0;
    std::vector<gguf::DirectoryListing::Item> kept;
    for (auto& item : *items) {
        if (!item.error.empty() && item.error.find(kRangeIgnored) != std::string::npos) {
            if (first != items->size()) {
                ++others;
                continue;
            }
            first = kept.size();
        }
        kept.push_back(std::move(item));
    }
    if (others > 0) {
        kept[first].error += "; the same for the " + std::to_string(others) + " other file(s) of its folder, none served";
    }
    *items = std::move(kept);
}

}  // namespace


namespace {

/// `segment` percent-encoded for a URL path (libcurl's curl_easy_escape).
std::string escape_segment(const std::string& segment) {
    char* e = curl_easy_escape(nullptr, segment.c_str(), static_cast<int>(segment.size()));
    if (!e) throw gguf::Error(gguf::Code::Io, "out of memory escaping a URL", ENOMEM);
    std::string out(e);
    curl_free(e);
    return out;
}

/// `entries` in nginx's JSON autoindex form (what parse_index_json reads back): the listing kept
/// in the cache for --offline.
std::string listing_json(const std::vector<IndexEntry>& entries) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries) {
        if (!e.problem.empty()) continue;
        nlohmann::json item = {{"name", e.name}, {"type", e.directory ? "directory" : "file"}};
        if (e.size) item["size"] = *e.size;
        out.push_back(std::move(item));
    }
    return out.dump();
}

}  // namespace

HttpDirectoryListing::HttpDirectoryListing(std::shared_ptr<RemoteContext> context, std::string root_url,
                                           size_t max_names)
    : context_(std::move(context)), root_url_(std::move(root_url)), max_names_(max_names) {}

std::string HttpDirectoryListing::root() const {
    std::string r = url_for_message(root_url_);
    while (!r.empty() && r.back() == '/') r.pop_back();
    return r;
}

std::vector<gguf::DirectoryListing::Item> HttpDirectoryListing::list(const std::string& path) {
    try {
        return list_bounded(path);
    } catch (const std::bad_alloc&) {
        throw gguf::Error(gguf::Code::Io, root() + "/" + path + ": out of memory while listing it", ENOMEM);
    }
}

std::vector<gguf::DirectoryListing::Item> HttpDirectoryListing::list_bounded(const std::string& path) {
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
    // The catalog walks from the root: a new walk (a mount's rebuild) starts a new budget.
    std::lock_guard<std::mutex> lock(mutex_);
    if (path.empty()) {
        listed_ = 0;
        set_definite_failure("");
    }
    if (listed_ > max_names_) return {};  // the budget was spent: nothing fetched, nothing listed
    std::vector<IndexEntry> entries;
    BlockCache& cache = context_->cache();
    if (context_->options().offline) {
        // No network: the last good listing stored by an online mount, if any.
        std::optional<std::string> stored = cache.load_listing(dir_url);
        if (!stored) {
            throw gguf::Error(gguf::Code::Io, url_for_message(dir_url) + ": listing not in the cache (--offline)",
                              ENOENT);
        }
        entries = parse_index_json(*stored, dir_url);
    } else {
        std::string content_type, final_url;
        try {
            std::string body = context_->client().get_page(dir_url + query, &content_type, &final_url);
            entries = parse_index(body, content_type, final_url);
        } catch (const HttpError& e) {
            const std::string line = std::string(e.what()) + " (directory index)";
            if (path.empty() && definite_answer(e)) set_definite_failure(line);
            throw gguf::Error(gguf::Code::Io, line, e.sys_errno());
        } catch (const gguf::Error& e) {
            if (path.empty()) set_definite_failure(e.what());  // an index page that does not parse
            throw;
        }
    }
    // Names shown (not hidden) count against the walk's budget before any file is opened: one
    // name past it is listed unopened, so the catalog sees the cut and says so.
    // In name order, as the catalog walks and counts them, so the name past the budget is the
    // one where the catalog stops.
    std::sort(entries.begin(), entries.end(), [](const IndexEntry& a, const IndexEntry& b) { return a.name < b.name; });
    std::vector<IndexEntry> kept;
    for (auto& e : entries) {
        if (e.name[0] == '.') continue;
        if (listed_ > max_names_) break;
        ++listed_;
        kept.push_back(std::move(e));
    }
    if (listed_ > max_names_) {
        spdlog::warn("{}: more than {} names listed under it (the model-directory limit); the rest is not listed",
                     gguf::quote_name(root()), max_names_);
    }
    if (!context_->options().offline) cache.save_listing(dir_url, listing_json(kept));
    std::vector<std::string> urls;
    const size_t openable = kept.size() - (listed_ > max_names_ ? 1 : 0);
    for (size_t i = 0; i < openable; ++i) {
        const IndexEntry& e = kept[i];
        if (!e.directory && e.problem.empty()) urls.push_back(dir_url + escape_segment(e.name) + query);
    }
    auto opened = open_sources(context_, urls);
    std::vector<Item> items;
    for (size_t i = 0; i < kept.size(); ++i) {
        const IndexEntry& e = kept[i];
        Item item;
        item.name = e.name;
        item.directory = e.directory;
        if (!e.problem.empty()) {
            // Not an entry (a name over NAME_MAX, a claimed size above 1 PiB): a Problem.
            item.name = name_for_message(e.name);
            item.directory = false;
            item.error = url_for_message(dir_url) + name_for_message(e.name) + ": " + e.problem;
        } else if (i >= openable) {
            item.directory = false;
            item.error = url_for_message(dir_url) + e.name + ": past the limit of " + std::to_string(max_names_) +
                         " names; not opened";
        } else if (!e.directory) {
            auto it = opened.find(dir_url + escape_segment(e.name) + query);
            if (it == opened.end() || !it->second.source) {
                item.error = it == opened.end() ? url_for_message(dir_url) + e.name + ": not opened" : it->second.error;
            } else if (std::string why = size_problem(it->second.source->size()); !why.empty()) {
                item.error = url_for_message(dir_url) + e.name + ": " + why;
            } else {
                item.part = it->second.source->part();
            }
        }
        items.push_back(std::move(item));
    }
    fold_range_refusals(&items);
    return items;
}

}  // namespace gguf_mount::remote
