// The RequestSigner of one registry (remote/client.hpp): the Accept header of manifest GETs, the
// Authorization a registry asks for (a Bearer token from its token service, or Basic), and the
// one-line names of its error answers (distribution-spec "Error Codes"). Tokens come from
// remote/oci/auth.hpp.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "remote/client.hpp"
#include "remote/oci/auth.hpp"
#include "remote/oci/reference.hpp"

namespace gguf_mount::remote::oci {

/// The one-line message of a registry's error answer: "REGISTRY/REPOSITORY:REF: CODE: message
/// (HTTP STATUS)" with advice for UNAUTHORIZED (the credential source tried), DENIED,
/// TOOMANYREQUESTS (the limit) and NAME_UNKNOWN / MANIFEST_UNKNOWN; `body` is the answer's JSON
/// ({"errors":[{"code","message"}]}, "" or anything else when absent). Never holds a secret.
std::string describe_registry_error(const Reference& ref, long status, const std::string& body,
                                    const std::string& credential_source);

/// Signs the requests to `ref`'s registry origin (and nothing else: a blob GET redirected to a
/// CDN on another host gets no Authorization, the client's rule). Thread-safe.
class RegistrySigner final : public RequestSigner {
public:
    /// `auth`: the registry's authorization state (its challenge learnt by Auth::discover).
    RegistrySigner(Reference ref, std::shared_ptr<Auth> auth);

    bool covers(const std::string& url) const noexcept override;
    /// Adds Accept to manifest requests and the Authorization the registry asks for (a token
    /// fetched, or refreshed before it expires, here). Throws HttpError (one line naming the
    /// registry and the credential source, never a secret) when no token can be had.
    void sign(Request& request) const override;
    /// After a 401: a new token (Auth::renew). True when one was had.
    bool refresh() const noexcept override;
    /// describe_registry_error for answers with a JSON error document or 401/403/404/429.
    std::optional<HttpError> explain(const FailedAnswer& answer) const override;

    const Reference& reference() const noexcept { return ref_; }

private:
    Reference ref_;
    std::string origin_;
    std::shared_ptr<Auth> auth_;
};

}  // namespace gguf_mount::remote::oci
