// SOURCE, resolved once for every command that takes one (mount, check, prefetch, merge): which
// kind of source the command-line string names, the name it has in messages, and what the
// command reads from it (a catalog, the listing of a directory, the first-shard URL and the
// remote context of a set).
//
// Adding a scheme is: its kinds in SourceKind, one line in classify() and one
// connect_*() function in cli/source.cpp, plus its listing and source classes in remote/ (a
// gguf::DirectoryListing for a folder, a gguf::ByteSource for a file). The commands do not
// change unless they treat the new kinds differently from the existing ones.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "gguf/model/catalog.hpp"

#ifdef GGUF_MOUNT_WITH_REMOTE
#include "remote/hub_listing.hpp"
#include "remote/oci/reference.hpp"
#include "remote/oci/signer.hpp"
#include "remote/s3/signer.hpp"
#include "remote/source.hpp"
#endif

namespace gguf_mount::cli {

/// What a SOURCE string names.
enum class SourceKind {
    LocalDirectory,  ///< a directory on this machine (a model directory)
    /// Any other local path: a first shard, a set joined with cat, a single .gguf file (the
    /// model rules tell which when it is opened), or a path that is not there
    /// (ResolvedSource::local_problem says so).
    LocalFile,
    HttpFile,       ///< http(s)://HOST/PATH/NAME-00001-of-N.gguf: a first shard (no '/' at the end)
    HttpDirectory,  ///< http(s)://HOST/PATH/ (ends in '/', before any query): its index pages
    HubRepo,        ///< hf://ORG/REPO[@REVISION][/FOLDER]: the tree of a Hugging Face Hub repo
    HubFile,        ///< hf://ORG/REPO[@REVISION]/PATH ending in .gguf (remote::hub_names_file)
    S3Object,       ///< s3://BUCKET/KEY-00001-of-N.gguf: a first shard (the key raw, as the AWS CLI takes it)
    S3Prefix,       ///< s3://BUCKET/PREFIX/ or s3://BUCKET: its ListObjectsV2 listing, sub-prefixes as folders
    /// oci://REGISTRY/REPO[:TAG|@DIGEST] or ollama://[REG/][NS/]MODEL[:TAG]: one model manifest
    /// (remote/oci/), pinned to its digest at connect()
    OciModel,
    OciLayout,    ///< a local OCI image layout (oci-layout + index.json + blobs/): its models
    OllamaStore,  ///< a local Ollama models store (manifests/ + blobs/): its models per tag
};

/// How a command resolves its SOURCE.
struct SourceOptions {
#ifdef GGUF_MOUNT_WITH_REMOTE
    /// The remote settings (read_remote_options) of the context connect() opens.
    remote::RemoteOptions remote;
#endif
    /// The command reads one file (merge): an hf:// folder is refused by pin() with the one
    /// line saying which file to give (remote::remote_source_url).
    bool files_only = false;
    /// An hf:// file: pin() also lists its folder at the pinned commit for the sha256 the Hub
    /// gives of each LFS file (ResolvedSource::sha256s; merge and prefetch check the bytes, a
    /// mount checks a shard that a reader reads in order to its end).
    bool hub_digests = false;
    /// A local OCI layout or Ollama store: every blob is checked whole against its digest as it
    /// is read (check, merge: the command reports a mismatch in its one line).
    bool verify_blobs = false;
};

/// A SOURCE string resolved: its kind and names right away (resolve_source, no network), then
/// what the command reads from it (pin(), connect(), catalog()). Errors are gguf::Error (or
/// what remote/ throws) with one line naming the source; no message holds a URL's userinfo or
/// query, or a token.
struct ResolvedSource {
    SourceKind kind = SourceKind::LocalFile;
    std::string argument;  ///< SOURCE as given (a URL may hold credentials or a signed query: never shown)
    /// SOURCE in messages: a local path without trailing '/'; an http(s) URL without userinfo,
    /// query and fragment (remote::url_for_message); an hf:// or s3:// source as given.
    std::string shown;
    /// The name of a mount of it (logs, the default fsname): a local directory by its real path,
    /// a local file by the real path of its directory and the name given (a Hugging Face
    /// snapshot link points to blobs/<sha256>, but the shard name is what counts); a remote
    /// SOURCE as `shown`.
    std::string canonical;
    /// Local only: the path (the argument without trailing '/', "/" kept).
    std::string path;
    /// Local only: "" when the argument (as given) is a directory or a regular file, else why
    /// not (strerror of stat(2), or "not a directory or a regular file").
    std::string local_problem;
    SourceOptions options;

