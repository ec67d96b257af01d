// HTTP servers for the remote-source tests, started by the test on 127.0.0.1 only and stopped by
// their own PID: Debian's nginx with a generated configuration (static tree with Range, HTML and
// JSON autoindex, a location that ignores Range, optional TLS and rate limit, a JSON access log),
// and FaultServer, a small Python 3 server (tests/remote/fault_server.py) that injects faults
// (stalls, dropped connections, 5xx, 429 + Retry-After, changed ETag, ignored Range, redirects).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/support.hpp"

namespace remote_test {

/// One request as a server logged it (NginxServer and FaultServer write the same fields).
struct AccessEntry {
    uint16_t port = 0;            // the server port that answered
    std::string method;           // "GET", "HEAD"
    std::string uri;              // request target as sent, with the query ("/a%20b.gguf?x=1")
    std::string request_line;     // "GET /a.gguf HTTP/1.1"
    int status = 0;               // HTTP status sent (nginx: 499 when the client went away)
    std::string range;            // the Range header as sent, "" when absent ("bytes=0-99")
    std::string authorization;    // the Authorization header as sent, "" when absent
    std::string accept_encoding;  // the Accept-Encoding header as sent, "" when absent
    std::string cache_control;    // nginx: the Cache-Control header as sent, "" when absent
    std::string pragma;           // nginx: the Pragma header as sent, "" when absent
    std::string user_agent;       // the User-Agent header as sent, "" when absent
    uint64_t bytes_sent = 0;      // bytes sent to the client, headers included
    uint64_t body_bytes_sent = 0; // body bytes sent
    uint64_t seq = 0;             // FaultServer: arrival number of the request (1, 2, ...); nginx: 0
    bool has_authorization() const { return !authorization.empty(); }
};

/// Number of data requests among `log`: GETs answered 200 or 206 with a non-empty body (what a
/// cached read must not cause; HEAD, redirects, errors and empty bodies do not count).
size_t count_data_requests(const std::vector<AccessEntry>& log);

/// Parses one access-log file of JSON lines (the format both servers write). Lines that are
/// not JSON objects fail the current test and are skipped.
std::vector<AccessEntry> parse_access_log(const std::string& text);

/// A child process started from argv with stdin = /dev/null and stdout+stderr appended to
/// `log_path`. stop() signals exactly this PID (SIGTERM, then SIGKILL after `grace`) and reaps
/// it; the destructor calls stop(). The child also gets SIGTERM when the thread that started it
/// ends (PR_SET_PDEATHSIG): a test process killed or aborted leaves no server behind, so start
/// servers from a thread that outlives them (the test's own).
class ChildProcess {
public:
    ChildProcess() = default;
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;
    ~ChildProcess();

    /// Starts argv (argv[0] is a path) with this process's environment plus `env` ("NAME=VALUE",
    /// replacing a variable of the same name). Returns false with *error set when it cannot be spawned.
    bool start(const std::vector<std::string>& argv, const std::string& log_path, std::string* error,
               const std::vector<std::string>& env = {});
    /// True while the child has not exited (reaps it without blocking when it has).
    bool running();
    /// Stops and reaps the child; returns its exit status (128 + signal) or nullopt if none ran.
    std::optional<int> stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));
    pid_t pid() const { return pid_; }
    /// Exit status once the child has been reaped (128 + signal when killed).
    std::optional<int> exit_code() const { return exit_code_; }

private:
    pid_t pid_ = -1;
    std::optional<int> exit_code_;
};

/// Absolute path of an executable found as `path` (if it contains '/') or on $PATH, then in
/// /usr/sbin and /usr/bin; "" when none.
std::string find_program(const std::string& name);

/// Waits until a TCP connection to `host`:`port` (an IPv4 loopback address) succeeds. False
/// after `timeout`.
bool wait_port(uint16_t port, std::chrono::milliseconds timeout, const std::string& host = "127.0.0.1");

/// A free TCP port on 127.0.0.1 at the time of the call (bind to port 0, read it, close).
uint16_t free_port();

