#include "remote/s3/sigv4.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "common/text.hpp"
#include "gguf/error.hpp"

namespace gguf_mount::remote::s3 {
namespace {

using gguf::Code;
using gguf::Error;

std::string sha256_hex(std::string_view data) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr) != 1)
        throw Error(Code::Io, "SigV4: SHA-256 failed (OpenSSL)");
    return gguf::hex_bytes(std::string_view(reinterpret_cast<const char*>(md), n));
}

/// HMAC-SHA256(key, data) as 32 raw bytes (OpenSSL EVP_Q_mac).
std::string hmac_sha256(std::string_view key, std::string_view data) {
    unsigned char out[EVP_MAX_MD_SIZE];
    size_t n = 0;
    char digest[] = "SHA256";
    if (EVP_Q_mac(nullptr, "HMAC", nullptr, digest, nullptr, key.data(), key.size(),
                  reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, sizeof out, &n) == nullptr)
        throw Error(Code::Io, "SigV4: HMAC-SHA256 failed (OpenSSL)");
    std::string result(reinterpret_cast<const char*>(out), n);
    OPENSSL_cleanse(out, sizeof out);
    return result;
}

/// A string that holds key material, wiped when it goes out of scope.
struct Wiped {
    std::string bytes;
    ~Wiped() {
        if (!bytes.empty()) OPENSSL_cleanse(bytes.data(), bytes.size());
    }
};

/// The SigV4 signing key of `secret` for `date`, `region` and `service` (four HMACs).
std::string derive_signing_key(const std::string& secret, const std::string& date, const std::string& region,
                               const std::string& service) {
    Wiped prefixed{"AWS4" + secret};
    Wiped k_date{hmac_sha256(prefixed.bytes, date)};
    Wiped k_region{hmac_sha256(k_date.bytes, region)};
    Wiped k_service{hmac_sha256(k_region.bytes, service)};
    return hmac_sha256(k_service.bytes, "aws4_request");
}

/// A header value as SigV4 canonicalizes it: leading and trailing spaces/tabs removed, each run of
/// spaces/tabs inside collapsed to one space.
std::string canonical_value(std::string_view v) {
    std::string out;
    bool pending_space = false;
    for (char c : v) {
        if (c == ' ' || c == '\t') {
            pending_space = !out.empty();
            continue;
        }
        if (pending_space) out += ' ';
        pending_space = false;
        out += c;
    }
    return out;
}

/// AWS's UriEncode: every byte but A-Z a-z 0-9 - _ . ~ as %XX (uppercase hex); '/' kept when
/// `keep_slash`. Byte-wise, so UTF-8 is encoded per byte.
std::string uri_encode(std::string_view text, bool keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(text.size());
    for (char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 0xF];
        }
    }
    return out;
}

void check_header_text(std::string_view what, std::string_view text) {
    if (text.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos)
        throw Error(Code::BadArgument, "SigV4: " + std::string(what) + " holds CR, LF or NUL");
}

}  // namespace

SigningKeyCache::~SigningKeyCache() { wipe(); }

void SigningKeyCache::wipe() noexcept {
    for (std::string* s : {&secret_, &key_}) {
        if (!s->empty()) OPENSSL_cleanse(s->data(), s->size());
        s->clear();
    }
}

std::string SigningKeyCache::key(const std::string& secret_access_key, const std::string& date,
                                 const std::string& region, const std::string& service) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (key_.empty() || date != date_ || region != region_ || service != service_ ||
        secret_access_key.size() != secret_.size() ||
        CRYPTO_memcmp(secret_access_key.data(), secret_.data(), secret_.size()) != 0) {
        std::string fresh = derive_signing_key(secret_access_key, date, region, service);
        wipe();
        key_ = std::move(fresh);
        secret_ = secret_access_key;
        date_ = date;
        region_ = region;
        service_ = service;
        ++derivations_;
    }
    return key_;
}

unsigned SigningKeyCache::derivations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return derivations_;
}

std::string Credentials::redacted() const {
    std::string id = access_key_id;
    if (id.size() > 8) {
        for (size_t i = 4; i + 4 < id.size(); ++i) id[i] = '*';
    } else {
        id.assign(id.size(), '*');
    }
    return "access key " + id + (session_token.empty() ? "" : " (with a session token)");
}

