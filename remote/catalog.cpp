#include "remote/catalog.hpp"
#include "remote/bounds.hpp"
#include "remote/hub.hpp"
#include "remote/hub_listing.hpp"
#include "remote/url_parts.hpp"

#include <unistd.h>

#include <cerrno>
#include <map>
#include <vector>

#include <spdlog/spdlog.h>

#include "gguf/error.hpp"
#include "gguf/bytes/file_io.hpp"
#include "gguf/model/split_set.hpp"
#include "common/text.hpp"

namespace gguf_mount::remote {

namespace {

/// Throws unless the hf:// `source` (parsed: `hub`) names the first shard of a split set:
/// before any request, one line naming the source and what to give instead.
void require_hub_first_shard(const std::string& source, const HubSource& hub) {
    std::string arg = source;
    while (arg.size() > 1 && arg.back() == '/') arg.pop_back();
    const std::string folder = arg.substr(0, arg.rfind('/'));  // hf://ORG/REPO[@REV][/DIR]
    if (hub.path.empty() || !hub_names_file(hub)) {
        throw gguf::Error(gguf::Code::BadArgument,
                          source + ": not a .gguf file: give the first shard of a set (" +
                              (hub.path.empty() ? arg : folder) + "/NAME-00001-of-NNNNN.gguf); mount, check and "
                              "prefetch also take the folder");
    }
    const auto name = gguf::parse_shard_name(gguf::base_name(hub.path));
    if (!name) {
        throw gguf::Error(gguf::Code::BadSplit,
                          source + ": a single-file model, not the first shard of a split set "
                                   "(NAME-00001-of-NNNNN.gguf): mount, check or prefetch its folder " +
                              folder + " to serve it");
    }
    if (name->index != 1) {
        throw gguf::Error(gguf::Code::BadSplit, source + ": shard " + std::to_string(name->index) + " of " +
                                                    std::to_string(name->count) + ", not the first: give " + folder +
                                                    "/" + gguf::shard_path(name->prefix, 1, name->count));
    }
}

}  // namespace

std::string remote_source_url(const std::string& source, RemoteOptions* ro, std::map<std::string, std::string>* sha256s) {
    if (is_http_url(source)) return source;
    if (source.rfind("hf://", 0) != 0) return "";
    HubSetup hub = hub_setup(source, &ro->http);
    require_hub_first_shard(source, hub.source);
    auto context = std::make_shared<RemoteContext>(*ro);
    HubListing listing(context, hub.source, hub.endpoint, hub.token_source);
    const std::string commit = listing.fetch_commit();
    spdlog::debug("{}: revision {} is commit {}", gguf::quote_name(source), hub.source.revision, commit);
    if (sha256s) {
        // The shards' lfs.oid: the tree of their folder at the commit.
        HubSource folder = hub.source;
        const size_t slash = folder.path.rfind('/');
        folder.path = slash == std::string::npos ? "" : folder.path.substr(0, slash);
        folder.revision = commit;
        folder.revision_given = true;
        HubListing tree(context, folder, hub.endpoint, hub.token_source);
        std::vector<gguf::DirectoryListing::Item> items;
        try {
            items = tree.list("");
        } catch (const gguf::Error& e) {
            // Offline, a cache whose tree record is missing (a cache filled before the tree was
            // listed for a file) still serves what it holds, unchecked.
            if (!ro->offline || e.sys_errno() != ENOENT) throw;
            spdlog::info(
                "{}: the tree of its folder at commit {} is not in the cache (--offline): its shards' "
                "sha256 is not checked",
                gguf::quote_name(source), commit);
        }
        for (const auto& item : items) {
            auto file = std::dynamic_pointer_cast<const RemoteSource>(item.part.source);
            if (file && !file->sha256().empty()) (*sha256s)[file->display_name()] = file->sha256();
        }
    }
    return hub_resolve_url(hub.endpoint, hub.source, commit, hub.source.path);
}

gguf::SplitSet open_remote_set(const std::string& first_url, const std::shared_ptr<RemoteContext>& context,
                               const std::map<std::string, std::string>& sha256s) {
    const size_t q = first_url.find_first_of("?#");
    const std::string query = q == std::string::npos ? "" : first_url.substr(q);
    const std::string plain = url_for_message(first_url);  // the shard URLs follow from this form
    // The names of shards in messages and the set (an S3 object: "s3://BUCKET/KEY"; else plain).
    const std::string shown = context->client().name_for_message(first_url);
    const std::string real_base = first_url.substr(0, q);
    // The real URL of a shard named in the shown form: credentials and query put back.
    const size_t path_at = plain.find('/', plain.find("://") + 3);
    const size_t real_path_at = real_base.find('/', real_base.find("://") + 3);
    auto real_url = [&](const std::string& shown_url) {
        if (path_at == std::string::npos || real_path_at == std::string::npos) return shown_url + query;
        return real_base.substr(0, real_path_at) + shown_url.substr(path_at) + query;
    };

    auto name = gguf::parse_shard_name(shown);
    auto plain_name = gguf::parse_shard_name(plain);
    if (name && name->index != 1) {
        throw gguf::Error(gguf::Code::BadSplit, shown + ": shard " + std::to_string(name->index) + " of " +
                                                    std::to_string(name->count) + ", not the first; did you mean " +
                                                    gguf::shard_path(name->prefix, 1, name->count) + "?");
    }
    if (!name || !plain_name || plain_name->index != 1 || plain_name->count != name->count) {
        // Before any request: a folder given without its '/', or a single-file model.
        const std::string file = gguf::base_name(shown);
        const bool gguf_name = file.size() > 5 && file.compare(file.size() - 5, 5, ".gguf") == 0;
        const std::string meant = gguf_name ? shown.substr(0, shown.size() - file.size()) : shown + "/";
        throw gguf::Error(gguf::Code::BadSplit,
                          shown + ": not a first-shard URL (NAME-00001-of-NNNNN.gguf) or a directory URL ending in "
                                  "'/'; did you mean " + meant + (gguf_name ? " (the folder of this single-file model)" : "") +
                              "?");
    }
    // Shard 1 first: its failure (refused, DNS, 404, TLS) is the error of the whole mount.
    std::map<std::string, std::shared_ptr<RemoteSource>> opened;
    opened[shown] = RemoteSource::open(context, real_url(plain));
    if (std::string why = size_problem(opened[shown]->size()); !why.empty())
        throw gguf::Error(gguf::Code::Io, shown + ": " + why, EFBIG);
    // Then the other shards' headers, several at a time; failures are reported by
    // SplitSet::open in shard order (a missing shard, or the HTTP message).
    std::vector<std::string> shown_urls, real_urls;
    for (uint32_t k = 2; k <= name->count; ++k) {
        shown_urls.push_back(gguf::shard_path(name->prefix, k, name->count));
        real_urls.push_back(real_url(gguf::shard_path(plain_name->prefix, k, name->count)));
    }
    std::map<std::string, Opened> got = open_sources(context, real_urls);
    std::map<std::string, std::string> failed;
    for (size_t k = 0; k < shown_urls.size(); ++k) {
        const Opened& o = got[real_urls[k]];
        if (o.source && !size_problem(o.source->size()).empty()) {
            failed[shown_urls[k]] = shown_urls[k] + ": " + size_problem(o.source->size());
        } else if (o.source) {
            opened[shown_urls[k]] = o.source;
        } else {
            failed[shown_urls[k]] = o.sys_errno == ENOENT ? "" : o.error;  // "": a missing shard
        }
    }
    for (auto& [u, src] : opened) {  // before SplitSet::open reads the headers
        auto it = sha256s.find(u);
        if (it != sha256s.end()) src->expect_sha256(it->second);
    }
    auto resolve = [&](const std::string& u) -> std::optional<gguf::LogicalFile> {
        auto it = opened.find(u);
        if (it == opened.end()) {
            auto f = failed.find(u);
            if (f != failed.end() && !f->second.empty()) throw gguf::Error(gguf::Code::Io, f->second, EIO);
            return std::nullopt;
        }
        gguf::LogicalFile lf;
        lf.path = u;
        lf.parts.push_back(it->second->part());
        return lf;
    };
    return gguf::SplitSet::open(shown, resolve);
}

gguf::Catalog remote_set_catalog(const std::string& first_url, const std::shared_ptr<RemoteContext>& context,
                                 const gguf::KvOverrides& overrides,
                                 const std::map<std::string, std::string>& sha256s) {
    gguf::SplitSet set = open_remote_set(first_url, context, sha256s);
    gguf::Catalog catalog;
    catalog.source = context->client().name_for_message(first_url);
    gguf::CatalogDirectory root;
    root.attr.mode = 0555;
    root.attr.uid = ::getuid();
    root.attr.gid = ::getgid();
    catalog.directories.push_back(root);
    try {
        catalog.entries.push_back(gguf::merged_set_entry(set, set.merged_name(), overrides));
    } catch (const gguf::Error& e) {
        if (overrides.empty()) throw;
        throw gguf::Error(e.code(), set.merged_name() + ": " + e.what(), e.sys_errno());
    }
    return catalog;
}

}  // namespace gguf_mount::remote
