// Local OCI sources: an OCI image layout and an Ollama models store, their blobs read in place.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "gguf/bytes/file_io.hpp"
#include "gguf/error.hpp"
#include "remote/oci/listing.hpp"
#include "remote/oci/local_blob.hpp"
#include "remote/store/cache_files.hpp"

namespace gguf_mount::remote::oci {
namespace {

/// Manifests and indexes are small; a larger "manifest" is not one.
constexpr off_t kMaxManifestBytes = off_t{4} << 20;

bool is_dir(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

/// The bytes of the manifest or index file `path`, beneath the layout or store `root` (path =
/// root + "/" + a plain relative name): opened beneath root without following any link on the
/// way (gguf::open_regular_beneath: a link in the folder speaks for its writer), judged on that
/// descriptor (a regular file) and read up to kMaxManifestBytes (gguf::read_bounded). Throws
/// gguf::Error naming the path when it cannot be opened, passes through a link, is not a
/// regular file or is larger.
std::string read_small(const std::string& root, const std::string& path) {
    const std::string prefix = root + "/";
    const std::string rel = path.compare(0, prefix.size(), prefix) == 0 ? path.substr(prefix.size()) : std::string();
    if (!gguf::is_plain_relative_path(rel))
        throw gguf::Error(gguf::Code::BadValue, path + ": not a file name beneath " + root);
    gguf::UniqueFd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir) throw gguf::Error(gguf::Code::Io, root + ": " + std::strerror(errno), errno);
    const gguf::UniqueFd fd = gguf::open_regular_beneath(dir.get(), rel, path);
    return gguf::read_bounded(fd.get(), static_cast<uint64_t>(kMaxManifestBytes), path);
}

std::vector<std::string> entries(const std::string& dir) {
    std::vector<std::string> out;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return out;
    while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

/// A local blob's FilePart (read in place through a LocalBlobSource, its bytes checked against
/// its digest). Throws gguf::Error(Io) naming the path when it is missing, BadValue when its
/// size is not the descriptor's or its digest is not a sha256 one.
gguf::FilePart blob_part(const std::string& root, const std::string& path, const Descriptor& d, bool whole) {
    // Opened beneath root, no link followed on the way (a link in the folder is whatever its
    // writer planted); the served file's later open is checked against this inode
    // (LocalFileSource::open).
    struct stat st {};
    try {
        const std::string prefix = root + "/";
        const std::string rel = path.compare(0, prefix.size(), prefix) == 0 ? path.substr(prefix.size()) : std::string();
        gguf::UniqueFd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!dir) throw gguf::Error(gguf::Code::Io, root + ": " + std::strerror(errno), errno);
        (void)gguf::open_regular_beneath(dir.get(), rel, path, &st);
    } catch (const gguf::Error& e) {
        if (e.sys_errno() == ENOENT) throw gguf::Error(gguf::Code::Io, path + ": blob " + d.digest + " missing", ENOENT);
        throw gguf::Error(gguf::Code::Io, std::string(e.what()) + " (blob " + d.digest + ")", e.sys_errno());
    }
    if (static_cast<uint64_t>(st.st_size) != d.size)
        throw gguf::Error(gguf::Code::BadValue, path + ": blob " + d.digest + " is " + std::to_string(st.st_size) +
                                                    " bytes, its manifest says " + std::to_string(d.size));
    const std::string hex = d.digest.rfind("sha256:", 0) == 0 ? d.digest.substr(7) : std::string();
    if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
        throw gguf::Error(gguf::Code::BadValue, path + ": blob digest " + d.digest.substr(0, 80) +
                                                    " is not sha256:<64 lowercase hex> (the only digest read here)");
    return std::make_shared<LocalBlobSource>(path, st, d.digest, whole)->part();
}

/// Adds the files of manifest `m` named after `base` under folder `folder` ("" or "a/b/").
void add_model(TreeListing& listing, const std::string& root, const Manifest& m, const std::string& folder,
               const std::string& base,
               const std::function<std::string(const std::string&)>& blob_path, const std::string& where, bool whole) {
    Naming naming;
    naming.base = base;
    naming.use_layer_names = false;
    ModelFiles files = model_files(m, naming, where);
    auto add = [&](const ModelFile& f) {
        try {
            listing.add(folder + f.name, blob_part(root, blob_path(f.layer.digest), f.layer, whole));
        } catch (const gguf::Error& e) {
            listing.add_error(folder + f.name, e.what());
        }
    };
    for (const ModelFile& f : files.weights) add(f);
    for (const ModelFile& f : files.companions) add(f);
    for (const std::string& r : files.refused) spdlog::warn("{}", r);
}

/// The bytes of the manifest blob of descriptor `d` (at blob_path(d.digest)), checked against its
/// digest. Throws gguf::Error(BadValue) naming the file and both digests when they differ.
std::string read_manifest_blob(const std::string& root, const std::function<std::string(const std::string&)>& blob_path,
                               const Descriptor& d) {
    const std::string path = blob_path(d.digest);
    std::string bytes = read_small(root, path);
    const std::string got = "sha256:" + cache_files::sha256_hex(bytes);
    if (got != d.digest)
        throw gguf::Error(gguf::Code::BadValue, path + ": sha256 mismatch: expected " + d.digest.substr(0, 80) +
                                                    " (the manifest's digest), its " + std::to_string(bytes.size()) +
                                                    " bytes hash to " + got + " (the file is damaged or was changed)");
    return bytes;
}

/// A manifest (the blob of descriptor `top`, or the file `path` when `top` is null: an Ollama
/// manifest, named by its tag), narrowed to its model manifest when it is an index; every file
/// read beneath `root` (read_small).
Manifest read_model_manifest(const std::string& root, const std::string& path, const Descriptor* top,
                             const std::function<std::string(const std::string&)>& blob_path, const std::string& where) {
    Manifest m = parse_manifest(top ? read_manifest_blob(root, blob_path, *top) : read_small(root, path),
                                top ? top->media_type : std::string(), where);
    if (!m.index) return m;
    auto fetch = [&](const Descriptor& d) { return read_manifest_blob(root, blob_path, d); };
    Descriptor chosen = select_model_manifest(m, fetch, where);
    m = parse_manifest(read_manifest_blob(root, blob_path, chosen), chosen.media_type, where);
    if (m.index) throw gguf::Error(gguf::Code::BadValue, where + ": an index inside an index is not read");
    return m;
}

std::string base_name(std::string p) {
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    const size_t s = p.rfind('/');
    return s == std::string::npos ? p : p.substr(s + 1);
}

}  // namespace

bool is_oci_layout(const std::string& dir) { return is_file(dir + "/oci-layout") && is_file(dir + "/index.json"); }

bool is_ollama_store(const std::string& dir) { return is_dir(dir + "/manifests") && is_dir(dir + "/blobs"); }

std::shared_ptr<TreeListing> layout_listing(const std::string& dir, bool whole) {
    const std::string index_path = dir + "/index.json";
    Manifest index = parse_manifest(read_small(dir, index_path), "", index_path);
    auto listing = std::make_shared<TreeListing>(dir);
    auto blob_path = [&](const std::string& digest) { return dir + "/blobs/sha256/" + digest.substr(7); };
    std::vector<Descriptor> list = index.index ? index.manifests : std::vector<Descriptor>{};
    const std::string dir_name = base_name(dir);
    for (const Descriptor& d : list) {
        auto ref = d.annotations.find("org.opencontainers.image.ref.name");
        std::string base;
        if (ref == d.annotations.end()) {
            base = dir_name + "-" + d.digest.substr(7, 12);
        } else {
            // "MODEL:TAG" or a full reference: MODEL-TAG; a plain tag: DIR-TAG.
            const std::string& r = ref->second;
            const size_t slash = r.rfind('/');
            const size_t colon = r.rfind(':');
            if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
                const std::string name = r.substr(0, colon);
                base = base_name(name) + "-" + r.substr(colon + 1);
            } else {
                base = dir_name + "-" + base_name(r);
            }
        }
        const std::string where = index_path + " (" + (ref == d.annotations.end() ? d.digest : ref->second) + ")";
        try {
            Manifest m = read_model_manifest(dir, "", &d, blob_path, where);
            add_model(*listing, dir, m, "", base, blob_path, where, whole);
        } catch (const gguf::Error& e) {
            if (e.code() == gguf::Code::BadValue && std::string(e.what()).find("no GGUF layer") != std::string::npos) {
                spdlog::info("{}", e.what());  // an image that is not a model: not shown
                continue;
            }
            listing->add_error(base + ".gguf", e.what());
        }
    }
    return listing;
}

