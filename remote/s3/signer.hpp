// The S3 RequestSigner (remote/client.hpp): AWS Signature V4 (sigv4.hpp) on every request the
// client sends to an S3 endpoint, with credentials from a CredentialSource (config.hpp), and the
// one place where S3's answers are named and explained: "s3://BUCKET/KEY" in messages, S3 error
// documents turned into one line (list_objects.hpp explain_failure).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "remote/client.hpp"
#include "remote/s3/config.hpp"
#include "remote/s3/sigv4.hpp"

namespace gguf_mount::remote::s3 {

/// Signs the requests to one S3 endpoint (S3Config: endpoint, region, addressing) with the
/// credentials of a CredentialSource, or leaves them unsigned (--no-sign-request). Thread-safe
/// (the credential source and the signing-key cache lock themselves). Credentials are resolved
/// by the source once and kept until they near their expiration; the SigV4 signing key is
/// derived once per UTC day (SigningKeyCache).
///
/// Signed: host, x-amz-content-sha256 (the empty-payload hash: every request is a GET or HEAD
/// without body), x-amz-date, and x-amz-security-token with temporary credentials. Range and
/// every other header are sent but not signed: SigV4 requires only host and the x-amz-*
/// headers to be signed (AWS, "Authenticating Requests: Using the Authorization Header"), and a
/// caching tier in front of the store that cuts a range into slices changes Range.
class S3Signer final : public RequestSigner {
public:
    /// `credentials` null or config.sign false: requests are sent unsigned.
    S3Signer(S3Config config, std::shared_ptr<CredentialSource> credentials);

    /// True for URLs on the endpoint's origin (scheme, host, port), and on BUCKET.HOST of it
    /// (virtual-hosted addressing). Never throws.
    bool covers(const std::string& url) const noexcept override;
    /// Parses the URL (its path and query percent-decoded once), signs it and replaces the URL
    /// with the canonical one signed (Request::exact_path set, so "//" and ".." of a key stay),
    /// then adds Host, x-amz-content-sha256, x-amz-date, x-amz-security-token (with a session
    /// token) and Authorization. Unsigned: only exact_path is set. Throws HttpError (EACCES,
    /// naming s3://BUCKET/KEY, never a secret) when no credentials can be had.
    void sign(Request& request) const override;
    /// Forgets the credentials and resolves them again (an ExpiredToken answer): true when they
    /// changed (the request is then sent again once). Never throws.
    bool refresh() const noexcept override;
    /// S3's error answers as one line naming s3://BUCKET/KEY (explain_failure): errno ENOENT
    /// for NoSuchKey/NoSuchBucket/404, EACCES for a 403, else EIO; SlowDown, 503 and 500
    /// retryable; ExpiredToken and TokenRefreshRequired with credentials_expired(). nullopt for
    /// a 416 (the client's own message says the object is shorter than expected).
    std::optional<HttpError> explain(const FailedAnswer& answer) const override;
    /// "s3://BUCKET/KEY" of an object URL, "s3://BUCKET/PREFIX" of a ListObjectsV2 URL.
    std::string name_for_message(const std::string& url) const override;

    /// The URL of `key` (raw, as the AWS CLI takes it) in `bucket`: target_for's scheme and
    /// host + canonical_path of its path. What a RemoteSource reads.
    std::string object_url(const std::string& bucket, const std::string& key) const;
    /// The ListObjectsV2 URL of `prefix` in `bucket` (list-type=2, delimiter=/, encoding-type=url, and
    /// continuation-token when `token` is not empty), canonical query.
    std::string list_url(const std::string& bucket, const std::string& prefix, const std::string& token) const;

    const S3Config& config() const noexcept { return config_; }

private:
    /// Bucket and raw key (or listing prefix) of a covered URL; false when it names neither.
    bool locate(const std::string& url, std::string* bucket, std::string* key) const;

    S3Config config_;
    std::shared_ptr<CredentialSource> credentials_;
    mutable SigningKeyCache keys_;  // derived once per UTC day, region and secret
    std::string scheme_;     // of the endpoint
    std::string host_;       // the endpoint's Host (with a non-default port)
    std::string base_path_;  // the endpoint's path ("" or "/base")
};

}  // namespace gguf_mount::remote::s3
