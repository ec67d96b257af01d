// remote/oci/: reference parsing, manifest reading and layer naming, without any server.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "gguf/error.hpp"
#include "remote/oci/auth.hpp"
#include "remote/oci/credentials.hpp"
#include "remote/oci/manifest.hpp"
#include "remote/oci/reference.hpp"
#include "remote/oci/signer.hpp"
#include "support/support.hpp"

namespace {

using namespace gguf_mount::remote::oci;

const std::string kDigest = "sha256:" + std::string(64, 'a');

TEST(OciReference, OciReferencesNameRegistryRepositoryAndTagOrDigest) {
    Reference r = parse_reference("oci://127.0.0.1:5000/models/gemma3:Q4_K_M", false);
    EXPECT_EQ(r.registry, "127.0.0.1:5000");
    EXPECT_EQ(r.repository, "models/gemma3");
    EXPECT_EQ(r.tag, "Q4_K_M");
    EXPECT_EQ(r.digest, "");
    EXPECT_EQ(r.manifest_url(), "https://127.0.0.1:5000/v2/models/gemma3/manifests/Q4_K_M");
    EXPECT_EQ(r.last_component(), "gemma3");

    r = parse_reference("oci://127.0.0.1:5000/a/b/c", true);
    EXPECT_EQ(r.tag, "latest");
    EXPECT_EQ(r.blob_url(kDigest), "http://127.0.0.1:5000/v2/a/b/c/blobs/" + kDigest);

    r = parse_reference("oci://[::1]:5000/m@" + kDigest, true);
    EXPECT_EQ(r.registry, "[::1]:5000");
    EXPECT_EQ(r.tag, "");
    EXPECT_EQ(r.digest, kDigest);
    EXPECT_EQ(r.shown(), "[::1]:5000/m@" + kDigest);
    EXPECT_EQ(r.manifest_url(), "http://[::1]:5000/v2/m/manifests/" + kDigest);
}

TEST(OciReference, DockerIoIsRegistry1WithLibraryForOneComponentNames) {
    Reference r = parse_reference("oci://docker.io/gemma3", false);
    EXPECT_EQ(r.registry, "registry-1.docker.io");
    EXPECT_EQ(r.repository, "library/gemma3");
    r = parse_reference("oci://docker.io/ai/gemma3:4B-Q4_K_M", false);
    EXPECT_EQ(r.registry, "registry-1.docker.io");
    EXPECT_EQ(r.repository, "ai/gemma3");
    EXPECT_EQ(r.tag, "4B-Q4_K_M");
    r = parse_reference("oci://hf.co/org/repo:Q8_0", false);
    EXPECT_EQ(r.registry, "hf.co");
    EXPECT_EQ(r.repository, "org/repo");
}

TEST(OciReference, OllamaNamesFillFromTheRight) {
    Reference r = parse_reference("ollama://gemma3", false);
    EXPECT_EQ(r.registry, "registry.ollama.ai");
    EXPECT_EQ(r.repository, "library/gemma3");
    EXPECT_EQ(r.tag, "latest");
    r = parse_reference("ollama://someone/model:7b", false);
    EXPECT_EQ(r.registry, "registry.ollama.ai");
    EXPECT_EQ(r.repository, "someone/model");
    EXPECT_EQ(r.tag, "7b");
    r = parse_reference("ollama://127.0.0.1:8080/library/qwen:0.5b", true);
    EXPECT_EQ(r.registry, "127.0.0.1:8080");
    EXPECT_EQ(r.repository, "library/qwen");
    EXPECT_EQ(r.base_url(), "http://127.0.0.1:8080");
}

TEST(OciReference, BadReferencesAreOneLineNamingTheSourceAndThePart) {
    auto why = [](const std::string& s) {
        try {
            parse_reference(s, false);
        } catch (const gguf::Error& e) {
            EXPECT_EQ(e.code(), gguf::Code::BadArgument);
            return std::string(e.what());
        }
        return std::string("parsed");
    };
    EXPECT_EQ(why("oci://127.0.0.1:5000"), "oci://127.0.0.1:5000: expected oci://REGISTRY/REPOSITORY[:TAG|@sha256:DIGEST]");
    EXPECT_NE(why("oci://127.0.0.1:5000/Upper").find("'Upper' is not valid"), std::string::npos);
    EXPECT_NE(why("oci://127.0.0.1:5000/a:b@sha256:12").find("is not sha256:"), std::string::npos);
    EXPECT_NE(why("oci://127.0.0.1:5000/a:-x").find("the tag '-x'"), std::string::npos);
    EXPECT_NE(why("oci://host:99999/a").find("the registry 'host:99999'"), std::string::npos);
    EXPECT_NE(why("ollama://a/b/c/d").find("expected ollama://"), std::string::npos);
    EXPECT_NE(why("oci://127.0.0.1/a//b").find("component ''"), std::string::npos);
}

/// A manifest of `layers` (media type, digest byte, annotation name) in JSON.
std::string manifest_json(const std::vector<std::tuple<std::string, char, std::string>>& layers,
                          const std::string& media_type = kOciManifest) {
    std::string out = R"({"schemaVersion":2,"mediaType":")" + media_type +
                      R"(","config":{"mediaType":"application/vnd.cncf.model.config.v1+json","digest":")" + kDigest +
                      R"(","size":2},"layers":[)";
    bool first = true;
    for (const auto& [mt, c, name] : layers) {
        out += std::string(first ? "" : ",") + R"({"mediaType":")" + mt + R"(","digest":"sha256:)" +
               std::string(64, c) + R"(","size":10)" +
               (name.empty() ? "" : R"(,"annotations":{"org.cncf.model.filepath":")" + name + R"("})") + "}";
        first = false;
    }
    return out + "]}";
}

