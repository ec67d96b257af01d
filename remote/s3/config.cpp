#include "remote/s3/config.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "gguf/error.hpp"
#include "remote/s3/aws_files.hpp"
#include "remote/s3/credential_process.hpp"
#include "remote/url_parts.hpp"

namespace gguf_mount::remote::s3 {
namespace {

using gguf::Code;
using gguf::Error;

/// An environment value, nullopt when unset or empty (the AWS tools treat both alike).
std::optional<std::string> env_value(const EnvLookup& env, const std::string& name) {
    std::optional<std::string> v = env(name);
    if (!v || v->empty()) return std::nullopt;
    return v;
}

std::optional<std::string> given(const std::optional<std::string>& v) {
    if (!v || v->empty()) return std::nullopt;
    return v;
}

/// "~/x" with $HOME, as the AWS tools expand the file variables.
std::string expand_home(const std::string& path, const EnvLookup& env) {
    if (path == "~" || path.rfind("~/", 0) == 0) return env_value(env, "HOME").value_or("") + path.substr(1);
    return path;
}

/// The two files and the profile, read once for one resolution.
struct Files {
    std::string profile;
    bool profile_named = false;  // by --profile, AWS_PROFILE or AWS_DEFAULT_PROFILE
    std::string credentials_path, config_path;
    std::optional<AwsFile> credentials, config;

