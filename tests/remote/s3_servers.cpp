#include "remote/s3_servers.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace remote_test {
namespace {

std::string slurp_if_any(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

}  // namespace

std::string s3_test_dir() {
    return fs::weakly_canonical(fs::path(GGUF_TEST_FIXTURES) / ".." / "remote" / "s3").string();
}

S3Server::S3Server(S3ServerOptions options) : options_(std::move(options)) {}

S3Server::~S3Server() { stop(); }

bool S3Server::available(std::string* why) {
    if (find_program("node").empty()) {
        if (why) *why = "node is not installed (scripts/install-deps.sh installs it)";
        return false;
    }
    const std::string modules = s3_test_dir() + "/node_modules";
    for (const char* package : {"s3rver", "@smithy/signature-v4", "@smithy/hash-node"}) {
        if (!fs::exists(modules + "/" + package + "/package.json")) {
            if (why)
                *why = std::string("npm package ") + package + " is not installed in " + modules +
                       " (run scripts/install-deps.sh, which runs npm ci there)";
            return false;
        }
    }
    return true;
}

bool S3Server::start(std::string* error) {
    if (!available(error)) return false;
    std::error_code ec;
    fs::remove(dir_ / "ready", ec);
    fs::create_directories(dir_ / "data");
    nlohmann::json config = {{"directory", dir_ / "data"},
                             {"buckets", options_.buckets},
                             {"credentials", options_.credentials},
                             {"access_log", dir_ / "access.log"},
                             {"ready", dir_ / "ready"},
                             {"max_skew_seconds", options_.max_skew_seconds},
                             {"faults_file", dir_ / "faults.json"}};
    if (!options_.seed.empty()) config["seed"] = options_.seed;
    if (options_.list_max_keys > 0) config["list_max_keys"] = options_.list_max_keys;
    gguf_test::write_file(dir_ / "config.json", config.dump());
    // s3rver 3.7.1 makes its continuation tokens with DES, which OpenSSL 3 keeps in its legacy
    // provider: without it every truncated ListObjectsV2 page is a 500 InternalError.
    if (!process_.start({find_program("node"), "--openssl-legacy-provider", s3_test_dir() + "/s3_server.js",
                         dir_ / "config.json"},
                        dir_ / "output.log", error))
        return false;
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline && process_.running()) {
        std::string text = slurp_if_any(dir_ / "ready");
        if (!text.empty()) {
            auto j = nlohmann::json::parse(text, nullptr, false);
            proxy_port_ = j.value("proxy_port", uint16_t{0});
            s3rver_port_ = j.value("s3_port", uint16_t{0});
            if (wait_port(proxy_port_, 2s) && wait_port(s3rver_port_, 2s)) return true;
        }
        std::this_thread::sleep_for(20ms);
    }
    process_.stop();
    if (error) *error = "the S3 test server did not start: " + output();
    return false;
}

void S3Server::stop() { process_.stop(); }

std::string S3Server::endpoint_url() const { return "http://127.0.0.1:" + std::to_string(proxy_port_); }

std::vector<S3AccessEntry> S3Server::access_log() const {
    std::string text = slurp_if_any(dir_ / "access.log");
    std::vector<AccessEntry> entries = parse_access_log(text);
    std::vector<S3AccessEntry> out;
    std::istringstream in(text);
    std::string line;
    size_t i = 0;
    while (std::getline(in, line) && i < entries.size()) {
        if (line.empty()) continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        S3AccessEntry e{entries[i++], {}};
        if (j.is_object()) {
            e.verdict = j.value("verdict", std::string());
            e.in_flight = j.value("in_flight", 0);
            e.client_port = j.value("client_port", uint16_t{0});
        }
        out.push_back(std::move(e));
    }
    return out;
}

std::vector<S3AccessEntry> S3Server::wait_access_log(size_t n, std::chrono::milliseconds timeout) const {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<S3AccessEntry> entries = access_log();
    while (entries.size() < n && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
        entries = access_log();
    }
    return entries;
}

void S3Server::clear_access_log() const { std::ofstream(dir_ / "access.log", std::ios::trunc); }

void S3Server::set_faults(const std::vector<S3Fault>& faults) const {
    nlohmann::json j = nlohmann::json::array();
    for (const S3Fault& f : faults) {
        nlohmann::json x = {{"match", f.match}, {"status", f.status}, {"headers", f.headers}};
        if (!f.code.empty()) x["code"] = f.code;
        if (!f.message.empty()) x["message"] = f.message;
        if (f.times >= 0) x["times"] = f.times;
        if (!f.method.empty()) x["method"] = f.method;
        if (f.delay_ms > 0) x["delay_ms"] = f.delay_ms;
        j.push_back(std::move(x));
    }
    // Written whole and renamed: the proxy never reads half a file.
    gguf_test::write_file(dir_ / "faults.json.tmp", j.dump());
    std::filesystem::rename(dir_ / "faults.json.tmp", dir_ / "faults.json");
}

std::string S3Server::output() const { return slurp_if_any(dir_ / "output.log"); }

HttpResponse send_signed(const gguf_mount::remote::s3::SignedRequest& signed_request, bool head) {
    HttpRequest request;
    request.head = head;
    for (const auto& [name, value] : signed_request.headers) request.headers.push_back(name + ": " + value);
    return http_get(signed_request.url, request);
}

}  // namespace remote_test
