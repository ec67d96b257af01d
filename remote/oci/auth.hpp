// Registry authorization (distribution-spec; Docker's "Token Authentication Specification"):
// a registry answers 401 with WWW-Authenticate: Bearer realm="...",service="...",scope="..." (a
// token service to ask) or Basic realm="..." (credentials on every request). Tokens are asked
// anonymously or with the credentials of the registry's host from the files and helpers Docker
// and podman read (remote/oci/credentials.hpp). Nothing here logs a secret.
#pragma once

#include <chrono>
#include <mutex>
#include <string>

#include "remote/http.hpp"
#include "remote/oci/credentials.hpp"
#include "remote/oci/reference.hpp"

namespace gguf_mount::remote::oci {

/// A parsed WWW-Authenticate challenge (RFC 9110 11.6.1; one scheme).
struct Challenge {
    std::string scheme;  ///< "bearer" or "basic" (lowercase); "" when none was sent
    std::string realm, service, scope;
};

/// Parses the first challenge of a WWW-Authenticate value. Never throws but std::bad_alloc.
Challenge parse_challenge(const std::string& header);

/// One registry's authorization, shared by its signer's threads.
class Auth {
public:
    /// `ref`: the registry and repository (the scope asked is "repository:REPO:pull");
    /// `http`: timeouts and --ca-cert for the ping and the token service.
    Auth(Reference ref, HttpOptions http, CredentialLookup lookup = {});

    /// GET /v2/ once: learns whether the registry wants a Bearer token, Basic, or nothing.
    /// Throws gguf::Error(Io) naming the registry when it cannot be reached.
    void discover();
    /// The Authorization header value for the next request ("" for none). A Bearer token is
    /// fetched on first use and again when it is within 10 % (at least 5 s) of its expires_in
    /// (60 s when the service gives none). Throws HttpError (one line) when the token service
    /// refuses or cannot be reached.
    std::string authorization();
    /// Drops the token (a 401 said it is no longer good) and fetches a new one. True when a
    /// new one was had. Never throws.
    bool renew() noexcept;
    /// Where credentials were looked for, for messages ("~/.docker/config.json", "no
    /// credentials found in ..."), never their value.
    std::string credential_source() const;

private:
    /// Asks the token service (GET with Basic credentials or none; POST of the refresh token
    /// for an identity token); under mutex_.
    void fetch_token();
    /// find_credentials once; under mutex_.
    void look_up_credentials();

    Reference ref_;
    HttpOptions http_;
    CredentialLookup lookup_;
    mutable std::mutex mutex_;
    Challenge challenge_;
    bool credentials_looked_ = false;
    Credentials credentials_;
    std::string token_;
    std::string refresh_token_;  // the identity token, or the one the token service rotated it to
    std::chrono::steady_clock::time_point renew_at_{};
    std::string tried_;
};

}  // namespace gguf_mount::remote::oci
