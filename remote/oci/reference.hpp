// OCI references: what an oci:// or ollama:// SOURCE names (a registry, a repository, a tag or
// a manifest digest) and the distribution API URLs of it (OCI distribution-spec v1.1, "Pulling
// manifests" and "Pulling blobs": /v2/<name>/manifests/<reference>, /v2/<name>/blobs/<digest>).
#pragma once

#include <string>

namespace gguf_mount::remote::oci {

/// The default registry of ollama:// references (Ollama's server/images.go: DefaultRegistry).
inline constexpr const char* kOllamaRegistry = "registry.ollama.ai";
/// Docker Hub: the name "docker.io" is served by this host (Docker's reference normalisation,
/// distribution/reference normalize.go: "docker.io" -> "registry-1.docker.io" for the API).
inline constexpr const char* kDockerHubRegistry = "registry-1.docker.io";

/// One parsed reference.
struct Reference {
    std::string scheme;      ///< "oci" or "ollama": how it was written (messages)
    std::string registry;    ///< host[:port] as given ("[::1]:5000" keeps its brackets)
    std::string repository;  ///< "library/gemma3": lowercase path components
    std::string tag;         ///< "latest" unless a digest was given; "" with a digest
    std::string digest;      ///< "sha256:<64 lowercase hex>", or ""
    bool plain_http = false; ///< http:// instead of https:// (--plain-http)

    /// "http(s)://REGISTRY".
    std::string base_url() const;
    /// "BASE/v2/REPOSITORY/manifests/TAG-or-DIGEST" (`reference` overrides the tag/digest).
    std::string manifest_url(const std::string& reference = "") const;
    /// "BASE/v2/REPOSITORY/blobs/DIGEST".
    std::string blob_url(const std::string& digest) const;
    /// The tag or the digest.
    const std::string& reference() const { return digest.empty() ? tag : digest; }
    /// "REGISTRY/REPOSITORY:TAG" or "REGISTRY/REPOSITORY@DIGEST": the name in messages.
    std::string shown() const;
    /// The repository's last path component ("gemma3"): the default name of its model.
    std::string last_component() const;
};

/// True when `s` starts with "oci://" or "ollama://".
bool is_oci_source(const std::string& s);

/// Parses `source`:
///   oci://REGISTRY[:PORT]/REPOSITORY[:TAG|@sha256:DIGEST]    (default tag "latest")
///   ollama://[REGISTRY/][NAMESPACE/]MODEL[:TAG]  (registry.ollama.ai, "library", "latest";
///       the parts fill from the right as Ollama's model names do: MODEL, NS/MODEL, REG/NS/MODEL)
/// The registry "docker.io" (and "index.docker.io") is registry-1.docker.io, and there a
/// one-component repository NAME is "library/NAME" (Docker's normalisation). Repository
/// components follow the distribution-spec grammar ([a-z0-9]+ joined by '.', '_', '__' or
/// '-'), tags [A-Za-z0-9_][A-Za-z0-9._-]{0,127}, digests sha256 with 64 lowercase hex digits.
/// Throws gguf::Error(BadArgument) with one line naming `source` and what is wrong.
Reference parse_reference(const std::string& source, bool plain_http);

/// True for "sha256:" + 64 lowercase hex digits.
bool is_sha256_digest(const std::string& digest);

}  // namespace gguf_mount::remote::oci
