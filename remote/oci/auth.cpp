#include "remote/oci/auth.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <memory>

#include <nlohmann/json.hpp>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include "gguf/error.hpp"
#include "remote/url_parts.hpp"

namespace gguf_mount::remote::oci {
namespace {

/// One small GET outside the block client (the ping and the token service come before the
/// client's signer can sign anything). At most 1 MiB of body.
struct SmallAnswer {
    long status = 0;
    std::string body, www_authenticate;
    std::string error;  // transport failure, "" when answered
};

size_t on_body(char* data, size_t size, size_t n, void* self) {
    auto* a = static_cast<SmallAnswer*>(self);
    if (a->body.size() + size * n > (size_t{1} << 20)) return 0;
    a->body.append(data, size * n);
    return size * n;
}

size_t on_header(char* data, size_t size, size_t n, void* self) {
    auto* a = static_cast<SmallAnswer*>(self);
    std::string line(data, size * n);
    if (line.rfind("HTTP/", 0) == 0) a->www_authenticate.clear();
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
        if (name == "www-authenticate" && a->www_authenticate.empty()) {
            std::string v = line.substr(colon + 1);
            while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(0, 1);
            while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.pop_back();
            a->www_authenticate = v.substr(0, 4096);
        }
    }
    return size * n;
}

/// GET `url` (or, with `form`, POST it as application/x-www-form-urlencoded).
SmallAnswer small_get(const std::string& url, const std::string& authorization, const HttpOptions& http,
                      const std::string* form = nullptr) {
    SmallAnswer a;
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> c(curl_easy_init(), &curl_easy_cleanup);
    if (!c) {
        a.error = "cannot set up libcurl";
        return a;
    }
    struct curl_slist* headers = nullptr;
    if (!authorization.empty()) headers = curl_slist_append(headers, ("Authorization: " + authorization).c_str());
    if (form) {
        headers = curl_slist_append(headers, "Content-Type: application/x-www-form-urlencoded");
        curl_easy_setopt(c.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(form->size()));
        curl_easy_setopt(c.get(), CURLOPT_POSTFIELDS, form->c_str());
    }
    const long timeout = static_cast<long>(http.net_timeout.count());
    curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT, timeout);
    curl_easy_setopt(c.get(), CURLOPT_TIMEOUT, 2 * timeout);
    curl_easy_setopt(c.get(), CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c.get(), CURLOPT_FOLLOWLOCATION, 0L);  // a token service answers itself
    curl_easy_setopt(c.get(), CURLOPT_USERAGENT, "gguf-mount");
    if (!http.ca_cert.empty()) curl_easy_setopt(c.get(), CURLOPT_CAINFO, http.ca_cert.c_str());
    if (headers) curl_easy_setopt(c.get(), CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, &on_body);
    curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &a);
    curl_easy_setopt(c.get(), CURLOPT_HEADERFUNCTION, &on_header);
    curl_easy_setopt(c.get(), CURLOPT_HEADERDATA, &a);
    const CURLcode rc = curl_easy_perform(c.get());
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
        a.error = curl_easy_strerror(rc);
        return a;
    }
    curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &a.status);
    return a;
}

std::string base64(const std::string& in) {
    std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
    const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                  reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
    out.resize(n < 0 ? 0 : static_cast<size_t>(n));
    return out;
}

/// Percent-encodes a query value (libcurl: RFC 3986 unreserved characters kept).
std::string query_value(const std::string& s) {
    std::unique_ptr<char, decltype(&curl_free)> e(curl_easy_escape(nullptr, s.c_str(), static_cast<int>(s.size())),
                                                  &curl_free);
    return e ? std::string(e.get()) : std::string();
}

}  // namespace

Challenge parse_challenge(const std::string& header) {
    Challenge ch;
    size_t i = 0;
    while (i < header.size() && header[i] == ' ') ++i;
    size_t s = i;
    while (i < header.size() && header[i] != ' ') ++i;
    ch.scheme = header.substr(s, i - s);
    std::transform(ch.scheme.begin(), ch.scheme.end(), ch.scheme.begin(), [](unsigned char c) { return std::tolower(c); });
    // auth-params: name=value or name="quoted", comma-separated.
    while (i < header.size()) {
        while (i < header.size() && (header[i] == ' ' || header[i] == ',')) ++i;
        s = i;
        while (i < header.size() && header[i] != '=' && header[i] != ',') ++i;
        std::string name = header.substr(s, i - s);
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
        if (i >= header.size() || header[i] != '=') continue;
        ++i;
        std::string value;
        if (i < header.size() && header[i] == '"') {
            for (++i; i < header.size() && header[i] != '"'; ++i) {
                if (header[i] == '\\' && i + 1 < header.size()) ++i;
                value += header[i];
            }
            ++i;
        } else {
            s = i;
            while (i < header.size() && header[i] != ',') ++i;
            value = header.substr(s, i - s);
        }
        if (name == "realm") ch.realm = value;
        else if (name == "service") ch.service = value;
        else if (name == "scope") ch.scope = value;
    }
    return ch;
}

namespace {

/// True when libcurl's error text `error` is a TLS failure (a plain-http registry asked over
/// https answers the handshake with garbage), where --plain-http may be what was meant; not
/// for a name that does not resolve or a port nobody listens on.
bool tls_failure(const std::string& error) {
    return error.find("SSL") != std::string::npos || error.find("TLS") != std::string::npos;
}

}  // namespace

Auth::Auth(Reference ref, HttpOptions http, CredentialLookup lookup)
    : ref_(std::move(ref)), http_(std::move(http)), lookup_(std::move(lookup)) {}