/// What NginxServer serves. Every location reads the same `root` tree.
struct NginxOptions {
    std::string root;             // document root (absolute); files served with Range support at "/"
    bool tls = false;             // also listen with TLS on https_port() (cert made by openssl in the test)
    uint64_t limit_rate = 0;      // per-connection rate limit in bytes/s for every location, 0 = none
    int worker_processes = 1;     // nginx worker_processes
    /// Raw nginx directives placed inside every server block after the standard locations, e.g.
    /// "location /api/ { default_type application/json; add_header Link '<...>; rel=\"next\"'; }".
    std::string extra_server_config;
    /// Raw nginx directives placed in the http block before the server blocks (e.g. `map`).
    std::string extra_http_config;
    /// Raw nginx directives placed in the main context (e.g. `load_module`, `env`).
    std::string extra_main_config;
    /// "NAME=VALUE" entries added to nginx's environment (what `env NAME;` passes to workers).
    std::vector<std::string> environment;
};

/// Debian's nginx run as `nginx -c CONF -p PREFIX` with `daemon off;` as a child of the test,
/// configuration, pid, logs and temp paths in its own temp dir, listening on 127.0.0.1 only.
/// Locations (all map to options.root):
///   /            static files, Range on (nginx default)
///   /html/       autoindex on, HTML (sizes in exact bytes: autoindex_exact_size on)
///   /json/       autoindex on, autoindex_format json
///   /norange/    max_ranges 0 (answers 200 with the whole file to a Range request)
/// The access log is JSON lines (see AccessEntry), read with access_log().
class NginxServer {
public:
    explicit NginxServer(NginxOptions options);
    ~NginxServer();
    NginxServer(const NginxServer&) = delete;
    NginxServer& operator=(const NginxServer&) = delete;

    /// True when an nginx binary is installed; else false with *why ("nginx not found ...").
    /// Tests call GTEST_SKIP() << why in that case.
    static bool available(std::string* why);

    /// Writes the config (and, with TLS, a key + self-signed cert for 127.0.0.1 via
    /// `openssl req -x509`), starts nginx and waits until its port(s) accept connections.
    /// After stop(), start() again serves on the same port(s) ("the server is back").
    /// Returns false with *error (including nginx's error log) on failure.
    bool start(std::string* error);
    /// Stops nginx (SIGTERM to its master PID, SIGKILL after 5 s) and reaps it. Idempotent.
    void stop();

    uint16_t port() const { return port_; }
    uint16_t https_port() const { return https_port_; }
    /// "http://127.0.0.1:PORT" (no trailing slash).
    std::string base_url() const;
    /// "https://127.0.0.1:HTTPS_PORT"; empty without TLS.
    std::string https_base_url() const;
    /// PEM file of the self-signed certificate, usable as --ca-cert / CURLOPT_CAINFO.
    std::string ca_file() const { return ca_file_; }
    /// Directory that holds the generated config, logs, pid and temp paths.
    std::string prefix() const { return dir_.path(); }

    /// All requests logged so far.
    std::vector<AccessEntry> access_log() const;
    /// Waits until at least `n` requests are logged (nginx logs after the response is sent);
    /// returns the entries read last.
    std::vector<AccessEntry> wait_access_log(size_t n,
                                             std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) const;
    /// Truncates the access log (to count the requests of one step of a test).
    void clear_access_log() const;
    /// nginx's error log so far.
    std::string error_log() const;

private:
    std::string config_text() const;
    bool make_certificate(std::string* error);
    NginxOptions options_;
    gguf_test::TempDir dir_;
    ChildProcess process_;
    uint16_t port_ = 0;
    uint16_t https_port_ = 0;
    std::string ca_file_;
};

