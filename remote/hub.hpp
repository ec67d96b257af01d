// The Hugging Face Hub as a source (issue 12), the pure part: `hf://` sources, endpoint URLs,
// the API's JSON answers, pagination links and where the token comes from. No HTTP here.
//
// Formats confirmed against huggingface_hub's own client code (read with the `search` tool):
//   - constants.py: ENDPOINT = $HF_ENDPOINT or "https://huggingface.co";
//     HUGGINGFACE_CO_URL_TEMPLATE = ENDPOINT + "/{repo_id}/resolve/{revision}/{filename}";
//     HF_HOME = $HF_HOME or $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface;
//     HF_TOKEN_PATH = $HF_TOKEN_PATH or HF_HOME/token; DEFAULT_REVISION = "main".
//   - hf_api.py HfApi.model_info: GET {endpoint}/api/models/{repo_id}/revision/{quote(revision, safe='')}
//     -> JSON object with "sha" (the commit).
//   - hf_api.py HfApi.list_repo_tree: GET {endpoint}/api/models/{repo_id}/tree/{quote(revision, safe='')}
//     [/{quote(path_in_repo, safe='')}] with params recursive, expand -> JSON array; RepoFile reads
//     "path", "size", "oid" and optional "lfs": {"oid" (sha256), "size", "pointerSize"} (and
//     "xetHash"); RepoFolder reads "path", "oid".
//   - utils/_pagination.py paginate: follows the "Link" header's rel="next" URL ("the same
//     Link header format as GitHub"); the next URL already holds the query.
//   - file_download.py hf_hub_url: {endpoint}/{repo_id}/resolve/{quote(revision, safe='')}/{quote(filename)}
//     (quote keeps '/' in the file name).
//   - utils/_auth.py get_token: $HF_TOKEN (then legacy $HUGGING_FACE_HUB_TOKEN), else the token
//     file; the value is cleaned of CR/LF and surrounding blanks, and "" means no token.
//   - hf:// URIs (utils/_hf_uri.py, hf_file_system.py): the revision after '@' is URL-decoded;
//     "refs/pr/N" and "refs/convert/NAME" may be written with their '/' unencoded.
// The token may go only to requests with the endpoint's origin (url_parts.hpp same_origin),
// never to the CDN a resolve URL redirects to.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "remote/url_parts.hpp"

namespace gguf_mount::remote {

/// The default endpoint, used only when HF_ENDPOINT is unset (tests always set it).
inline constexpr const char* kDefaultHubEndpoint = "https://huggingface.co";

/// A parsed `hf://ORG/REPO[@REVISION][/PATH]` source.
struct HubSource {
    std::string org;                  // "unsloth"
    std::string repo;                 // "Qwen3-8B-GGUF"
    std::string revision = "main";    // decoded: "main", "v1.0", "refs/pr/3", a commit sha
    std::string path;                 // folder or file inside the repo, "" = the root; no leading/trailing '/'
    bool revision_given = false;      // true when the source had "@REVISION"

