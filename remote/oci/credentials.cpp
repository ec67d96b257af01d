#include "remote/oci/credentials.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include "remote/oci/reference.hpp"

namespace gguf_mount::remote::oci {
namespace {

std::string get(const CredentialLookup& l, const std::string& name) {
    if (l.env) return l.env(name);
    const char* v = std::getenv(name.c_str());
    return v ? v : "";
}

/// Base64 (RFC 4648) decoding through OpenSSL; nullopt-like "" plus false when it is not base64.
bool base64_decode(const std::string& in, std::string* out) {
    std::string s;
    for (char c : in) {
        if (c != '\n' && c != '\r' && c != ' ') s += c;
    }
    if (s.empty() || s.size() % 4 != 0) return false;
    std::string buf(s.size() / 4 * 3, '\0');
    const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(buf.data()),
                                  reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
    if (n < 0) return false;
    size_t len = static_cast<size_t>(n);
    if (s.size() >= 1 && s[s.size() - 1] == '=') --len;
    if (s.size() >= 2 && s[s.size() - 2] == '=') --len;
    buf.resize(len);
    *out = std::move(buf);
    return true;
}

/// host[:port] of an "auths" key: "https://index.docker.io/v1/" -> "index.docker.io".
std::string key_host(std::string key) {
    if (const size_t s = key.find("://"); s != std::string::npos) key = key.substr(s + 3);
    if (const size_t slash = key.find('/'); slash != std::string::npos) key.resize(slash);
    return key;
}

std::vector<std::string> names_of(const std::string& registry) {
    if (registry == kDockerHubRegistry || registry == "docker.io" || registry == "index.docker.io")
        return {kDockerHubRegistry, "index.docker.io", "docker.io"};
    return {registry};
}

/// Looks in one file; true when an entry of `registry` was found (it may hold no usable
/// credentials: a warning then).
bool look_in(const std::string& path, const std::string& registry, Credentials* c) {
    std::ifstream in(path);
    if (!in) return false;
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (!j.is_object()) {
        spdlog::warn("{}: not a JSON object; its registry credentials are not used", path);
        return false;
    }
    auto auths = j.find("auths");
    if (auths == j.end() || !auths->is_object()) return false;
    for (const std::string& name : names_of(registry)) {
        for (auto it = auths->begin(); it != auths->end(); ++it) {
            if (key_host(it.key()) != name || !it.value().is_object()) continue;
            const nlohmann::json& e = it.value();
            std::string user = e.value("username", std::string());
            std::string pass = e.value("password", std::string());
            const std::string auth = e.value("auth", std::string());
            if (!auth.empty()) {
                std::string decoded;
                const size_t colon = base64_decode(auth, &decoded) ? decoded.find(':') : std::string::npos;
                if (colon == std::string::npos) {
                    spdlog::warn("{}: the \"auth\" of {} is not base64 of USER:PASSWORD; not used", path, it.key());
                    continue;
                }
                user = decoded.substr(0, colon);
                pass = decoded.substr(colon + 1);
            }
            c->identity_token = e.value("identitytoken", std::string());
            c->username = user;
            c->password = pass;
            if (!c->found()) continue;
            c->source = path;
            return true;
        }
    }
    return false;
}

}  // namespace

Credentials find_credentials(const std::string& registry, const CredentialLookup& lookup) {
    Credentials c;
    std::vector<std::string> files;
    std::string docker = get(lookup, "DOCKER_CONFIG");
    if (docker.empty() && !get(lookup, "HOME").empty()) docker = get(lookup, "HOME") + "/.docker";
    if (!docker.empty()) files.push_back(docker + "/config.json");
    if (std::string f = get(lookup, "REGISTRY_AUTH_FILE"); !f.empty()) {
        files.push_back(f);
    } else if (std::string x = get(lookup, "XDG_RUNTIME_DIR"); !x.empty()) {
        files.push_back(x + "/containers/auth.json");
    }
    for (const std::string& f : files) {
        c.tried += (c.tried.empty() ? "" : "; ") + f;
        if (look_in(f, registry, &c)) return c;
    }
    return c;
}

}  // namespace gguf_mount::remote::oci