TEST(OciManifest, ShardNamedLayersAreOrderedByTheirNamesWhateverTheLayerOrder) {
    const std::string w = "application/vnd.cncf.model.weight.v1.raw";
    Manifest m = parse_manifest(manifest_json({{w, 'c', "x-00003-of-00003.gguf"},
                                               {w, 'a', "x-00001-of-00003.gguf"},
                                               {w, 'b', "x-00002-of-00003.gguf"},
                                               {"application/vnd.cncf.model.doc.v1.raw", 'd', "README.md"}}),
                                "", "where");
    ModelFiles f = model_files(m, Naming{"repo", true}, "where");
    ASSERT_EQ(f.weights.size(), 3u);
    EXPECT_EQ(f.weights[0].name, "x-00001-of-00003.gguf");
    EXPECT_EQ(f.weights[0].layer.digest, "sha256:" + std::string(64, 'a'));
    EXPECT_EQ(f.weights[2].layer.digest, "sha256:" + std::string(64, 'c'));
    ASSERT_EQ(f.companions.size(), 1u);
    EXPECT_EQ(f.companions[0].name, "README.md");

    // In a store: named after the model and tag, ordered by the names all the same.
    f = model_files(m, Naming{"kv-t7", false}, "where");
    EXPECT_EQ(f.weights[0].name, "kv-t7-00001-of-00003.gguf");
    EXPECT_EQ(f.weights[0].layer.digest, "sha256:" + std::string(64, 'a'));
    EXPECT_EQ(f.companions[0].name, "kv-t7.README.md");
}