    const ProfileSection* in_credentials() const {
        if (!credentials) return nullptr;
        auto it = credentials->find(profile);
        return it == credentials->end() ? nullptr : &it->second;
    }
    const ProfileSection* in_config() const {
        if (!config) return nullptr;
        auto it = config->find(profile);
        return it == config->end() ? nullptr : &it->second;
    }
};

/// $HOME, else the user's home directory from the password database (mount(8) clears the
/// environment of an fstab mount).
std::string home_dir(const EnvLookup& env) {
    if (std::optional<std::string> h = env_value(env, "HOME")) return *h;
    const struct passwd* pw = ::getpwuid(::getuid());
    return pw && pw->pw_dir ? pw->pw_dir : "";
}

Files load_files(const S3CommandOptions& options, const EnvLookup& env) {
    Files f;
    const std::string home = home_dir(env);
    // A systemd unit's credential (LoadCredential=aws-credentials:FILE, gguf-mount-remote@.service)
    // is the default credentials file: the keys never pass through argv or the environment.
    std::string default_credentials = home + "/.aws/credentials";
    if (std::optional<std::string> dir = env_value(env, "CREDENTIALS_DIRECTORY")) {
        const std::string loaded = *dir + "/aws-credentials";
        if (::access(loaded.c_str(), R_OK) == 0) default_credentials = loaded;
    }
    f.credentials_path = expand_home(env_value(env, "AWS_SHARED_CREDENTIALS_FILE").value_or(default_credentials), env);
    f.config_path = expand_home(env_value(env, "AWS_CONFIG_FILE").value_or(home + "/.aws/config"), env);
    if (std::optional<std::string> p = given(options.profile)) {
        f.profile = *p;
        f.profile_named = true;
    } else if (std::optional<std::string> e = env_value(env, "AWS_PROFILE")) {
        f.profile = *e;
        f.profile_named = true;
    } else if (std::optional<std::string> d = env_value(env, "AWS_DEFAULT_PROFILE")) {
        f.profile = *d;
        f.profile_named = true;
    } else {
        f.profile = "default";
    }
    f.credentials = read_aws_file(f.credentials_path, AwsFileKind::Credentials);
    f.config = read_aws_file(f.config_path, AwsFileKind::Config);
    if (f.profile_named && f.profile != "default" && !f.in_credentials() && !f.in_config())
        throw Error(Code::BadArgument, "AWS profile \"" + f.profile + "\" is not in " + f.credentials_path + " nor in " +
                                           f.config_path);
    return f;
}

bool is_region(const std::string& r) {
    if (r.empty() || r.size() > 64) return false;
    for (char c : r)
        if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-'))
            return false;
    return true;
}

/// A bucket name that can be the first label(s) of a host name.
bool dns_compatible(const std::string& bucket, bool allow_dots) {
    if (bucket.size() < 3 || bucket.size() > 63) return false;
    for (char c : bucket) {
        if (c == '.' && allow_dots) continue;
        if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-'))
            return false;
    }
    return bucket.front() != '-' && bucket.back() != '-';
}

/// "http(s)://HOST[:PORT][/PATH]" checked and without a trailing '/'.
std::string normalize_endpoint(const std::string& url, const std::string& from) {
    std::optional<UrlParts> p = parse_url(url);
    if (!p || (p->scheme != "http" && p->scheme != "https") || p->host.empty())
        throw Error(Code::BadArgument, from + ": endpoint \"" + url_for_message(url) + "\" is not an http:// or https:// URL");
    if (!p->query.empty() || !p->fragment.empty() || !p->user.empty())
        throw Error(Code::BadArgument, from + ": endpoint \"" + url_for_message(url) +
                                           "\" must not hold a user, a query or a fragment");
    const bool default_port = (p->scheme == "http" && p->port == "80") || (p->scheme == "https" && p->port == "443");
    std::string path = p->path_decoded;
    while (!path.empty() && path.back() == '/') path.pop_back();
    return p->scheme + "://" + p->host + (default_port ? "" : ":" + p->port) + path;
}

AddressingStyle parse_style(const std::string& v, const std::string& from) {
    if (v == "path") return AddressingStyle::Path;
    if (v == "virtual") return AddressingStyle::Virtual;
    if (v == "auto") return AddressingStyle::Auto;
    throw Error(Code::BadArgument, from + ": addressing_style \"" + v + "\" is not path, virtual or auto");
}

bool env_true(const EnvLookup& env, const std::string& name) {
    std::optional<std::string> v = env_value(env, name);
    if (!v) return false;
    std::string l;
    for (char c : *v) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return l == "true" || l == "1";
}

/// A key pair from a profile section, or nullopt when it has neither key; an error for one of two.
std::optional<Credentials> profile_keys(const ProfileSection* s, const std::string& where) {
    if (!s) return std::nullopt;
    std::optional<std::string> id = s->get("aws_access_key_id");
    std::optional<std::string> secret = s->get("aws_secret_access_key");
    if (!id && !secret) return std::nullopt;
    if (!id || !secret)
        throw Error(Code::BadArgument, where + " has " + (id ? "aws_access_key_id but no aws_secret_access_key"
                                                             : "aws_secret_access_key but no aws_access_key_id"));
    Credentials c;
    c.access_key_id = *id;
    c.secret_access_key = *secret;
    c.session_token = s->get("aws_session_token").value_or("");
    return c;
}

}  // namespace

std::optional<std::string> process_env(const std::string& name) {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
}

S3Uri parse_s3_uri(const std::string& uri) {
    if (uri.rfind("s3://", 0) != 0) throw Error(Code::BadArgument, uri + ": not an s3:// URI");
    std::string rest = uri.substr(5);
    size_t slash = rest.find('/');
    S3Uri u;
    u.bucket = rest.substr(0, slash);
    u.key = slash == std::string::npos ? "" : rest.substr(slash + 1);
    bool ok = u.bucket.size() >= 3 && u.bucket.size() <= 255 && std::isalnum(static_cast<unsigned char>(u.bucket.front())) &&
              std::isalnum(static_cast<unsigned char>(u.bucket.back()));
    for (char c : u.bucket)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) ok = false;
    if (!ok)
        throw Error(Code::BadArgument, uri + ": \"" + u.bucket +
                                           "\" is not a bucket name (3-255 letters, digits, '.', '-', '_', starting and "
                                           "ending with a letter or digit)");
    if (u.key.find_first_of(std::string_view("\0\r\n", 3)) != std::string::npos)
        throw Error(Code::BadArgument, uri + ": the key holds a NUL, CR or LF byte");
    return u;
}

