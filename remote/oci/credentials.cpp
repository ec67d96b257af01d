#include "remote/oci/credentials.hpp"

#include <sys/stat.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include "gguf/error.hpp"
#include "remote/helper_process.hpp"
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

/// The server address a credential helper is asked for (what `docker login` stores): Docker
/// Hub's "https://index.docker.io/v1/" (Docker's registry.IndexServer), else host[:port].
std::string server_address(const std::string& registry) {
    return names_of(registry).size() > 1 ? "https://index.docker.io/v1/" : registry;
}

/// The helper named for `registry` in the file's "credHelpers", else its "credsStore" ("" for
/// none); `*key` gets which of the two named it.
std::string helper_of(const nlohmann::json& j, const std::string& registry, std::string* key) {
    auto helpers = j.find("credHelpers");
    if (helpers != j.end() && helpers->is_object()) {
        for (const std::string& name : names_of(registry)) {
            for (auto it = helpers->begin(); it != helpers->end(); ++it) {
                if (key_host(it.key()) == name && it.value().is_string() && !it.value().get<std::string>().empty()) {
                    *key = "credHelpers";
                    return it.value().get<std::string>();
                }
            }
        }
    }
    auto store = j.find("credsStore");
    if (store != j.end() && store->is_string() && !store->get<std::string>().empty()) {
        *key = "credsStore";
        return store->get<std::string>();
    }
    return "";
}

bool helper_name_ok(const std::string& name) {
    if (name.empty() || name.size() > 64) return false;
    for (unsigned char ch : name) {
        if (!std::isalnum(ch) && ch != '.' && ch != '_' && ch != '-') return false;
    }
    return name[0] != '.';
}

/// Asks the helper `name` (named by `key` of `path`) for `registry`'s credentials. True when
/// it had them (*c filled); false, with a warning unless it simply had none, otherwise.
bool ask_helper(const std::string& name, const std::string& key, const std::string& path, const std::string& registry,
                const CredentialLookup& lookup, Credentials* c) {
    const std::string program_name = "docker-credential-" + name;
    const std::string what = path + ": " + key + " \"" + name + "\"";
    if (!helper_name_ok(name)) {
        spdlog::warn("{}: not a helper name (letters, digits, '.', '_', '-'); not used", what);
        return false;
    }
    const std::string program = find_on_path(program_name);
    if (program.empty()) {
        spdlog::warn("{}: {} not found on $PATH; not used", what, program_name);
        return false;
    }
    if (std::string why = ownership_problem(program, "the credential helper"); !why.empty()) {
        spdlog::warn("{}: {}: not run (a credential helper and the folders above it must belong to this process's "
                     "uid or root and not be writable by group or others, as ssh requires of its files)",
                     what, why);
        return false;
    }
    HelperRun run;
    try {
        run = run_helper({program, "get"}, server_address(registry), what + ": " + program_name,
                         lookup.helper_timeout);
    } catch (const gguf::Error& e) {
        spdlog::warn("{}; not used", e.what());
        return false;
    }
    if (run.exit_status != 0) {
        // docker-credential-helpers' credentials.ErrCredentialsNotFound, which helpers print on
        // their standard output: nothing stored for this registry.
        const bool none = run.out.find("credentials not found") != std::string::npos;
        wipe(run.out);
        if (!none) {
            const std::string line = first_line_of(run.err);
            spdlog::warn("{}: {} exited with status {}{}; not used", what, program_name, run.exit_status,
                         line.empty() ? "" : ": " + line);
        }
        return false;
    }
    nlohmann::json answer = nlohmann::json::parse(run.out, nullptr, false);
    wipe(run.out);
    const std::string user = answer.is_object() && answer.value("Username", nlohmann::json()).is_string()
                                 ? answer["Username"].get<std::string>()
                                 : std::string();
    std::string secret = answer.is_object() && answer.value("Secret", nlohmann::json()).is_string()
                             ? answer["Secret"].get<std::string>()
                             : std::string();
    if (answer.is_object()) answer.clear();
    if (secret.empty()) {
        spdlog::warn("{}: {} answered no \"Secret\" (not JSON with Username and Secret); not used", what,
                     program_name);
        return false;
    }
    // docker/cli credentials/native_store.go: the user "<token>" marks an identity token.
    if (user == "<token>") {
        c->identity_token = std::move(secret);
        c->username.clear();
        c->password.clear();
    } else {
        c->username = user;
        c->password = std::move(secret);
        c->identity_token.clear();
    }
    c->source = program_name + " (" + key + " in " + path + ")";
    return true;
}

/// Looks in one file; true when credentials of `registry` were found (an entry that holds no
/// usable credentials gets a warning).
/// Bound on a credentials file's size (bytes): the AWS files' bound.
constexpr off_t kMaxCredentialFileBytes = off_t{1} << 20;

bool look_in(const std::string& path, const std::string& registry, const CredentialLookup& lookup, Credentials* c) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return false;  // absent: the next file
    // The file speaks for whoever may write it (and names helper programs to run): the
    // ownership rule of the AWS files and helpers (remote/helper_process.hpp).
    if (const std::string why = ownership_problem(path, "the registry credentials file"); !why.empty()) {
        spdlog::warn("{}", why);
        return false;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > kMaxCredentialFileBytes) {
        spdlog::warn("{}: not a regular file of at most 1 MiB; its registry credentials are not used", path);
        return false;
    }
    std::ifstream in(path);
    if (!in) return false;
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (!j.is_object()) {
        spdlog::warn("{}: not a JSON object; its registry credentials are not used", path);
        return false;
    }
    std::string key;
    if (const std::string helper = helper_of(j, registry, &key); !helper.empty()) {
        if (ask_helper(helper, key, path, registry, lookup, c)) return true;
        c->tried += "; docker-credential-" + helper + " (" + key + " in " + path + ")";
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
    // containers-auth.json(5): the primary file (REGISTRY_AUTH_FILE, else the runtime
    // directory's; with XDG_RUNTIME_DIR unset, as in a root shell, containers/image and so
    // podman, skopeo and buildah write /run/containers/UID/auth.json), then the config home's.
    if (std::string f = get(lookup, "REGISTRY_AUTH_FILE"); !f.empty()) {
        files.push_back(f);
    } else if (std::string x = get(lookup, "XDG_RUNTIME_DIR"); !x.empty()) {
        files.push_back(x + "/containers/auth.json");
    } else {
        files.push_back("/run/containers/" + std::to_string(lookup.uid) + "/auth.json");
    }
    std::string config_home = get(lookup, "XDG_CONFIG_HOME");
    if (config_home.empty() && !get(lookup, "HOME").empty()) config_home = get(lookup, "HOME") + "/.config";
    if (!config_home.empty()) files.push_back(config_home + "/containers/auth.json");
    for (const std::string& f : files) {
        c.tried += (c.tried.empty() ? "" : "; ") + f;
        if (look_in(f, registry, lookup, &c)) return c;
    }
    return c;
}

}  // namespace gguf_mount::remote::oci
