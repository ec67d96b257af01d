// Registry token auth end to end: docker-registry with "auth.token" trusting the certificate of
// a throw-away key that tests/remote/oci/token_server.py signs RS256 JWTs with (both on
// 127.0.0.1, started here). Anonymous pulls of a public repository, a private one with the
// credentials of a DOCKER_CONFIG file, of a credential helper (credHelpers) and of an identity
// token (the OAuth2 refresh-token exchange), a refusal naming the file tried, tokens that expire
// during a mount, Basic auth (auth.htpasswd), and blobs redirected to a CDN on another host.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "mount/mount_fixture.hpp"
#include "remote/oci_registry.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;
using remote_test::OciRegistry;

const std::string kTiny = std::string(GGUF_TEST_FIXTURES) + "/tiny-llama/tiny-llama.gguf";

class OciAuth : public remote_test::OciMountFixture {
protected:
    void SetUp() override {
        OciMountFixture::SetUp();
        if (IsSkipped()) return;
        for (const char* name : {"DOCKER_CONFIG", "REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "HOME"}) {
            if (const char* v = std::getenv(name)) saved_.emplace_back(name, v);
        }
        ::unsetenv("DOCKER_CONFIG");
        ::unsetenv("REGISTRY_AUTH_FILE");
        ::setenv("XDG_RUNTIME_DIR", (root_ + "/run").c_str(), 1);
        ::setenv("HOME", (root_ + "/home").c_str(), 1);
        if (const char* p = std::getenv("PATH")) path_ = p;
        ::setenv("PATH", (root_ + "/bin:" + path_).c_str(), 1);
    }
    void TearDown() override {
        OciMountFixture::TearDown();
        tokens_.stop();
        for (const char* name : {"DOCKER_CONFIG", "REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "HOME"}) ::unsetenv(name);
        for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
        ::setenv("PATH", path_.c_str(), 1);
    }
    /// ROOT/bin/docker-credential-NAME: a shell script (ROOT/bin is first on PATH).
    void write_helper(const std::string& name, const std::string& script) {
        fs::create_directories(root_ + "/bin");
        const std::string path = root_ + "/bin/docker-credential-" + name;
        gguf_test::write_file(path, "#!/bin/sh\n" + script);
        fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
    }
    /// DOCKER_CONFIG=ROOT/docker with `json` as its config.json.
    void write_config(const std::string& json) {
        fs::create_directories(root_ + "/docker");
        gguf_test::write_file(root_ + "/docker/config.json", json);
        ::setenv("DOCKER_CONFIG", (root_ + "/docker").c_str(), 1);
    }
    /// The token server (`extra` options), then the registry trusting its certificate.
    void start(const std::vector<std::string>& extra = {}, const std::string& redirect_base = "") {
        const std::string dir = root_ + "/tokens";
        fs::create_directories(dir);
        std::vector<std::string> argv = {remote_test::find_program("python3"),
                                         remote_test::oci_test_dir() + "/token_server.py", "--dir", dir,
                                         "--port-file", dir + "/port", "--users", "alice:s3cret-Pa55",
                                         "--private", "team/private"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        std::string error;
        ASSERT_TRUE(tokens_.start(argv, root_ + "/tokens.log", &error)) << error;
        ASSERT_TRUE(mount_test::time_until([&] { return fs::exists(dir + "/port"); }, std::chrono::seconds(20)))
            << gguf_test::read_file(root_ + "/tokens.log");
        const std::string& realm = realm_ = "http://127.0.0.1:" + gguf_test::read_file(dir + "/port") + "/token";
        ASSERT_TRUE(registry_.start(root_ + "/registry", &error, realm, dir + "/token.crt", redirect_base)) << error;
        token_log_ = dir + "/token.log";
        // Pushed with alice's token (push scope).
        auto r = gguf_test::run({"/usr/bin/curl", "-sf", "-u", "alice:s3cret-Pa55",
                                 realm + "?service=gguf-test&scope=repository:team/private:pull,push"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const std::string push_token = nlohmann::json::parse(r.out).at("token").get<std::string>();
        ASSERT_FALSE(registry_.push({"--token", push_token, "--flavour", "ollama", "--repo", "team/private", kTiny}).empty());
        r = gguf_test::run({"/usr/bin/curl", "-sf", "-u", "alice:s3cret-Pa55",
                            realm + "?service=gguf-test&scope=repository:team/public:pull,push"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const std::string t2 = nlohmann::json::parse(r.out).at("token").get<std::string>();
        ASSERT_FALSE(registry_.push({"--token", t2, "--flavour", "ollama", "--repo", "team/public", kTiny}).empty());
    }
    std::vector<std::string> args() const { return {"--plain-http", "--cache-dir", cache_}; }
    std::string ref(const std::string& r) const { return "oci://" + registry_.host() + "/" + r; }
    /// The token server's request lines since start.
    std::vector<nlohmann::json> token_requests() const {
        std::vector<nlohmann::json> out;
        for (const std::string& line : mount_test::lines_with(gguf_test::read_file(token_log_), "{"))
            out.push_back(nlohmann::json::parse(line));
        return out;
    }
    void write_docker_config() {
        fs::create_directories(root_ + "/docker");
        // base64("alice:s3cret-Pa55")
        gguf_test::write_file(root_ + "/docker/config.json",
                              R"({"auths":{")" + registry_.host() + R"(":{"auth":"YWxpY2U6czNjcmV0LVBhNTU="}}})");
        ::setenv("DOCKER_CONFIG", (root_ + "/docker").c_str(), 1);
    }

    std::vector<std::string> check_args(const std::string& source) const {
        return {gguf_test::gguf_mount_binary(), "check", "--plain-http", "--cache-dir", cache_, source};
    }

    std::string token_log_, realm_, path_;
    std::vector<std::pair<std::string, std::string>> saved_;  // the variables SetUp changes
    remote_test::ChildProcess tokens_;
};

TEST_F(OciAuth, APublicRepositoryIsPulledWithAnAnonymousToken) {
    ASSERT_NO_FATAL_FAILURE(start());
    ASSERT_TRUE(mount(args(), ref("team/public"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/public.gguf"), gguf_test::sha256_file(kTiny)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    bool anonymous = false;
    for (const auto& j : token_requests()) {
        if (j.value("scope", "") == "repository:team/public:pull") anonymous = anonymous || !j.value("credentials", true);
    }
    EXPECT_TRUE(anonymous);
}

TEST_F(OciAuth, APrivateRepositoryNeedsTheDockerConfigsCredentialsAndARefusalNamesTheFileTried) {
    ASSERT_NO_FATAL_FAILURE(start());
    EXPECT_FALSE(mount(args(), ref("team/private")));
    std::string l = log();
    EXPECT_NE(l.find(registry_.host() + "/team/private:latest: UNAUTHORIZED"), std::string::npos) << l;
    EXPECT_NE(l.find("no credentials for " + registry_.host() + " in " + root_ + "/home/.docker/config.json; " + root_ +
                     "/run/containers/auth.json"),
              std::string::npos)
        << l;
    EXPECT_NE(l.find("nothing mounted"), std::string::npos) << l;

    write_docker_config();
    ASSERT_TRUE(mount(args(), ref("team/private"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/private.gguf"), gguf_test::sha256_file(kTiny)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    l = log();
    EXPECT_EQ(l.find("s3cret"), std::string::npos) << l;
    EXPECT_EQ(l.find("YWxpY2U6"), std::string::npos) << l;
    bool alice = false;
    for (const auto& j : token_requests()) alice = alice || j.value("user", nlohmann::json()).is_string();
    EXPECT_TRUE(alice);
    // Nothing of the credentials or tokens in the cache.
    for (const auto& e : fs::recursive_directory_iterator(cache_)) {
        if (!e.is_regular_file()) continue;
        const std::string bytes = gguf_test::read_file(e.path().string());
        EXPECT_EQ(bytes.find("s3cret"), std::string::npos) << e.path();
        EXPECT_EQ(bytes.find("eyJ"), std::string::npos) << e.path();  // a JWT's start
    }
    // A wrong password: refused by the token service, the file named.
    gguf_test::write_file(root_ + "/docker/config.json",
                          R"({"auths":{")" + registry_.host() + R"(":{"auth":"YWxpY2U6d3Jvbmc="}}})");
    auto r = gguf_test::run(check_args(ref("team/private")));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("refused a token (HTTP 401; credentials from " + root_ + "/docker/config.json)"),
              std::string::npos)
        << r.err;
}

TEST_F(OciAuth, APrivateRepositoryIsPulledWithTheCredentialsACredentialHelperGives) {
    ASSERT_NO_FATAL_FAILURE(start());
    // docker-credential-helpers' protocol: `get`, the server address on stdin, JSON out.
    write_helper("gguftest", "read -r host || true\necho \"$1 $host\" >> \"" + root_ +
                                 "/helper.log\"\n"
                                 "[ \"$host\" = \"" + registry_.host() +
                                 "\" ] || { echo 'credentials not found in native keychain'; exit 1; }\n"
                                 "printf '{\"ServerURL\":\"%s\",\"Username\":\"alice\",\"Secret\":\"s3cret-Pa55\"}' \"$host\"\n");
    write_config(R"({"credHelpers":{")" + registry_.host() + R"(":"gguftest"},"auths":{}})");
    ASSERT_TRUE(mount(args(), ref("team/private"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/private.gguf"), gguf_test::sha256_file(kTiny)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    const auto asked = mount_test::lines_with(gguf_test::read_file(root_ + "/helper.log"), "get");
    EXPECT_GE(asked.size(), 1u);
    for (const std::string& line : asked) EXPECT_EQ(line, "get " + registry_.host());
    bool alice = false;
    for (const auto& j : token_requests()) alice = alice || j.value("user", nlohmann::json()) == "alice";
    EXPECT_TRUE(alice);
    EXPECT_EQ(log().find("s3cret"), std::string::npos) << log();

    // A helper that has nothing for the registry: the refusal names the helper and the file.
    write_helper("gguftest", "echo 'credentials not found in native keychain'\nexit 1\n");
    auto r = gguf_test::run(check_args(ref("team/private")));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("team/private:latest: UNAUTHORIZED"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("no credentials for " + registry_.host() + " in " + root_ + "/docker/config.json; "
                         "docker-credential-gguftest (credHelpers in " + root_ + "/docker/config.json)"),
              std::string::npos)
        << r.err;
    // A helper that fails says so in one line, without its standard output.
    write_helper("gguftest", "echo 'SECRET-ish output'\necho 'helper broke' >&2\nexit 3\n");
    r = gguf_test::run(check_args(ref("team/private")));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(root_ + "/docker/config.json: credHelpers \"gguftest\": docker-credential-gguftest exited with "
                         "status 3: helper broke; not used"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("SECRET-ish"), std::string::npos) << r.err;
}

TEST_F(OciAuth, AnIdentityTokenIsExchangedAtTheRealmAsAnOAuth2RefreshToken) {
    ASSERT_NO_FATAL_FAILURE(start({"--refresh-tokens", "refresh-Tok3n:alice"}));
    write_config(R"({"auths":{")" + registry_.host() + R"(":{"auth":"","identitytoken":"refresh-Tok3n"}}})");
    ASSERT_TRUE(mount(args(), ref("team/private"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/private.gguf"), gguf_test::sha256_file(kTiny)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    size_t posts = 0;
    for (const auto& j : token_requests()) {
        if (j.value("method", "") != "POST") continue;
        ++posts;
        EXPECT_EQ(j.value("grant_type", ""), "refresh_token") << j;
        EXPECT_EQ(j.value("client_id", ""), "gguf-mount") << j;
        EXPECT_EQ(j.value("service", ""), "gguf-test") << j;
        EXPECT_EQ(j.value("scope", ""), "repository:team/private:pull") << j;
        EXPECT_EQ(j.value("user", nlohmann::json()), "alice") << j;
    }
    EXPECT_GE(posts, 1u);
    EXPECT_EQ(log().find("refresh-Tok3n"), std::string::npos) << log();

    // A helper's "<token>" user marks an identity token too.
    write_helper("gguftoken", "printf '{\"Username\":\"<token>\",\"Secret\":\"refresh-Tok3n\"}'\n");
    write_config(R"({"credsStore":"gguftoken"})");
    ASSERT_TRUE(mount(args(), ref("team/private"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/private.gguf"), gguf_test::sha256_file(kTiny)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    // An identity token the token service does not know: refused, the source named.
    write_config(R"({"auths":{")" + registry_.host() + R"(":{"identitytoken":"not-known"}}})");
    auto r = gguf_test::run(check_args(ref("team/private")));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("refused a token (HTTP 401, for the identity token; credentials from " + root_ +
                         "/docker/config.json)"),
              std::string::npos)
        << r.err;
}

TEST_F(OciAuth, ABasicChallengeIsAnsweredWithTheDockerConfigsCredentials) {
    // registry 2.8's auth.htpasswd: bcrypt entries (glibc's crypt makes $2b$ hashes).
    auto r = gguf_test::run({remote_test::find_program("python3"), "-W", "ignore", "-c",
                             "import crypt,sys; print('alice:' + crypt.crypt('s3cret-Pa55', "
                             "crypt.mksalt(crypt.METHOD_BLOWFISH)))"});
    if (r.exit_code != 0 || r.out.rfind("alice:$2", 0) != 0)
        GTEST_SKIP() << "python3's crypt makes no bcrypt hash here: " << r.out << r.err;
    gguf_test::write_file(root_ + "/htpasswd", r.out);
    registry_.set_htpasswd(root_ + "/htpasswd");
    std::string error;
    ASSERT_TRUE(registry_.start(root_ + "/registry", &error)) << error;
    ASSERT_FALSE(registry_.push({"--basic", "alice:s3cret-Pa55", "--flavour", "docker", "--repo", "team/basic", kTiny})
                     .empty());
    r = gguf_test::run(check_args(ref("team/basic")));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(registry_.host() + "/team/basic:latest: UNAUTHORIZED"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("no credentials for " + registry_.host() + " in " + root_ + "/home/.docker/config.json"),
              std::string::npos)
        << r.err;
    write_docker_config();
    ASSERT_TRUE(mount(args(), ref("team/basic"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/basic.gguf"), gguf_test::sha256_file(kTiny)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_EQ(log().find("s3cret"), std::string::npos) << log();
    EXPECT_EQ(log().find("YWxpY2U6"), std::string::npos) << log();
}

TEST_F(OciAuth, TokensThatExpireDuringAMountAreRenewedAndReadsGoOn) {
    // Tokens said to last 3 s, whose exp the registry (60 s of leeway) passes 3 s after issue.
    ASSERT_NO_FATAL_FAILURE(start({"--expires-in", "3", "--early", "60"}));
    // A model of 3 shards of 6 MiB: the mount fetches the first block of each, reads the rest.
    fs::create_directories(root_ + "/dense");
    auto shards = mount_test::split_dense_model(12, [](int) { return int64_t{393216}; }, 4, 7, root_ + "/dense/dense");
    ASSERT_EQ(shards.size(), 3u);
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", shards[0], root_ + "/want.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = gguf_test::run({"/usr/bin/curl", "-sf", "-u", "alice:s3cret-Pa55",
                        realm_ + "?service=gguf-test&scope=repository:team/dense:pull,push"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> push = {"--token", nlohmann::json::parse(r.out).at("token").get<std::string>(),
                                     "--flavour", "ollama", "--repo", "team/dense"};
    push.insert(push.end(), shards.begin(), shards.end());
    ASSERT_FALSE(registry_.push(push).empty());

    ASSERT_TRUE(mount(args(), ref("team/dense"))) << log();
    const size_t before = token_requests().size();
    std::this_thread::sleep_for(std::chrono::seconds(5));  // the mount's token is refused now
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/dense.gguf"), gguf_test::sha256_file(root_ + "/want.gguf")) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    EXPECT_GT(token_requests().size(), before);
}

TEST_F(OciAuth, BlobsRedirectedToAnotherHostAreFetchedThereWithoutAuthorization) {
    // The "CDN": a plain server on another host (127.0.0.2) over the registry's own storage.
    remote_test::FaultServer cdn(root_ + "/registry/storage", "127.0.0.2");
    std::string error;
    fs::create_directories(root_ + "/registry/storage");
    ASSERT_TRUE(cdn.start(&error)) << error;
    ASSERT_NO_FATAL_FAILURE(start({}, cdn.base_url()));
    write_docker_config();
    ASSERT_TRUE(mount(args(), ref("team/private"))) << log();
    EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/private.gguf"), gguf_test::sha256_file(kTiny)) << log();
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    const auto entries = cdn.access_log();
    size_t blobs = 0;
    for (const auto& e : entries) {
        blobs += e.uri.find("/docker/registry/v2/blobs/sha256/") != std::string::npos;
        EXPECT_FALSE(e.has_authorization()) << e.uri;
    }
    EXPECT_GE(blobs, 1u);
    EXPECT_EQ(cdn.base_url().rfind("http://127.0.0.2:", 0), 0u);
}

}  // namespace
