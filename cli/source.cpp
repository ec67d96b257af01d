#include "cli/source.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <spdlog/spdlog.h>

#include "common/text.hpp"
#include "gguf/bytes/file_io.hpp"
#include "gguf/error.hpp"

#ifdef GGUF_MOUNT_WITH_REMOTE
#include "remote/catalog.hpp"
#include "remote/http.hpp"
#include "remote/hub.hpp"
#include "remote/listing.hpp"
#include "remote/oci/listing.hpp"
#include "remote/s3/listing.hpp"
#include "remote/url_parts.hpp"
#endif

namespace gguf_mount::cli {

namespace {

/// A local path: kind from stat(2) of the argument as given ("x.gguf/" is not a file).
void classify_local(ResolvedSource* s) {
    s->path = s->argument;
    while (s->path.size() > 1 && s->path.back() == '/') s->path.pop_back();
    s->shown = s->path;
    struct stat st {};
    if (::stat(s->argument.c_str(), &st) != 0) {
        s->local_problem = std::strerror(errno);
    } else if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
        s->local_problem = "not a directory or a regular file";
    }
    s->kind = S_ISDIR(st.st_mode) && s->local_problem.empty() ? SourceKind::LocalDirectory : SourceKind::LocalFile;
#ifdef GGUF_MOUNT_WITH_REMOTE
    if (s->kind == SourceKind::LocalDirectory) {
        if (remote::oci::is_oci_layout(s->path)) s->kind = SourceKind::OciLayout;
        else if (remote::oci::is_ollama_store(s->path)) s->kind = SourceKind::OllamaStore;
        else if (remote::oci::is_ollama_store(s->path + "/models"))  // ~/.ollama given for ~/.ollama/models
            spdlog::warn("{} is an Ollama store: give it as SOURCE to see its models by name ({} itself is "
                         "served as a plain folder)", gguf::quote_name(s->path + "/models"), gguf::quote_name(s->path));
    } else if (!s->local_problem.empty()) {
        // DIR/NAME.gguf of a layout or store: the model a mount of DIR shows as NAME.gguf.
        for (std::string dir = gguf::dir_name(s->path); !dir.empty() && dir != "/" && dir != ".";
             dir = gguf::dir_name(dir)) {
            const bool layout = remote::oci::is_oci_layout(dir);
            if (!layout && !remote::oci::is_ollama_store(dir)) continue;
            s->kind = layout ? SourceKind::OciLayout : SourceKind::OllamaStore;
            s->oci_model = s->path.substr(dir.size() + 1);
            s->path = s->shown = dir;
            s->local_problem.clear();
            s->canonical = real_path(dir);
            return;
        }
    }
#endif
    s->canonical = s->kind == SourceKind::LocalDirectory
                       ? real_path(s->argument)
                       : real_path(gguf::dir_name(s->argument)) + "/" + gguf::base_name(s->argument);
}

#ifdef GGUF_MOUNT_WITH_REMOTE
/// True when the URL's path (before any query or fragment) ends in '/': a directory.
bool names_directory(const std::string& url) {
    const std::string path_part = url.substr(0, url.find_first_of("?#"));
    return !path_part.empty() && path_part.back() == '/';
}

/// hf://: a file when its PATH ends in .gguf, else a folder; a source that does not parse is
/// taken as a folder here and refused by pin() (hub_setup) with its reason.
SourceKind hub_kind(const std::string& source) {
    try {
        return remote::hub_names_file(remote::parse_hub_source(source)) ? SourceKind::HubFile : SourceKind::HubRepo;
    } catch (const std::exception&) {
        return SourceKind::HubRepo;
    }
}

/// The scheme branches of connect(): each opens the listing of its folder kind.
void connect_http(ResolvedSource* s) {
    if (s->kind == SourceKind::HttpDirectory) {
        s->listing = std::make_shared<remote::HttpDirectoryListing>(s->context, s->argument);
    }
}

void connect_hub(ResolvedSource* s) {
    if (s->kind != SourceKind::HubRepo) return;
    // Pinned to one commit now, walked like a directory.
    auto listing = std::make_shared<remote::HubListing>(s->context, s->hub.source, s->hub.endpoint,
                                                        s->hub.token_source);
    s->commit = listing->pin();
    s->tree_pages = listing->pages();
    s->listing = listing;
}

void connect_s3(ResolvedSource* s) {
    if (s->kind != SourceKind::S3Prefix) return;
    s->listing = std::make_shared<remote::s3::S3Listing>(s->context, s->s3_signer, s->s3_uri.bucket, s->s3_uri.key);
}

void connect_oci(ResolvedSource* s) {
    if (s->kind != SourceKind::OciModel) return;
    remote::oci::PinnedManifest pinned;
    s->listing = remote::oci::registry_listing(s->context, s->oci_ref, &pinned);
    s->oci_digest = pinned.digest;
    s->oci_model = pinned.model_file;
}

/// pin() of an oci:// or ollama:// SOURCE: the reference, the registry's authorization (asked
/// once, unless offline) and the signer of the context's client.
void pin_oci(ResolvedSource* s) {
    remote::RemoteOptions& ro = s->options.remote;
    s->oci_ref = remote::oci::parse_reference(s->argument, ro.plain_http);
    auto auth = std::make_shared<remote::oci::Auth>(s->oci_ref, ro.http);
    if (!ro.offline) auth->discover();
    auto signer = std::make_shared<const remote::oci::RegistrySigner>(s->oci_ref, auth);
    ro.http.signer = signer;
    // A registry mirror (pull-through cache) answers whole blobs while it fills its copy.
    ro.http.retry_whole_answers = true;
    s->oci_signer = signer;
}

/// pin() of an s3:// SOURCE: configuration, credentials (early, for a clear error before any
/// request), the signer of the context's client, and the object URL of a first shard.
void pin_s3(ResolvedSource* s) {
    remote::RemoteOptions& ro = s->options.remote;
    s->s3_uri = remote::s3::parse_s3_uri(s->argument);
    remote::s3::S3Config config;
    auto credentials = std::make_shared<remote::s3::CredentialSource>(ro.s3);
    try {
        config = remote::s3::resolve_config(ro.s3);
        if (config.sign && !ro.offline) credentials->get();
    } catch (const gguf::Error& e) {
        throw gguf::Error(e.code(), s->shown + ": " + e.what(), e.sys_errno());
    }
    auto signer = std::make_shared<const remote::s3::S3Signer>(config, credentials);
    ro.http.signer = signer;
    s->s3_signer = signer;
    if (s->kind == SourceKind::S3Object) s->url = signer->object_url(s->s3_uri.bucket, s->s3_uri.key);
}
#endif

/// The kind and names of `s->argument` (no network).
void classify(ResolvedSource* s) {
#ifdef GGUF_MOUNT_WITH_REMOTE
    const std::string& a = s->argument;
    if (a.rfind("hf://", 0) == 0) {
        s->kind = hub_kind(a);
        s->shown = s->canonical = a;
        return;
    }
    if (remote::is_http_url(a)) {
        s->kind = names_directory(a) ? SourceKind::HttpDirectory : SourceKind::HttpFile;
        s->shown = s->canonical = remote::url_for_message(a);
        return;
    }
    if (remote::oci::is_oci_source(a)) {
        s->kind = SourceKind::OciModel;
        s->shown = s->canonical = a;
        return;
    }
    if (a.rfind("s3://", 0) == 0) {
        // s3://BUCKET, s3://BUCKET/PREFIX/: a folder; anything else an object (a first shard).
        const size_t slash = a.find('/', 5);
        const bool prefix = slash == std::string::npos || a.back() == '/';
        s->kind = prefix ? SourceKind::S3Prefix : SourceKind::S3Object;
        s->shown = s->canonical = a;
        return;
    }
#endif
    classify_local(s);
}

}  // namespace

