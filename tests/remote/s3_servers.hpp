// The S3 server of the remote tests: tests/remote/s3/s3_server.js run by node, started by the test
// on 127.0.0.1 and stopped by its PID. It is s3rver 3.7.1 (ListObjectsV2, Range, ETags, S3 errors)
// behind a proxy that verifies every signed request's Signature V4 with AWS's own signer
// (@smithy/signature-v4): s3rver alone accepts any secret. Clients talk to the proxy (port()).
// The npm packages are installed by scripts/install-deps.sh (`npm ci` in tests/remote/s3), never
// by a test; without them the tests skip with the reason.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "remote/servers.hpp"
#include "remote/s3/sigv4.hpp"
#include "support/support.hpp"

namespace remote_test {

/// What S3Server serves and whom it accepts.
struct S3ServerOptions {
    /// A directory of BUCKET/KEY files, uploaded (PUT) into s3rver at start; keys are the paths
    /// below BUCKET, raw ("team a/α+β.gguf"). "" = nothing.
    std::string seed;
    std::vector<std::string> buckets;  // buckets created at start (those in `seed` too)
    /// Access keys the proxy accepts: {"AKID": {"secret": "...", "session_token": "T" (then
    /// required), "expired_tokens": ["T0"] (answered 400 ExpiredToken)}}.
    nlohmann::json credentials = {{"S3RVER", {{"secret", "S3RVER"}}}};
    int max_skew_seconds = 900;  // RequestTimeTooSkewed beyond this (S3: 15 minutes)
    int list_max_keys = 0;       // > 0: ListObjectsV2 pages of at most this many entries
};

/// An answer the proxy gives instead of s3rver's (after verifying the request): to requests
/// whose raw URI holds `match` (and of `method`, when not empty), `times` times (-1: always),
/// each held `delay_ms` first; `status` 0 with a delay: s3rver's answer, late.
struct S3Fault {
    std::string match;
    int status = 503;
    std::string code;     // the <Error><Code>; "" for an empty body
    std::string message;  // "" = the code
    nlohmann::json headers = nlohmann::json::object();
    int times = -1;
    std::string method;
    int delay_ms = 0;
};

/// One request as the proxy logged it: the AccessEntry fields, and what the proxy decided.
struct S3AccessEntry {
    AccessEntry entry;
    /// "verified" (signature recomputed and equal), "anonymous" (no Authorization), or the S3
    /// error code the proxy answered ("SignatureDoesNotMatch", "InvalidAccessKeyId", ...).
    std::string verdict;
    int in_flight = 0;         // requests the proxy was answering when this one came, itself included
    uint16_t client_port = 0;  // the client's TCP port (one per connection)
};

class S3Server {
public:
    explicit S3Server(S3ServerOptions options);
    ~S3Server();
    S3Server(const S3Server&) = delete;
    S3Server& operator=(const S3Server&) = delete;

    /// True when node and tests/remote/s3/node_modules (s3rver, @smithy/signature-v4) are there;
    /// else false with *why naming what is missing and how to install it.
    static bool available(std::string* why);
    /// Starts node, waits until s3rver and the proxy listen and the seed is uploaded (30 s at
    /// most). False with *error (node's output) on failure.
    bool start(std::string* error);
    void stop();

    uint16_t port() const { return proxy_port_; }           // the verifying proxy
    uint16_t s3rver_port() const { return s3rver_port_; }   // s3rver itself (unverified)
    /// "http://127.0.0.1:PROXY_PORT": the endpoint URL clients use.
    std::string endpoint_url() const;
    /// All requests logged so far (each is logged once its answer is sent), in arrival order.
    std::vector<S3AccessEntry> access_log() const;
    /// Waits until at least `n` requests are logged; returns the entries read last.
    std::vector<S3AccessEntry> wait_access_log(size_t n,
                                               std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) const;
    void clear_access_log() const;
    /// Replaces the faults the proxy answers with (none when empty); applies to the next request.
    void set_faults(const std::vector<S3Fault>& faults) const;
    std::string output() const;

private:
    S3ServerOptions options_;
    gguf_test::TempDir dir_;
    ChildProcess process_;
    uint16_t proxy_port_ = 0;
    uint16_t s3rver_port_ = 0;
};

/// Path of tests/remote/s3 in the source tree.
std::string s3_test_dir();

/// Sends `signed_request` (sign()'s URL and headers, unchanged) with the tests' libcurl client.
HttpResponse send_signed(const gguf_mount::remote::s3::SignedRequest& signed_request, bool head = false);

}  // namespace remote_test