// The files' mtime comes from the manifest's org.opencontainers.image.created (RFC 3339, any
// offset, fractions of a second dropped); anything else is 0 (the listing then uses the time
// the cache first saw the manifest).
TEST(OciManifest, TheCreatedAnnotationIsReadAsRfc3339AndAnythingElseIsZero) {
    auto with_created = [](const std::string& value) {
        std::string j = manifest_json({{"application/vnd.docker.ai.gguf.v3", 'a', ""}});
        j.pop_back();  // the closing brace
        return parse_manifest(j + R"(,"annotations":{"org.opencontainers.image.created":")" + value + R"("}})", "",
                              "where");
    };
    EXPECT_EQ(created_time(with_created("2025-04-01T09:30:00Z")), 1743499800);
    EXPECT_EQ(created_time(with_created("2025-04-01T11:30:00.123+02:00")), 1743499800);
    EXPECT_EQ(created_time(with_created("2025-04-01T08:00:00-01:30")), 1743499800);
    for (const char* bad : {"2025-04-01T09:30:00", "2025-04-01", "yesterday", "2025-13-01T09:30:00Z",
                            "2025-04-01T09:30:00Zjunk", "2025-04-01T09:30:00.Z", ""}) {
        EXPECT_EQ(created_time(with_created(bad)), 0) << bad;
    }
    EXPECT_EQ(created_time(parse_manifest(manifest_json({{"application/vnd.docker.ai.gguf.v3", 'a', ""}}), "", "w")), 0);
}

TEST(OciManifest, UnnamedLayersKeepLayerOrderAndCompanionsGetTheirKindsNames) {
    const std::string o = "application/vnd.ollama.image.";
    Manifest m = parse_manifest(manifest_json({{o + "model", 'b', ""},
                                               {o + "model", 'a', ""},
                                               {o + "template", 'c', ""},
                                               {o + "params", 'd', ""},
                                               {o + "projector", 'e', ""},
                                               {o + "license", 'f', ""},
                                               {o + "messages", '1', ""}},
                                              kDockerManifest),
                                "", "where");
    ModelFiles f = model_files(m, Naming{"gemma3", true}, "where");
    ASSERT_EQ(f.weights.size(), 2u);
    EXPECT_EQ(f.weights[0].name, "gemma3-00001-of-00002.gguf");
    EXPECT_EQ(f.weights[0].layer.digest, "sha256:" + std::string(64, 'b'));
    std::vector<std::string> names;
    for (const auto& c : f.companions) names.push_back(c.name);
    EXPECT_EQ(names, (std::vector<std::string>{"gemma3.template", "gemma3.params", "mmproj-gemma3.gguf",
                                               "gemma3.license"}));
    m = parse_manifest(manifest_json({{"application/vnd.docker.ai.gguf.v3", 'a', ""},
                                      {"application/vnd.docker.ai.chat.template.jinja", 'b', ""}}),
                       "", "w");
    f = model_files(m, Naming{"smollm2", true}, "w");
    ASSERT_EQ(f.weights.size(), 1u);
    EXPECT_EQ(f.weights[0].name, "smollm2.gguf");
    EXPECT_EQ(f.companions.at(0).name, "smollm2.jinja");
}

TEST(OciManifest, ArchiveWeightsAreRefusedAndNoGgufLayerNamesTheMediaTypes) {
    Manifest m = parse_manifest(manifest_json({{"application/vnd.cncf.model.weight.v1.tar+zstd", 'a', "x.gguf"},
                                               {"application/vnd.cncf.model.doc.v1.raw", 'b', "README.md"}}),
                                "", "reg/repo:tag");
    try {
        model_files(m, Naming{"x", true}, "reg/repo:tag");
        FAIL() << "no error";
    } catch (const gguf::Error& e) {
        EXPECT_EQ(std::string(e.what()),
                  "reg/repo:tag: no GGUF layer (media types: application/vnd.cncf.model.weight.v1.tar+zstd, "
                  "application/vnd.cncf.model.doc.v1.raw); archive weight layers cannot be range-read");
    }
    const std::string w = "application/vnd.cncf.model.weight.v1.raw";
    m = parse_manifest(manifest_json({{w, 'a', "x.gguf"}, {"application/vnd.cncf.model.weight.v1.tar", 'b', "y"}}), "",
                       "r");
    ModelFiles f = model_files(m, Naming{"x", true}, "r");
    ASSERT_EQ(f.refused.size(), 1u);
    EXPECT_NE(f.refused[0].find("application/vnd.cncf.model.weight.v1.tar: an archive layer cannot be range-read"),
              std::string::npos);
}