    bool remote() const noexcept {
        return kind != SourceKind::LocalDirectory && kind != SourceKind::LocalFile && !oci_local();
    }
    /// A local OCI layout or Ollama store: a listing made of its manifests, blobs read in place.
    bool oci_local() const noexcept { return kind == SourceKind::OciLayout || kind == SourceKind::OllamaStore; }
    /// True for the kinds whose catalog is a directory walk (LocalDirectory, HttpDirectory,
    /// HubRepo); the others name one file or set.
    bool directory() const noexcept {
        return kind == SourceKind::LocalDirectory || kind == SourceKind::HttpDirectory || kind == SourceKind::HubRepo ||
               kind == SourceKind::S3Prefix || kind == SourceKind::OciModel || oci_local();
    }

#ifdef GGUF_MOUNT_WITH_REMOTE
    /// Remote only, network for an hf:// file: for hf:// reads HF_ENDPOINT and the Hub token
    /// (remote::hub_setup: `hub`, the token into options.remote.http for the endpoint only)
    /// and sets `url`: an http(s) SOURCE itself, an hf:// file the resolve URL at the commit
    /// its revision names now (remote::remote_source_url; with hub_digests also `sha256s`).
    /// For s3:// resolves the S3 configuration and, unless offline or --no-sign-request, the
    /// credentials (remote/s3/config.hpp: one line naming what is missing), puts the signer
    /// into options.remote.http (`s3_signer`), and sets `url` of an S3Object to its endpoint
    /// URL. Done once; throws as those functions do.
    void pin();
    /// pin(), then the remote context (the block cache; once), then the listing of a folder:
    /// an http(s) directory's index pages (nothing fetched yet), an hf:// folder's tree pinned
    /// to one commit now (`commit`, `tree_pages`). Nothing for local kinds. Throws as pin(),
    /// remote::RemoteContext and remote::HubListing::pin do.
    void connect();

    /// After pin(): the http(s) URL read (may hold a query: never shown); "" for an hf:// folder.
    std::string url;
    std::shared_ptr<remote::RemoteContext> context;          ///< after connect()
    std::shared_ptr<gguf::DirectoryListing> listing;         ///< folder kinds, after connect()
    std::map<std::string, std::string> sha256s;  ///< hub_digests: shown resolve URL -> lfs.oid
    remote::HubSetup hub;                        ///< HubRepo after pin()
    std::shared_ptr<const remote::s3::S3Signer> s3_signer;  ///< s3:// after pin()
    remote::s3::S3Uri s3_uri;                               ///< s3:// after pin()
    std::string commit;                          ///< HubRepo after connect(): the pinned commit
    size_t tree_pages = 0;                       ///< HubRepo after connect(): tree pages fetched
    remote::oci::Reference oci_ref;              ///< OciModel after pin()
    std::shared_ptr<const remote::oci::RegistrySigner> oci_signer;  ///< OciModel after pin()
    std::string oci_digest;                      ///< OciModel after connect(): the pinned manifest digest
    /// OciModel after connect(): the model's path in the catalog. OciLayout, OllamaStore: the
    /// model named by SOURCE DIR/PATH (PATH a mount of DIR shows), "" for SOURCE DIR.
    std::string oci_model;
#endif

    /// What a mount shows, built afresh at each call (connect() first for remote kinds): a
    /// local path by gguf::build_catalog(path); a folder by build_catalog(listing); a remote
    /// file by its set (remote::remote_set_catalog: one merged entry; the shards in `sha256s`
    /// checked by an in-order reader, RemoteSource::expect_sha256). The builder keeps what
    /// it needs (listing, context), not this object. Throws what those throw.
    std::function<gguf::Catalog()> catalog_builder(const gguf::CatalogOptions& copt);
    /// catalog_builder(copt)(), once.
    gguf::Catalog catalog(const gguf::CatalogOptions& copt);

private:
    bool pinned_ = false;
};

/// Resolves `source` with `options`: its kind and names, without network and without
/// throwing for a bad SOURCE (a path that is not there: local_problem; an hf:// source that
/// does not parse: kind HubRepo, and pin() throws its one-line reason). In a build without
/// remote support every SOURCE is a local path. Throws only std::bad_alloc.
ResolvedSource resolve_source(const std::string& source, const SourceOptions& options);

/// realpath(3) of `path`, or `path` itself when it cannot be resolved (missing, no permission).
std::string real_path(const std::string& path);

}  // namespace gguf_mount::cli
