#include "remote/oci_registry.hpp"

#include <algorithm>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "support/support.hpp"

namespace remote_test {

namespace fs = std::filesystem;

std::string oci_test_dir() {
    return fs::weakly_canonical(fs::path(GGUF_TEST_FIXTURES) / ".." / "remote" / "oci").string();
}

bool OciRegistry::available(std::string* why) {
    if (find_program("docker-registry").empty()) {
        *why = "docker-registry not found (apt-get install docker-registry)";
        return false;
    }
    return true;
}

bool OciRegistry::start(const std::string& root, std::string* error, const std::string& token_realm,
                        const std::string& cert, const std::string& redirect_base) {
    storage_ = root + "/storage";
    fs::create_directories(storage_);
    if (port_ == 0) port_ = free_port();
    std::string config = "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n"
                         "  filesystem:\n    rootdirectory: " + storage_ +
                         "\n  delete:\n    enabled: true\n  maintenance:\n    uploadpurging:\n      enabled: false\n"
                         "http:\n  addr: 127.0.0.1:" + std::to_string(port_) + "\n";
    if (!htpasswd_.empty()) {
        config += "auth:\n  htpasswd:\n    realm: gguf-test-basic\n    path: " + htpasswd_ + "\n";
    } else if (!token_realm.empty()) {
        config += "auth:\n  token:\n    realm: " + token_realm +
                  "\n    service: gguf-test\n    issuer: gguf-test-issuer\n    rootcertbundle: " + cert + "\n";
    }
    if (!redirect_base.empty()) {
        config += "middleware:\n  storage:\n    - name: redirect\n      options:\n        baseurl: " + redirect_base + "\n";
    }
    const std::string conf = root + "/registry.yml";
    gguf_test::write_file(conf, config);
    log_ = root + "/registry.log";
    if (!process_.start({find_program("docker-registry"), "serve", conf}, log_, error)) return false;
    if (!wait_port(port_, std::chrono::seconds(20))) {
        *error = "docker-registry did not listen on " + host() + ": " + gguf_test::read_file(log_);
        process_.stop();
        return false;
    }
    return true;
}

void OciRegistry::stop() { process_.stop(); }

std::string OciRegistry::blob_path(const std::string& digest) const {
    const std::string hex = digest.substr(7);
    return storage_ + "/docker/registry/v2/blobs/sha256/" + hex.substr(0, 2) + "/" + hex + "/data";
}

std::string OciRegistry::push(const std::vector<std::string>& args) const {
    std::vector<std::string> a = {"--registry", host()};
    a.insert(a.end(), args.begin(), args.end());
    return oci_push(a);
}

bool RegistryProxy::start(const std::string& upstream, const std::string& dir, std::string* error, int redirect_life) {
    dir_ = dir;
    fs::create_directories(dir_);
    std::error_code ec;
    fs::remove(dir_ + "/port", ec);
    set_rules(nlohmann::json::array());
    std::vector<std::string> argv = {find_program("python3"), oci_test_dir() + "/registry_proxy.py", "--upstream",
                                     upstream, "--port-file", dir_ + "/port", "--log", dir_ + "/access.log",
                                     "--rules", dir_ + "/rules.json"};
    if (redirect_life > 0) {
        argv.push_back("--redirect-life");
        argv.push_back(std::to_string(redirect_life));
    }
    if (!process_.start(argv, dir_ + "/output.log", error)) return false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline && process_.running()) {
        if (fs::exists(dir_ + "/port")) {
            port_ = static_cast<uint16_t>(std::stoul(gguf_test::read_file(dir_ + "/port")));
            if (wait_port(port_, std::chrono::seconds(5))) return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    *error = "registry_proxy.py did not start: " + gguf_test::read_file(dir_ + "/output.log");
    process_.stop();
    return false;
}

void RegistryProxy::set_rules(const nlohmann::json& rules) {
    gguf_test::write_file(dir_ + "/rules.json.tmp", rules.dump());
    fs::rename(dir_ + "/rules.json.tmp", dir_ + "/rules.json");
}

std::vector<AccessEntry> RegistryProxy::requests() const {
    std::error_code ec;
    if (!fs::exists(dir_ + "/access.log", ec)) return {};
    auto entries = parse_access_log(gguf_test::read_file(dir_ + "/access.log"));
    std::stable_sort(entries.begin(), entries.end(), [](const AccessEntry& a, const AccessEntry& b) { return a.seq < b.seq; });
    return entries;
}

size_t RegistryProxy::count(const std::string& method, const std::string& part) const {
    size_t n = 0;
    for (const AccessEntry& e : requests()) n += e.method == method && e.uri.find(part) != std::string::npos;
    return n;
}

void RegistryProxy::clear() const {
    std::error_code ec;
    fs::remove(dir_ + "/access.log", ec);
}

void OciMountFixture::SetUp() {
    MountFixture::SetUp();
    if (IsSkipped()) return;
    std::string why;
    if (!OciRegistry::available(&why)) GTEST_SKIP() << why;
    cache_ = root_ + "/cache";
}

void OciMountFixture::TearDown() {
    MountFixture::TearDown();
    registry_.stop();
}

std::string oci_push(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {find_program("python3"), oci_test_dir() + "/oci_push.py"};
    argv.insert(argv.end(), args.begin(), args.end());
    gguf_test::RunResult r = gguf_test::run(argv);
    std::string out = r.out;
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    if (r.exit_code != 0 || out.rfind("sha256:", 0) != 0) {
        ADD_FAILURE() << "oci_push.py failed (" << r.exit_code << "): " << r.out << r.err;
        return "";
    }
    return out;
}

}  // namespace remote_test