TEST(OciManifest, AnIndexIsNarrowedToTheModelManifestByArtifactTypeOrByItsLayers) {
    const std::string image = R"({"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:)" +
                              std::string(64, '1') + R"(","size":5,"platform":{"os":"linux","architecture":"amd64"}})";
    const std::string model = R"({"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:)" +
                              std::string(64, '2') + R"(","size":5})";
    Manifest index = parse_manifest(R"({"schemaVersion":2,"manifests":[)" + image + "," + model + "]}", "", "w");
    ASSERT_TRUE(index.index);
    std::vector<std::string> fetched;
    Descriptor d = select_model_manifest(
        index,
        [&](const Descriptor& x) {
            fetched.push_back(x.digest);
            if (x.digest.back() == '1') return std::string(R"({"schemaVersion":2,"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")" + kDigest + R"(","size":1},"layers":[]})");
            return manifest_json({{"application/vnd.docker.ai.gguf.v3", 'a', ""}});
        },
        "w");
    EXPECT_EQ(d.digest, "sha256:" + std::string(64, '2'));
    EXPECT_EQ(fetched.size(), 2u);
    // With an artifactType the model manifest is chosen without fetching anything.
    const std::string typed = R"({"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:)" +
                              std::string(64, '3') +
                              R"(","size":5,"artifactType":"application/vnd.cncf.model.manifest.v1+json"})";
    index = parse_manifest(R"({"schemaVersion":2,"manifests":[)" + image + "," + typed + "]}", "", "w");
    fetched.clear();
    d = select_model_manifest(index, [&](const Descriptor& x) { fetched.push_back(x.digest); return std::string(); }, "w");
    EXPECT_EQ(d.digest, "sha256:" + std::string(64, '3'));
    EXPECT_TRUE(fetched.empty());
}

TEST(OciManifest, ManifestsThatAreNotReadAreOneLine) {
    auto why = [](const std::string& bytes) {
        try {
            parse_manifest(bytes, "", "r/x:t");
        } catch (const gguf::Error& e) {
            return std::string(e.what());
        }
        return std::string("parsed");
    };
    EXPECT_EQ(why("nope"), "r/x:t: the manifest is not a JSON object");
    EXPECT_EQ(why(R"({"schemaVersion":1})"), "r/x:t: not a schemaVersion 2 manifest (schema 1 manifests are not read)");
    EXPECT_NE(why(R"({"schemaVersion":2,"layers":[{"digest":"md5:x","size":1}]})").find("is not sha256"),
              std::string::npos);
}

TEST(OciChallenge, ChallengesParseAndRegistryErrorsNameTheReference) {
    Challenge c = parse_challenge(R"(Bearer realm="http://127.0.0.1:1/token",service="reg",scope="repository:a/b:pull")");
    EXPECT_EQ(c.scheme, "bearer");
    EXPECT_EQ(c.realm, "http://127.0.0.1:1/token");
    EXPECT_EQ(c.service, "reg");
    EXPECT_EQ(c.scope, "repository:a/b:pull");
    c = parse_challenge(R"(Basic realm="Registry Realm")");
    EXPECT_EQ(c.scheme, "basic");
    EXPECT_EQ(c.realm, "Registry Realm");

    Reference r = parse_reference("oci://127.0.0.1:5000/ns/m:v1", true);
    EXPECT_EQ(describe_registry_error(r, 404, R"({"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]})", ""),
              "127.0.0.1:5000/ns/m:v1: MANIFEST_UNKNOWN: manifest unknown (HTTP 404); no manifest v1 in ns/m (no "
              "such tag, or no such repository)");
    EXPECT_EQ(describe_registry_error(r, 401, "", "anonymous: no credentials for 127.0.0.1:5000 in /x/config.json"),
              "127.0.0.1:5000/ns/m:v1: UNAUTHORIZED (HTTP 401); anonymous: no credentials for 127.0.0.1:5000 in "
              "/x/config.json");
}