void Auth::discover() {
    const std::string url = ref_.base_url() + "/v2/";
    SmallAnswer a = small_get(url, "", http_);
    if (!a.error.empty()) {
        const std::string hint = !ref_.plain_http && tls_failure(a.error)
                                     ? " (a registry without TLS: --plain-http)"
                                     : " (mount and merge --offline serve what an earlier mount or prefetch cached)";
        throw gguf::Error(gguf::Code::Io,
                          ref_.shown() + ": registry " + ref_.base_url() + " cannot be reached: " + a.error + hint, EIO);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (a.status == 401) challenge_ = parse_challenge(a.www_authenticate);
    spdlog::debug("{}: /v2/ answered {} ({} authorization)", ref_.registry, a.status,
                  challenge_.scheme.empty() ? "no" : challenge_.scheme);
}

std::string Auth::credential_source() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!credentials_looked_) return "";
    if (!credentials_.source.empty()) return "credentials from " + credentials_.source;
    return "anonymous: no credentials for " + ref_.registry + " in " +
           (credentials_.tried.empty() ? std::string("(no file: DOCKER_CONFIG, HOME unset)") : credentials_.tried) +
           " (docker login, podman login or skopeo login " + ref_.registry + " writes them)";
}

void Auth::look_up_credentials() {
    if (credentials_looked_) return;
    credentials_ = find_credentials(ref_.registry, lookup_);
    credentials_looked_ = true;
    refresh_token_ = credentials_.identity_token;
}

void Auth::fetch_token() {
    look_up_credentials();
    const std::string scope = "repository:" + ref_.repository + ":pull";
    std::string url = challenge_.realm;
    if (url.empty() || !is_http_url(url))
        throw HttpError(ref_.shown() + ": the registry's Bearer challenge names no http(s) realm", EACCES, 401, false);
    url += (url.find('?') == std::string::npos ? "?" : "&");
    url += "scope=" + query_value(scope);
    if (!challenge_.service.empty()) url += "&service=" + query_value(challenge_.service);
    std::string authorization;
    std::string form;
    if (!refresh_token_.empty()) {
        // An identity token is an OAuth2 refresh token (RFC 6749 6): exchanged by POST to the
        // realm as Docker does it (distribution registry/client/auth/session.go
        // fetchTokenWithOAuth; Docker's "Token Authentication Specification", oauth.md).
        url = challenge_.realm;
        form = "grant_type=refresh_token&refresh_token=" + query_value(refresh_token_) +
               "&service=" + query_value(challenge_.service) + "&scope=" + query_value(scope) +
               "&client_id=gguf-mount";
    } else if (!credentials_.username.empty()) {
        authorization = "Basic " + base64(credentials_.username + ":" + credentials_.password);
    }
    SmallAnswer a = small_get(url, authorization, http_, form.empty() ? nullptr : &form);
    OPENSSL_cleanse(form.data(), form.size());
    const std::string realm = url_for_message(challenge_.realm);
    if (!a.error.empty())
        throw HttpError(ref_.shown() + ": token service " + realm + " cannot be reached: " + a.error, EIO, 0, true);
    if (a.status != 200) {
        throw HttpError(ref_.shown() + ": token service " + realm + " refused a token (HTTP " +
                            std::to_string(a.status) + (form.empty() ? "" : ", for the identity token") + "; " +
                            (credentials_.source.empty() ? "anonymous: no credentials for " + ref_.registry + " in " +
                                                               credentials_.tried
                                                         : "credentials from " + credentials_.source) +
                            ")",
                        EACCES, a.status, false);
    }
    nlohmann::json j = nlohmann::json::parse(a.body, nullptr, false);
    std::string token = j.is_object() ? j.value("token", std::string()) : std::string();
    if (token.empty() && j.is_object()) token = j.value("access_token", std::string());
    if (token.empty()) throw HttpError(ref_.shown() + ": token service " + realm + " answered no token", EACCES, 200, false);
    // A token service may rotate the refresh token: the new one is used from now on (memory only).
    if (!refresh_token_.empty() && j.contains("refresh_token") && j["refresh_token"].is_string() &&
        !j["refresh_token"].get<std::string>().empty())
        refresh_token_ = j["refresh_token"].get<std::string>();
    long expires = 60;  // the Token Authentication Specification's default
    if (j.contains("expires_in") && j["expires_in"].is_number()) expires = j["expires_in"].get<long>();
    if (expires < 1) expires = 1;
    const long margin = std::max<long>(expires / 10, std::min<long>(5, expires / 2));
    token_ = token;
    renew_at_ = std::chrono::steady_clock::now() + std::chrono::seconds(expires - margin);
    spdlog::debug("{}: token for {} valid {} s ({})", ref_.registry, scope, expires,
                  credentials_.source.empty() ? "anonymous" : "credentials from " + credentials_.source);
}

std::string Auth::authorization() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (challenge_.scheme == "bearer") {
        if (token_.empty() || std::chrono::steady_clock::now() >= renew_at_) fetch_token();
        return "Bearer " + token_;
    }
    if (challenge_.scheme == "basic") {
        look_up_credentials();
        if (credentials_.username.empty()) return "";
        return "Basic " + base64(credentials_.username + ":" + credentials_.password);
    }
    return "";
}

bool Auth::renew() noexcept {
    try {
        std::lock_guard<std::mutex> lock(mutex_);
        if (challenge_.scheme != "bearer") return false;
        const std::string old = token_;
        token_.clear();
        fetch_token();
        return true;
    } catch (const std::exception& e) {
        spdlog::warn("{}", e.what());
        return false;
    }
}

}  // namespace gguf_mount::remote::oci
