#include "remote/oci/listing.hpp"

#include <cerrno>
#include <ctime>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/threads.hpp"
#include "gguf/error.hpp"
#include "gguf/model/split_set.hpp"
#include "remote/client.hpp"
#include "remote/store/cache_files.hpp"
#include "remote/source.hpp"

namespace gguf_mount::remote::oci {
namespace {

/// The prefix of cache records holding a manifest's bytes (BlockCache::save_listing names).
constexpr const char* kManifestRecord = "oci-manifest ";

struct Fetched {
    std::string bytes, content_type;
    time_t first_seen = 0;  ///< when this cache first stored these bytes for the URL (0: unknown)
};

std::string digest_of(const std::string& bytes) { return "sha256:" + cache_files::sha256_hex(bytes); }

/// The cache's copy of the manifest at `url`, if any.
std::optional<Fetched> cached_manifest(BlockCache& cache, const std::string& url) {
    std::optional<std::string> stored = cache.load_listing(kManifestRecord + url);
    nlohmann::json j = stored ? nlohmann::json::parse(*stored, nullptr, false) : nlohmann::json();
    if (!j.is_object() || !j.contains("bytes") || !j["bytes"].is_string()) return std::nullopt;
    Fetched f;
    f.bytes = j["bytes"].get<std::string>();
    f.content_type = j.value("content_type", std::string());
    if (j.contains("first_seen") && j["first_seen"].is_number_integer()) f.first_seen = j["first_seen"].get<time_t>();
    return f;
}

/// Keeps `f` as the cache's copy of the manifest at `url` (for --offline and the next mount).
void save_manifest(BlockCache& cache, const std::string& url, const Fetched& f) {
    nlohmann::json j = {{"bytes", f.bytes}, {"content_type", f.content_type}, {"first_seen", f.first_seen}};
    cache.save_listing(kManifestRecord + url, j.dump());
}

/// The manifest at `url` (a tag's, or with `digest` the one of that digest), asked as the
/// registries' rate limits want it (Docker Hub counts manifest GETs, not HEADs: "Docker Hub
/// usage and limits"): a digest's manifest kept in the cache is used without a request (its
/// bytes are checked against the digest); a tag's kept manifest is revalidated with one HEAD,
/// whose ETag (the registry's manifest digest, distribution's manifest handler) says whether the
/// tag still names it; otherwise one GET, whose bytes are kept for --offline and the next mount.
/// With --offline only the cache's copy is used (Io with ENOENT when absent).
Fetched fetch_manifest(const std::shared_ptr<RemoteContext>& context, const Reference& ref, const std::string& url,
                       const std::string& digest = "") {
    BlockCache& cache = context->cache();
    std::optional<Fetched> kept = cached_manifest(cache, url);
    if (context->options().offline) {
        if (!kept)
            throw gguf::Error(gguf::Code::Io, ref.shown() + ": manifest not in the cache (--offline): mount or "
                                                            "prefetch it once online with this --cache-dir",
                              ENOENT);
        return *kept;
    }
    // A record from before first_seen was kept gets it now, so that later mounts agree.
    auto stamped = [&](Fetched k) {
        if (k.first_seen > 0) return k;
        k.first_seen = ::time(nullptr);
        save_manifest(cache, url, k);
        return k;
    };
    if (kept && !digest.empty() && digest_of(kept->bytes) == digest) return stamped(*kept);
    if (kept && digest.empty()) {
        try {
            std::string validator = context->client().head(url).validator;
            if (validator.rfind("W/", 0) == 0) validator.erase(0, 2);
            if (validator.size() >= 2 && validator.front() == '"' && validator.back() == '"')
                validator = validator.substr(1, validator.size() - 2);
            const std::string had = digest_of(kept->bytes);
            if (validator == had) {
                spdlog::debug("{}: the tag still names {} (HEAD); the cached manifest is used", ref.shown(), had);
                return stamped(*kept);
            }
            spdlog::info("{}: the tag now names {}, not {} (HEAD); getting its manifest", ref.shown(),
                         validator.substr(0, 80), had);
        } catch (const HttpError& e) {
            spdlog::debug("{}: HEAD of the tag failed ({}); getting its manifest", ref.shown(), e.what());
        }
    }
    Fetched f;
    std::string final_url;
    try {
        f.bytes = context->client().get_page(url, &f.content_type, &final_url);
    } catch (const HttpError& e) {
        const std::string what = e.what();
        // The signer names registry errors by the reference already; others get it in front.
        throw gguf::Error(gguf::Code::Io, what.rfind(ref.shown(), 0) == 0 ? what : ref.shown() + ": " + what,
                          e.sys_errno());
    }
    // The same bytes again keep the time they were first seen: a remount shows the same mtime.
    f.first_seen = kept && kept->bytes == f.bytes && kept->first_seen > 0 ? kept->first_seen : ::time(nullptr);
    save_manifest(cache, url, f);
    return f;
}

}  // namespace

void TreeListing::add(const std::string& path, gguf::FilePart part) {
    Item item;
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash);
    item.name = slash == std::string::npos ? path : path.substr(slash + 1);
    for (const Item& i : dirs_[dir]) {
        if (i.name == item.name) return;
    }
    item.part = std::move(part);
    dirs_[dir].push_back(std::move(item));
    ++files_;
    // Its folders, up to the root.
    std::string d = dir;
    while (!d.empty()) {
        const size_t s = d.rfind('/');
        const std::string parent = s == std::string::npos ? "" : d.substr(0, s);
        const std::string name = s == std::string::npos ? d : d.substr(s + 1);
        bool known = false;
        for (const Item& i : dirs_[parent]) known = known || (i.directory && i.name == name);
        if (known) break;
        Item folder;
        folder.name = name;
        folder.directory = true;
        dirs_[parent].push_back(std::move(folder));
        d = parent;
    }
}

