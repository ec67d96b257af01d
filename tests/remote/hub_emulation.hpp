// An emulation of the Hugging Face Hub's endpoints for the remote tests, served by two nginx
// instances on 127.0.0.1 from generated files (formats: see remote/hub.hpp):
//   API port (HF_ENDPOINT = endpoint()):
//     GET /api/models/ORG/REPO/revision/REV          -> {"id": "ORG/REPO", "sha": COMMIT}
//     GET /api/models/ORG/REPO/tree/REV[/DIR]?recursive=true[&cursor=N]
//                                                    -> a page of at most page_size entries,
//                                                       Link: <...&cursor=N+1>; rel="next" while more
//     GET /ORG/REPO/resolve/REV/PATH                 -> LFS files: 302 to the CDN port
//                                                       (/blobs/SHA256?X-Amz-Signature=...), with
//                                                       X-Repo-Commit, X-Linked-Etag, X-Linked-Size;
//                                                       other files: 200 from the API port itself
//   CDN port: /blobs/SHA256 with Range support, no token needed (a signed URL on the real Hub);
//     nginx, or with HubRepoSpec::cdn_fault_server the FaultServer (faults per signed URL).
// REV is any of the revision names or the commit sha. With required_token set, every API and
// resolve request without "Authorization: Bearer TOKEN" gets 401, as a gated or private repo
// (accept_tokens changes the accepted tokens while running: a rotated token).
// The Hub's other behaviours on demand (HubRepoSpec): X-Error-Code answers (RepoNotFound,
// GatedRepo, EntryNotFound), relative 307 redirects (resolve-cache, a renamed repo), long Link
// headers and next links to another host.
// Both access logs record the Authorization header, so tests check where the token went.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "remote/servers.hpp"

namespace remote_test {

/// Makes the process environment safe for Hub tests: HF_TOKEN, HUGGING_FACE_HUB_TOKEN,
/// HF_TOKEN_PATH and HF_ENDPOINT unset, HF_HOME and XDG_CACHE_HOME under `root` (so no real
/// token and no real Hub is ever used).
void isolate_hub_environment(const std::string& root);

/// One file of the emulated repo.
struct HubRepoFile {
    std::string path;        // repo-relative, '/'-separated ("Q4_K_M/m-00001-of-00002.gguf")
    std::string local_file;  // absolute path of the bytes to serve (symlinked, not copied)
    bool lfs = true;         // LFS files are redirected to the CDN port; others served directly
};

/// The emulated repo and server behaviour.
struct HubRepoSpec {
    std::string org = "test-org";
    std::string repo = "test-repo";
    std::string commit = "0123456789abcdef0123456789abcdef01234567";  // 40 hex digits
    std::vector<std::string> revisions = {"main"};                      // names that resolve to commit
    std::vector<HubRepoFile> files;
    size_t page_size = 2;                         // tree entries per page (>= 1)
    std::optional<std::string> required_token;    // API and resolve need "Bearer <token>"
    uint64_t cdn_limit_rate = 0;                  // bytes/s per CDN connection, 0 = none
    /// The CDN is a FaultServer (fault_cdn(): faults by signature) serving copies of the blobs
    /// instead of nginx, and every resolve redirects with a signature of its own
    /// (X-Amz-Signature=<nginx $request_id>), as the Hub's expiring signed URLs differ per resolve.
    bool cdn_fault_server = false;
    /// Every API and resolve request answers 401 with X-Error-Code: CODE and an
    /// X-Error-Message (the Hub's missing or private repo without a token: "RepoNotFound").
    std::string api_error_code;
    /// Every resolve request answers 403 with X-Error-Code: CODE while listing works (the Hub's
    /// gated repo: "GatedRepo").
    std::string resolve_error_code;
    /// Files listed in the tree whose resolve answers 404 with X-Error-Code: EntryNotFound.
    std::vector<std::string> missing_files;
    /// Non-LFS files answer resolve with a 307 whose Location is relative
    /// (/api/resolve-cache/models/ORG/REPO/COMMIT/PATH, served by the API port), as the Hub does
    /// for small files.
    bool relative_redirects = false;
    /// A former name of the repo: API and resolve requests for ORG/RENAMED_FROM answer 307 with
    /// a relative Location to the same request for ORG/REPO (a renamed repo).
    std::string renamed_from;
    /// Extra Link headers (rel="related", a title of 64,000 bytes each) on every tree page.
    size_t link_padding_headers = 0;
    /// Base URL ("http://127.0.0.1:PORT") the next-page links point to instead of the API's own.
    std::string next_link_base;
    /// Both ports answer a Range request with 200 and the whole file (max_ranges 0): an
    /// HF_ENDPOINT mirror that ignores Range.
    bool ignore_range = false;
};

/// One entry the emulation lists in its tree pages (what a parser must get back).
struct HubEmulatedEntry {
    std::string path;
    bool directory = false;
    uint64_t size = 0;
    std::string sha256;  // content sha256 for files, "" for directories
    bool lfs = false;
};

/// Two nginx servers (API + CDN) emulating one Hub repo; stopped by their PIDs on destruction.
class HubEmulation {
public:
    explicit HubEmulation(HubRepoSpec spec);
    ~HubEmulation();
    HubEmulation(const HubEmulation&) = delete;
    HubEmulation& operator=(const HubEmulation&) = delete;

    /// True when nginx is installed; else false with *why (tests skip).
    static bool available(std::string* why);
    /// Generates the files and starts the CDN, then the API server. False with *error on failure
    /// (bad spec: paths with quotes, '$', '\\', control characters, "." or ".." segments).
    bool start(std::string* error);
    void stop();

    /// "http://127.0.0.1:API_PORT": the value for HF_ENDPOINT.
    std::string endpoint() const;
    /// "http://127.0.0.1:CDN_PORT".
    std::string cdn_base_url() const;
    NginxServer& api() { return *api_; }
    /// The nginx CDN (not with HubRepoSpec::cdn_fault_server).
    NginxServer& cdn() { return *cdn_; }
    /// The FaultServer CDN (only with HubRepoSpec::cdn_fault_server).
    FaultServer& fault_cdn() { return *fault_cdn_; }
    /// Requests the CDN (either kind) has logged so far.
    std::vector<AccessEntry> cdn_access_log() const;
    const HubRepoSpec& spec() const { return spec_; }
    /// Every file and directory of the repo, sorted by path, as the tree pages list them.
    const std::vector<HubEmulatedEntry>& entries() const { return entries_; }
    /// A push, as far as a client pinning revisions can see: revision `revision` now answers
    /// `sha` (40 hex digits; nothing is served at that commit). False when not started.
    bool move_revision(const std::string& revision, const std::string& sha);
    /// With HubRepoSpec::required_token: from now on only `tokens` are accepted (a rotated
    /// token). Tokens: letters, digits, '_'. False when one cannot be emulated.
    bool accept_tokens(const std::vector<std::string>& tokens);
    /// Number of tree pages the listing of `dir` ("" = root) takes.
    size_t page_count(const std::string& dir) const;

private:
    bool generate(std::string* error);
    std::vector<const HubEmulatedEntry*> listing(const std::string& dir) const;
    HubRepoSpec spec_;
    gguf_test::TempDir dir_;
    std::vector<HubEmulatedEntry> entries_;
    std::unique_ptr<NginxServer> api_;
    std::unique_ptr<NginxServer> cdn_;
    std::unique_ptr<FaultServer> fault_cdn_;
};

}  // namespace remote_test
