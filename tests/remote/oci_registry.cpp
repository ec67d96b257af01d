#include "remote/oci_registry.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <regex>
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
    std::string config = std::string("version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: ") +
                         (access_log ? "false" : "true") + "\nstorage:\n"
                         "  filesystem:\n    rootdirectory: " + storage_ +
                         "\n  delete:\n    enabled: true\n  maintenance:\n    uploadpurging:\n      enabled: false\n"
                         "http:\n  addr: " + host() + "\n";
    if (!htpasswd_.empty()) {
        config += "auth:\n  htpasswd:\n    realm: gguf-test-basic\n    path: " + htpasswd_ + "\n";
    } else if (!token_realm.empty()) {
        config += "auth:\n  token:\n    realm: " + token_realm +
                  "\n    service: gguf-test\n    issuer: gguf-test-issuer\n    rootcertbundle: " + cert + "\n";
    }
    if (!redirect_base.empty()) {
        config += "middleware:\n  storage:\n    - name: redirect\n      options:\n        baseurl: " + redirect_base + "\n";
    }
    return start_with_config(root, config, error);
}

bool OciRegistry::start_with_config(const std::string& root, const std::string& config, std::string* error) {
    host();  // the port, chosen once
    storage_ = root + "/storage";
    fs::create_directories(storage_);
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

std::string OciRegistry::host() const {
    if (port_ == 0) port_ = free_port();
    return "127.0.0.1:" + std::to_string(port_);
}

std::vector<OciRegistry::Access> OciRegistry::gets() const {
    std::vector<Access> out;
    // Combined log format: ... "GET /v2/... HTTP/1.1" 200 1234 "referer" "agent"
    static const std::regex line("\"GET ([^ \"]+) HTTP/[0-9.]+\" ([0-9]+) ([0-9]+)");
    const std::string text = gguf_test::read_file(log_);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator(); ++it) {
        Access a;
        a.path = (*it)[1].str();
        a.status = std::stoi((*it)[2].str());
        a.bytes = std::stoull((*it)[3].str());
        out.push_back(a);
    }
    return out;
}

uint64_t OciRegistry::blob_bytes_sent() const {
    uint64_t n = 0;
    for (const Access& a : gets()) n += a.path.find("/blobs/") != std::string::npos ? a.bytes : 0;
    return n;
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

std::vector<std::string> kvzoo_t7() {
    std::vector<std::string> out;
    for (int i = 1; i <= 7; ++i) out.push_back(std::string(GGUF_TEST_FIXTURES) + "/kvzoo/t7/" + mount_test::kvzoo_shard(i));
    return out;
}

std::vector<std::string> kvzoo_t15(const std::string& dir) {
    fs::create_directories(dir + "/t15");
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "split", "--split-max-tensors", "15",
                             std::string(GGUF_TEST_FIXTURES) + "/kvzoo/original.gguf", dir + "/t15/kvzoo"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> out;
    for (int i = 1; i <= 3; ++i) out.push_back(dir + "/t15/" + mount_test::kvzoo_shard(i, 3));
    return out;
}

std::string tiny_llama() { return std::string(GGUF_TEST_FIXTURES) + "/tiny-llama/tiny-llama.gguf"; }

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

std::vector<std::string> dense_shards(const std::string& dir, std::string* want) {
    fs::create_directories(dir + "/dense");
    auto shards = mount_test::split_dense_model(12, [](int) { return int64_t{393216}; }, 4, 11, dir + "/dense/dense");
    EXPECT_EQ(shards.size(), 3u);
    if (shards.empty()) return shards;
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", shards[0], dir + "/dense-want.gguf"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    *want = gguf_test::sha256_file(dir + "/dense-want.gguf");
    return shards;
}

std::string daemonized_sha256(const std::vector<std::string>& argv, const std::string& mnt, const std::string& file,
                              const std::string& log, std::string* why) {
    struct Unmount {  // also on an early return: unmounted, and the daemon gone
        const std::string& mnt;
        ~Unmount() {
            mount_test::unmount(mnt);
            for (pid_t pid : mount_test::daemon_pids_with_argument(mnt))
                if (!mount_test::wait_gone(pid)) ::kill(pid, SIGKILL);
        }
    } unmount{mnt};
    auto r = gguf_test::run(argv);
    if (r.exit_code != 0) {
        *why = "the mount exited with " + std::to_string(r.exit_code) + ": " + r.err;
        return "";
    }
    r = gguf_test::run({"/usr/bin/timeout", "120", "sha256sum", mnt + "/" + file});
    if (r.exit_code != 0 || r.out.size() < 64) {
        *why = "sha256sum of the daemonized mount's " + file + " exited with " + std::to_string(r.exit_code) +
               " (124: still reading after 120 s): " + r.err + "\n" + gguf_test::read_file(log);
        return "";
    }
    return r.out.substr(0, 64);
}

int read_until_error(const std::string& path, uint64_t* good) {
    mount_test::Fd fd{::open(path.c_str(), O_RDONLY)};
    if (fd.fd < 0) return errno;
    std::string buf(1 << 20, '\0');
    *good = 0;
    // A short read (the kernel copies the pages before a failed one) goes on at the first byte
    // not read, so the failed page is asked for again and answers its error.
    for (off_t at = 0;;) {
        const ssize_t n = ::pread(fd.fd, buf.data(), buf.size(), at);
        if (n < 0) return errno;
        if (n == 0) return 0;
        *good += static_cast<uint64_t>(n);
        at += static_cast<off_t>(n);
    }
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
