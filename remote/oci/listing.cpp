#include "remote/oci/listing.hpp"

#include <cerrno>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

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
};

/// One manifest GET (or the cache's copy with --offline); a copy is saved for --offline.
Fetched fetch_manifest(const std::shared_ptr<RemoteContext>& context, const Reference& ref, const std::string& url) {
    BlockCache& cache = context->cache();
    const std::string record = kManifestRecord + url;
    Fetched f;
    if (context->options().offline) {
        std::optional<std::string> stored = cache.load_listing(record);
        nlohmann::json j = stored ? nlohmann::json::parse(*stored, nullptr, false) : nlohmann::json();
        if (!j.is_object())
            throw gguf::Error(gguf::Code::Io, ref.shown() + ": manifest not in the cache (--offline): mount or "
                                                            "prefetch it once online with this --cache-dir",
                              ENOENT);
        f.bytes = j.value("bytes", std::string());
        f.content_type = j.value("content_type", std::string());
        return f;
    }
    std::string final_url;
    try {
        f.bytes = context->client().get_page(url, &f.content_type, &final_url);
    } catch (const HttpError& e) {
        const std::string what = e.what();
        // The signer names registry errors by the reference already; others get it in front.
        throw gguf::Error(gguf::Code::Io, what.rfind(ref.shown(), 0) == 0 ? what : ref.shown() + ": " + what,
                          e.sys_errno());
    }
    nlohmann::json j = {{"bytes", f.bytes}, {"content_type", f.content_type}};
    cache.save_listing(record, j.dump());
    return f;
}

std::string digest_of(const std::string& bytes) { return "sha256:" + cache_files::sha256_hex(bytes); }

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
    Fetched f = fetch_manifest(context, ref, ref.manifest_url());
    const std::string got = digest_of(f.bytes);
    if (!ref.digest.empty() && got != ref.digest) {
        throw gguf::Error(gguf::Code::BadValue, ref.shown() + ": the manifest's bytes hash to " + got +
                                                    ", not the digest asked for (a wrong answer from the registry)");
    }
    Manifest m = parse_manifest(f.bytes, f.content_type, ref.shown());
    p.digest = got;
    if (m.index) {
        p.index_digest = got;
        Descriptor chosen = select_model_manifest(
            m,
            [&](const Descriptor& d) {
                Fetched child = fetch_manifest(context, ref, ref.manifest_url(d.digest));
                if (digest_of(child.bytes) != d.digest)
                    throw gguf::Error(gguf::Code::BadValue, ref.shown() + ": manifest " + d.digest +
                                                                " of the index: its bytes hash to " +
                                                                digest_of(child.bytes));
                return child.bytes;
            },
            ref.shown());
        Fetched child = fetch_manifest(context, ref, ref.manifest_url(chosen.digest));
        if (digest_of(child.bytes) != chosen.digest)
            throw gguf::Error(gguf::Code::BadValue, ref.shown() + ": manifest " + chosen.digest +
                                                        " of the index: its bytes hash to " + digest_of(child.bytes));
        m = parse_manifest(child.bytes, chosen.media_type, ref.shown() + " (" + chosen.digest + ")");
        if (m.index) throw gguf::Error(gguf::Code::BadValue, ref.shown() + ": an index inside an index is not read");
        p.digest = chosen.digest;
    }
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
    auto open = [&](const ModelFile& f) {
        ObjectInfo info;
        info.size = f.layer.size;
        info.validator = f.layer.digest;
        auto source = RemoteSource::open_known(context, ref.blob_url(f.layer.digest), info, f.layer.digest.substr(7),
                                               "oci-blob:" + f.layer.digest, "the layer's digest");
        listing->add(f.name, source->part());
    };
    for (const ModelFile& f : files.weights) open(f);
    for (const ModelFile& f : files.companions) open(f);
    for (const std::string& r : files.refused) spdlog::warn("{}", r);
    auto shard = gguf::parse_shard_name(files.weights.front().name);
    p.model_file = files.weights.size() > 1 && shard ? shard->prefix + ".gguf" : files.weights.front().name;
    if (pinned) *pinned = std::move(p);
    return listing;
}

}  // namespace gguf_mount::remote::oci
