#include "remote/oci/manifest.hpp"

#include <time.h>

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "gguf/error.hpp"
#include "gguf/model/split_set.hpp"
#include "remote/oci/reference.hpp"

namespace gguf_mount::remote::oci {
namespace {

// Layer media types. Ollama: server/images.go, server/model.go; Docker model artifacts:
// docker/model-distribution types/config.go; CNCF ModelPack: specs/media-types.md.
constexpr const char* kOllamaModel = "application/vnd.ollama.image.model";
constexpr const char* kOllamaPrefix = "application/vnd.ollama.image.";
constexpr const char* kDockerGguf = "application/vnd.docker.ai.gguf.v3";
constexpr const char* kDockerPrefix = "application/vnd.docker.ai.";
constexpr const char* kModelPackWeightRaw = "application/vnd.cncf.model.weight.v1.raw";
constexpr const char* kModelPackWeight = "application/vnd.cncf.model.weight.v1.";
constexpr const char* kModelPackPrefix = "application/vnd.cncf.model.";
constexpr const char* kModelPackManifest = "application/vnd.cncf.model.manifest.v1+json";
constexpr const char* kFilepath = "org.cncf.model.filepath";
constexpr const char* kTitle = "org.opencontainers.image.title";

[[noreturn]] void bad(const std::string& where, const std::string& why) {
    throw gguf::Error(gguf::Code::BadValue, where + ": " + why);
}

bool starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
bool ends(const std::string& s, const std::string& e) {
    return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

std::string str(const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// The string-valued "annotations" of a descriptor or manifest object `j`.
std::map<std::string, std::string> annotations_of(const nlohmann::json& j) {
    std::map<std::string, std::string> out;
    if (auto a = j.find("annotations"); a != j.end() && a->is_object()) {
        for (auto it = a->begin(); it != a->end(); ++it) {
            if (it.value().is_string()) out[it.key()] = it.value().get<std::string>();
        }
    }
    return out;
}

Descriptor descriptor(const nlohmann::json& j, const std::string& where) {
    if (!j.is_object()) bad(where, "a descriptor is not a JSON object");
    Descriptor d;
    d.media_type = str(j, "mediaType");
    d.digest = str(j, "digest");
    d.artifact_type = str(j, "artifactType");
    if (!is_sha256_digest(d.digest))
        bad(where, "descriptor digest '" + d.digest.substr(0, 80) + "' is not sha256:<64 hex> (the only one read)");
    auto size = j.find("size");
    if (size == j.end() || !size->is_number_unsigned()) bad(where, "descriptor " + d.digest + " has no size");
    d.size = size->get<uint64_t>();
    d.annotations = annotations_of(j);
    return d;
}

/// The annotated name of a layer, reduced to its last path segment; "" when absent or unsafe.
std::string layer_name(const Descriptor& d) {
    for (const char* key : {kFilepath, kTitle}) {
        auto it = d.annotations.find(key);
        if (it == d.annotations.end()) continue;
        std::string n = it->second;
        const size_t slash = n.rfind('/');
        if (slash != std::string::npos) n = n.substr(slash + 1);
        if (n.empty() || n[0] == '.' || n.size() > 255 || n.find('\0') != std::string::npos) return "";
        return n;
    }
    return "";
}

bool model_config(const std::string& media_type) {
    return starts(media_type, kDockerPrefix) || starts(media_type, kModelPackPrefix) ||
           starts(media_type, kOllamaPrefix);
}

/// The suffix naming a companion of `media_type` after BASE (or the "mmproj-" prefix mark).
std::string companion_suffix(const std::string& mt) {
    const std::string kind = starts(mt, kOllamaPrefix)   ? mt.substr(std::string(kOllamaPrefix).size())
                             : starts(mt, kDockerPrefix) ? mt.substr(std::string(kDockerPrefix).size())
                                                         : std::string("file");
    if (kind == "projector" || kind == "mmproj") return "mmproj";
    if (kind == "chat.template.jinja") return ".jinja";
    return "." + kind;
}

}  // namespace

time_t created_time(const Manifest& m) noexcept {
    auto it = m.annotations.find("org.opencontainers.image.created");
    if (it == m.annotations.end()) return 0;
    // RFC 3339 date-time: full-date "T" partial-time [time-secfrac] time-offset ("Z" or +hh:mm;
    // glibc's %z reads both).
    std::tm tm{};
    const char* rest = ::strptime(it->second.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
    if (!rest) return 0;
    if (*rest == '.') {
        const char* from = ++rest;
        while (*rest >= '0' && *rest <= '9') ++rest;
        if (rest == from) return 0;
    }
    std::tm zone{};
    if (*rest == '\0') return 0;  // no time-offset: not RFC 3339
    rest = ::strptime(rest, "%z", &zone);
    if (!rest || *rest != '\0') return 0;
    const time_t t = ::timegm(&tm);
    return t == static_cast<time_t>(-1) || t <= zone.tm_gmtoff ? 0 : t - zone.tm_gmtoff;
}

std::string manifest_accept() {
    return std::string(kOciManifest) + ", " + kOciIndex + ", " + kDockerManifest + ", " + kDockerList;
}

Manifest parse_manifest(const std::string& bytes, const std::string& content_type, const std::string& where) {
    nlohmann::json j = nlohmann::json::parse(bytes, nullptr, false);
    if (!j.is_object()) bad(where, "the manifest is not a JSON object");
    auto version = j.find("schemaVersion");
    if (version == j.end() || !version->is_number_integer() || version->get<int>() != 2)
        bad(where, "not a schemaVersion 2 manifest (schema 1 manifests are not read)");
    Manifest m;
    m.media_type = str(j, "mediaType");
    if (m.media_type.empty()) {
        const std::string ct = content_type.substr(0, content_type.find(';'));
        m.media_type = !ct.empty() && ct != "application/json" && ct != "application/octet-stream"
                           ? ct
                           : (j.contains("manifests") ? kOciIndex : kOciManifest);
    }
    m.artifact_type = str(j, "artifactType");
    m.annotations = annotations_of(j);
    if (m.media_type == kOciIndex || m.media_type == kDockerList) {
        m.index = true;
        auto list = j.find("manifests");
        if (list == j.end() || !list->is_array()) bad(where, "an index without a manifests list");
        for (const auto& e : *list) m.manifests.push_back(descriptor(e, where));
        return m;
    }
    if (m.media_type != kOciManifest && m.media_type != kDockerManifest)
        bad(where, "manifest media type '" + m.media_type.substr(0, 120) + "' is not an image manifest or index");
    if (auto c = j.find("config"); c != j.end()) m.config = descriptor(*c, where);
    auto layers = j.find("layers");
    if (layers == j.end() || !layers->is_array()) bad(where, "a manifest without a layers list");
    for (const auto& l : *layers) m.layers.push_back(descriptor(l, where));
    return m;
}

LayerRole layer_role(const Descriptor& l) {
    const std::string& mt = l.media_type;
    if (mt == kOllamaModel || mt == kDockerGguf) return LayerRole::Weights;
    if (mt == kModelPackWeightRaw) {
        const std::string n = layer_name(l);
        return n.empty() || ends(n, ".gguf") ? LayerRole::Weights : LayerRole::Companion;
    }
    if (starts(mt, kModelPackWeight) && mt.find(".tar") != std::string::npos) return LayerRole::Packed;
    if (starts(mt, kOllamaPrefix)) {
        const std::string kind = mt.substr(std::string(kOllamaPrefix).size());
        if (kind == "projector" || kind == "template" || kind == "params" || kind == "system" || kind == "license")
            return LayerRole::Companion;
        return LayerRole::Ignored;
    }
    if (starts(mt, kDockerPrefix)) {
        const std::string kind = mt.substr(std::string(kDockerPrefix).size());
        if (kind == "mmproj" || kind == "chat.template.jinja" || kind == "license") return LayerRole::Companion;
        return LayerRole::Ignored;
    }
    if (starts(mt, kModelPackPrefix) && ends(mt, ".raw")) return LayerRole::Companion;  // doc, code, weight.config
    if (starts(mt, kModelPackPrefix) && mt.find(".tar") != std::string::npos) return LayerRole::Ignored;
    return LayerRole::Ignored;
}

Descriptor select_model_manifest(const Manifest& index, const std::function<std::string(const Descriptor&)>& fetch,
                                 const std::string& where) {
    if (index.manifests.empty()) bad(where, "the index lists no manifest");
    if (index.manifests.size() == 1) return index.manifests.front();
    for (const Descriptor& d : index.manifests) {
        if (d.artifact_type == kModelPackManifest || model_config(d.artifact_type)) return d;
    }
    std::set<std::string> seen;
    size_t looked = 0;
    for (const Descriptor& d : index.manifests) {
        if (++looked > 16) break;
        Manifest m = parse_manifest(fetch(d), d.media_type, where + " (" + d.digest + ")");
        if (m.index) continue;
        if (model_config(m.config.media_type) && !starts(m.config.media_type, kOllamaPrefix)) return d;
        for (const Descriptor& l : m.layers) {
            if (layer_role(l) == LayerRole::Weights) return d;
            seen.insert(l.media_type);
        }
        seen.insert(m.config.media_type);
    }
    std::string types;
    for (const std::string& t : seen) types += (types.empty() ? "" : ", ") + t;
    bad(where, "no manifest of the index is a model (media types: " + types + ")");
}

ModelFiles model_files(const Manifest& m, const Naming& naming, const std::string& where) {
    ModelFiles out;
    std::vector<Descriptor> weights;
    std::vector<std::string> types;
    for (const Descriptor& l : m.layers) {
        types.push_back(l.media_type);
        switch (layer_role(l)) {
        case LayerRole::Weights: weights.push_back(l); break;
        case LayerRole::Packed:
            out.refused.push_back(where + ": layer " + l.digest + " is " + l.media_type +
                                  ": an archive layer cannot be range-read (only .raw weight layers are served)");
            break;
        case LayerRole::Companion: {
            ModelFile f;
            f.layer = l;
            const std::string annotated = layer_name(l);
            const std::string suffix = companion_suffix(l.media_type);
            if (!annotated.empty()) {
                f.name = naming.use_layer_names ? annotated : naming.base + "." + annotated;
            } else if (suffix == "mmproj") {
                f.name = "mmproj-" + naming.base + ".gguf";
            } else {
                f.name = naming.base + suffix;
            }
            out.companions.push_back(std::move(f));
            break;
        }
        case LayerRole::Ignored: break;
        }
    }
    if (weights.empty()) {
        std::string list;
        for (const std::string& t : types) list += (list.empty() ? "" : ", ") + (t.empty() ? "(none)" : t);
        bad(where, "no GGUF layer (media types: " + (list.empty() ? std::string("no layers") : list) + ")" +
                       (out.refused.empty() ? "" : "; archive weight layers cannot be range-read"));
    }
    // Several weight layers: ordered by their shard names when every one has one of one
    // prefix and count; else in layer order.
    std::string prefix = naming.base;
    if (weights.size() > 1) {
        std::vector<std::pair<uint32_t, Descriptor>> named;
        std::string seen_prefix;
        bool by_name = true;
        for (const Descriptor& d : weights) {
            auto sn = gguf::parse_shard_name(layer_name(d));
            if (!sn || sn->count != weights.size() || (!seen_prefix.empty() && sn->prefix != seen_prefix)) {
                by_name = false;
                break;
            }
            seen_prefix = sn->prefix;
            named.emplace_back(sn->index, d);
        }
        if (by_name) {
            std::stable_sort(named.begin(), named.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
            for (size_t i = 0; i < named.size(); ++i) {
                if (named[i].first != i + 1) by_name = false;  // a duplicate or missing number
            }
        }
        if (by_name) {
            for (size_t i = 0; i < named.size(); ++i) weights[i] = named[i].second;
            if (naming.use_layer_names) prefix = seen_prefix;
        }
        const auto count = static_cast<uint32_t>(weights.size());
        for (uint32_t i = 0; i < count; ++i) {
            out.weights.push_back(ModelFile{gguf::shard_path(prefix, i + 1, count), weights[i]});
        }
    } else {
        const std::string annotated = layer_name(weights[0]);
        out.weights.push_back(ModelFile{
            naming.use_layer_names && ends(annotated, ".gguf") ? annotated : naming.base + ".gguf", weights[0]});
    }
    // A companion whose name a weight file or an earlier companion has is dropped.
    std::set<std::string> names;
    for (const ModelFile& f : out.weights) names.insert(f.name);
    std::vector<ModelFile> kept;
    for (ModelFile& f : out.companions) {
        if (names.insert(f.name).second) kept.push_back(std::move(f));
    }
    out.companions = std::move(kept);
    return out;
}

}  // namespace gguf_mount::remote::oci
