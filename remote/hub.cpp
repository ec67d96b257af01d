#include "remote/hub.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "gguf/error.hpp"
#include "remote/bounds.hpp"
#include "remote/url_parts.hpp"

namespace gguf_mount::remote {

namespace {

using gguf::Code;
using gguf::Error;

constexpr size_t kMaxRepoIdLength = 96;        // huggingface_hub validate_repo_id
constexpr size_t kMaxTokenFileBytes = 64 * 1024;

bool is_hex(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

/// A repo-id part: [A-Za-z0-9_.-], no "--"/"..", not starting or ending with '-' or '.'.
bool valid_name_part(const std::string& s) {
    if (s.empty() || s.front() == '-' || s.front() == '.' || s.back() == '-' || s.back() == '.') return false;
    if (s.find("--") != std::string::npos || s.find("..") != std::string::npos) return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
}

/// A repo-relative path: non-empty '/'-separated segments, none "." or "..", no NUL.
bool valid_repo_path(const std::string& p) {
    if (p.empty() || p.find('\0') != std::string::npos) return false;
    size_t start = 0;
    while (true) {
        size_t end = p.find('/', start);
        std::string seg = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (seg.empty() || seg == "." || seg == "..") return false;
        if (end == std::string::npos) return true;
        start = end + 1;
    }
}

std::string percent_decode(const std::string& s, const std::string& source) {
    int len = 0;
    char* raw = curl_easy_unescape(nullptr, s.c_str(), static_cast<int>(s.size()), &len);
    if (raw == nullptr) throw Error(Code::BadArgument, source + ": cannot decode \"" + s + "\"");
    std::string out(raw, static_cast<size_t>(len));
    curl_free(raw);
    return out;
}

std::string repo_base(const std::string& endpoint, const HubSource& s) { return endpoint + "/" + s.org + "/" + s.repo; }

std::string api_base(const std::string& endpoint, const HubSource& s) {
    return endpoint + "/api/models/" + s.org + "/" + s.repo;
}

uint64_t unsigned_field(const nlohmann::json& obj, const char* key, const std::string& at) {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_number_unsigned())
        throw Error(Code::BadValue, at + ": \"" + key + "\" is not an unsigned integer");
    return it->get<uint64_t>();
}

std::string string_field(const nlohmann::json& obj, const char* key, const std::string& at) {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_string()) throw Error(Code::BadValue, at + ": \"" + key + "\" is not a string");
    return it->get<std::string>();
}

/// Length of the "refs/pr/N" or "refs/convert/NAME" revision that `s` starts with, when one
/// ends there or at a '/' (hf:// URIs may keep those slashes unencoded); 0 otherwise. One pass,
/// no regex.
size_t special_ref_length(std::string_view s) {
    auto part_end = [&](size_t from, bool digits_only) {
        size_t i = from;
        while (i < s.size() && s[i] != '/') {
            const auto c = static_cast<unsigned char>(s[i]);
            const bool ok = digits_only ? std::isdigit(c) != 0
                                        : (std::isalnum(c) != 0 || c == '_' || c == '.' || c == '-');
            if (!ok) return size_t{0};
            ++i;
        }
        return i > from ? i : size_t{0};
    };
    if (s.rfind("refs/pr/", 0) == 0) return part_end(8, true);
    if (s.rfind("refs/convert/", 0) == 0) return part_end(13, false);
    return 0;
}

}  // namespace

