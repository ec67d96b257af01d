// A real OCI registry for tests: Debian's docker-registry (the distribution project's registry
// 2.8) on 127.0.0.1 with filesystem storage below the test's directory, without auth or with
// token auth (tests/remote/oci/token_server.py), and models pushed into it through its HTTP API
// (tests/remote/oci/oci_push.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mount/mount_fixture.hpp"
#include "remote/servers.hpp"

namespace remote_test {

class OciRegistry {
public:
    /// True when docker-registry is installed; else false with *why.
    static bool available(std::string* why);

    /// Writes a config (storage ROOT/storage, 127.0.0.1:free port) and starts the registry; with
    /// `token_realm` (and the token server's `cert`), token auth ("auth.token": realm, service
    /// "gguf-test", issuer "gguf-test-issuer", rootcertbundle `cert`). False with *error.
    /// `redirect_base`: blob GETs are answered 307 to this base URL + the blob's storage path
    /// (the registry's "redirect" storage middleware, as a CDN-backed registry answers).
    bool start(const std::string& root, std::string* error, const std::string& token_realm = "",
               const std::string& cert = "", const std::string& redirect_base = "");
    /// Starts the registry with the YAML configuration `config` (written to ROOT/registry.yml);
    /// it must listen on host(). The storage root stays ROOT/storage. False with *error.
    bool start_with_config(const std::string& root, const std::string& config, std::string* error);
    void stop();
    ~OciRegistry() { stop(); }
    /// Before start(): "auth.htpasswd" with this bcrypt htpasswd file instead of token auth
    /// (the registry answers 401 with WWW-Authenticate: Basic and checks every request).
    void set_htpasswd(const std::string& path) { htpasswd_ = path; }

    /// Set before start(): the registry writes its access log (combined format) to its log.
    bool access_log = false;
    /// One GET the registry answered, from its access log.
    struct Access {
        std::string path;  ///< "/v2/REPO/blobs/sha256:HEX"
        int status = 0;
        uint64_t bytes = 0;  ///< body bytes sent
    };
    /// The GETs of the access log so far (HEADs are left out: their logged size is not sent).
    std::vector<Access> gets() const;
    /// Body bytes of the blob GETs (/blobs/) of gets().
    uint64_t blob_bytes_sent() const;

    /// "127.0.0.1:PORT" (a free port chosen at the first call, kept across restarts).
    std::string host() const;
    /// The storage root (docker/registry/v2/blobs/sha256/XX/HEX/data).
    const std::string& storage() const { return storage_; }
    /// The path of a blob's data file in the storage.
    std::string blob_path(const std::string& digest) const;

    /// Runs oci_push.py with `args` against this registry (--registry HOST added); returns the
    /// manifest digest it printed, "" on failure (the test fails with its output).
    std::string push(const std::vector<std::string>& args) const;

private:
    ChildProcess process_;
    mutable uint16_t port_ = 0;
    std::string storage_, log_, htpasswd_;
};

/// tests/remote/oci/registry_proxy.py in front of a registry: every request logged (AccessEntry
/// fields), rate limits and errors answered by rules, blob redirects made expiring URLs.
class RegistryProxy {
public:
    /// Starts it on 127.0.0.1 (a free port) forwarding to `upstream` ("http://127.0.0.1:P"),
    /// its files under `dir`; `redirect_life` > 0: Location gets expires=NOW+S. False with *error.
    bool start(const std::string& upstream, const std::string& dir, std::string* error, int redirect_life = 0);
    void stop() { process_.stop(); }
    ~RegistryProxy() { stop(); }
    /// "127.0.0.1:PORT".
    std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
    /// Replaces the rules (registry_proxy.py's docstring); use counters restart.
    void set_rules(const nlohmann::json& rules);
    /// The requests so far, in arrival order.
    std::vector<AccessEntry> requests() const;
    /// The requests whose method is `method` and whose path holds `part` ("/manifests/").
    size_t count(const std::string& method, const std::string& part) const;
    void clear() const;

private:
    ChildProcess process_;
    uint16_t port_ = 0;
    std::string dir_;
};

/// A real mount with a registry: SetUp skips without docker-registry and sets cache_ to
/// ROOT/cache; TearDown unmounts first, then stops registry_.
class OciMountFixture : public mount_test::MountFixture {
protected:
    void SetUp() override;
    void TearDown() override;
    std::string cache_;
    OciRegistry registry_;
};

/// The fixtures' kvzoo model in 7 shards (tests/fixtures/kvzoo/t7), in order.
std::vector<std::string> kvzoo_t7();
/// The fixtures' kvzoo model cut in 3 shards under DIR/t15 (gguf-mount split
/// --split-max-tensors 15, as gguf-split cuts it); fails the current test if it cannot be cut.
std::vector<std::string> kvzoo_t15(const std::string& dir);
/// tests/fixtures/tiny-llama/tiny-llama.gguf (one unsplit file).
std::string tiny_llama();
/// `a` followed by `b`.
std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b);
/// A dense model in 3 shards of 6 MiB (two cache blocks each) under DIR/dense; *want gets the
/// sha256 of its local merge (gguf-mount merge). Fails the current test on errors.
std::vector<std::string> dense_shards(const std::string& dir, std::string* want);
/// Reads `path` in 1 MiB preads from its start until its end or an error, each read at the
/// byte after the last one read (a short read is not a skip): the errno of the error (0 at
/// the end); *good gets the bytes read before it.
int read_until_error(const std::string& path, uint64_t* good);
/// Runs `argv` (a gguf-mount command without -f, mounting on `mnt`: it daemonizes), then
/// sha256sum of MNT/FILE in a process of its own bounded by 120 s (a hung read fails the test,
/// it does not hold it); unmounts and waits for the daemon, SIGKILLed after 10 s, also when
/// something fails. The hex digest, or "" with *why set (the daemon's `log` file appended).
std::string daemonized_sha256(const std::vector<std::string>& argv, const std::string& mnt, const std::string& file,
                              const std::string& log, std::string* why);

/// tests/remote/oci/oci_push.py run with `args` (a layout or store target), the digest printed.
std::string oci_push(const std::vector<std::string>& args);

/// The source tree's tests/remote/oci folder.
std::string oci_test_dir();

}  // namespace remote_test