TEST(OciCredentials, DockerConfigAuthsAndPodmanAuthFileAreFoundByHost) {
    gguf_test::TempDir tmp;
    const std::string dir = tmp.path();
    gguf_test::write_file(dir + "/config.json",
                          R"({"auths":{"http://127.0.0.1:5000/v1/":{"auth":"dXNlcjpwYXNzOndvcmQ="},)"
                          R"("127.0.0.1:6000":{"identitytoken":"tok"}}})");
    gguf_test::write_file(dir + "/auth.json", R"({"auths":{"127.0.0.1:7000":{"auth":"YTpi"}}})");
    std::map<std::string, std::string> env{{"DOCKER_CONFIG", dir}, {"REGISTRY_AUTH_FILE", dir + "/auth.json"}};
    CredentialLookup l{[&](const std::string& n) { return env.count(n) ? env[n] : std::string(); }};
    Credentials c = find_credentials("127.0.0.1:5000", l);
    EXPECT_EQ(c.username, "user");
    EXPECT_EQ(c.password, "pass:word");
    EXPECT_EQ(c.source, dir + "/config.json");
    c = find_credentials("127.0.0.1:6000", l);
    EXPECT_EQ(c.identity_token, "tok");
    c = find_credentials("127.0.0.1:7000", l);
    EXPECT_EQ(c.username, "a");
    EXPECT_EQ(c.source, dir + "/auth.json");
    c = find_credentials("127.0.0.1:8000", l);
    EXPECT_FALSE(c.found());
    EXPECT_EQ(c.tried, dir + "/config.json; " + dir + "/auth.json");
}


TEST(OciCredentials, AConfigFileOthersMayWriteIsNotUsed) {
    // Whoever may write a credentials file speaks for it (and names the helpers it runs).
    gguf_test::TempDir tmp;
    const std::string dir = tmp.path();
    gguf_test::write_file(dir + "/config.json", R"({"auths":{"127.0.0.1:5000":{"auth":"dXNlcjpwYXNz"}}})");
    std::map<std::string, std::string> env{{"DOCKER_CONFIG", dir}, {"REGISTRY_AUTH_FILE", dir + "/none.json"}};
    CredentialLookup l{[&](const std::string& n) { return env.count(n) ? env[n] : std::string(); }};
    ASSERT_TRUE(find_credentials("127.0.0.1:5000", l).found());
    ASSERT_EQ(::chmod((dir + "/config.json").c_str(), 0666), 0);
    EXPECT_FALSE(find_credentials("127.0.0.1:5000", l).found());
    ASSERT_EQ(::chmod((dir + "/config.json").c_str(), 0600), 0);
    ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);  // a folder others may write, not sticky
    EXPECT_FALSE(find_credentials("127.0.0.1:5000", l).found());
    ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
}

TEST(OciCredentials, WithoutARuntimeDirectoryPodmansRunFileThenTheConfigHomesAuthFileAreRead) {
    // skopeo/podman login in a root shell (no XDG_RUNTIME_DIR) writes /run/containers/UID/auth.json;
    // ~/.config/containers/auth.json comes after it (containers-auth.json(5)).
    gguf_test::TempDir tmp;
    const std::string dir = tmp.path();
    std::filesystem::create_directories(dir + "/cfg/containers");
    gguf_test::write_file(dir + "/cfg/containers/auth.json", R"({"auths":{"127.0.0.1:7000":{"auth":"YTpi"}}})");
    std::map<std::string, std::string> env{{"DOCKER_CONFIG", dir}, {"XDG_CONFIG_HOME", dir + "/cfg"}};
    CredentialLookup l{[&](const std::string& n) { return env.count(n) ? env[n] : std::string(); }};
    l.uid = 4242;  // no such folder under /run/containers: looked for, not found
    Credentials c = find_credentials("127.0.0.1:7000", l);
    EXPECT_EQ(c.username, "a");
    EXPECT_EQ(c.source, dir + "/cfg/containers/auth.json");
    EXPECT_EQ(c.tried, dir + "/config.json; /run/containers/4242/auth.json; " + dir + "/cfg/containers/auth.json");
    // HOME alone: ~/.config is the config home.
    env = {{"HOME", dir + "/home"}};
    c = find_credentials("127.0.0.1:8000", l);
    EXPECT_FALSE(c.found());
    EXPECT_EQ(c.tried, dir + "/home/.docker/config.json; /run/containers/4242/auth.json; " + dir +
                           "/home/.config/containers/auth.json");
}