HubSource parse_hub_source(const std::string& source) {
    static const std::string scheme = "hf://";
    const std::string where = "source \"" + source + "\"";
    if (source.compare(0, scheme.size(), scheme) != 0)
        throw Error(Code::BadArgument, where + ": not an hf://ORG/REPO[@REVISION][/PATH] source");
    std::string rest = source.substr(scheme.size());
    HubSource out;
    // ORG
    size_t slash = rest.find('/');
    if (slash == std::string::npos) throw Error(Code::BadArgument, where + ": expected hf://ORG/REPO");
    out.org = rest.substr(0, slash);
    rest = rest.substr(slash + 1);
    if (out.org == "datasets" || out.org == "spaces" || out.org == "buckets")
        throw Error(Code::BadArgument, where + ": only model repositories are supported");
    // REPO, then optional @REVISION
    size_t end = rest.find_first_of("@/");
    out.repo = rest.substr(0, end);
    rest = end == std::string::npos ? "" : rest.substr(end);
    if (!valid_name_part(out.org) || !valid_name_part(out.repo))
        throw Error(Code::BadArgument, where + ": \"" + out.repo_id() +
                                           "\" is not a repo id (letters, digits, '-', '_', '.'; no '--' or '..')");
    if (out.repo_id().size() > kMaxRepoIdLength)
        throw Error(Code::BadArgument, where + ": repo id longer than " + std::to_string(kMaxRepoIdLength) + " characters");
    if (!rest.empty() && rest[0] == '@') {
        rest = rest.substr(1);
        std::string raw = special_ref_length(rest) > 0 ? rest.substr(0, special_ref_length(rest))
                                                       : rest.substr(0, rest.find('/'));
        rest = rest.substr(raw.size());
        out.revision = percent_decode(raw, where);
        out.revision_given = true;
        if (out.revision.empty()) throw Error(Code::BadArgument, where + ": empty revision after '@'");
        if (std::any_of(out.revision.begin(), out.revision.end(),
                        [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
            throw Error(Code::BadArgument, where + ": revision holds control characters");
    }
    if (!rest.empty()) {
        // rest starts with '/'
        std::string path = rest.substr(1);
        while (!path.empty() && path.back() == '/') path.pop_back();
        if (!path.empty() && !valid_repo_path(path))
            throw Error(Code::BadArgument, where + ": path \"" + path + "\" has an empty, '.' or '..' segment");
        out.path = path;
    }
    return out;
}

std::optional<std::string> process_env(const std::string& name) {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
}

std::string hub_endpoint(const EnvLookup& env) {
    auto value = env("HF_ENDPOINT");
    if (!value || value->empty()) return kDefaultHubEndpoint;
    std::string endpoint = *value;
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    auto parts = parse_url(endpoint);
    if (!parts) throw Error(Code::BadArgument, "HF_ENDPOINT \"" + url_for_message(endpoint) + "\" is not an absolute URL");
    if (parts->scheme != "http" && parts->scheme != "https")
        throw Error(Code::BadArgument, "HF_ENDPOINT \"" + url_for_message(endpoint) + "\" is not an http(s) URL");
    if (!parts->query.empty() || !parts->fragment.empty() || !parts->user.empty())
        throw Error(Code::BadArgument, "HF_ENDPOINT \"" + url_for_message(endpoint) +
                                           "\" must not hold credentials, a query or a fragment");
    return endpoint;
}

std::string hub_revision_url(const std::string& endpoint, const HubSource& source, const std::string& revision) {
    return api_base(endpoint, source) + "/revision/" + url_quote(revision, false);
}

std::string hub_tree_url(const std::string& endpoint, const HubSource& source, const std::string& commit,
                         const std::string& path) {
    std::string url = api_base(endpoint, source) + "/tree/" + url_quote(commit, false);
    if (!path.empty()) url += "/" + url_quote(path, false);
    return url + "?recursive=true&expand=false&limit=" + std::to_string(kHubTreePageLimit);
}

bool hub_names_file(const HubSource& source) {
    const size_t slash = source.path.rfind('/');
    std::string leaf = slash == std::string::npos ? source.path : source.path.substr(slash + 1);
    for (char& c : leaf) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return leaf.size() > 5 && leaf.compare(leaf.size() - 5, 5, ".gguf") == 0;
}

std::string hub_resolve_url(const std::string& endpoint, const HubSource& source, const std::string& commit,
                            const std::string& path) {
    return repo_base(endpoint, source) + "/resolve/" + url_quote(commit, false) + "/" + url_quote(path, true);
}

std::string parse_hub_revision(std::string_view body, const std::string& url) {
    const std::string where = url_for_message(url);
    const nlohmann::json j = parse_json_bounded(body, where, "revision answer");
    if (!j.is_object()) throw Error(Code::BadValue, where + ": revision answer is not a JSON object");
    std::string sha = gguf::ascii_lower(string_field(j, "sha", where));
    if ((sha.size() != 40 && sha.size() != 64) || !is_hex(sha))
        throw Error(Code::BadValue, where + ": \"sha\" \"" + sha + "\" is not a 40 or 64 digit hex commit id");
    return sha;
}

std::vector<HubTreeEntry> parse_hub_tree(std::string_view body, const std::string& url) {
    const std::string where = url_for_message(url);
    const nlohmann::json j = parse_json_bounded(body, where, "tree page");
    if (!j.is_array()) throw Error(Code::BadValue, where + ": tree page is not a JSON array");
    std::vector<HubTreeEntry> out;
    out.reserve(j.size());
    for (size_t i = 0; i < j.size(); ++i) {
        const auto& item = j[i];
        std::string at = where + ": entry " + std::to_string(i);
        if (!item.is_object()) throw Error(Code::BadValue, at + " is not an object");
        const std::string type = string_field(item, "type", at);
        if (type != "file" && type != "directory") continue;
        HubTreeEntry e;
        e.directory = type == "directory";
        e.path = string_field(item, "path", at);
        at += " (\"" + name_for_message(e.path) + "\")";
        if (!valid_repo_path(e.path) || e.path.front() == '/')
            throw Error(Code::BadValue, at + ": path has an empty, '.' or '..' segment");
        e.oid = string_field(item, "oid", at);
        if (!e.directory) e.size = unsigned_field(item, "size", at);
        auto xet = item.find("xetHash");
        if (xet != item.end() && xet->is_string()) e.xet_hash = xet->get<std::string>();
        auto lfs = item.find("lfs");
        if (!e.directory && lfs != item.end() && !lfs->is_null()) {
            if (!lfs->is_object()) throw Error(Code::BadValue, at + ": \"lfs\" is not an object");
            HubLfsInfo info;
            std::string oid = gguf::ascii_lower(string_field(*lfs, "oid", at + ": lfs"));
            if (oid.rfind("sha256:", 0) == 0) oid = oid.substr(7);
            if (oid.size() != 64 || !is_hex(oid))
                throw Error(Code::BadValue, at + ": lfs \"oid\" is not a sha256 (64 hex digits)");
            info.sha256 = oid;
            info.size = unsigned_field(*lfs, "size", at + ": lfs");
            if (lfs->contains("pointerSize")) info.pointer_size = unsigned_field(*lfs, "pointerSize", at + ": lfs");
            if (info.size != e.size)
                throw Error(Code::BadValue, at + ": lfs size " + std::to_string(info.size) + " differs from size " +
                                                std::to_string(e.size));
            e.lfs = info;
        }
        // Served names are path segments: one over NAME_MAX, or an absurd size, is a Problem.
        for (size_t from = 0; e.problem.empty() && from <= e.path.size();) {
            const size_t slash = std::min(e.path.find('/', from), e.path.size());
            e.problem = name_problem(e.path.substr(from, slash - from));
            from = slash + 1;
        }
        if (e.problem.empty() && !e.directory) e.problem = size_problem(e.size);
        out.push_back(std::move(e));
    }
    return out;
}

namespace {

/// RFC 8288 link-values, scanned in one pass without regex, each field bounded
/// (kMaxLinkHeaderBytes, kMaxLinkTargetBytes, kMaxLinkParamBytes).
class LinkScanner {
public:
    LinkScanner(std::string_view header, const std::string& where) : s_(header), where_(where) {}

    /// The next link-value's target and whether its rel holds "next"; false at the end.
    bool next(std::string* target, bool* is_next) {
        while (i_ < s_.size() && (blank(s_[i_]) || s_[i_] == ',')) ++i_;
        if (i_ >= s_.size()) return false;
        if (s_[i_] != '<') bad("a link does not start with '<'");
        const size_t close = s_.find('>', i_ + 1);
        if (close == std::string_view::npos) bad("a '<' without its '>'");
        if (close - i_ - 1 > kMaxLinkTargetBytes)
            bad("a link target of " + std::to_string(close - i_ - 1) + " bytes (limit " +
                std::to_string(kMaxLinkTargetBytes) + ")");
        target->assign(s_.substr(i_ + 1, close - i_ - 1));
        i_ = close + 1;
        *is_next = false;
        while (true) {
            skip_blanks();
            if (i_ >= s_.size() || s_[i_] == ',') return true;
            if (s_[i_] != ';') bad("text after a link target that is not a ';' parameter");
            ++i_;
            skip_blanks();
            std::string name = gguf::ascii_lower(std::string(token("parameter name")));
            skip_blanks();
            std::string value;
            if (i_ < s_.size() && s_[i_] == '=') {
                ++i_;
                skip_blanks();
                value = i_ < s_.size() && s_[i_] == '"' ? quoted() : std::string(token("parameter value"));
            }
            if (name == "rel") *is_next = *is_next || has_word(gguf::ascii_lower(value), "next");
        }
    }

private:
    static bool blank(char c) { return c == ' ' || c == '\t'; }
    void skip_blanks() {
        while (i_ < s_.size() && blank(s_[i_])) ++i_;
    }
    [[noreturn]] void bad(const std::string& why) const {
        throw Error(Code::BadValue, where_ + ": malformed Link header: " + why);
    }
    void bound(size_t n) const {
        if (n > kMaxLinkParamBytes)
            bad("a parameter longer than " + std::to_string(kMaxLinkParamBytes) + " bytes");
    }
    /// An RFC 9110 token (the characters a parameter name or bare value may hold).
    std::string_view token(const char* what) {
        const size_t from = i_;
        while (i_ < s_.size() && !blank(s_[i_]) && s_[i_] != ';' && s_[i_] != ',' && s_[i_] != '=' &&
               s_[i_] != '"' && static_cast<unsigned char>(s_[i_]) > 0x20) {
            ++i_;
            bound(i_ - from);
        }
        if (i_ == from && std::string_view(what) == "parameter name") bad("an empty parameter name");
        return s_.substr(from, i_ - from);
    }
    /// A quoted-string at i_ (backslash escapes), without its quotes.
    std::string quoted() {
        std::string out;
        for (++i_; i_ < s_.size(); ++i_) {
            char c = s_[i_];
            if (c == '"') {
                ++i_;
                return out;
            }
            if (c == '\\' && i_ + 1 < s_.size()) c = s_[++i_];
            out += c;
            bound(out.size());
        }
        bad("a quoted parameter without its closing '\"'");
    }
    static bool has_word(const std::string& words, std::string_view word) {
        size_t p = 0;
        while (p <= words.size()) {
            size_t q = words.find_first_of(" \t", p);
            if (q == std::string::npos) q = words.size();
            if (std::string_view(words).substr(p, q - p) == word) return true;
            p = q + 1;
        }
        return false;
    }

    std::string_view s_;
    const std::string& where_;
    size_t i_ = 0;
};

}  // namespace

std::optional<std::string> parse_link_next(std::string_view header, const std::string& request_url) {
    const std::string where = url_for_message(request_url);
    if (header.size() > kMaxLinkHeaderBytes)
        throw Error(Code::BadValue, where + ": Link header of " + std::to_string(header.size()) +
                                        " bytes is longer than the limit of " + std::to_string(kMaxLinkHeaderBytes) +
                                        " bytes");
    LinkScanner scan(header, where);
    std::string target;
    bool is_next = false;
    while (scan.next(&target, &is_next)) {
        if (!is_next) continue;
        auto resolved = parse_url(target, request_url);
        if (!resolved || (resolved->scheme != "http" && resolved->scheme != "https"))
            throw Error(Code::BadValue, where + ": the Link header's next page is not an http(s) URL");
        return resolved->url;
    }
    return std::nullopt;
}

namespace {

/// `s` percent-decoded (libcurl); `s` itself when it cannot be.
std::string decoded(const std::string& s) {
    int len = 0;
    char* raw = curl_easy_unescape(nullptr, s.c_str(), static_cast<int>(s.size()), &len);
    if (raw == nullptr) return s;
    std::string out(raw, static_cast<size_t>(len));
    curl_free(raw);
    return out;
}

/// What an API or resolve URL of the Hub names: the repo page, repo id, revision and path.
struct HubUrlNames {
    std::string page;      // ENDPOINT/ORG/REPO ("" when the URL is neither kind)
    std::string repo_id;   // ORG/REPO
    std::string revision;  // decoded
    std::string path;      // decoded, "" for none
};

/// Reads {endpoint}/api/models/ORG/REPO/{revision,tree}/REV[/PATH] and
/// {endpoint}/ORG/REPO/resolve/REV/PATH (the endpoint may have a path prefix: a mirror).
HubUrlNames hub_url_names(const std::string& url) {
    HubUrlNames out;
    auto parts = parse_url(url);
    if (!parts) return out;
    std::vector<std::string> segs;
    for (size_t from = 1; from <= parts->path.size();) {
        size_t slash = std::min(parts->path.find('/', from), parts->path.size());
        segs.push_back(parts->path.substr(from, slash - from));
        from = slash + 1;
    }
    const std::string origin = parts->scheme + "://" + parts->host +
                               ((parts->scheme == "https" && parts->port == "443") ||
                                        (parts->scheme == "http" && parts->port == "80")
                                    ? std::string()
                                    : ":" + parts->port);
    auto prefix = [&](size_t n) {
        std::string p;
        for (size_t k = 0; k < n; ++k) p += "/" + segs[k];
        return p;
    };
    auto rest = [&](size_t from) {
        std::string p;
        for (size_t k = from; k < segs.size(); ++k) p += (p.empty() ? "" : "/") + decoded(segs[k]);
        return p;
    };
    for (size_t k = 0; k + 3 < segs.size(); ++k) {
        if (segs[k] == "api" && k + 4 < segs.size() && segs[k + 1] == "models" &&
            (segs[k + 4] == "revision" || segs[k + 4] == "tree")) {
            out.page = origin + prefix(k) + "/" + segs[k + 2] + "/" + segs[k + 3];
            out.repo_id = decoded(segs[k + 2]) + "/" + decoded(segs[k + 3]);
            if (k + 5 < segs.size()) out.revision = decoded(segs[k + 5]);
            out.path = k + 6 < segs.size() ? rest(k + 6) : "";
            return out;
        }
        if (segs[k + 2] == "resolve" && k + 3 < segs.size()) {
            out.page = origin + prefix(k) + "/" + segs[k] + "/" + segs[k + 1];
            out.repo_id = decoded(segs[k]) + "/" + decoded(segs[k + 1]);
            out.revision = decoded(segs[k + 3]);
            out.path = rest(k + 4);
            return out;
        }
    }
    return out;
}

/// Server text for a message: control characters dropped, at most 200 bytes.
std::string server_text(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) out += c;
        if (out.size() >= 200) {
            out += "...";
            break;
        }
    }
    return out;
}

}  // namespace

std::string describe_hub_error(long status, const std::string& code, const std::string& hub_message,
                               const std::string& url, bool token_sent) {
    static const std::string kGive = "HF_TOKEN=..., HF_TOKEN_PATH=FILE or `hf auth login`";
    const std::string where = url_for_message(url);
    const HubUrlNames n = hub_url_names(url);
    const std::string repo = n.repo_id.empty() ? std::string("the repository") : "repository " + n.repo_id;
    const std::string http = " (HTTP " + std::to_string(status) + ", " + server_text(code) + ")";
    if (code == "GatedRepo") {
        const std::string page = n.page.empty() ? std::string("its page on the Hub") : n.page;
        return where + ": " + repo + " is gated" + http + ": request access on " + page +
               (token_sent ? ", then use a token of the account that was granted it (" + kGive + ")"
                           : ", then give a token of the account that was granted it (" + kGive + ")");
    }
    if (code == "RepoNotFound") {
        return where + ": " + repo +
               (token_sent ? " not found, or the token has no access to it" : " not found (or private: give a token, " +
                                                                                   kGive + ")") +
               http;
    }
    if (code == "RevisionNotFound") {
        return where + ": revision \"" + server_text(n.revision) + "\" not found in " + repo + http;
    }
    if (code == "EntryNotFound") {
        return where + ": \"" + server_text(n.path) + "\" not found in " + repo +
               (n.revision.empty() ? std::string() : " at revision " + server_text(n.revision)) + http;
    }
    const std::string said = server_text(hub_message);
    return where + ": HTTP " + std::to_string(status) + " " + server_text(code) + (said.empty() ? "" : ": " + said);
}

namespace {

/// huggingface_hub _clean_token: drop CR and LF, strip blanks; "" -> nullopt.
std::optional<std::string> clean_token(std::string value) {
    value.erase(std::remove_if(value.begin(), value.end(), [](char c) { return c == '\r' || c == '\n'; }), value.end());
    size_t b = value.find_first_not_of(" \t");
    if (b == std::string::npos) return std::nullopt;
    size_t e = value.find_last_not_of(" \t");
    return value.substr(b, e - b + 1);
}

HubToken checked(std::string value, std::string source) {
    for (char c : value) {
        auto u = static_cast<unsigned char>(c);
        if (u < 0x21 || u == 0x7f)
            throw Error(Code::BadValue, "Hugging Face token from " + source +
                                            " holds spaces or control characters (value not shown)");
    }
    return HubToken{std::move(value), std::move(source)};
}

/// The token in the file `path`: nullopt when the file is missing or holds only blanks.
/// Throws like find_hub_token.
std::optional<HubToken> read_token_file(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT || err == ENOTDIR) return std::nullopt;
        throw Error(Code::Io, "Hugging Face token file " + path + ": " + std::strerror(err), err);
    }
    std::string text;
    char buf[4096];
    while (true) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int err = errno;
            ::close(fd);
            throw Error(Code::Io, "Hugging Face token file " + path + ": " + std::strerror(err), err);
        }
        if (n == 0) break;
        text.append(buf, static_cast<size_t>(n));
        if (text.size() > kMaxTokenFileBytes) {
            ::close(fd);
            throw Error(Code::BadValue, "Hugging Face token file " + path + " is larger than 64 KiB");
        }
    }
    ::close(fd);
    auto cleaned = clean_token(text);
    if (!cleaned) return std::nullopt;
    return checked(*cleaned, path);
}

}  // namespace