S3Config resolve_config(const S3CommandOptions& options, const EnvLookup& env) {
    Files f = load_files(options, env);
    S3Config c;
    c.profile = f.profile;
    c.sign = !options.no_sign_request;
    c.credentials_file = f.credentials_path;
    c.config_file = f.config_path;
    const ProfileSection* conf = f.in_config();
    const std::string in_profile = "profile " + f.profile + " in " + f.config_path;

    if (std::optional<std::string> r = given(options.region)) {
        c.region = *r, c.region_from = "--region";
    } else if (std::optional<std::string> e = env_value(env, "AWS_REGION")) {
        c.region = *e, c.region_from = "AWS_REGION";
    } else if (std::optional<std::string> d = env_value(env, "AWS_DEFAULT_REGION")) {
        c.region = *d, c.region_from = "AWS_DEFAULT_REGION";
    } else if (std::optional<std::string> p = conf ? conf->get("region") : std::nullopt) {
        c.region = *p, c.region_from = in_profile;
    } else {
        c.region = "us-east-1", c.region_from = "default";
    }
    if (!is_region(c.region))
        throw Error(Code::BadArgument, c.region_from + ": region \"" + c.region +
                                           "\" is not a region name (lowercase letters, digits and '-')");

    const bool ignore_configured = env_true(env, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
    std::optional<std::string> endpoint;
    if ((endpoint = given(options.endpoint_url))) {
        c.endpoint_from = "--endpoint-url";
    } else if (!ignore_configured && (endpoint = env_value(env, "AWS_ENDPOINT_URL_S3"))) {
        c.endpoint_from = "AWS_ENDPOINT_URL_S3";
    } else if (!ignore_configured && (endpoint = env_value(env, "AWS_ENDPOINT_URL"))) {
        c.endpoint_from = "AWS_ENDPOINT_URL";
    } else if (!ignore_configured && conf && (endpoint = conf->get_nested("s3", "endpoint_url"))) {
        c.endpoint_from = in_profile + " (s3 = endpoint_url)";
    } else if (!ignore_configured && conf && (endpoint = conf->get("endpoint_url"))) {
        c.endpoint_from = in_profile;
    } else {
        c.endpoint_from = "AWS";
    }
    if (endpoint) c.endpoint_url = normalize_endpoint(*endpoint, c.endpoint_from);
    if (std::optional<std::string> style = conf ? conf->get_nested("s3", "addressing_style") : std::nullopt)
        c.addressing = parse_style(*style, in_profile);
    return c;
}

RequestTarget target_for(const S3Config& config, const std::string& bucket, const std::string& key) {
    RequestTarget t;
    std::string base_host, base_path;
    if (config.endpoint_url.empty()) {
        t.scheme = "https";
        base_host = "s3." + config.region + ".amazonaws.com";
    } else {
        size_t scheme_end = config.endpoint_url.find("://");
        t.scheme = config.endpoint_url.substr(0, scheme_end);
        std::string rest = config.endpoint_url.substr(scheme_end + 3);
        size_t slash = rest.find('/');
        base_host = rest.substr(0, slash);
        base_path = slash == std::string::npos ? "" : rest.substr(slash);
    }
    bool virtual_host = false;
    if (config.addressing == AddressingStyle::Virtual) {
        virtual_host = dns_compatible(bucket, /*allow_dots=*/true);
    } else if (config.addressing == AddressingStyle::Auto) {
        // AWS: virtual-hosted where the bucket is a DNS label (dots would break the TLS name);
        // custom endpoints: path-style, which every S3-compatible store serves.
        virtual_host = config.endpoint_url.empty() && dns_compatible(bucket, /*allow_dots=*/false);
    }
    if (virtual_host) {
        t.host = bucket + "." + base_host;
        t.path = base_path + "/" + key;
    } else {
        t.host = base_host;
        t.path = base_path + "/" + bucket + (key.empty() ? "" : "/" + key);
    }
    return t;
}

CredentialSource::CredentialSource(S3CommandOptions options, EnvLookup env, std::chrono::seconds refresh_margin)
    : options_(std::move(options)), env_(std::move(env)), margin_(refresh_margin) {}

std::optional<Credentials> CredentialSource::get(std::chrono::system_clock::time_point now) {
    if (options_.no_sign_request) return std::nullopt;
    std::unique_lock<std::mutex> lock(mutex_);
    // Usable: not within the guard of Expiration. Fresh: not within the refresh margin.
    auto usable = [&] { return cached_ && (!cached_->expiration || *cached_->expiration - kExpiryGuard > now); };
    auto fresh = [&] { return cached_ && (!cached_->expiration || *cached_->expiration - margin_ > now); };
    for (;;) {
        if (fresh()) return cached_;
        if (usable() && (refreshing_ || (last_attempt_ && now - *last_attempt_ < kRefreshInterval))) return cached_;
        if (!refreshing_) break;
        // Nothing usable and another caller resolves: wait for its outcome, and share it.
        const uint64_t waited_for = generation_;
        resolved_.wait(lock, [&] { return generation_ != waited_for; });
        if (failure_ && !usable()) std::rethrow_exception(failure_);
    }
    const bool had_usable = usable();
    refreshing_ = true;
    last_attempt_ = now;
    lock.unlock();
    std::string origin;
    std::optional<Credentials> fetched;
    std::exception_ptr failure;
    try {
        fetched = resolve(&origin);
        if (fetched->expiration && *fetched->expiration <= now)
            throw Error(Code::BadArgument,
                        origin + ": the credentials it gave have already expired (" + fetched->redacted() + ")");
    } catch (...) {
        failure = std::current_exception();
    }
    lock.lock();
    refreshing_ = false;
    ++resolutions_;
    ++generation_;
    failure_ = failure;
    if (!failure) {
        cached_ = std::move(fetched);
        origin_ = std::move(origin);
    }
    resolved_.notify_all();
    if (failure) {
        if (!had_usable || !usable()) std::rethrow_exception(failure);
        try {
            std::rethrow_exception(failure);
        } catch (const std::exception& e) {
            spdlog::warn("{}: refreshing the credentials failed ({}); the current ones stay in use until shortly "
                         "before they expire, retried in {} s",
                         origin_, e.what(), kRefreshInterval.count());
        }
    }
    return cached_;
}

void CredentialSource::invalidate() {
    std::lock_guard<std::mutex> lock(mutex_);
    cached_.reset();
    last_attempt_.reset();
}

std::string CredentialSource::origin() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return origin_;
}

