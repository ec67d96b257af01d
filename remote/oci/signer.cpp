#include "remote/oci/signer.hpp"

#include <cerrno>

#include <nlohmann/json.hpp>

#include "remote/oci/manifest.hpp"
#include "remote/url_parts.hpp"

namespace gguf_mount::remote::oci {

std::string describe_registry_error(const Reference& ref, long status, const std::string& body,
                                    const std::string& credential_source) {
    std::string code, message;
    nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("errors") && j["errors"].is_array() && !j["errors"].empty() &&
        j["errors"][0].is_object()) {
        code = j["errors"][0].value("code", std::string()).substr(0, 64);
        message = j["errors"][0].value("message", std::string()).substr(0, 200);
    }
    if (code.empty()) {
        code = status == 401   ? "UNAUTHORIZED"
               : status == 403 ? "DENIED"
               : status == 404 ? "NOT FOUND"
               : status == 429 ? "TOOMANYREQUESTS"
                               : "HTTP " + std::to_string(status);
    }
    for (char& c : message) {
        if (c == '\n' || c == '\r') c = ' ';
    }
    std::string advice;
    if (code == "NAME_UNKNOWN") advice = "the registry has no repository " + ref.repository;
    // Registry 2.8 answers MANIFEST_UNKNOWN for a repository it does not have, too.
    else if (code == "MANIFEST_UNKNOWN")
        advice = "no manifest " + ref.reference() + " in " + ref.repository + " (no such tag, or no such repository)";
    else if (code == "UNAUTHORIZED")
        advice = credential_source.empty() ? "the registry wants credentials (docker login / podman login)"
                                           : credential_source;
    else if (code == "DENIED") advice = "the credentials are not allowed to pull this repository";
    else if (code == "TOOMANYREQUESTS")
        advice = "the registry's pull rate limit was reached (credentials may have a higher one)";
    return ref.shown() + ": " + code + (message.empty() ? "" : ": " + message) + " (HTTP " + std::to_string(status) +
           ")" + (advice.empty() ? "" : "; " + advice);
}

RegistrySigner::RegistrySigner(Reference ref, std::shared_ptr<Auth> auth)
    : ref_(std::move(ref)), origin_(ref_.base_url() + "/"), auth_(std::move(auth)) {}

bool RegistrySigner::covers(const std::string& url) const noexcept {
    try {
        return same_origin(url, origin_);
    } catch (...) {
        return false;
    }
}

void RegistrySigner::sign(Request& request) const {
    if (request.url.find("/manifests/") != std::string::npos) request.headers.emplace_back("Accept", manifest_accept());
    if (!auth_) return;
    const std::string authorization = auth_->authorization();
    if (!authorization.empty()) request.headers.emplace_back("Authorization", authorization);
}

bool RegistrySigner::refresh() const noexcept { return auth_ && auth_->renew(); }

std::optional<HttpError> RegistrySigner::explain(const FailedAnswer& a) const {
    const bool json_error = a.body.find("\"errors\"") != std::string::npos;
    if (!json_error && a.status != 401 && a.status != 403 && a.status != 404 && a.status != 429) return std::nullopt;
    if (a.status >= 500) return std::nullopt;  // the client retries, then names it
    const std::string line = describe_registry_error(ref_, a.status, a.body, auth_ ? auth_->credential_source() : "");
    // A 429 is waited out by the client (Retry-After, RateLimit), which then names the limit:
    // retryable, with its status kept.
    const bool limited = a.status == 429;
    const int err = a.status == 401 || a.status == 403 ? EACCES : a.status == 404 || a.status == 410 ? ENOENT : EIO;
    // A manifest answer is named by the reference, a blob's by its URL.
    const bool manifest = a.url.find("/manifests/") != std::string::npos;
    return HttpError(manifest ? line : url_for_message(a.url) + ": " + line.substr(ref_.shown().size() + 2), err,
                     a.status, limited);
}

}  // namespace gguf_mount::remote::oci