std::optional<HubToken> find_hub_token(const EnvLookup& env) {
    for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
        if (auto v = env(name)) {
            if (auto cleaned = clean_token(*v)) return checked(*cleaned, name);
        }
    }
    // A system unit's credential (LoadCredential=hf-token:FILE): systemd exposes FILE, readable
    // by the service only, as $CREDENTIALS_DIRECTORY/hf-token, so the token is never in argv or
    // in the unit's environment.
    if (auto c = env("CREDENTIALS_DIRECTORY"); c && !c->empty() && !env("HF_TOKEN_PATH")) {
        if (auto t = read_token_file(*c + "/" + kCredentialName)) return t;
    }
    std::string path;
    if (auto p = env("HF_TOKEN_PATH"); p && !p->empty()) {
        path = *p;
    } else {
        std::string home;
        if (auto h = env("HF_HOME"); h && !h->empty()) {
            home = *h;
        } else if (auto x = env("XDG_CACHE_HOME"); x && !x->empty()) {
            home = *x + "/huggingface";
        } else if (auto u = env("HOME"); u && !u->empty()) {
            home = *u + "/.cache/huggingface";
        } else {
            return std::nullopt;
        }
        path = home + "/token";
    }
    if (path.size() > 1 && path[0] == '~' && path[1] == '/') {
        if (auto u = env("HOME")) path = *u + path.substr(1);
    }
    return read_token_file(path);
}

}  // namespace gguf_mount::remote