/// A docker-credential-NAME script in `dir` (0755) answering by the server address on stdin.
std::string credential_helper(const std::string& dir, const std::string& name, const std::string& body) {
    const std::string path = dir + "/docker-credential-" + name;
    gguf_test::write_file(path, "#!/bin/sh\nread -r host || true\necho \"$1 $host\" >> " + dir + "/asked.log\n" + body);
    ::chmod(path.c_str(), 0755);
    return path;
}

TEST(OciCredentials, HelpersAnswerForTheirRegistriesThenTheStoreAndAuthsAreTheFallback) {
    gguf_test::TempDir tmp;
    const std::string dir = tmp.path();
    const std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
    ::setenv("PATH", (dir + ":" + old_path).c_str(), 1);
    credential_helper(dir, "per", R"(printf '{"ServerURL":"%s","Username":"u1","Secret":"p1"}' "$host")" "\n");
    credential_helper(dir, "store", R"([ "$host" = "https://index.docker.io/v1/" ] && { printf '{"Username":"<token>","Secret":"idt"}'; exit 0; })"
                                    "\necho 'credentials not found in native keychain'; exit 1\n");
    credential_helper(dir, "slow", "exec sleep 30\n");
    gguf_test::write_file(dir + "/config.json",
                          R"({"credHelpers":{"127.0.0.1:5000":"per","127.0.0.1:5001":"slow","127.0.0.1:5002":"../x"},)"
                          R"("credsStore":"store","auths":{"127.0.0.1:7000":{"auth":"YTpi"}}})");
    std::map<std::string, std::string> env{{"DOCKER_CONFIG", dir}};
    CredentialLookup l{[&](const std::string& n) { return env.count(n) ? env[n] : std::string(); }};
    l.helper_timeout = std::chrono::milliseconds(500);

    Credentials c = find_credentials("127.0.0.1:5000", l);
    EXPECT_EQ(c.username, "u1");
    EXPECT_EQ(c.password, "p1");
    EXPECT_EQ(c.source, "docker-credential-per (credHelpers in " + dir + "/config.json)");
    // Docker Hub's server address; the "<token>" user: an identity token.
    c = find_credentials("registry-1.docker.io", l);
    EXPECT_EQ(c.identity_token, "idt");
    EXPECT_TRUE(c.username.empty());
    EXPECT_EQ(c.source, "docker-credential-store (credsStore in " + dir + "/config.json)");
    // The store has nothing for 7000: its "auths" entry is used.
    c = find_credentials("127.0.0.1:7000", l);
    EXPECT_EQ(c.username, "a");
    EXPECT_EQ(c.source, dir + "/config.json");
    c = find_credentials("127.0.0.1:8000", l);
    EXPECT_FALSE(c.found());
    EXPECT_EQ(c.tried, dir + "/config.json; docker-credential-store (credsStore in " + dir +
                           "/config.json); /run/containers/" + std::to_string(::geteuid()) + "/auth.json");
    // A helper past its timeout is killed; a name with a '/' is never run.
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(find_credentials("127.0.0.1:5001", l).found());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    EXPECT_FALSE(find_credentials("127.0.0.1:5002", l).found());
    EXPECT_EQ(gguf_test::read_file(dir + "/asked.log"),
              "get 127.0.0.1:5000\nget https://index.docker.io/v1/\nget 127.0.0.1:7000\nget 127.0.0.1:8000\n"
              "get 127.0.0.1:5001\n");
    // A helper that others may rewrite is not run (the S3 credential_process's rule).
    ::chmod((dir + "/docker-credential-per").c_str(), 0777);
    EXPECT_FALSE(find_credentials("127.0.0.1:5000", l).found());
    ::setenv("PATH", old_path.c_str(), 1);
}

}  // namespace