unsigned CredentialSource::resolutions() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return resolutions_;
}

Credentials CredentialSource::resolve(std::string* origin) {
    // Environment keys, unless --profile names a profile (the AWS CLI then skips them).
    if (!given(options_.profile)) {
        std::optional<std::string> id = env_value(env_, "AWS_ACCESS_KEY_ID");
        std::optional<std::string> secret = env_value(env_, "AWS_SECRET_ACCESS_KEY");
        if (id && secret) {
            Credentials c;
            c.access_key_id = *id;
            c.secret_access_key = *secret;
            c.session_token = env_value(env_, "AWS_SESSION_TOKEN").value_or("");
            *origin = "environment (AWS_ACCESS_KEY_ID)";
            return c;
        }
        if (id || secret)
            throw Error(Code::BadArgument, std::string(id ? "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
                                                          : "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not"));
    }
    Files f = load_files(options_, env_);
    const std::string cred_where = "profile " + f.profile + " in " + f.credentials_path;
    const std::string conf_where = "profile " + f.profile + " in " + f.config_path;
    if (std::optional<Credentials> c = profile_keys(f.in_credentials(), cred_where)) {
        *origin = cred_where;
        return *c;
    }
    for (const ProfileSection* s : {f.in_config(), f.in_credentials()}) {
        if (!s) continue;
        if (std::optional<std::string> command = s->get("credential_process")) {
            *origin = "credential_process of profile " + f.profile;
            return run_credential_process(*command, *origin);
        }
    }
    if (std::optional<Credentials> c = profile_keys(f.in_config(), conf_where)) {
        *origin = conf_where;
        return *c;
    }
    for (const ProfileSection* s : {f.in_config(), f.in_credentials()}) {
        if (!s) continue;
        for (const char* kind : {"role_arn", "sso_session", "sso_start_url", "web_identity_token_file"})
            if (s->get(kind))
                throw Error(Code::BadArgument,
                            "profile " + f.profile + " uses " + kind +
                                ", which is not read here: use a profile whose credential_process is \"aws configure "
                                "export-credentials --profile " +
                                f.profile + " --format process\"");
    }
    throw Error(Code::BadArgument, "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, give profile " +
                                       f.profile + " keys or a credential_process (" + f.credentials_path + ", " +
                                       f.config_path + "), or use --no-sign-request for a public bucket");
}

}  // namespace gguf_mount::remote::s3