std::shared_ptr<TreeListing> store_listing(const std::string& dir, bool whole) {
    auto listing = std::make_shared<TreeListing>(dir);
    auto blob_path = [&](const std::string& digest) { return dir + "/blobs/sha256-" + digest.substr(7); };
    const std::string manifests = dir + "/manifests";
    for (const std::string& registry : entries(manifests)) {
        for (const std::string& ns : entries(manifests + "/" + registry)) {
            for (const std::string& model : entries(manifests + "/" + registry + "/" + ns)) {
                const std::string model_dir = manifests + "/" + registry + "/" + ns + "/" + model;
                for (const std::string& tag : entries(model_dir)) {
                    const std::string path = model_dir + "/" + tag;
                    if (!is_file(path)) continue;
                    std::string folder = registry == kOllamaRegistry ? "" : registry + "/";
                    if (ns != "library" || registry != kOllamaRegistry) folder += ns + "/";
                    const std::string base = model + "-" + tag;
                    try {
                        Manifest m = read_model_manifest(dir, path, nullptr, blob_path, path);
                        add_model(*listing, dir, m, folder, base, blob_path, path, whole);
                    } catch (const gguf::Error& e) {
                        listing->add_error(folder + base + ".gguf", e.what());
                    }
                }
            }
        }
    }
    return listing;
}

}  // namespace gguf_mount::remote::oci
