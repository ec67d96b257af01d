// Where an s3:// URI is read from and with which credentials, resolved the way the AWS CLI and
// SDKs resolve them (AWS CLI User Guide, "Configuration and credential file settings",
// "Environment variables to configure the AWS CLI", "Command line options"; AWS SDKs and Tools
// Reference Guide, "Service-specific endpoints"):
//   credentials  --no-sign-request: none; --profile P: that profile only; else AWS_ACCESS_KEY_ID +
//                AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); else the profile (AWS_PROFILE,
//                AWS_DEFAULT_PROFILE, "default"): its keys in the credentials file, its
//                credential_process, its keys in the config file.
//   region       --region, AWS_REGION, AWS_DEFAULT_REGION, the profile's region, "us-east-1".
//   endpoint     --endpoint-url, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
//                `s3 = endpoint_url`, its endpoint_url (AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true
//                skips all but --endpoint-url), else AWS.
//   addressing   the profile's `s3 = addressing_style` (path, virtual, auto); auto is
//                virtual-hosted for AWS (path-style for bucket names that are not DNS labels or
//                hold '.'), path-style for a custom endpoint.
// Files: AWS_SHARED_CREDENTIALS_FILE (default $CREDENTIALS_DIRECTORY/aws-credentials when systemd
// loaded that credential, else ~/.aws/credentials), AWS_CONFIG_FILE (~/.aws/config).
// Instance-metadata (169.254.169.254) and container credential endpoints are never contacted.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "remote/s3/sigv4.hpp"

namespace gguf_mount::remote::s3 {

/// Looks up an environment variable; nullopt when unset. process_env() reads the process's.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
std::optional<std::string> process_env(const std::string& name);

/// An s3:// URI split into bucket and raw key.
struct S3Uri {
    std::string bucket;  // "models"
    /// The key or prefix exactly as written, not percent-decoded (as the AWS CLI takes it):
    /// "team a/α+β/m-00001-of-00002.gguf", "team a/" (a prefix), "" (the whole bucket).
    std::string key;
    bool is_prefix() const { return key.empty() || key.back() == '/'; }
};

/// Parses "s3://BUCKET[/KEY]". Throws gguf::Error(BadArgument) naming the URI when the scheme is
/// not s3://, the bucket is empty or not a bucket name (3-255 bytes of lowercase letters, digits,
/// '.', '-', '_', starting and ending with a letter or digit; S3-compatible stores allow
/// uppercase and '_' too, so those are accepted), or the key holds a NUL, CR or LF byte.
S3Uri parse_s3_uri(const std::string& uri);

/// The S3 options of the command line (unset = not given).
struct S3CommandOptions {
    bool no_sign_request = false;              // --no-sign-request
    std::optional<std::string> endpoint_url;   // --endpoint-url
    std::optional<std::string> region;         // --region
    std::optional<std::string> profile;        // --profile
};

enum class AddressingStyle { Path, Virtual, Auto };

/// The resolved configuration (credentials are resolved separately by CredentialSource).
struct S3Config {
    std::string profile;          // the profile used ("default" when none named)
    std::string region;           // never empty
    /// The endpoint without a trailing '/': "http://127.0.0.1:4568", or "" for AWS.
    std::string endpoint_url;
    AddressingStyle addressing = AddressingStyle::Auto;  // as configured
    bool sign = true;             // false with --no-sign-request
    /// Where each setting came from, for `check` and messages ("--region", "AWS_REGION",
    /// "profile dev in /root/.aws/config", "default").
    std::string region_from, endpoint_from;
    std::string credentials_file, config_file;  // the paths read
};

/// Resolves everything but the credentials. Throws gguf::Error(BadArgument) for a profile named
/// by --profile or AWS_PROFILE that neither file has, an endpoint URL that is not http(s)://HOST,
/// or an addressing_style other than path, virtual or auto; gguf::Error(BadValue/Io) for a file
/// that cannot be parsed or read (aws_files.hpp).
S3Config resolve_config(const S3CommandOptions& options, const EnvLookup& env = process_env);

/// Where one request goes.
struct RequestTarget {
    std::string scheme;  // "http" / "https"
    /// The Host header: "models.s3.eu-west-1.amazonaws.com", "127.0.0.1:4568" (a non-default port
    /// kept).
    std::string host;
    /// Raw (not encoded) path: "/models/team a/k" (path-style), "/team a/k" (virtual-hosted); with
    /// an endpoint path ("http://h/base") it is prefixed ("/base/models/k").
    std::string path;
};

/// The target for `key` in `bucket` ("" key: the bucket itself, for ListObjectsV2).
RequestTarget target_for(const S3Config& config, const std::string& bucket, const std::string& key);

/// Credentials for the configuration, cached, and refreshed from their source (the environment
/// and files re-read, credential_process re-run). Rules (the AWS SDKs refresh ahead of expiry
/// in the background the same way): credentials are used as they are while more than
/// `refresh_margin` is left before their Expiration; inside the margin a refresh is tried at most
/// once per kRefreshInterval, by one caller, while every other caller keeps using the old ones;
/// a refresh that fails inside the margin keeps the old ones (a warning); only within
/// kExpiryGuard of Expiration (or after invalidate(), an ExpiredToken answer) do callers wait
/// for new credentials. A helper that gives credentials expiring within the margin (a 15-minute
/// role session with a 5-minute margin, or less) is thus run about once a minute, not once per
/// request. Thread-safe.
class CredentialSource {
public:
    /// Inside the refresh margin, at most one refresh per this interval.
    static constexpr std::chrono::seconds kRefreshInterval{60};
    /// Credentials this close to their Expiration are not used (a request signed now still
    /// reaches the server before they expire).
    static constexpr std::chrono::seconds kExpiryGuard{10};

    /// `env` is kept; it must outlive the source.
    CredentialSource(S3CommandOptions options, EnvLookup env = process_env,
                     std::chrono::seconds refresh_margin = std::chrono::minutes(5));

    /// Current credentials; nullopt with --no-sign-request (send the request unsigned). Throws
    /// gguf::Error(BadArgument) when no source has credentials ("no AWS credentials: set
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, or --no-sign-request"), for only
    /// one of AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or of a profile's pair), for a
    /// credential_process that fails or answers badly (credential_process.hpp) when no usable
    /// credentials are cached, for an AWS file or helper that fails the ownership rule
    /// (aws_files.hpp untrusted_aws_path), or when the credentials a process just gave are
    /// already expired. Messages name the source (variable, file and profile, or
    /// "credential_process of profile P"), never a secret.
    std::optional<Credentials> get(std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

    /// Forgets the cached credentials: the next get() resolves them again.
    void invalidate();

    /// Where the cached credentials came from ("environment", "profile dev in FILE",
    /// "credential_process of profile dev"), "" before the first get().
    std::string origin() const;

    /// How many times credentials were resolved (for tests of the refresh rule).
    unsigned resolutions() const;

private:
    Credentials resolve(std::string* origin);
    S3CommandOptions options_;
    EnvLookup env_;
    std::chrono::seconds margin_;
    mutable std::mutex mutex_;
    std::condition_variable resolved_;  // a resolution finished (refreshing_ false again)
    std::optional<Credentials> cached_;
    std::string origin_;
    unsigned resolutions_ = 0;
    bool refreshing_ = false;  // a caller is resolving, without the lock
    std::optional<std::chrono::system_clock::time_point> last_attempt_;  // of a refresh inside the margin
    std::exception_ptr failure_;  // of the last resolution, for the callers that waited for it
    uint64_t generation_ = 0;     // resolutions finished
};

}  // namespace gguf_mount::remote::s3
