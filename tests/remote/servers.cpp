#include "remote/servers.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <curl/curl.h>
#include <gtest/gtest.h>

extern char** environ;

namespace remote_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

uint64_t to_u64(const nlohmann::json& v) {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_string()) {
        const auto& s = v.get_ref<const std::string&>();
        return s.empty() || s == "-" ? 0 : std::strtoull(s.c_str(), nullptr, 10);
    }
    return 0;
}

std::string str_field(const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// Reads the JSON-lines log at `path` until it holds `n` entries or `timeout` passed.
std::vector<AccessEntry> wait_log_entries(const std::string& path, size_t n, std::chrono::milliseconds timeout);

}  // namespace

std::vector<AccessEntry> parse_access_log(const std::string& text) {
    std::vector<AccessEntry> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_object()) {
            ADD_FAILURE() << "access log line is not a JSON object: " << line;
            continue;
        }
        AccessEntry e;
        e.port = static_cast<uint16_t>(to_u64(j.value("port", nlohmann::json("0"))));
        e.method = str_field(j, "method");
        e.uri = str_field(j, "uri");
        e.request_line = str_field(j, "request");
        e.status = static_cast<int>(to_u64(j.value("status", nlohmann::json("0"))));
        e.range = str_field(j, "range");
        e.authorization = str_field(j, "authorization");
        e.accept_encoding = str_field(j, "accept_encoding");
        e.cache_control = str_field(j, "cache_control");
        e.pragma = str_field(j, "pragma");
        e.user_agent = str_field(j, "user_agent");
        e.bytes_sent = to_u64(j.value("bytes_sent", nlohmann::json("0")));
        e.body_bytes_sent = to_u64(j.value("body_bytes_sent", nlohmann::json("0")));
        e.seq = to_u64(j.value("seq", nlohmann::json(0)));
        out.push_back(std::move(e));
    }
    return out;
}

namespace {

std::vector<AccessEntry> wait_log_entries(const std::string& path, size_t n, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto entries = parse_access_log(slurp(path));
    while (entries.size() < n && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
        entries = parse_access_log(slurp(path));
    }
    return entries;
}

}  // namespace

size_t count_data_requests(const std::vector<AccessEntry>& log) {
    return static_cast<size_t>(std::count_if(log.begin(), log.end(), [](const AccessEntry& e) {
        return e.method == "GET" && (e.status == 200 || e.status == 206) && e.body_bytes_sent > 0;
    }));
}

// --- ChildProcess ------------------------------------------------------------------------------

ChildProcess::~ChildProcess() { stop(); }

bool ChildProcess::start(const std::vector<std::string>& argv, const std::string& log_path, std::string* error,
                         const std::vector<std::string>& env) {
    // Everything the child needs is prepared before fork: between fork and exec it makes only
    // async-signal-safe calls (the test process has threads).
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e) {
        const std::string entry(*e);
        const std::string name = entry.substr(0, entry.find('='));
        bool replaced = std::any_of(env.begin(), env.end(), [&](const std::string& x) { return x.rfind(name + "=", 0) == 0; });
        if (!replaced) envp.push_back(*e);
    }
    for (const auto& x : env) envp.push_back(const_cast<char*>(x.c_str()));
    envp.push_back(nullptr);
    int report[2];  // the child writes exec's errno here; closed by a successful exec
    if (::pipe2(report, O_CLOEXEC) != 0) {
        if (error) *error = std::string("pipe: ") + std::strerror(errno);
        return false;
    }
    const pid_t parent = ::getpid();
    exit_code_.reset();
    pid_ = ::fork();
    if (pid_ == 0) {
        // A test process that dies without running its destructors (a crash, abort, SIGKILL by
        // a time limit) takes its servers along instead of leaving them running.
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(127);
        int in = ::open("/dev/null", O_RDONLY);
        int out = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (in < 0 || out < 0 || ::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(out, 2) < 0) {
            int e = errno;
            (void)!::write(report[1], &e, sizeof e);
            ::_exit(127);
        }
        ::execve(args[0], args.data(), envp.data());
        int e = errno;
        (void)!::write(report[1], &e, sizeof e);
        ::_exit(127);
    }
    ::close(report[1]);
    int child_errno = 0;
    ssize_t n;
    while ((n = ::read(report[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR) {
    }
    ::close(report[0]);
    if (pid_ < 0 || n > 0) {
        const int e = pid_ < 0 ? errno : child_errno;
        if (pid_ > 0) {
            int status = 0;
            ::waitpid(pid_, &status, 0);
        }
        pid_ = -1;
        if (error) *error = "cannot run " + argv[0] + ": " + std::strerror(e);
        return false;
    }
    return true;
}

bool ChildProcess::running() {
    if (pid_ <= 0 || exit_code_) return false;
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return false;
    }
    return true;
}

std::optional<int> ChildProcess::stop(std::chrono::milliseconds grace) {
    if (pid_ <= 0) return std::nullopt;
    if (running()) {
        ::kill(pid_, SIGTERM);
        auto deadline = std::chrono::steady_clock::now() + grace;
        while (running() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
        if (running()) {
            ::kill(pid_, SIGKILL);
            int status = 0;
            while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
            }
            exit_code_ = 128 + SIGKILL;
        }
    }
    pid_ = -1;
    return exit_code_;
}

// --- helpers -----------------------------------------------------------------------------------

std::string find_program(const std::string& name) {
    if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
    std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
    path += ":/usr/sbin:/usr/bin:/sbin:/bin";
    std::istringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        if (dir.empty()) continue;
        std::string candidate = dir + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0 && fs::is_regular_file(candidate)) return candidate;
    }
    return "";
}