/// tests/remote/fault_server.py run by python3: an HTTP/1.1 server (keep-alive, single-range
/// Range requests, HEAD, ETag) over `root`, bound to 127.0.0.1 on a port it picks itself.
/// Faults are rules in a JSON file the server re-reads on every request (set_rules());
/// each rule matches a path (exact, or "*") and, with "query": TEXT, only requests whose query
/// string contains TEXT (one signed URL of several), lets its first `skip` matching requests through
/// (default 0) and applies to the next `times` ones (default -1 = all). Kinds and their fields:
///   {"fault": "stall", "seconds": S, "after_bytes": N}  sleeps S s after N body bytes
///                                                        (no after_bytes: before the headers)
///   {"fault": "drop", "after_bytes": N}                  sends headers + N body bytes, closes
///   {"fault": "status", "status": 503}                   answers that status, no file body
///   {"fault": "retry_after", "seconds": S}               429 with "Retry-After: S"
///   {"fault": "etag", "etag": "\"v2\""}                  serves that ETag instead of the real one
///   {"fault": "ignore_range"}                            200 with the whole body
///   {"fault": "redirect", "location": "http://..."}      302 to location + request path
///   {"fault": "no_validators"}                           the file without ETag and Last-Modified
///   {"fault": "drip", "bytes_per_second": 1}             the body at that rate
///   {"fault": "gzip"}                                    "Content-Encoding: gzip", a gzip stream
///                                                        of the asked length
///   {"fault": "rate_limit", "seconds": 4, "t": 3}        429 with only "RateLimit: "api";r=0;t=3"
///                                                        (+ RateLimit-Policy) for 4 s from the
///                                                        first request it answers
///   {"fault": "expires", "status": 403}                 a request whose query has Expires=T with
///                                                        T (seconds since the epoch) past gets
///                                                        that status (403 by default), as a
///                                                        signed CDN URL past its life does
/// Any rule may also have "method": "HEAD" (that method only) and "range_from": N (ranged
/// requests whose first byte is at N or later only).
/// Requests are logged as JSON lines (AccessEntry fields), read with access_log().
class FaultServer {
public:
    /// Serves `root` on `host` (an address of 127.0.0.0/8: "127.0.0.2" is another host to a
    /// client, as a CDN is).
    explicit FaultServer(std::string root, std::string host = "127.0.0.1");
    ~FaultServer();
    FaultServer(const FaultServer&) = delete;
    FaultServer& operator=(const FaultServer&) = delete;

    /// True when python3 is installed; else false with *why.
    static bool available(std::string* why);
    /// Starts the server and waits until it listens; after stop(), start() again listens on
    /// the same port and keeps the rules. False with *error on failure.
    bool start(std::string* error);
    /// Stops the server by its PID and reaps it. Idempotent.
    void stop();
    /// Replaces the fault rules (a JSON array of rule objects, see the class comment);
    /// use counters restart, also when the same rules are set again. Atomic (write + rename).
    void set_rules(const nlohmann::json& rules);

    uint16_t port() const { return port_; }
    std::string base_url() const;
    /// All requests logged so far (each is logged after its response was sent), in arrival order.
    std::vector<AccessEntry> access_log() const;
    /// Waits until at least `n` requests are logged; returns the entries read last.
    std::vector<AccessEntry> wait_access_log(size_t n,
                                             std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) const;
    void clear_access_log() const;
    /// The server's stdout/stderr so far (Python tracebacks).
    std::string output() const;

private:
    std::string root_;
    std::string host_;
    gguf_test::TempDir dir_;
    ChildProcess process_;
    uint16_t port_ = 0;
    uint64_t generation_ = 0;
};

/// A response as the tests' own libcurl client saw it (no redirects followed).
struct HttpResponse {
    int curl_code = 0;             // CURLcode of curl_easy_perform (0 = CURLE_OK)
    long status = 0;               // HTTP status, 0 when none arrived
    std::string body;              // body bytes received (also those before a failure)
    std::vector<std::pair<std::string, std::string>> headers;  // names lowercased, in order
    double seconds = 0;            // wall time of the request
    /// First value of header `name` (lowercase), "" when absent.
    std::string header(const std::string& name) const;
};

/// Options of http_get().
struct HttpRequest {
    std::string range;                    // "100-199" -> "Range: bytes=100-199"; "" = none
    std::vector<std::string> headers;     // raw "Name: value" lines
    std::string ca_file;                  // CURLOPT_CAINFO when not empty
    long timeout_ms = 20000;              // CURLOPT_TIMEOUT_MS
    bool head = false;                    // HEAD instead of GET
    std::string method;                   // another method ("PUT", "DELETE"; no body), "" = GET/HEAD
    bool path_as_is = false;              // CURLOPT_PATH_AS_IS: "/a/../b" and "/./" sent as written
};

/// One GET (or HEAD) with libcurl, test side: a reference client independent of remote/.
HttpResponse http_get(const std::string& url, const HttpRequest& request = {});

/// Path of tests/remote/fault_server.py in the source tree.
std::string fault_server_script();

}  // namespace remote_test
