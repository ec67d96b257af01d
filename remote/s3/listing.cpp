#include "remote/s3/listing.hpp"

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/threads.hpp"
#include "gguf/error.hpp"
#include "remote/s3/list_objects.hpp"
#include "common/text.hpp"

namespace gguf_mount::remote::s3 {
namespace {

/// More pages than this for one folder is a server that never ends its listing (S3 pages hold
/// up to 1,000 keys: 10 million keys).
constexpr size_t kMaxPages = 10000;

/// Seconds since the epoch of an ISO 8601 LastModified ("2024-01-02T03:04:05.000Z"), 0 when it
/// does not parse.
time_t parse_time(const std::string& iso) {
    struct tm t {};
    if (std::sscanf(iso.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour, &t.tm_min,
                    &t.tm_sec) != 6)
        return 0;
    t.tm_year -= 1900;
    t.tm_mon -= 1;
    const time_t s = ::timegm(&t);
    return s < 0 ? 0 : s;
}

}  // namespace

S3Listing::S3Listing(std::shared_ptr<RemoteContext> context, std::shared_ptr<const S3Signer> signer, std::string bucket,
                     std::string prefix, size_t max_names)
    : context_(std::move(context)),
      signer_(std::move(signer)),
      bucket_(std::move(bucket)),
      prefix_(std::move(prefix)),
      max_names_(max_names) {}

std::string S3Listing::listing_record(const std::string& prefix) const {
    return "s3 ListObjectsV2 of " + signer_->object_url(bucket_, prefix);
}

std::string S3Listing::root() const {
    std::string r = s3_location(bucket_, prefix_);
    while (r.size() > 5 && r.back() == '/') r.pop_back();
    return r;
}

std::vector<S3Listing::Entry> S3Listing::fetch(const std::string& prefix) {
    const std::string where = s3_location(bucket_, prefix);
    // The cache names a record by its URL without the query: the folder's own path-style URL,
    // not the ListObjectsV2 URL (whose prefix is in the query, the same for every folder).
    const std::string record = listing_record(prefix);
    BlockCache& cache = context_->cache();
    std::vector<Entry> entries;
    if (context_->options().offline) {
        std::optional<std::string> stored = cache.load_listing(record);
        if (!stored) throw gguf::Error(gguf::Code::Io, where + ": listing not in the cache (--offline)", ENOENT);
        nlohmann::json j = nlohmann::json::parse(*stored, nullptr, false);
        if (!j.is_array()) throw gguf::Error(gguf::Code::BadValue, where + ": the stored listing is damaged");
        for (const auto& e : j) {
            Entry x;
            x.name = e.value("name", std::string());
            x.directory = e.value("directory", false);
            x.size = e.value("size", uint64_t{0});
            x.etag = e.value("etag", std::string());
            x.last_modified = e.value("last_modified", std::string());
            if (!x.name.empty()) entries.push_back(std::move(x));
        }
        return entries;
    }
    std::map<std::string, Entry> seen;  // by name: a name in two pages is listed once
    std::string token;
    for (size_t pages = 0;; ++pages) {
        if (pages >= kMaxPages)
            throw gguf::Error(gguf::Code::TooLarge, where + ": more than " + std::to_string(kMaxPages) +
                                                        " ListObjectsV2 pages (the server never ends the listing?)");
        std::string content_type, final_url, body;
        const bool root = prefix == prefix_;
        try {
            body = context_->client().get_page(signer_->list_url(bucket_, prefix, token), &content_type, &final_url);
        } catch (const HttpError& e) {
            const std::string line = std::string(e.what()) + " (ListObjectsV2)";
            if (root && definite_answer(e)) set_definite_failure(line);
            throw gguf::Error(gguf::Code::Io, line, e.sys_errno());
        }
        ListPage page;
        try {
            page = parse_list_page(body, where);
        } catch (const gguf::Error& e) {
            if (root) set_definite_failure(e.what());
            throw;
        }
        for (const ListProblem& p : page.problems) {
            spdlog::warn("{}: {}: {}; not listed", gguf::quote_name(where), gguf::quote_name(p.key), p.reason);
        }
        for (const ObjectEntry& o : page.contents) {
            if (o.key.size() <= prefix.size() || o.key.compare(0, prefix.size(), prefix) != 0) continue;
            Entry x;
            x.name = o.key.substr(prefix.size());
            if (x.name.find('/') != std::string::npos) continue;  // a folder marker, or a server without delimiter
            x.size = o.size;
            x.etag = o.etag;
            x.last_modified = o.last_modified;
            seen[x.name] = std::move(x);
        }
        for (const std::string& p : page.common_prefixes) {
            if (p.size() <= prefix.size() + 1 || p.compare(0, prefix.size(), prefix) != 0) continue;
            Entry x;
            x.name = p.substr(prefix.size(), p.size() - prefix.size() - 1);
            x.directory = true;
            if (x.name.find('/') == std::string::npos) seen.emplace(x.name, std::move(x));
        }
        if (!page.is_truncated) break;
        token = page.next_continuation_token;
    }
    nlohmann::json stored = nlohmann::json::array();
    for (auto& [name, e] : seen) {
        if (!e.directory) e.problem = size_problem(e.size);
        if (e.problem.empty()) e.problem = name_problem(name);
        if (e.problem.empty())
            stored.push_back({{"name", e.name}, {"directory", e.directory}, {"size", e.size}, {"etag", e.etag},
                              {"last_modified", e.last_modified}});
        entries.push_back(std::move(e));
    }
    cache.save_listing(record, stored.dump());
    return entries;
}

std::vector<gguf::DirectoryListing::Item> S3Listing::list(const std::string& path) {
    const std::string prefix = prefix_ + (path.empty() ? "" : path + "/");
    std::lock_guard<std::mutex> lock(mutex_);
    if (path.empty()) {
        listed_ = 0;  // a new walk (a mount's rebuild) starts a new budget
        set_definite_failure("");
    }
    if (listed_ > max_names_) return {};
    std::vector<Entry> entries;
    try {
        entries = fetch(prefix);
    } catch (const std::bad_alloc&) {
        throw gguf::Error(gguf::Code::Io, s3_location(bucket_, prefix) + ": out of memory while listing it", ENOMEM);
    }
    std::vector<Item> items;
    std::vector<std::pair<size_t, const Entry*>> files;  // item index, entry
    for (const Entry& e : entries) {
        if (e.name.empty() || e.name[0] == '.') continue;
        Item item;
        item.name = e.name;
        item.directory = e.directory;
        if (++listed_ > max_names_) {
            spdlog::warn("{}: more than {} names listed under it (the model-directory limit); the rest is not listed",
                         gguf::quote_name(root()), max_names_);
            item.directory = false;
            item.error = s3_location(bucket_, prefix + e.name) + ": past the limit of " + std::to_string(max_names_) +
                         " names; not opened";
            items.push_back(std::move(item));
            break;
        }
        if (!e.problem.empty()) {
            item.name = name_for_message(e.name);
            item.directory = false;
            item.error = s3_location(bucket_, prefix + name_for_message(e.name)) + ": " + e.problem;
        } else if (!e.directory) {
            files.emplace_back(items.size(), &e);
        }
        items.push_back(std::move(item));
    }
    open_files(prefix, files, items);
    return items;
}

void S3Listing::open_files(const std::string& prefix, const std::vector<std::pair<size_t, const Entry*>>& files,
                           std::vector<Item>& items) const {
    // Each file is opened from its listed size and ETag (open_listed records them in the cache,
    // one durable write each) and, online, its block 0 (the header, which the catalog reads
    // next, one file after the other) fetched: kListingFetches files at a time. A failed fetch
    // is left for the catalog's own read to report.
    const bool warm = !context_->options().offline;
    gguf::for_each_parallel(files.size(), kListingFetches, [&](size_t i) {
        const Entry& e = *files[i].second;
        ObjectInfo info;
        info.size = e.size;
        info.validator = e.etag.empty() ? "lm:" + e.last_modified + ":" + std::to_string(e.size) : e.etag;
        info.mtime = parse_time(e.last_modified);
        auto source = RemoteSource::open_listed(context_, signer_->object_url(bucket_, prefix + e.name), info);
        items[files[i].first].part = source->part();
        if (warm && source->size() > 0 && !source->cached(0)) {
            char byte = 0;
            (void)source->pread(&byte, 1, 0);
        }
    });
}

}  // namespace gguf_mount::remote::s3
