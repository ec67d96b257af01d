// An `hf://ORG/REPO[@REVISION][/PATH]` source as a gguf::DirectoryListing (issue 12): the
// revision is pinned to its commit once, the tree of PATH at that commit is listed once
// (recursive, every Link rel="next" page), and each file is a RemoteSource of its commit-pinned
// resolve URL with size and validator from the tree. The gguf/ catalog never learns HTTP.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gguf/model/catalog.hpp"
#include "remote/bounds.hpp"
#include "remote/hub.hpp"
#include "remote/source.hpp"

namespace gguf_mount::remote {

class HubListing final : public gguf::DirectoryListing {
public:
    /// `endpoint` as hub_endpoint() gives it. `token_source` names where the token came from
    /// (HubToken::source, "" = no token; the token itself travels in the context's
    /// HttpOptions::signer): it only changes the wording of 401/403 errors. Nothing is
    /// fetched until pin() or list(). `max_names`: the tree entries one listing keeps
    /// (kMaxListedNames, the catalog's CatalogOptions::max_entries; tests use fewer).
    HubListing(std::shared_ptr<RemoteContext> context, HubSource source, std::string endpoint,
               std::string token_source, size_t max_names = kMaxListedNames);

    /// Pins the revision (GET .../revision/REV -> "sha") and lists the tree of the source's
    /// PATH at that commit (every Link rel="next" page, each on the endpoint's own scheme, host
    /// and port, at most kMaxHubTreePages; entries past `max_names` are not kept, and the
    /// cut is logged once and left to the catalog's limit), once per HubListing (later calls return the same commit: a push
    /// during a mount never mixes files of two commits). Returns the commit (hex). Throws
    /// gguf::Error with one line naming the source: Code::BadArgument with ENOTDIR when PATH is
    /// a file (README.md, a single-file model: one HEAD of its resolve URL tells), Code::Io with EACCES for 401/403 (the repo
    /// is gated or private: how to give a token; or the token was refused), ENOENT for 404
    /// (repo or revision not found; or PATH not found at the commit), EIO for other failures;
    /// Code::BadValue for answers that do not parse (parse_hub_revision, parse_hub_tree).
    std::string pin();

    /// The commit the source's revision names now (GET .../revision/REV -> "sha"), without
    /// listing any tree (for a source whose PATH names one file); stored in the cache, from
    /// which RemoteOptions::offline takes it (Code::Io, ENOENT "not in the cache (--offline)"
    /// when it is not there). Throws like pin().
    std::string fetch_commit();

    /// Entries of `path` (relative to the source's PATH): from the pinned tree; files are
    /// RemoteSource::open_known of hub_resolve_url (no request), validator and sha256() = lfs.oid
    /// for LFS files, else "git:" + the blob oid. Names starting with '.' are left out. An
    /// entry with HubTreeEntry::problem (a name over 255 bytes, a size above 1 PiB) is an Item
    /// with that error (a Problem of the catalog), named by its path cut for messages.
    std::vector<Item> list(const std::string& path) override;

    /// "hf://ORG/REPO@COMMIT[/PATH]" once pinned, else the source as given.
    std::string root() const override;

    /// With RemoteOptions::offline, pin() takes commit and tree from the cache's record of
    /// the last online pin of the same endpoint, repo, revision and PATH (BlockCache
    /// save_listing), or throws gguf::Error(Code::Io, ENOENT) "not in the cache (--offline)".

    /// Number of tree pages fetched (for tests and the info line).
    size_t pages() const noexcept { return pages_; }

private:
    /// The one-line error of a failed Hub API request `what` ("revision", "tree").
    /// Pins the revision and fetches every tree page; returns the commit. Throws as pin().
    std::string fetch_tree(std::vector<HubTreeEntry>* out);
    /// Fills dirs_ and commit_ from the tree of `commit`.
    void build(const std::string& commit, const std::vector<HubTreeEntry>& entries);
    [[noreturn]] void fail(const HttpError& e, const std::string& what, const std::string& commit) const;

    std::shared_ptr<RemoteContext> context_;
    HubSource source_;
    std::string endpoint_;
    std::string token_source_;
    size_t max_names_;
    std::mutex mutex_;
    std::string commit_;  // "" until pinned
    size_t pages_ = 0;
    std::map<std::string, std::vector<Item>> dirs_;  // relative dir ("" = root) -> entries
};

/// What an hf:// command line needs before the context exists.
struct HubSetup {
    HubSource source;
    std::string endpoint;      // hub_endpoint()
    std::string token_source;  // HubToken::source, "" = no token
};

/// Parses `source_arg` (parse_hub_source), reads HF_ENDPOINT (hub_endpoint) and the token
/// (find_hub_token), and puts the token into `http` as its signer (a BearerSigner for the
/// endpoint's origin: never sent elsewhere, with a TokenSupply that follows a token file
/// rewritten while running, remote/token.hpp). Throws gguf::Error as those do (one line, no
/// token value).
HubSetup hub_setup(const std::string& source_arg, HttpOptions* http, const EnvLookup& env = process_env);

/// Upper bound on tree pages followed for one listing (a server whose next links never end is
/// refused, not followed forever): 100,000 entries (kMaxListedNames) at 100 a page; the Hub
/// sends up to 1,000 a page (kHubTreePageLimit).
inline constexpr size_t kMaxHubTreePages = 1000;

}  // namespace gguf_mount::remote