void TreeListing::add_error(const std::string& path, const std::string& error) {
    gguf::FilePart none;
    add(path, none);
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash);
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    for (Item& i : dirs_[dir]) {
        if (!i.directory && i.name == name && !i.part.source && i.part.path.empty()) i.error = error;
    }
}

std::vector<gguf::DirectoryListing::Item> TreeListing::list(const std::string& path) {
    auto it = dirs_.find(path);
    if (it == dirs_.end()) {
        if (path.empty()) return {};
        throw gguf::Error(gguf::Code::Io, root_ + "/" + path + ": no such folder", ENOENT);
    }
    return it->second;
}

PinnedManifest pin_manifest(const std::shared_ptr<RemoteContext>& context, const Reference& ref) {
    PinnedManifest p;
    Fetched f = fetch_manifest(context, ref, ref.manifest_url(), ref.digest);
    const std::string got = digest_of(f.bytes);
    if (!ref.digest.empty() && got != ref.digest) {
        throw gguf::Error(gguf::Code::BadValue, ref.shown() + ": the manifest's bytes hash to " + got +
                                                    ", not the digest asked for (a wrong answer from the registry)");
    }
    Manifest m = parse_manifest(f.bytes, f.content_type, ref.shown());
    p.digest = got;
    time_t seen = f.first_seen;
    Manifest index;  // the index the reference named, if it named one
    if (m.index) {
        index = m;
        p.index_digest = got;
        // Each child manifest is asked once (by digest), however often it is looked at.
        std::map<std::string, std::string> children;
        std::map<std::string, time_t> child_seen;  // when the cache first saw each child
        auto child = [&](const Descriptor& d) -> const std::string& {
            auto it = children.find(d.digest);
            if (it != children.end()) return it->second;
            Fetched c = fetch_manifest(context, ref, ref.manifest_url(d.digest), d.digest);
            child_seen[d.digest] = c.first_seen;
            if (digest_of(c.bytes) != d.digest)
                throw gguf::Error(gguf::Code::BadValue, ref.shown() + ": manifest " + d.digest +
                                                            " of the index: its bytes hash to " + digest_of(c.bytes));
            return children.emplace(d.digest, std::move(c.bytes)).first->second;
        };
        Descriptor chosen = select_model_manifest(
            m, [&](const Descriptor& d) { return child(d); }, ref.shown());
        m = parse_manifest(child(chosen), chosen.media_type, ref.shown() + " (" + chosen.digest + ")");
        if (m.index) throw gguf::Error(gguf::Code::BadValue, ref.shown() + ": an index inside an index is not read");
        p.digest = chosen.digest;
        // The model manifest's own: a tag moved to another index of the same model keeps it.
        if (child_seen[chosen.digest] > 0) seen = child_seen[chosen.digest];
    }
    p.created = created_time(m);
    if (p.created == 0) p.created = created_time(index);
    if (p.created == 0) p.created = seen > 0 ? seen : ::time(nullptr);
    p.manifest = std::move(m);
    return p;
}

std::shared_ptr<TreeListing> registry_listing(const std::shared_ptr<RemoteContext>& context, const Reference& ref,
                                              PinnedManifest* pinned) {
    PinnedManifest p = pin_manifest(context, ref);
    Naming naming;
    naming.base = ref.last_component();
    ModelFiles files = model_files(p.manifest, naming, ref.shown());
    auto listing = std::make_shared<TreeListing>(ref.scheme + "://" + ref.registry + "/" + ref.repository + "@" +
                                                 p.digest);
    std::vector<std::shared_ptr<RemoteSource>> weights;
    auto open = [&](const ModelFile& f) {
        ObjectInfo info;
        info.size = f.layer.size;
        info.validator = f.layer.digest;
        info.mtime = p.created;
        auto source = RemoteSource::open_known(context, ref.blob_url(f.layer.digest), info, f.layer.digest.substr(7),
                                               "oci-blob:" + f.layer.digest, "the layer's digest");
        listing->add(f.name, source->part());
        return source;
    };
    for (const ModelFile& f : files.weights) weights.push_back(open(f));
    for (const ModelFile& f : files.companions) open(f);
    // Planning reads each layer's header in turn: their first blocks are fetched (or checked
    // from the cache) side by side first. 7 layers, cold, loopback registry: 1.5 s one after
    // the other (bench/README.md "OCI registries").
    gguf::for_each_parallel(weights.size(), kParallelOpens, [&](size_t i) { weights[i]->load_first_block(); });
    for (const std::string& r : files.refused) spdlog::warn("{}", r);
    auto shard = gguf::parse_shard_name(files.weights.front().name);
    p.model_file = files.weights.size() > 1 && shard ? shard->prefix + ".gguf" : files.weights.front().name;
    if (pinned) *pinned = std::move(p);
    return listing;
}

}  // namespace gguf_mount::remote::oci
