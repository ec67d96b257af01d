#include "remote/hub_listing.hpp"

#include <cerrno>
#include <set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "gguf/error.hpp"
#include "remote/token.hpp"
#include "remote/url_parts.hpp"

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
        http->bearer_token = token->value;
        http->bearer_origin = out.endpoint;
        http->bearer_supply = std::make_shared<TokenSupply>(*token, env);
        out.token_source = token->source;
    }
    return out;
}

HubListing::HubListing(std::shared_ptr<RemoteContext> context, HubSource source, std::string endpoint,
                       std::string token_source)
    : context_(std::move(context)),
      source_(std::move(source)),
      endpoint_(std::move(endpoint)),
      token_source_(std::move(token_source)) {}

std::string HubListing::root() const {
    return display(source_, commit_.empty() ? (source_.revision_given ? source_.revision : "") : commit_);
}

void HubListing::fail(const HttpError& e, const std::string& what, const std::string& commit) const {
    const std::string shown = display(source_, source_.revision_given ? source_.revision : "");
    const long status = e.status();
    if (status == 401 || status == 403) {
        if (token_source_.empty()) {
            throw gguf::Error(gguf::Code::Io,
                              shown + ": the repository is gated or private (HTTP " + std::to_string(status) +
                                  "): give a Hugging Face token with HF_TOKEN=... or `huggingface-cli login` "
                                  "(writes $HF_HOME/token), after accepting the repo's terms on the Hub if it is gated",
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
            context_->http().head(hub_resolve_url(endpoint_, source_, commit, source_.path));
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
        auto j = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
        try {
            if (!text || j.is_discarded()) throw std::runtime_error("absent");
            commit = j.at("commit").get<std::string>();
            entries = parse_hub_tree(j.at("tree").dump(), "cache record of " + shown);
        } catch (const std::exception&) {
            throw gguf::Error(gguf::Code::Io,
                              shown + ": not in the cache (--offline): mount it once online with the same cache", ENOENT);
        }
    } else {
        commit = fetch_tree(&entries);
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
        auto j = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
        if (j.is_object() && j.contains("commit") && j["commit"].is_string()) return j["commit"].get<std::string>();
        throw gguf::Error(gguf::Code::Io,
                          display(source_, source_.revision_given ? source_.revision : "") +
                              ": not in the cache (--offline): read it once online with the same cache",
                          ENOENT);
    }
    const std::string url = hub_revision_url(endpoint_, source_, source_.revision);
    std::string body, content_type, final_url;
    try {
        body = context_->http().get_page(url, &content_type, &final_url);
    } catch (const HttpError& e) {
        fail(e, "revision", "");
    }
    const std::string commit = parse_hub_revision(body, url);
    context_->cache().save_listing(record, nlohmann::json{{"commit", commit}}.dump());
    return commit;
}

std::string HubListing::fetch_tree(std::vector<HubTreeEntry>* out) {
    HttpClient& http = context_->http();
    std::string content_type, final_url, link;
    const std::string commit = fetch_commit();
    // The tree at the commit, every page.
    std::vector<HubTreeEntry> entries;
    std::set<std::string> seen_pages;
    std::optional<std::string> next = hub_tree_url(endpoint_, source_, commit, source_.path);
    size_t pages = 0;
    while (next) {
        if (!seen_pages.insert(*next).second || pages >= kMaxHubTreePages) {
            throw gguf::Error(gguf::Code::BadValue, url_for_message(*next) + ": tree pages loop (a next link seen before)");
        }
        std::string body;
        try {
            body = http.get_page(*next, &content_type, &final_url, &link);
        } catch (const HttpError& e) {
            fail(e, "tree", commit);
        }
        ++pages;
        auto page = parse_hub_tree(body, *next);
        entries.insert(entries.end(), std::make_move_iterator(page.begin()), std::make_move_iterator(page.end()));
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