bool wait_port(uint16_t port, std::chrono::milliseconds timeout, const std::string& host) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    do {
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(port);
        if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
        ::close(fd);
        if (ok) return true;
        std::this_thread::sleep_for(20ms);
    } while (std::chrono::steady_clock::now() < deadline);
    return false;
}

uint16_t free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    uint16_t port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
        port = ntohs(addr.sin_port);
    }
    ::close(fd);
    return port;
}

// --- NginxServer -------------------------------------------------------------------------------

NginxServer::NginxServer(NginxOptions options) : options_(std::move(options)) {}

NginxServer::~NginxServer() { stop(); }

bool NginxServer::available(std::string* why) {
    if (!find_program("nginx").empty()) return true;
    if (why) *why = "nginx not found on PATH or in /usr/sbin (Debian package nginx-light)";
    return false;
}

bool NginxServer::make_certificate(std::string* error) {
    std::string openssl = find_program("openssl");
    if (openssl.empty()) {
        if (error) *error = "openssl not found";
        return false;
    }
    ca_file_ = dir_ / "cert.pem";
    auto r = gguf_test::run({openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                             "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout",
                             dir_ / "key.pem", "-out", ca_file_});
    if (r.exit_code != 0) {
        if (error) *error = "openssl req -x509 failed: " + r.err;
        return false;
    }
    return true;
}

