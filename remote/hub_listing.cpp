#include "remote/hub_listing.hpp"

#include <cerrno>
#include <set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "gguf/error.hpp"
#include "remote/bounds.hpp"
#include "remote/token.hpp"
#include "remote/url_parts.hpp"
#include "common/text.hpp"

namespace gguf_mount::remote {

namespace {

std::string display(const HubSource& s, const std::string& revision) {
    std::string out = "hf://" + s.repo_id();
    if (!revision.empty()) out += "@" + revision;
    if (!s.path.empty()) out += "/" + s.path;
    return out;
}

/// Parent directory of a '/'-separated relative path ("" for a top-level name).
std::string parent_of(const std::string& p) {
    size_t slash = p.rfind('/');
    return slash == std::string::npos ? "" : p.substr(0, slash);
}

std::string leaf_of(const std::string& p) {
    size_t slash = p.rfind('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

HubSetup hub_setup(const std::string& source_arg, HttpOptions* http, const EnvLookup& env) {
    HubSetup out;
    out.source = parse_hub_source(source_arg);
    out.endpoint = hub_endpoint(env);
    if (auto token = find_hub_token(env)) {
        http->signer = std::make_shared<BearerSigner>(out.endpoint, token->value,
                                                      std::make_shared<TokenSupply>(*token, env));
        out.token_source = token->source;
    }
    return out;
}

HubListing::HubListing(std::shared_ptr<RemoteContext> context, HubSource source, std::string endpoint,
                       std::string token_source, size_t max_names)
    : context_(std::move(context)),
      source_(std::move(source)),
      endpoint_(std::move(endpoint)),
      token_source_(std::move(token_source)),
      max_names_(max_names) {}

std::string HubListing::root() const {
    return display(source_, commit_.empty() ? (source_.revision_given ? source_.revision : "") : commit_);
}

void HubListing::fail(const HttpError& e, const std::string& what, const std::string& commit) const {
    const std::string shown = display(source_, source_.revision_given ? source_.revision : "");
    const long status = e.status();
    const std::string& code = e.hub_code();
    // A later tree page that fails says which page: the source's path was found (page 1 came).
    if (what != "revision" && what != "tree")
        throw gguf::Error(gguf::Code::Io, shown + ": " + e.what() + " (" + what + ")", e.sys_errno());
    if (!code.empty() && code != "EntryNotFound") {
        // The Hub said what is wrong (http.cpp describe_hub_error: gated, not found, revision).
        throw gguf::Error(gguf::Code::Io, shown + ": " + e.what(), e.sys_errno());
    }
    if (status == 401 || status == 403) {
        if (token_source_.empty()) {
            throw gguf::Error(gguf::Code::Io,
                              shown + ": access refused (HTTP " + std::to_string(status) +
                                  "): the repository is private or gated, or does not exist: give a Hugging Face "
                                  "token with HF_TOKEN=..., HF_TOKEN_PATH=FILE or `hf auth login` (writes "
                                  "$HF_HOME/token); for a gated repo, request access on " +
                                  endpoint_ + "/" + source_.repo_id() + " first",
                              EACCES);
        }
        throw gguf::Error(gguf::Code::Io,
                          shown + ": the Hugging Face token from " + token_source_ + " was refused (HTTP " +
                              std::to_string(status) + "): it has no access to " + source_.repo_id() +
                              " (gated repo not accepted, or a token without read access)",
                          EACCES);
    }
    if ((status == 404 || status == 410) && what == "tree" && !source_.path.empty()) {
        // No folder there: a file (README.md, a single-file model)? One HEAD of its resolve URL.
        bool is_file = false;
        try {
            context_->client().head(hub_resolve_url(endpoint_, source_, commit, source_.path));
            is_file = true;
        } catch (const HttpError&) {
            // not a file either: "not found" below
        }
        if (is_file) {
            const size_t slash = shown.rfind('/');
            throw gguf::Error(gguf::Code::BadArgument,
                              shown + ": a file, not a folder: mount, check and prefetch take a folder or the first "
                                      "shard of a set (NAME-00001-of-NNNNN.gguf); give its folder " +
                                  shown.substr(0, slash),
                              ENOTDIR);
        }
    }
    if (status == 404 || status == 410) {
        if (what == "revision") {
            throw gguf::Error(gguf::Code::Io,
                              shown + ": repository " + source_.repo_id() + " or revision \"" + source_.revision +
                                  "\" not found (HTTP " + std::to_string(status) + ")",
                              ENOENT);
        }
        throw gguf::Error(gguf::Code::Io,
                          shown + ": path \"" + source_.path + "\" not found in " + source_.repo_id() + " at commit " +
                              commit + " (HTTP " + std::to_string(status) + ")",
                          ENOENT);
    }
    throw gguf::Error(gguf::Code::Io, shown + ": " + e.what() + " (" + what + ")", e.sys_errno());
}

std::string HubListing::pin() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!commit_.empty()) return commit_;
    // The record of this source's last pinned tree in the cache (for --offline).
    const std::string record = "hub\n" + endpoint_ + "\n" + source_.repo_id() + "\n" + source_.revision + "\n" +
                               source_.path;
    std::string commit;
    std::vector<HubTreeEntry> entries;
    if (context_->options().offline) {
        const std::string shown = display(source_, source_.revision_given ? source_.revision : "");
        auto text = context_->cache().load_listing(record);
        try {
            if (!text) throw std::runtime_error("absent");
            const nlohmann::json j = parse_json_bounded(*text, "cache record of " + shown, "record");
            commit = j.at("commit").get<std::string>();
            entries = parse_hub_tree(j.at("tree").dump(), "cache record of " + shown);
        } catch (const std::exception&) {
            throw gguf::Error(gguf::Code::Io,
                              shown + ": not in the cache (--offline): mount it once online with the same cache", ENOENT);
        }
    } else {
        try {
            commit = fetch_tree(&entries);
        } catch (const std::bad_alloc&) {
            throw gguf::Error(gguf::Code::Io,
                              display(source_, source_.revision_given ? source_.revision : "") +
                                  ": out of memory while listing the tree at " +
                                  url_for_message(hub_tree_url(endpoint_, source_, "COMMIT", source_.path)),
                              ENOMEM);
        }
        nlohmann::json tree = nlohmann::json::array();
        for (const auto& e : entries) {
            nlohmann::json item = {{"type", e.directory ? "directory" : "file"}, {"path", e.path}, {"oid", e.oid},
                                   {"size", e.size}};
            if (e.lfs) item["lfs"] = {{"oid", e.lfs->sha256}, {"size", e.lfs->size}};
            tree.push_back(std::move(item));
        }
        context_->cache().save_listing(record, nlohmann::json{{"commit", commit}, {"tree", tree}}.dump());
    }
    build(commit, entries);
    return commit_;
}

std::string HubListing::fetch_commit() {
    // The cache's record of the last commit this revision named (for --offline).
    const std::string record = "hub-commit\n" + endpoint_ + "\n" + source_.repo_id() + "\n" + source_.revision;
    if (context_->options().offline) {
        auto text = context_->cache().load_listing(record);
        nlohmann::json j;
        try {
            if (text) j = parse_json_bounded(*text, "cache record", "record");
        } catch (const gguf::Error&) {
            // an unreadable record is no record
        }
        if (j.is_object() && j.contains("commit") && j["commit"].is_string()) return j["commit"].get<std::string>();
        throw gguf::Error(gguf::Code::Io,
                          display(source_, source_.revision_given ? source_.revision : "") +
                              ": not in the cache (--offline): read it once online with the same cache",
                          ENOENT);
    }
    const std::string url = hub_revision_url(endpoint_, source_, source_.revision);
    std::string body, content_type, final_url;
    try {
        body = context_->client().get_page(url, &content_type, &final_url);
    } catch (const HttpError& e) {
        fail(e, "revision", "");
    }
    const std::string commit = parse_hub_revision(body, url);
    context_->cache().save_listing(record, nlohmann::json{{"commit", commit}}.dump());
    return commit;
}

std::string HubListing::fetch_tree(std::vector<HubTreeEntry>* out) {
    Client& http = context_->client();
    std::string content_type, final_url, link;
    const std::string commit = fetch_commit();
    const std::string shown = display(source_, commit);
    // The tree at the commit, page by page, each page bounded before it is kept: at most
    // kMaxHubTreePages pages, and no entry past max_names_ + 1 (the one more lets the
    // catalog say the listing was cut).
    std::vector<HubTreeEntry> entries;
    std::set<std::string> seen_pages;
    const std::string first = hub_tree_url(endpoint_, source_, commit, source_.path);
    std::optional<std::string> next = first;
    size_t pages = 0;
    while (next) {
        if (!seen_pages.insert(*next).second)
            throw gguf::Error(gguf::Code::BadValue, url_for_message(*next) + ": tree pages loop (a next link seen before)");
        if (pages >= kMaxHubTreePages)
            throw gguf::Error(gguf::Code::BadValue, shown + ": the tree has more than " +
                                                        std::to_string(kMaxHubTreePages) +
                                                        " pages (the limit); not listed");
        // Next pages only from the endpoint's own scheme, host and port: a page must not send
        // the listing (and its requests) elsewhere.
        if (!same_origin(*next, endpoint_)) {
            auto other = parse_url(*next);
            throw gguf::Error(gguf::Code::BadValue,
                              url_for_message(final_url) + ": the tree's next page is on another host (" +
                                  (other ? other->scheme + "://" + other->host + ":" + other->port : *next) +
                                  ", not the endpoint " + endpoint_ + "); refused, nothing requested there");
        }
        std::string body;
        try {
            body = http.get_page(*next, &content_type, &final_url, &link);
        } catch (const HttpError& e) {
            fail(e, pages == 0 ? "tree" : "tree page " + std::to_string(pages + 1), commit);
        }
        ++pages;
        std::vector<HubTreeEntry> page = parse_hub_tree(body, *next);
        body = std::string();  // the page's text is not kept while the next one is fetched
        const size_t room = max_names_ + 1 - entries.size();
        const bool cut = page.size() >= room;
        entries.insert(entries.end(), std::make_move_iterator(page.begin()),
                       std::make_move_iterator(page.begin() + static_cast<std::ptrdiff_t>(std::min(room, page.size()))));
        if (cut) {
            spdlog::warn("{}: the tree has more than {} entries (the model-directory limit); the rest is not listed",
                         gguf::quote_name(shown), max_names_);
            break;
        }
        next = parse_link_next(link, final_url);
    }
    pages_ = pages;
    *out = std::move(entries);
    return commit;
}

void HubListing::build(const std::string& commit, const std::vector<HubTreeEntry>& entries) {
    // Group by directory, relative to the source's PATH.
    std::map<std::string, std::vector<Item>> dirs;
    dirs[""];
    const std::string prefix = source_.path.empty() ? "" : source_.path + "/";
    for (const auto& e : entries) {
        if (e.path.compare(0, prefix.size(), prefix) != 0 || e.path.size() == prefix.size()) continue;
        const std::string rel = e.path.substr(prefix.size());
        const std::string leaf = leaf_of(rel);
        if (leaf.empty() || leaf[0] == '.') continue;
        Item item;
        item.name = leaf;
        item.directory = e.directory;
        if (!e.problem.empty()) {
            // Not an entry: a Problem under its directory, named so a message stays readable.
            item.name = name_for_message(leaf);
            item.directory = false;
            item.error = "hf://" + source_.repo_id() + "@" + commit + "/" + name_for_message(e.path) + ": " + e.problem;
            dirs[parent_of(rel)].push_back(std::move(item));
            continue;
        }
        if (e.directory) {
            dirs[rel];
        } else {
            ObjectInfo info;
            info.size = e.size;
            info.validator = e.lfs ? e.lfs->sha256 : "git:" + e.oid;
            auto src = RemoteSource::open_known(context_, hub_resolve_url(endpoint_, source_, commit, e.path), info,
                                                e.lfs ? e.lfs->sha256 : std::string());
            item.part = src->part();
        }
        dirs[parent_of(rel)].push_back(std::move(item));
    }
    dirs_ = std::move(dirs);
    commit_ = commit;
}

std::vector<gguf::DirectoryListing::Item> HubListing::list(const std::string& path) {
    pin();
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = dirs_.find(path);
    if (it == dirs_.end()) {
        throw gguf::Error(gguf::Code::Io, root() + "/" + path + ": not a directory of the pinned tree", ENOENT);
    }
    return it->second;
}

}  // namespace gguf_mount::remote
