#include "remote/hub.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <regex>

#include <nlohmann/json.hpp>

#include "gguf/error.hpp"
#include "remote/url_parts.hpp"

namespace gguf_mount::remote {

namespace {

using gguf::Code;
using gguf::Error;

constexpr size_t kMaxRepoIdLength = 96;        // huggingface_hub validate_repo_id
constexpr size_t kMaxTokenFileBytes = 64 * 1024;

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

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
        static const std::regex special(R"(^refs/(?:convert/[A-Za-z0-9_.-]+|pr/[0-9]+)(?=/|$))");
        std::smatch m;
        std::string raw;
        if (std::regex_search(rest, m, special)) {
            raw = m[0].str();
        } else {
            raw = rest.substr(0, rest.find('/'));
        }
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
    return url + "?recursive=true";
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
    auto j = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw Error(Code::BadValue, where + ": revision answer is not a JSON object");
    std::string sha = lower(string_field(j, "sha", where));
    if ((sha.size() != 40 && sha.size() != 64) || !is_hex(sha))
        throw Error(Code::BadValue, where + ": \"sha\" \"" + sha + "\" is not a 40 or 64 digit hex commit id");
    return sha;
}

std::vector<HubTreeEntry> parse_hub_tree(std::string_view body, const std::string& url) {
    const std::string where = url_for_message(url);
    auto j = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
    if (j.is_discarded()) throw Error(Code::BadValue, where + ": tree page is not valid JSON");
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
        at += " (\"" + e.path + "\")";
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
            std::string oid = lower(string_field(*lfs, "oid", at + ": lfs"));
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
        out.push_back(std::move(e));
    }
    return out;
}

std::optional<std::string> parse_link_next(std::string_view header, const std::string& request_url) {
    // Split into link-values at commas outside <...> and quotes.
    std::vector<std::string> values;
    std::string cur;
    bool in_uri = false, in_quote = false;
    for (char c : header) {
        if (c == '<' && !in_quote) in_uri = true;
        if (c == '>' && !in_quote) in_uri = false;
        if (c == '"' && !in_uri) in_quote = !in_quote;
        if (c == ',' && !in_uri && !in_quote) {
            values.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    values.push_back(cur);
    static const std::regex rel_param(R"re(;\s*rel\s*=\s*(?:"([^"]*)"|([^;\s,]+)))re", std::regex::icase);
    for (const auto& v : values) {
        size_t open = v.find('<'), close = v.find('>');
        if (open == std::string::npos || close == std::string::npos || close < open) continue;
        std::string target = v.substr(open + 1, close - open - 1);
        std::string params = v.substr(close + 1);
        std::smatch m;
        if (!std::regex_search(params, m, rel_param)) continue;
        std::string rels = lower(m[1].matched ? m[1].str() : m[2].str());
        bool next = false;
        size_t p = 0;
        while (p < rels.size()) {
            size_t q = rels.find(' ', p);
            if (rels.substr(p, q == std::string::npos ? std::string::npos : q - p) == "next") next = true;
            if (q == std::string::npos) break;
            p = q + 1;
        }
        if (!next) continue;
        auto resolved = parse_url(target, request_url);
        if (!resolved || (resolved->scheme != "http" && resolved->scheme != "https")) return std::nullopt;
        return resolved->url;
    }
    return std::nullopt;
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