std::string NginxServer::config_text() const {
    const std::string& p = dir_.path();
    std::string root = options_.root;
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    std::ostringstream c;
    if (::geteuid() == 0) c << "user root;\n";
    c << options_.extra_main_config << "\n";
    c << "daemon off;\n"
      << "worker_processes " << options_.worker_processes << ";\n"
      << "pid " << p << "/nginx.pid;\n"
      << "error_log " << p << "/error.log info;\n"
      << "events { worker_connections 256; }\n"
      << "http {\n"
      << "  types { text/html html; application/json json; application/octet-stream gguf; }\n"
      << "  default_type application/octet-stream;\n"
      << "  client_body_temp_path " << p << "/client_body;\n"
      << "  proxy_temp_path " << p << "/proxy;\n"
      << "  fastcgi_temp_path " << p << "/fastcgi;\n"
      << "  uwsgi_temp_path " << p << "/uwsgi;\n"
      << "  scgi_temp_path " << p << "/scgi;\n"
      << "  log_format gguf_json escape=json '{\"port\":\"$server_port\",\"method\":\"$request_method\","
         "\"uri\":\"$request_uri\",\"request\":\"$request\",\"status\":\"$status\",\"range\":\"$http_range\","
         "\"authorization\":\"$http_authorization\",\"accept_encoding\":\"$http_accept_encoding\","
         "\"user_agent\":\"$http_user_agent\",\"cache_control\":\"$http_cache_control\",\"pragma\":\"$http_pragma\","
         "\"bytes_sent\":\"$bytes_sent\","
         "\"body_bytes_sent\":\"$body_bytes_sent\"}';\n"
      << "  access_log " << p << "/access.log gguf_json;\n"
      << "  sendfile on;\n"
      << "  keepalive_requests 100000;\n";
    if (options_.limit_rate > 0) c << "  limit_rate " << options_.limit_rate << ";\n";
    c << options_.extra_http_config << "\n";
    auto server = [&](uint16_t port, bool tls) {
        c << "  server {\n"
          << "    listen 127.0.0.1:" << port << (tls ? " ssl http2" : "") << ";\n"
          << "    server_name localhost;\n";
        if (tls) {
            c << "    ssl_certificate " << ca_file_ << ";\n"
              << "    ssl_certificate_key " << p << "/key.pem;\n";
        }
        c << "    root " << root << ";\n"
          << "    location / { }\n"
          << "    location /html/ { alias " << root << "/; autoindex on; autoindex_exact_size on; }\n"
          << "    location /json/ { alias " << root << "/; autoindex on; autoindex_format json; }\n"
          << "    location /norange/ { alias " << root << "/; max_ranges 0; }\n"
          << "    location /norange-html/ { alias " << root << "/; max_ranges 0; autoindex on; }\n"
          << options_.extra_server_config << "\n"
          << "  }\n";
    };
    server(port_, false);
    if (options_.tls) server(https_port_, true);
    c << "}\n";
    return c.str();
}

bool NginxServer::start(std::string* error) {
    std::string nginx = find_program("nginx");
    if (nginx.empty()) {
        available(error);
        return false;
    }
    if (options_.tls && ca_file_.empty() && !make_certificate(error)) return false;
    // A restart keeps its ports (clients keep their URLs). A fresh free port can be taken
    // between free_port() and nginx's bind: retry a few times with new ones.
    const bool restart = port_ != 0;
    for (int attempt = 0; attempt < (restart ? 1 : 5); ++attempt) {
        if (!restart) {
            port_ = free_port();
            https_port_ = options_.tls ? free_port() : 0;
        }
        const std::string conf = dir_ / "nginx.conf";
        gguf_test::write_file(conf, config_text());
        std::error_code ec;
        fs::remove(dir_ / "error.log", ec);
        if (!process_.start({nginx, "-c", conf, "-p", dir_.path() + "/", "-e", dir_ / "error.log"},
                            dir_ / "stdout.log", error, options_.environment))
            return false;
        auto deadline = std::chrono::steady_clock::now() + 10s;
        bool up = false;
        while (std::chrono::steady_clock::now() < deadline && process_.running()) {
            if (wait_port(port_, 50ms) && (!options_.tls || wait_port(https_port_, 50ms))) {
                up = true;
                break;
            }
        }
        if (up) return true;
        process_.stop();
        std::string log = error_log() + slurp(dir_ / "stdout.log");
        if (!restart && log.find("Address already in use") != std::string::npos) continue;
        if (error) *error = "nginx did not start: " + log;
        return false;
    }
    if (error) *error = "nginx: no free port after 5 attempts";
    return false;
}

void NginxServer::stop() { process_.stop(); }

std::string NginxServer::base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

std::string NginxServer::https_base_url() const {
    return options_.tls ? "https://127.0.0.1:" + std::to_string(https_port_) : std::string();
}

std::vector<AccessEntry> NginxServer::access_log() const { return parse_access_log(slurp(dir_ / "access.log")); }

std::vector<AccessEntry> NginxServer::wait_access_log(size_t n, std::chrono::milliseconds timeout) const {
    return wait_log_entries(dir_ / "access.log", n, timeout);
}

void NginxServer::clear_access_log() const { ::truncate((dir_ / "access.log").c_str(), 0); }

std::string NginxServer::error_log() const { return slurp(dir_ / "error.log"); }

// --- FaultServer -------------------------------------------------------------------------------

std::string fault_server_script() {
    return fs::weakly_canonical(fs::path(GGUF_TEST_FIXTURES) / ".." / "remote" / "fault_server.py").string();
}