std::string real_path(const std::string& path) {
    std::unique_ptr<char, decltype(&std::free)> r(::realpath(path.c_str(), nullptr), &std::free);
    return r ? std::string(r.get()) : path;
}

ResolvedSource resolve_source(const std::string& source, const SourceOptions& options) {
    ResolvedSource s;
    s.argument = source;
    s.options = options;
    classify(&s);
    return s;
}

#ifdef GGUF_MOUNT_WITH_REMOTE
void ResolvedSource::pin() {
    if (pinned_ || !remote()) return;
    if (kind == SourceKind::HubFile || (kind == SourceKind::HubRepo && options.files_only)) {
        // hf://ORG/REPO[@REV]/PATH/NAME-00001-of-N.gguf: the set of its resolve URL at the
        // commit the revision names now, read like an http(s) first-shard URL (a folder is
        // refused here for a command that reads one file; the token set up as hub_setup does).
        url = remote::remote_source_url(argument, &options.remote, options.hub_digests ? &sha256s : nullptr);
    } else if (kind == SourceKind::HubRepo) {
        hub = remote::hub_setup(argument, &options.remote.http);
    } else if (kind == SourceKind::S3Object || kind == SourceKind::S3Prefix) {
        pin_s3(this);
    } else if (kind == SourceKind::OciModel) {
        pin_oci(this);
    } else {
        url = argument;  // http(s)
    }
    pinned_ = true;
}

void ResolvedSource::connect() {
    if (!remote() || context) return;
    pin();
    context = std::make_shared<remote::RemoteContext>(options.remote);
    switch (kind) {
    case SourceKind::HttpFile:
    case SourceKind::HttpDirectory: connect_http(this); break;
    case SourceKind::HubFile:
    case SourceKind::HubRepo: connect_hub(this); break;
    case SourceKind::S3Object:
    case SourceKind::S3Prefix: connect_s3(this); break;
    case SourceKind::OciModel: connect_oci(this); break;
    default: break;
    }
}
#endif

std::function<gguf::Catalog()> ResolvedSource::catalog_builder(const gguf::CatalogOptions& copt) {
#ifdef GGUF_MOUNT_WITH_REMOTE
    if (remote()) {
        connect();
        if (listing) {
            return [l = listing, copt] { return gguf::build_catalog(*l, copt); };
        }
        return [url = url, c = context, o = copt.overrides, d = sha256s] {
            return remote::remote_set_catalog(url, c, o, d);
        };
    }
    if (kind == SourceKind::OciLayout || kind == SourceKind::OllamaStore) {
        // Read afresh at each build: a model pulled meanwhile appears at the next rescan.
        return [p = path, layout = kind == SourceKind::OciLayout, whole = options.verify_blobs, copt] {
            auto l = layout ? remote::oci::layout_listing(p, whole) : remote::oci::store_listing(p, whole);
            return gguf::build_catalog(*l, copt);
        };
    }
#endif
    return [p = path, copt] { return gguf::build_catalog(p, copt); };
}

gguf::Catalog ResolvedSource::catalog(const gguf::CatalogOptions& copt) { return catalog_builder(copt)(); }

}  // namespace gguf_mount::cli
