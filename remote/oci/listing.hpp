// What an OCI source shows, as a gguf::DirectoryListing: a fixed tree of files made from model
// manifests (remote/oci/manifest.hpp), built once when the source is opened (a registry
// reference pinned to its manifest digest; a local layout or Ollama store read at that moment).
// The gguf/ catalog applies its rules to it: shard-named weight layers become one merged file.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gguf/model/catalog.hpp"
#include "remote/context.hpp"
#include "remote/oci/manifest.hpp"
#include "remote/oci/reference.hpp"

namespace gguf_mount::remote::oci {

/// A listing of files known in advance: each path ("a/b/x.gguf") is a file item, its parent
/// folders are directory items. Thread-safe (read-only after construction).
class TreeListing final : public gguf::DirectoryListing {
public:
    explicit TreeListing(std::string root) : root_(std::move(root)) {}
    /// Adds a file at `path` ('/'-separated, no empty or dot-leading segment). A path already
    /// added is kept as first added.
    void add(const std::string& path, gguf::FilePart part);
    /// Adds a file that cannot be served (the catalog shows a Problem with `error`).
    void add_error(const std::string& path, const std::string& error);

    std::vector<Item> list(const std::string& path) override;
    std::string root() const override { return root_; }
    /// Number of files added.
    size_t files() const noexcept { return files_; }

private:
    std::string root_;
    std::map<std::string, std::vector<Item>> dirs_;  // folder path -> its items
    size_t files_ = 0;
};

/// A registry reference pinned: the manifest digest of its tag (or the digest given, checked
/// against the manifest's bytes), the manifest (an index narrowed to its model manifest).
struct PinnedManifest {
    std::string digest;  ///< "sha256:HEX" of the model manifest's bytes
    std::string index_digest;  ///< the index's digest when the reference named an index, else ""
    Manifest manifest;
    /// The files' mtime, seconds since the epoch: the manifest's org.opencontainers.image.created
    /// (remote/oci/manifest.hpp created_time; else the index's), else the time this cache first
    /// stored the manifest's bytes (kept for the next mount), else now. Never 0.
    time_t created = 0;
    /// Set by registry_listing: the model's path in the catalog ("kvzoo.gguf": a set's merged
    /// name, or the one GGUF layer's name).
    std::string model_file;
};

/// GETs the manifest of `ref` once through the context's client (whose signer adds Accept and
/// Authorization) and checks it: a digest reference must hash to its digest, an index is
/// narrowed (select_model_manifest) and its chosen child checked against its descriptor. The
/// bytes are kept in the cache under the manifest URL; with --offline they are read from there
/// (Io with ENOENT when absent). Throws gguf::Error(Io) "REGISTRY/REPO:REF: ..." (the registry's
/// error code: RegistrySigner::explain), BadValue for a manifest that does not parse.
PinnedManifest pin_manifest(const std::shared_ptr<RemoteContext>& context, const Reference& ref);

/// The files of one registry model: its weight and companion layers as RemoteSources of their
/// blob URLs (opened from the manifest's size and digest, no request; cached by blob digest;
/// each checked against its digest by a reader that reads it in order to its end, and whole by
/// prefetch and merge). Root name: "oci://REGISTRY/REPO@DIGEST". Throws as pin_manifest and
/// model_files do.
std::shared_ptr<TreeListing> registry_listing(const std::shared_ptr<RemoteContext>& context, const Reference& ref,
                                              PinnedManifest* pinned = nullptr);

/// True when `dir` is an OCI image layout (holds an "oci-layout" file and index.json).
bool is_oci_layout(const std::string& dir);
/// True when `dir` is an Ollama models store (holds manifests/ and blobs/ folders).
bool is_ollama_store(const std::string& dir);

/// The models of an OCI image layout (image-spec image-layout.md): each index.json entry
/// with an org.opencontainers.image.ref.name annotation (else its digest's first 12 hex digits)
/// whose manifest is a model, as NAME.gguf (REF.gguf for a plain tag, or MODEL-TAG.gguf for
/// "MODEL:TAG"). Blobs are read in place (blobs/sha256/HEX), never copied. Entries that are
/// not models are skipped; an entry whose blobs are missing or whose manifest does not parse is
/// an error item. Blobs are oci::LocalBlobSources (remote/oci/local_blob.hpp): checked against
/// their digest by a reader in order, and every byte with `whole` (check, merge). Manifests named
/// by a digest are checked against it. Throws gguf::Error(Io/BadValue) naming DIR/index.json when
/// it cannot be read.
std::shared_ptr<TreeListing> layout_listing(const std::string& dir, bool whole = false);

/// The models of an Ollama store (Ollama's server/modelpath.go layout:
/// manifests/REGISTRY/NAMESPACE/MODEL/TAG and blobs/sha256-HEX): each tag's model as
/// MODEL-TAG.gguf under NAMESPACE/ (the default registry and "library/" dropped; another
/// registry is a folder: REGISTRY/NAMESPACE/MODEL-TAG.gguf). Blobs are read in place and checked
/// as layout_listing's are.
std::shared_ptr<TreeListing> store_listing(const std::string& dir, bool whole = false);

}  // namespace gguf_mount::remote::oci
