#include "remote/oci/reference.hpp"

#include <cctype>
#include <vector>

#include "gguf/error.hpp"

namespace gguf_mount::remote::oci {
namespace {

[[noreturn]] void bad(const std::string& source, const std::string& why) {
    throw gguf::Error(gguf::Code::BadArgument, source + ": " + why);
}

bool lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

/// One repository path component: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)* (distribution-spec).
bool valid_component(const std::string& c) {
    if (c.empty() || !lower_alnum(c.front()) || !lower_alnum(c.back())) return false;
    for (size_t i = 0; i < c.size(); ++i) {
        const char ch = c[i];
        if (lower_alnum(ch) || ch == '-') continue;
        if (ch == '.' || ch == '_') {
            if (ch == '_' && i + 1 < c.size() && c[i + 1] == '_') ++i;  // "__"
            if (i + 1 >= c.size() || !lower_alnum(c[i + 1])) return false;
            continue;
        }
        return false;
    }
    return true;
}

bool valid_tag(const std::string& t) {
    if (t.empty() || t.size() > 128) return false;
    if (!(std::isalnum(static_cast<unsigned char>(t[0])) || t[0] == '_')) return false;
    for (char c : t) {
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) return false;
    }
    return true;
}

/// host[:port], or [v6]:port; letters, digits, '.', '-'.
bool valid_registry(const std::string& r) {
    if (r.empty()) return false;
    size_t i = 0;
    if (r[0] == '[') {
        const size_t close = r.find(']');
        if (close == std::string::npos || close < 2) return false;
        for (size_t k = 1; k < close; ++k) {
            if (!(std::isxdigit(static_cast<unsigned char>(r[k])) || r[k] == ':' || r[k] == '.')) return false;
        }
        i = close + 1;
    } else {
        for (; i < r.size() && r[i] != ':'; ++i) {
            const char c = r[i];
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-')) return false;
        }
        if (i == 0) return false;
    }
    if (i == r.size()) return true;
    if (r[i] != ':' || i + 1 == r.size() || r.size() - i - 1 > 5) return false;
    long port = 0;
    for (size_t k = i + 1; k < r.size(); ++k) {
        if (!std::isdigit(static_cast<unsigned char>(r[k]))) return false;
        port = port * 10 + (r[k] - '0');
    }
    return port >= 1 && port <= 65535;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t start = 0;
    for (;;) {
        const size_t at = s.find(sep, start);
        out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
        if (at == std::string::npos) return out;
        start = at + 1;
    }
}

/// Splits "PATH[:TAG][@DIGEST]" into its parts (the tag's ':' is the last one after the last '/').
void split_reference(const std::string& source, std::string rest, std::string* path, Reference* ref) {
    if (const size_t at = rest.find('@'); at != std::string::npos) {
        ref->digest = rest.substr(at + 1);
        rest.resize(at);
        if (!is_sha256_digest(ref->digest))
            bad(source, "the digest '" + ref->digest + "' is not sha256: followed by 64 lowercase hex digits");
    }
    const size_t slash = rest.rfind('/');
    const size_t colon = rest.rfind(':');
    if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
        const std::string tag = rest.substr(colon + 1);
        if (!valid_tag(tag))
            bad(source, "the tag '" + tag + "' is not a valid tag ([A-Za-z0-9_][A-Za-z0-9._-], at most 128)");
        if (ref->digest.empty()) ref->tag = tag;  // a digest wins over a tag (as docker pull NAME:TAG@DIGEST)
        rest.resize(colon);
    }
    if (ref->digest.empty() && ref->tag.empty()) ref->tag = "latest";
    *path = rest;
}

void check_repository(const std::string& source, const std::string& repository) {
    if (repository.empty()) bad(source, "no repository named");
    for (const std::string& c : split(repository, '/')) {
        if (!valid_component(c))
            bad(source, "the repository component '" + c +
                            "' is not valid (lowercase letters and digits, joined by '.', '_', '__' or '-')");
    }
}

}  // namespace

bool is_sha256_digest(const std::string& d) {
    if (d.size() != 7 + 64 || d.compare(0, 7, "sha256:") != 0) return false;
    for (size_t i = 7; i < d.size(); ++i) {
        const char c = d[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return true;
}

bool is_oci_source(const std::string& s) { return s.rfind("oci://", 0) == 0 || s.rfind("ollama://", 0) == 0; }

Reference parse_reference(const std::string& source, bool plain_http) {
    Reference ref;
    ref.plain_http = plain_http;
    std::string path;
    if (source.rfind("oci://", 0) == 0) {
        ref.scheme = "oci";
        split_reference(source, source.substr(6), &path, &ref);
        const size_t slash = path.find('/');
        if (slash == std::string::npos) bad(source, "expected oci://REGISTRY/REPOSITORY[:TAG|@sha256:DIGEST]");
        ref.registry = path.substr(0, slash);
        ref.repository = path.substr(slash + 1);
    } else if (source.rfind("ollama://", 0) == 0) {
        ref.scheme = "ollama";
        split_reference(source, source.substr(9), &path, &ref);
        std::vector<std::string> parts = split(path, '/');
        if (parts.size() > 3) bad(source, "expected ollama://[REGISTRY/][NAMESPACE/]MODEL[:TAG]");
        ref.registry = parts.size() == 3 ? parts[0] : kOllamaRegistry;
        const std::string ns = parts.size() >= 2 ? parts[parts.size() - 2] : "library";
        ref.repository = ns + "/" + parts.back();
    } else {
        bad(source, "not an oci:// or ollama:// reference");
    }
    if (!valid_registry(ref.registry)) bad(source, "the registry '" + ref.registry + "' is not HOST[:PORT]");
    if (ref.registry == "docker.io" || ref.registry == "index.docker.io") {
        ref.registry = kDockerHubRegistry;
        if (ref.repository.find('/') == std::string::npos) ref.repository = "library/" + ref.repository;
    }
    check_repository(source, ref.repository);
    return ref;
}

std::string Reference::base_url() const { return (plain_http ? "http://" : "https://") + registry; }

std::string Reference::manifest_url(const std::string& r) const {
    return base_url() + "/v2/" + repository + "/manifests/" + (r.empty() ? reference() : r);
}

std::string Reference::blob_url(const std::string& d) const { return base_url() + "/v2/" + repository + "/blobs/" + d; }

std::string Reference::shown() const {
    return registry + "/" + repository + (digest.empty() ? ":" + tag : "@" + digest);
}

std::string Reference::last_component() const {
    const size_t slash = repository.rfind('/');
    return slash == std::string::npos ? repository : repository.substr(slash + 1);
}

}  // namespace gguf_mount::remote::oci
