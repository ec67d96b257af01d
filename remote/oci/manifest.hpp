// Model manifests: the JSON of an OCI image manifest or index, a Docker v2 manifest or manifest
// list (OCI image-spec v1.1 manifest.md and image-index.md; Docker "Image Manifest V2, Schema
// 2"), and which of their layers make a model: GGUF weights (Ollama, Docker model artifacts,
// CNCF ModelPack) and the companion files beside them. Pure: no network, no files.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace gguf_mount::remote::oci {

inline constexpr const char* kOciManifest = "application/vnd.oci.image.manifest.v1+json";
inline constexpr const char* kOciIndex = "application/vnd.oci.image.index.v1+json";
inline constexpr const char* kDockerManifest = "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr const char* kDockerList = "application/vnd.docker.distribution.manifest.list.v2+json";
/// The Accept header of a manifest GET: every kind above.
std::string manifest_accept();

/// A content descriptor (image-spec descriptor.md).
struct Descriptor {
    std::string media_type;
    std::string digest;  ///< "sha256:HEX" (other algorithms are refused when parsed)
    uint64_t size = 0;
    std::string artifact_type;
    std::map<std::string, std::string> annotations;
};

/// A parsed manifest or index.
struct Manifest {
    std::string media_type;  ///< one of the four above
    bool index = false;      ///< an OCI index or a Docker manifest list: `manifests` is set
    std::string artifact_type;
    Descriptor config;
    std::vector<Descriptor> layers;     ///< manifests only
    std::vector<Descriptor> manifests;  ///< indexes only
    std::map<std::string, std::string> annotations;  ///< the manifest's own (string values only)
};

/// Seconds since the epoch of the `org.opencontainers.image.created` annotation of `m`
/// (image-spec annotations.md: "date and time on which the image was built, conforming to
/// RFC 3339"), e.g. "2025-04-01T09:30:00Z", "2025-04-01T11:30:00.123+02:00"; 0 when it is
/// absent or not such a date and time. Never throws.
time_t created_time(const Manifest& m) noexcept;

/// Parses manifest bytes. `content_type`: the answer's Content-Type ("" for a file), used when
/// the JSON has no mediaType. Throws gguf::Error(BadValue) "WHERE: why" (not JSON, schemaVersion
/// not 2, a descriptor without a sha256 digest or size, an unknown media type).
Manifest parse_manifest(const std::string& bytes, const std::string& content_type, const std::string& where);

/// Of an index, the entry of the model manifest: the one entry whose artifactType is a model's
/// (ModelPack "application/vnd.cncf.model.manifest.v1+json", Docker or Ollama kinds), else the
/// first (in order, at most 16 looked at) whose manifest, fetched with `fetch(descriptor)` (the
/// manifest's bytes), has a model config media type or a GGUF layer; an index of one entry is
/// that entry. Throws gguf::Error(BadValue) "WHERE: ..." naming the media types seen when none
/// is a model, and what `fetch` throws.
Descriptor select_model_manifest(const Manifest& index, const std::function<std::string(const Descriptor&)>& fetch,
                                 const std::string& where);

/// What a layer is to a model.
enum class LayerRole {
    Weights,    ///< a GGUF file (a whole model or one shard of a split set)
    Companion,  ///< a file served beside the model (projector, template, license, ...)
    Packed,     ///< weights in a tar, tar+gzip or tar+zstd layer: cannot be range-read
    Ignored,    ///< anything else (configs, other artifacts)
};

/// The role of `layer` (media types above; ModelPack weight.v1.raw is weights when its
/// org.cncf.model.filepath ends in ".gguf" or is absent, a companion otherwise).
LayerRole layer_role(const Descriptor& layer);

/// One file a model manifest shows.
struct ModelFile {
    std::string name;  ///< a path relative to the model's folder ("gemma3.gguf", "gemma3.template")
    Descriptor layer;
};

/// The files of one model manifest, as a folder shows them.
struct ModelFiles {
    /// The GGUF weight layers in shard order under shard names ("BASE-00001-of-00003.gguf"),
    /// or the one GGUF layer ("BASE.gguf"); the catalog merges a set (gguf/model/catalog.hpp).
    std::vector<ModelFile> weights;
    std::vector<ModelFile> companions;
    std::vector<std::string> refused;  ///< one line per packed (tar) weight layer
};

/// How model_files names what it finds.
struct Naming {
    /// The name of the model without ".gguf": the repository's last component ("gemma3") for
    /// a registry reference, "MODEL-TAG" in a store or layout of several models.
    std::string base;
    /// Use the layers' org.cncf.model.filepath (or org.opencontainers.image.title) names when
    /// they are safe single names: a registry mount of one model. A store prefixes every name
    /// with `base` instead, so that its models never clash.
    bool use_layer_names = true;
};

/// The files of `m`. Several GGUF layers are one split set: ordered by their names (filepath
/// or title annotations) when every one is a shard name of one prefix and count
/// (PREFIX-NNNNN-of-MMMMM.gguf; the names decide, whatever the layer order), else in layer
/// order; named PREFIX-i-of-N.gguf after the names' prefix (use_layer_names) or `base`. One GGUF
/// layer is its annotated name (use_layer_names, ending in .gguf) or BASE.gguf. Companions:
/// their annotated name (use_layer_names) or BASE + a suffix of their kind (".template",
/// ".params", ".system", ".license", ".jinja", "mmproj-" prefix for projectors). Throws
/// gguf::Error(BadValue) "WHERE: no GGUF layer (media types: ...)" when there is no weights
/// layer (packed ones named as refused).
ModelFiles model_files(const Manifest& m, const Naming& naming, const std::string& where);

}  // namespace gguf_mount::remote::oci