std::string canonical_path(std::string_view raw_path) { return uri_encode(raw_path, /*keep_slash=*/true); }

std::string canonical_query(const std::vector<Pair>& raw_query) {
    std::vector<Pair> encoded;
    encoded.reserve(raw_query.size());
    for (const auto& [name, value] : raw_query) encoded.emplace_back(uri_encode(name, false), uri_encode(value, false));
    std::sort(encoded.begin(), encoded.end());
    std::string out;
    for (const auto& [name, value] : encoded) {
        if (!out.empty()) out += '&';
        out += name;
        out += '=';
        out += value;
    }
    return out;
}

std::string amz_date(std::time_t t) {
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
    return buf;
}

SignedRequest sign(const SigningRequest& request, const Credentials& credentials, const std::string& region,
                   std::time_t now, const std::string& service, SigningKeyCache* keys) {
    if (credentials.access_key_id.empty() || credentials.secret_access_key.empty())
        throw Error(Code::BadArgument, "SigV4: no access key id or secret access key to sign with");
    if (request.host.empty()) throw Error(Code::BadArgument, "SigV4: no host to sign for");
    if (region.empty()) throw Error(Code::BadArgument, "SigV4: no region to sign for");
    if (request.path.empty() || request.path[0] != '/')
        throw Error(Code::BadArgument, "SigV4: the path does not start with '/'");
    check_header_text("the host", request.host);
    check_header_text("the session token", credentials.session_token);

    SignedRequest out;
    out.amz_date = amz_date(now);
    const std::string date = out.amz_date.substr(0, 8);

    // Headers to sign, by lowercase name (std::map sorts them as SigV4 wants); repeated names
    // are joined with ',' as the specification says. `sent` keeps the spelling to send.
    std::map<std::string, std::string> signed_values;
    std::vector<Pair> sent;
    auto add = [&](const std::string& name, const std::string& value) {
        check_header_text("header " + name, name);
        check_header_text("the value of header " + name, value);
        std::string key = gguf::ascii_lower(name);
        std::string v = canonical_value(value);
        auto it = signed_values.find(key);
        if (it == signed_values.end()) {
            signed_values.emplace(key, v);
        } else {
            it->second += "," + v;
        }
        sent.emplace_back(name, value);
    };
    add("Host", request.host);
    for (const auto& [name, value] : request.headers) {
        std::string key = gguf::ascii_lower(name);
        if (key == "host" || key == "x-amz-date" || key == "x-amz-content-sha256" || key == "x-amz-security-token" ||
            key == "authorization")
            throw Error(Code::BadArgument, "SigV4: header " + name + " is set by the signer");
        add(name, value);
    }
    add("x-amz-content-sha256", request.payload_hash);
    add("x-amz-date", out.amz_date);
    if (!credentials.session_token.empty()) add("x-amz-security-token", credentials.session_token);

    std::string canonical_headers;
    std::string signed_headers;
    for (const auto& [name, value] : signed_values) {
        canonical_headers += name + ":" + value + "\n";
        if (!signed_headers.empty()) signed_headers += ';';
        signed_headers += name;
    }

    const std::string path = canonical_path(request.path);
    const std::string query = canonical_query(request.query);
    out.canonical_request = request.method + "\n" + path + "\n" + query + "\n" + canonical_headers + "\n" +
                            signed_headers + "\n" + request.payload_hash;

    const std::string scope = date + "/" + region + "/" + service + "/aws4_request";
    out.string_to_sign =
        "AWS4-HMAC-SHA256\n" + out.amz_date + "\n" + scope + "\n" + sha256_hex(out.canonical_request);

    Wiped k_signing{keys ? keys->key(credentials.secret_access_key, date, region, service)
                         : derive_signing_key(credentials.secret_access_key, date, region, service)};
    out.signature = gguf::hex_bytes(hmac_sha256(k_signing.bytes, out.string_to_sign));

    out.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
                        ",SignedHeaders=" + signed_headers + ",Signature=" + out.signature;
    out.headers = std::move(sent);
    out.headers.emplace_back("Authorization", out.authorization);
    out.url = request.scheme + "://" + request.host + path + (query.empty() ? "" : "?" + query);
    return out;
}

}  // namespace gguf_mount::remote::s3