FaultServer::FaultServer(std::string root, std::string host) : root_(std::move(root)), host_(std::move(host)) {}

FaultServer::~FaultServer() { stop(); }

bool FaultServer::available(std::string* why) {
    if (!find_program("python3").empty()) return true;
    if (why) *why = "python3 not found";
    return false;
}

bool FaultServer::start(std::string* error) {
    std::string python = find_program("/usr/bin/python3");
    if (python.empty()) python = find_program("python3");
    if (python.empty()) {
        available(error);
        return false;
    }
    const std::string port_file = dir_ / "port";
    std::error_code ec;
    fs::remove(port_file, ec);
    if (generation_ == 0) set_rules(nlohmann::json::array());
    // A restart asks for the port it had (clients keep their URLs); the first start takes any.
    if (!process_.start({python, fault_server_script(), root_, dir_ / "rules.json", port_file, dir_ / "access.log",
                         std::to_string(port_), host_},
                        dir_ / "output.log", error))
        return false;
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline && process_.running()) {
        std::string text = slurp(port_file);
        if (!text.empty()) {
            port_ = static_cast<uint16_t>(std::stoul(text));
            if (wait_port(port_, 2s, host_)) return true;
        }
        std::this_thread::sleep_for(20ms);
    }
    process_.stop();
    if (error) *error = "fault server did not start: " + output();
    return false;
}

void FaultServer::stop() { process_.stop(); }

void FaultServer::set_rules(const nlohmann::json& rules) {
    const std::string tmp = dir_ / "rules.json.tmp";
    gguf_test::write_file(tmp, nlohmann::json{{"generation", ++generation_}, {"rules", rules}}.dump());
    fs::rename(tmp, dir_ / "rules.json");
}

std::string FaultServer::base_url() const { return "http://" + host_ + ":" + std::to_string(port_); }

std::vector<AccessEntry> FaultServer::access_log() const {
    auto entries = parse_access_log(slurp(dir_ / "access.log"));
    std::stable_sort(entries.begin(), entries.end(), [](const AccessEntry& a, const AccessEntry& b) { return a.seq < b.seq; });
    return entries;
}

std::vector<AccessEntry> FaultServer::wait_access_log(size_t n, std::chrono::milliseconds timeout) const {
    wait_log_entries(dir_ / "access.log", n, timeout);
    return access_log();
}

void FaultServer::clear_access_log() const { ::truncate((dir_ / "access.log").c_str(), 0); }

std::string FaultServer::output() const { return slurp(dir_ / "output.log"); }

// --- http_get ----------------------------------------------------------------------------------

std::string HttpResponse::header(const std::string& name) const {
    for (const auto& [k, v] : headers)
        if (k == name) return v;
    return "";
}

namespace {

size_t on_body(char* data, size_t size, size_t n, void* user) {
    static_cast<HttpResponse*>(user)->body.append(data, size * n);
    return size * n;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
    std::string line(data, size * n);
    auto colon = line.find(':');
    if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string value = line.substr(colon + 1);
        auto b = value.find_first_not_of(" \t");
        auto e = value.find_last_not_of(" \t\r\n");
        value = b == std::string::npos ? "" : value.substr(b, e - b + 1);
        static_cast<HttpResponse*>(user)->headers.emplace_back(name, value);
    }
    return size * n;
}

}  // namespace

HttpResponse http_get(const std::string& url, const HttpRequest& request) {
    HttpResponse r;
    CURL* curl = curl_easy_init();
    if (curl == nullptr) {
        ADD_FAILURE() << "curl_easy_init failed";
        return r;
    }
    curl_slist* headers = nullptr;
    for (const auto& h : request.headers) headers = curl_slist_append(headers, h.c_str());
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, request.timeout_ms);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!request.range.empty()) curl_easy_setopt(curl, CURLOPT_RANGE, request.range.c_str());
    if (!request.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, request.ca_file.c_str());
    if (request.head) curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    if (!request.method.empty()) curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    if (request.path_as_is) curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);
    auto t0 = std::chrono::steady_clock::now();
    r.curl_code = static_cast<int>(curl_easy_perform(curl));
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return r;
}

}  // namespace remote_test