    std::string repo_id() const { return org + "/" + repo; }
};

/// Parses `hf://ORG/REPO[@REVISION][/PATH]`. ORG and REPO: letters, digits, '-', '_', '.', not
/// starting or ending with '-' or '.', no "--" or "..", repo id at most 96 characters (the
/// Hub's repo-id rules, huggingface_hub validate_repo_id). REVISION: up to the next '/', then
/// URL-decoded ("release%2Fv2" -> "release/v2"), except "refs/pr/N" and "refs/convert/NAME",
/// which may keep their '/'. PATH: '/'-separated, no empty, "." or ".." segments, a trailing '/'
/// is dropped. Throws gguf::Error(Code::BadArgument) with a one-line reason naming the source.
HubSource parse_hub_source(const std::string& source);

/// True when the source's PATH names a file rather than a folder: its last segment ends in
/// ".gguf" (ASCII case-insensitive; "Q4_K_M/m-00001-of-00002.gguf", "model.GGUF"). Such a
/// source is served as one set (its PATH must then be a first shard); any other PATH is a
/// folder, listed through the tree API. Pure.
bool hub_names_file(const HubSource& source);

/// Lookup of environment variables: returns the value or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

/// The process environment (std::getenv).
std::optional<std::string> process_env(const std::string& name);

/// $HF_ENDPOINT without trailing '/', else kDefaultHubEndpoint. Throws
/// gguf::Error(Code::BadArgument) when HF_ENDPOINT is set but is not an absolute http(s) URL
/// without query or fragment.
std::string hub_endpoint(const EnvLookup& env = process_env);

/// `GET` this to pin a revision: {endpoint}/api/models/ORG/REPO/revision/{revision, '/' as %2F}.
std::string hub_revision_url(const std::string& endpoint, const HubSource& source, const std::string& revision);

/// Entries asked for per tree page (the `limit` parameter; the Hub's largest page is 1,000).
inline constexpr size_t kHubTreePageLimit = 1000;

/// First page of the recursive listing of `path` ("" = repo root) at `commit`:
/// {endpoint}/api/models/ORG/REPO/tree/{commit}[/{path, '/' as %2F}]?recursive=true&expand=false&limit=1000
/// (expand=false: no last-commit or security fields, which cost the Hub time per entry).
std::string hub_tree_url(const std::string& endpoint, const HubSource& source, const std::string& commit,
                         const std::string& path);

/// The file URL: {endpoint}/ORG/REPO/resolve/{commit, '/' as %2F}/{path, each segment escaped, '/' kept}.
/// It may answer 302 to a CDN on another host.
std::string hub_resolve_url(const std::string& endpoint, const HubSource& source, const std::string& commit,
                            const std::string& path);

/// The commit sha of a revision answer (JSON object with "sha": 40 or 64 hex digits; returned
/// lowercase). Throws gguf::Error(Code::BadValue) naming `url` (without query) otherwise.
std::string parse_hub_revision(std::string_view body, const std::string& url);

/// Git LFS facts of a tree entry.
struct HubLfsInfo {
    std::string sha256;         // lfs.oid: sha256 of the content, 64 lowercase hex digits
    uint64_t size = 0;          // lfs.size: content size in bytes
    uint64_t pointer_size = 0;  // lfs.pointerSize: size of the git pointer file (0 when absent)
};

/// One entry of a tree listing page.
struct HubTreeEntry {
    bool directory = false;          // "type": "directory" (else "file")
    std::string path;                // repo-relative, '/'-separated ("Q4_K_M/model-00001-of-00003.gguf")
    uint64_t size = 0;               // file size in bytes (0 for directories)
    std::string oid;                 // git blob (file) or tree (directory) id
    std::optional<HubLfsInfo> lfs;   // set for LFS-stored files; then lfs->size == size
    std::string xet_hash;            // "xetHash" when the Hub gives it, else ""
    /// Non-empty: why the entry cannot be served (remote/bounds.hpp: a path segment over 255
    /// bytes, a size above 1 PiB); the listing shows a Problem instead, and requests nothing.
    std::string problem;
};

/// One tree page: a JSON array of entries. Files need "path" (string), "size" (unsigned) and
/// "oid" (string); directories "path" and "oid"; "lfs" when present needs "oid" (64 hex, an
/// optional "sha256:" prefix dropped) and "size" equal to the entry's size. Paths must be
/// relative without empty, "." or ".." segments. Entries of other types are skipped. Parsed with
/// parse_json_bounded (at most 64 levels, 2,000,000 values). Throws gguf::Error(Code::BadValue)
/// naming `url` (without query), the entry index and the field.
std::vector<HubTreeEntry> parse_hub_tree(std::string_view body, const std::string& url);

/// Bounds of the Link header scanner (parse_link_next).
inline constexpr size_t kMaxLinkHeaderBytes = 64 * 1024;  ///< the whole header (all Link lines)
inline constexpr size_t kMaxLinkTargetBytes = 8 * 1024;   ///< one <URI>
inline constexpr size_t kMaxLinkParamBytes = 1024;        ///< one parameter name or value

/// The rel="next" target of an HTTP Link header (RFC 8288: `<URI>; rel="next"`, several links
/// separated by commas, rel may be quoted or not and a space-separated list), resolved against
/// `request_url` when relative, else kept byte for byte (an opaque cursor is never re-encoded);
/// nullopt when the header has no next link. Scanned in one pass, without regex. Throws
/// gguf::Error(Code::BadValue) naming `request_url` (without query) when the header is over
/// kMaxLinkHeaderBytes, a target over kMaxLinkTargetBytes, a parameter over kMaxLinkParamBytes,
/// the header is not link-values, or the next target is not an http(s) URL: a pagination that
/// cannot be followed must not pass for a complete listing.
std::optional<std::string> parse_link_next(std::string_view link_header, const std::string& request_url);

/// The one line for an error answer of the Hub, from its X-Error-Code `code` (huggingface_hub
/// utils/_http.py hf_raise_for_status: GatedRepo, RepoNotFound, RevisionNotFound,
/// EntryNotFound) and X-Error-Message `hub_message`, to a request for `url` (an API or resolve
/// URL: repo, revision and path are read from it). `token_sent` tells whether the request
/// carried a token. GatedRepo: the repo is gated, access is requested on its page
/// ENDPOINT/ORG/REPO, and a token is given with HF_TOKEN, HF_TOKEN_PATH or `hf auth login`;
/// RepoNotFound: "not found (or private: give a token ...)" without a token, never "gated";
/// RevisionNotFound and EntryNotFound name the revision or the path. Other codes: the status,
/// the code and the Hub's message (control characters dropped, at most 200 bytes). The line
/// starts with `url` without query. Pure.
std::string describe_hub_error(long status, const std::string& code, const std::string& hub_message,
                               const std::string& url, bool token_sent);

/// Where the token came from: "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN" or the token file's path.
/// The value is never part of messages.
struct HubToken {
    std::string value;
    std::string source;
};

/// The systemd credential name of the token (gguf-mount-remote@.service:
/// LoadCredential=hf-token:/etc/gguf-mount/hf-token).
inline constexpr const char* kCredentialName = "hf-token";

/// Finds the Hub token as huggingface_hub's get_token does: $HF_TOKEN, else
/// $HUGGING_FACE_HUB_TOKEN, else (gguf-mount's addition for system units) the file
/// $CREDENTIALS_DIRECTORY/hf-token when it exists and HF_TOKEN_PATH is unset, else the file $HF_TOKEN_PATH, else $HF_HOME/token, with HF_HOME
/// defaulting to $XDG_CACHE_HOME/huggingface, else $HOME/.cache/huggingface. Values are cleaned
/// (CR and LF removed, blanks around stripped); an empty value counts as unset. A missing token
/// file means no token (nullopt). Throws gguf::Error(Code::Io) naming the file when it exists
/// but cannot be read, and Code::BadValue when it is over 64 KiB or the token holds control
/// characters or spaces (it must fit in one HTTP header).
std::optional<HubToken> find_hub_token(const EnvLookup& env = process_env);

}  // namespace gguf_mount::remote
