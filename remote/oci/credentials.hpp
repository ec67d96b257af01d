// Registry credentials where Docker and podman keep them: $DOCKER_CONFIG/config.json (default
// ~/.docker/config.json) "auths" entries ("auth": base64 of "user:password", "identitytoken":
// an OAuth refresh token), then REGISTRY_AUTH_FILE or $XDG_RUNTIME_DIR/containers/auth.json
// (containers-auth.json(5), the same "auths" form). The files are read, never written; no
// value is ever logged or put in a message (only the file's path).
#pragma once

#include <functional>
#include <string>

namespace gguf_mount::remote::oci {

/// Looks up an environment variable ("" when unset); tests pass their own.
using EnvGetter = std::function<std::string(const std::string&)>;

/// Where credentials are looked for.
struct CredentialLookup {
    EnvGetter env;  ///< empty: the process environment (getenv)
};

/// Credentials for one registry.
struct Credentials {
    std::string username, password;  ///< Basic, or the token service's HTTP Basic auth
    std::string identity_token;      ///< OAuth2 refresh token (docker login with a token)
    std::string source;              ///< the file they came from ("" when none were found)
    /// Every file looked in, "; "-separated, for an UNAUTHORIZED message.
    std::string tried;
    bool found() const { return !username.empty() || !identity_token.empty(); }
};

/// The credentials of `registry` (host[:port]; Docker Hub's entry is also found under
/// "https://index.docker.io/v1/" and "docker.io"). Keys of "auths" match as the host, or a URL
/// whose host[:port] it is. A file that is absent is skipped; one that is not JSON or whose
/// entry does not decode is skipped with one warning naming the file (never its content).
/// Never throws but std::bad_alloc.
Credentials find_credentials(const std::string& registry, const CredentialLookup& lookup);

}  // namespace gguf_mount::remote::oci
