// What the S3 mount and command tests share: an S3Server (s3rver behind the SigV4-verifying
// proxy) seeded by the test, a clean AWS environment (no variable or ~/.aws file of the machine
// is read: the credentials and config files point into the test's directory), and a real FUSE
// mount (MountFixture). Skips with the reason without node and the npm packages.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mount/mount_fixture.hpp"
#include "remote/s3_servers.hpp"
#include "support/support.hpp"

namespace s3_test {

/// Long-term keys the server accepts (besides s3rver's own S3RVER/S3RVER).
inline const std::string kKeyId = "AKIAEXAMPLEKEY000001";
inline const std::string kSecret = "the/secret+key=42";
/// Temporary keys: the session token is required; "old-token" is answered ExpiredToken.
inline const std::string kTempKeyId = "AKIATEMPORARY0000001";
inline const std::string kTempSecret = "tempsecret";
inline const std::string kToken = "tok/en+1=";
inline const std::string kExpiredToken = "old-token";
/// A prefix with a space, '+', '=' and non-ASCII bytes (UTF-8 of α and β).
inline const std::string kOddPrefix = "team a/\xCE\xB1+\xCE\xB2=1/";

class S3Fixture : public mount_test::MountFixture {
protected:
    void SetUp() override;
    void TearDown() override;

    /// Adds object `key` with `bytes` to bucket `bucket` of the seed (before start_server).
    void put(const std::string& key, const std::string& bytes, const std::string& bucket = "models");
    /// Adds the shards of manifest case `c` as PREFIX + their file names.
    void put_case(const gguf_test::ManifestCase& c, const std::string& prefix);
    /// Starts the server on the seed with buckets "models" and `more_buckets` (ListObjectsV2
    /// pages of `list_max_keys` entries when > 0); fails the test when it cannot start.
    void start_server(int list_max_keys = 0, const std::vector<std::string>& more_buckets = {});

    /// Sets AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and (when not empty) AWS_SESSION_TOKEN.
    void use_keys(const std::string& id = kKeyId, const std::string& secret = kSecret, const std::string& token = "");
    /// Sets (value given) or unsets an environment variable for the rest of the test.
    void set_env(const std::string& name, const std::optional<std::string>& value);
    /// Writes the credentials file / config file the environment points at.
    void write_credentials(const std::string& text);
    void write_config(const std::string& text);
    /// A credential_process script that prints the temporary keys with `tokens[i]` on its i-th
    /// run (the last one from then on), Expiration an hour ahead; returns its path.
    std::string credential_process(const std::vector<std::string>& tokens);

    /// --cache-dir, --endpoint-url of the server, --region us-east-1, --net-timeout 3 (unless
    /// `more` gives one), then `more`.
    std::vector<std::string> s3_args(const std::vector<std::string>& more = {}) const;
    /// Runs `gguf-mount args...`.
    gguf_test::RunResult gm(const std::vector<std::string>& args) const;
    /// Succeeds when the proxy logged at least one request and gave each the verdict `verdict`.
    ::testing::AssertionResult every_request(const std::string& verdict) const;
    /// The verdicts of the proxy's log, in order.
    std::vector<std::string> verdicts() const;

    std::string seed_, cache_, aws_;
    std::unique_ptr<remote_test::S3Server> server_;

private:
    std::map<std::string, std::optional<std::string>> saved_env_;
};

/// The lines of `text` that hold `needle`.
std::vector<std::string> lines_holding(const std::string& text, const std::string& needle);

}  // namespace s3_test
