// Registry credentials where Docker and podman keep them: $DOCKER_CONFIG/config.json (default
// ~/.docker/config.json), then REGISTRY_AUTH_FILE or $XDG_RUNTIME_DIR/containers/auth.json
// (/run/containers/UID/auth.json without XDG_RUNTIME_DIR), then
// ${XDG_CONFIG_HOME:-~/.config}/containers/auth.json (containers-auth.json(5), the same form). In each file, as Docker's cli/config/credentials
// reads it: the credential helper of the registry ("credHelpers": {"HOST": "NAME"}), else the
// default one ("credsStore": "NAME"), each run as `docker-credential-NAME get` with the
// registry's server address on its standard input (docker-credential-helpers' protocol: JSON
// {"ServerURL", "Username", "Secret"} out; Username "<token>" means Secret is an identity
// token); then, when a helper has nothing for the registry, the "auths" entries ("auth": base64
// of "user:password", "identitytoken": an OAuth refresh token). The files are read, never
// written; no value is ever logged or put in a message (only the file's path and the helper's
// name).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>

namespace gguf_mount::remote::oci {

/// Looks up an environment variable ("" when unset); tests pass their own.
using EnvGetter = std::function<std::string(const std::string&)>;

/// Where credentials are looked for.
struct CredentialLookup {
    EnvGetter env;  ///< empty: the process environment (getenv)
    /// How long a credential helper may run before it is killed (the S3 credential_process's
    /// bound, remote/s3/credential_process.hpp).
    std::chrono::milliseconds helper_timeout{std::chrono::seconds(60)};
    /// The user whose /run/containers/UID/auth.json is read when XDG_RUNTIME_DIR is unset.
    uid_t uid = ::geteuid();
};

/// Credentials for one registry.
struct Credentials {
    std::string username, password;  ///< Basic, or the token service's HTTP Basic auth
    std::string identity_token;      ///< OAuth2 refresh token (docker login with a token)
    /// Where they came from: the file, or "docker-credential-NAME (credHelpers in FILE)" ("" when
    /// none were found).
    std::string source;
    /// Every file (and helper) looked in, "; "-separated, for an UNAUTHORIZED message.
    std::string tried;
    bool found() const { return !username.empty() || !identity_token.empty(); }
};

/// The credentials of `registry` (host[:port]; Docker Hub's entry is also found under
/// "https://index.docker.io/v1/" and "docker.io"). Keys of "auths" match as the host, or a URL
/// whose host[:port] it is; so do the keys of "credHelpers". A file that is absent is skipped;
/// one that is not JSON or whose entry does not decode is skipped with one warning naming the
/// file (never its content). A helper is found on $PATH (a NAME with anything but
/// [A-Za-z0-9._-] is refused) and run by run_helper (remote/helper_process.hpp: no shell, a
/// timeout, bounded output); one that fails the ownership rule (ownership_problem), cannot be
/// run, exits non-zero (other than docker-credential-helpers' "credentials not found"), times
/// out or answers no Secret is skipped with one warning naming it and the file, with at most the
/// first line of its standard error (never its standard output). Never throws but
/// std::bad_alloc.
Credentials find_credentials(const std::string& registry, const CredentialLookup& lookup);

}  // namespace gguf_mount::remote::oci
