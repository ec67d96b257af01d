// remote/hub: hf:// sources, Hub endpoint URLs, revision and tree JSON, Link pagination,
// token lookup. Pure: no server.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>

#include "gguf/error.hpp"
#include "remote/expect_error.hpp"
#include "remote/hub.hpp"
#include "remote/url_parts.hpp"
#include "support/support.hpp"

namespace {

using remote_test::code_of;
using namespace gguf_mount::remote;

EnvLookup env_of(std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

const std::string kSha = "0123456789abcdef0123456789abcdef01234567";
const std::string kSha256 = "a3f1c0b5d2e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2b4c6d8e0f2a4b6c8d0e2f4a6";

TEST(HubSource, ParsesOrgRepoRevisionAndPath) {
    auto s = parse_hub_source("hf://unsloth/Qwen3-8B-GGUF");
    EXPECT_EQ(s.org, "unsloth");
    EXPECT_EQ(s.repo, "Qwen3-8B-GGUF");
    EXPECT_EQ(s.repo_id(), "unsloth/Qwen3-8B-GGUF");
    EXPECT_EQ(s.revision, "main");
    EXPECT_FALSE(s.revision_given);
    EXPECT_EQ(s.path, "");

    s = parse_hub_source("hf://org/repo.v2_x@v1.0/Q4_K_M/");
    EXPECT_EQ(s.repo, "repo.v2_x");
    EXPECT_EQ(s.revision, "v1.0");
    EXPECT_TRUE(s.revision_given);
    EXPECT_EQ(s.path, "Q4_K_M");

    s = parse_hub_source("hf://org/repo@release%2Fv2/sub dir/m-00001-of-00002.gguf");
    EXPECT_EQ(s.revision, "release/v2");
    EXPECT_EQ(s.path, "sub dir/m-00001-of-00002.gguf");

    s = parse_hub_source("hf://org/repo@refs/pr/3/Q8_0");
    EXPECT_EQ(s.revision, "refs/pr/3");
    EXPECT_EQ(s.path, "Q8_0");
    s = parse_hub_source("hf://org/repo@refs/convert/parquet");
    EXPECT_EQ(s.revision, "refs/convert/parquet");
    EXPECT_EQ(s.path, "");
    // Not a special ref: the revision ends at the first '/'.
    s = parse_hub_source("hf://org/repo@refs/prx/3");
    EXPECT_EQ(s.revision, "refs");
    EXPECT_EQ(s.path, "prx/3");
    s = parse_hub_source("hf://org/repo/a.gguf");
    EXPECT_EQ(s.revision, "main");
    EXPECT_EQ(s.path, "a.gguf");
}

TEST(HubSource, APathEndingInDotGgufNamesAFileAnythingElseAFolder) {
    EXPECT_TRUE(hub_names_file(parse_hub_source("hf://o/r/Q4_K_M/m-00001-of-00002.gguf")));
    EXPECT_TRUE(hub_names_file(parse_hub_source("hf://o/r@v1/model.GGUF")));
    EXPECT_FALSE(hub_names_file(parse_hub_source("hf://o/r")));
    EXPECT_FALSE(hub_names_file(parse_hub_source("hf://o/r/Q4_K_M")));
    EXPECT_FALSE(hub_names_file(parse_hub_source("hf://o/r/README.md")));
    EXPECT_FALSE(hub_names_file(parse_hub_source("hf://o/r/x.gguf/sub")));
    EXPECT_FALSE(hub_names_file(parse_hub_source("hf://o/r/.gguf")));  // a hidden name, no stem
}

TEST(HubSource, RejectsMalformedSourcesNamingThem) {
    for (const char* bad :
         {"http://h/org/repo", "hf:/org/repo", "hf://org", "hf://org/", "hf://-org/repo", "hf://org/re--po",
          "hf://org/re..po", "hf://org/repo.", "hf://org/re po", "hf://org/repo@", "hf://org/repo@/x",
          "hf://org/repo/a//b", "hf://org/repo/../x", "hf://org/repo/./x", "hf://datasets/org/repo",
          "hf://org/repo@a%0Ab", "hf://org/repo@a%00b"}) {
        std::string message;
        EXPECT_EQ(code_of([&] { parse_hub_source(bad); }, &message), gguf::Code::BadArgument) << bad;
        EXPECT_NE(message.find("hf:/"), std::string::npos) << message;
    }
    const std::string long_repo(95, 'r');
    EXPECT_EQ(code_of([&] { parse_hub_source("hf://org/" + long_repo); }), gguf::Code::BadArgument);
    EXPECT_NO_THROW(parse_hub_source("hf://o/" + std::string(94, 'r')));  // 96 characters
}

TEST(HubUrls, EndpointFromEnvironment) {
    EXPECT_EQ(hub_endpoint(env_of({})), std::string(gguf_mount::remote::kDefaultHubEndpoint));
    EXPECT_EQ(hub_endpoint(env_of({{"HF_ENDPOINT", ""}})), std::string(gguf_mount::remote::kDefaultHubEndpoint));
    EXPECT_EQ(hub_endpoint(env_of({{"HF_ENDPOINT", "http://127.0.0.1:8080//"}})), "http://127.0.0.1:8080");
    EXPECT_EQ(hub_endpoint(env_of({{"HF_ENDPOINT", "https://127.0.0.1:8443/mirror"}})), "https://127.0.0.1:8443/mirror");
    for (const char* bad : {"ftp://127.0.0.1", "not a url", "http://127.0.0.1/?x=1", "http://u:p@127.0.0.1"}) {
        std::string message;
        EXPECT_EQ(code_of([&] { hub_endpoint(env_of({{"HF_ENDPOINT", bad}})); }, &message), gguf::Code::BadArgument)
            << bad;
        EXPECT_EQ(message.find(":p@"), std::string::npos) << message;
    }
}

TEST(HubUrls, RevisionTreeAndResolveAreEncodedLikeHuggingfaceHub) {
    const std::string ep = "http://127.0.0.1:8080";
    auto s = parse_hub_source("hf://org/repo@refs/pr/3");
    EXPECT_EQ(hub_revision_url(ep, s, s.revision), "http://127.0.0.1:8080/api/models/org/repo/revision/refs%2Fpr%2F3");
    EXPECT_EQ(hub_revision_url(ep, s, "main"), "http://127.0.0.1:8080/api/models/org/repo/revision/main");
    // expand=false and limit=1000 on every tree page (B6: the Hub's cheapest, largest pages).
    const std::string q = "?recursive=true&expand=false&limit=1000";
    EXPECT_EQ(hub_tree_url(ep, s, kSha, ""), ep + "/api/models/org/repo/tree/" + kSha + q);
    EXPECT_EQ(hub_tree_url(ep, s, s.revision, "a"), ep + "/api/models/org/repo/tree/refs%2Fpr%2F3/a" + q);
    EXPECT_EQ(hub_resolve_url(ep, s, s.revision, "a/b"), ep + "/org/repo/resolve/refs%2Fpr%2F3/a/b");
    EXPECT_EQ(hub_tree_url(ep, s, kSha, "Q4 K/sub"), ep + "/api/models/org/repo/tree/" + kSha + "/Q4%20K%2Fsub" + q);
    EXPECT_EQ(hub_resolve_url(ep, s, kSha, "Q4 K/a+b#\xc3\xa9~_.-.gguf"),
              ep + "/org/repo/resolve/" + kSha + "/Q4%20K/a%2Bb%23%C3%A9~_.-.gguf");
    EXPECT_EQ(url_quote("a/b c", true), "a/b%20c");
    EXPECT_EQ(url_quote("a/b c", false), "a%2Fb%20c");
    EXPECT_EQ(url_quote("", false), "");
}

TEST(HubJson, RevisionGivesTheCommitSha) {
    const std::string url = "http://127.0.0.1:8080/api/models/org/repo/revision/main?token=SECRET";
    EXPECT_EQ(parse_hub_revision(R"({"_id":"x","id":"org/repo","sha":")" + kSha + R"(","siblings":[]})", url), kSha);
    std::string upper = kSha;
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(parse_hub_revision(R"({"sha":")" + upper + R"("})", url), kSha);
    EXPECT_EQ(parse_hub_revision(R"({"sha":")" + kSha256 + R"("})", url), kSha256);
    for (const std::string bad : {std::string("[]"), std::string("{}"), std::string(R"({"sha":1})"),
                                  std::string(R"({"sha":"abc"})"), R"({"sha":")" + kSha.substr(1) + "g\"}",
                                  std::string("nope")}) {
        std::string message;
        EXPECT_EQ(code_of([&] { parse_hub_revision(bad, url); }, &message), gguf::Code::BadValue) << bad;
        EXPECT_EQ(message.rfind("http://127.0.0.1:8080/api/models/org/repo/revision/main: ", 0), 0u) << message;
    }
}

TEST(HubJson, TreePageGivesFilesFoldersAndLfs) {
    const std::string body = R"([
      {"type":"directory","oid":"1111111111111111111111111111111111111111","size":0,"path":"Q4_K_M"},
      {"type":"file","oid":"2222222222222222222222222222222222222222","size":5234,"path":"README.md"},
      {"type":"file","oid":"3333333333333333333333333333333333333333","size":4920734208,
       "lfs":{"oid":")" + kSha256 + R"(","size":4920734208,"pointerSize":135},
       "xetHash":"abcd","path":"Q4_K_M/m-00001-of-00002.gguf"},
      {"type":"file","oid":"4444444444444444444444444444444444444444","size":7,
       "lfs":{"oid":"sha256:)" + kSha256 + R"(","size":7},"path":"small.gguf"},
      {"type":"submodule","oid":"5","path":"ext"}
    ])";
    auto entries = parse_hub_tree(body, "http://127.0.0.1:8080/api/models/org/repo/tree/" + kSha);
    ASSERT_EQ(entries.size(), 4u);
    EXPECT_TRUE(entries[0].directory);
    EXPECT_EQ(entries[0].path, "Q4_K_M");
    EXPECT_EQ(entries[0].size, 0u);
    EXPECT_FALSE(entries[0].lfs);
    EXPECT_FALSE(entries[1].directory);
    EXPECT_EQ(entries[1].size, 5234u);
    EXPECT_EQ(entries[1].oid, "2222222222222222222222222222222222222222");
    EXPECT_FALSE(entries[1].lfs);
    ASSERT_TRUE(entries[2].lfs);
    EXPECT_EQ(entries[2].path, "Q4_K_M/m-00001-of-00002.gguf");
    EXPECT_EQ(entries[2].size, 4920734208u);
    EXPECT_EQ(entries[2].lfs->sha256, kSha256);
    EXPECT_EQ(entries[2].lfs->size, 4920734208u);
    EXPECT_EQ(entries[2].lfs->pointer_size, 135u);
    EXPECT_EQ(entries[2].xet_hash, "abcd");
    ASSERT_TRUE(entries[3].lfs);
    EXPECT_EQ(entries[3].lfs->sha256, kSha256);
    EXPECT_EQ(entries[3].lfs->pointer_size, 0u);
    EXPECT_TRUE(parse_hub_tree("[]", "http://h/x").empty());
}

TEST(HubJson, TreePageRejectsWhatItCannotTrust) {
    const std::string url = "http://127.0.0.1:8080/api/models/org/repo/tree/main?cursor=SECRET";
    const std::string oid = R"("oid":"2222222222222222222222222222222222222222")";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{}", "not a JSON array"},
        {"[1]", "entry 0 is not an object"},
        {R"([{"path":"a","size":1,)" + oid + "}]", "\"type\""},
        {R"([{"type":"file","size":1,)" + oid + "}]", "\"path\""},
        {R"([{"type":"file","path":"a","size":1}])", "\"oid\""},
        {R"([{"type":"file","path":"a",)" + oid + "}]", "\"size\""},
        {R"([{"type":"file","path":"a","size":-1,)" + oid + "}]", "\"size\""},
        {R"([{"type":"file","path":"a/../b","size":1,)" + oid + "}]", "segment"},
        {R"([{"type":"file","path":"/a","size":1,)" + oid + "}]", "segment"},
        {R"([{"type":"file","path":"a","size":1,"lfs":{"oid":"xyz","size":1},)" + oid + "}]", "sha256"},
        {R"([{"type":"file","path":"a","size":1,"lfs":{"oid":")" + kSha256 + R"(","size":2},)" + oid + "}]",
         "lfs size 2 differs from size 1"},
        {R"([{"type":"file","path":"a","size":1,"lfs":[],)" + oid + "}]", "\"lfs\" is not an object"},
    };
    for (const auto& [body, reason] : cases) {
        std::string message;
        EXPECT_EQ(code_of([&] { parse_hub_tree(body, url); }, &message), gguf::Code::BadValue) << body;
        EXPECT_NE(message.find(reason), std::string::npos) << message;
        EXPECT_EQ(message.rfind("http://127.0.0.1:8080/api/models/org/repo/tree/main: ", 0), 0u) << message;
    }
}

TEST(HubLink, FindsTheNextPage) {
    const std::string req = "http://127.0.0.1:8080/api/models/o/r/tree/main?recursive=true";
    EXPECT_EQ(parse_link_next(R"(<http://127.0.0.1:8080/api/models/o/r/tree/main?recursive=true&cursor=abc>; rel="next")", req),
              "http://127.0.0.1:8080/api/models/o/r/tree/main?recursive=true&cursor=abc");
    EXPECT_EQ(parse_link_next(R"(<http://h/p1>; rel="prev", <http://h/p3?a=1,2>; rel="next")", req), "http://h/p3?a=1,2");
    EXPECT_EQ(parse_link_next("<http://h/p2>;rel=next", req), "http://h/p2");
    EXPECT_EQ(parse_link_next(R"(<http://h/p2>; title="a, b"; REL="last Next")", req), "http://h/p2");
    EXPECT_EQ(parse_link_next(R"(</api/models/o/r/tree/main?cursor=2>; rel="next")", req),
              "http://127.0.0.1:8080/api/models/o/r/tree/main?cursor=2");
    EXPECT_EQ(parse_link_next(R"(<http://h/p1>; rel="prev")", req), std::nullopt);
    EXPECT_EQ(parse_link_next(R"(<http://h/p1>; rel="nextpage")", req), std::nullopt);
    EXPECT_EQ(parse_link_next("", req), std::nullopt);
    // A next page that cannot be followed is an error, not the end of the listing.
    std::string message;
    EXPECT_EQ(code_of([&] { parse_link_next(R"(<javascript:alert(1)>; rel="next")", req); }, &message),
              gguf::Code::BadValue);
    EXPECT_EQ(message, "http://127.0.0.1:8080/api/models/o/r/tree/main: the Link header's next page is not an http(s) URL");
    EXPECT_EQ(code_of([&] { parse_link_next(R"(http://h/p2; rel="next")", req); }, &message), gguf::Code::BadValue);
    EXPECT_EQ(message, "http://127.0.0.1:8080/api/models/o/r/tree/main: malformed Link header: a link does not start "
                       "with '<'");
    // Quoted values with escapes and commas, several Link lines joined by ", ".
    EXPECT_EQ(parse_link_next(R"(<http://h/a>; title="x\"; rel=next, y"; rel="prev", <http://h/b>; rel="next")", req),
              "http://h/b");
}

TEST(HubLink, TheCursorIsKeptByteForByte) {
    const std::string req = "http://127.0.0.1:8080/api/models/o/r/tree/main?recursive=true";
    // An opaque base64 cursor with '+', '/', '=' and a percent-escape: never decoded or re-encoded.
    const std::string next =
        "http://127.0.0.1:8080/api/models/o/r/tree/main?recursive=true&expand=false&limit=1000&cursor=eyJmaWxlX25hbWUiOi+/Ab%3D%3D==";
    EXPECT_EQ(parse_link_next("<" + next + ">; rel=\"next\"", req), next);
    EXPECT_EQ(parse_link_next("</api/models/o/r/tree/main?cursor=a+b/c%2Fd==>; rel=next", req),
              "http://127.0.0.1:8080/api/models/o/r/tree/main?cursor=a+b/c%2Fd==");
}

TEST(HubLink, LongHeadersAndParametersAreRefusedInBoundedTimeWithoutRegex) {
    const std::string req = "http://127.0.0.1:8080/api/models/o/r/tree/main?recursive=true&cursor=SECRET";
    std::string message;
    // Several MB of Link header: refused on its size, before any scan (std::regex overflowed
    // the stack on such a header).
    const std::string huge = "<http://h/p2>; rel=\"next\"; title=\"" + std::string(4 << 20, ' ') + "\"";
    EXPECT_EQ(code_of([&] { parse_link_next(huge, req); }, &message), gguf::Code::BadValue);
    EXPECT_EQ(message, "http://127.0.0.1:8080/api/models/o/r/tree/main: Link header of " +
                           std::to_string(huge.size()) + " bytes is longer than the limit of 65536 bytes");
    // Within the header bound, a parameter over 1 KiB and a target over 8 KiB are refused.
    const std::string long_param = "<http://h/p2>; rel=\"next\"; title=\"" + std::string(2000, 'x') + "\"";
    EXPECT_EQ(code_of([&] { parse_link_next(long_param, req); }, &message), gguf::Code::BadValue);
    EXPECT_NE(message.find("a parameter longer than 1024 bytes"), std::string::npos) << message;
    const std::string long_blanks = "<http://h/p2>;" + std::string(60000, ' ') + "rel=next";
    EXPECT_EQ(parse_link_next(long_blanks, req), "http://h/p2");  // blanks are skipped in one pass
    const std::string long_target = "<http://h/" + std::string(9000, 'a') + ">; rel=next";
    EXPECT_EQ(code_of([&] { parse_link_next(long_target, req); }, &message), gguf::Code::BadValue);
    EXPECT_NE(message.find("a link target of 9009 bytes (limit 8192)"), std::string::npos) << message;
    EXPECT_EQ(message.find("SECRET"), std::string::npos) << message;
}

TEST(HubLink, SameOriginDecidesWhereTheTokenMayGo) {
    EXPECT_TRUE(same_origin("http://127.0.0.1:8080", "http://127.0.0.1:8080/org/repo/resolve/x/a.gguf"));
    EXPECT_TRUE(same_origin("http://LOCALHOST", "http://localhost:80/x"));
    EXPECT_FALSE(same_origin("http://127.0.0.1:8080", "http://127.0.0.1:8081/x"));
    EXPECT_FALSE(same_origin("http://127.0.0.1:8080", "https://127.0.0.1:8080/x"));
    EXPECT_FALSE(same_origin("http://127.0.0.1:8080", "http://[::1]:8080/x"));
    EXPECT_FALSE(same_origin("http://127.0.0.1:8080", "not a url"));
}

TEST(HubToken, EnvironmentFirstThenTokenFile) {
    gguf_test::TempDir dir;
    std::filesystem::create_directories(dir / "hf");
    gguf_test::write_file(dir / "hf/token", "hf_from_file\r\n");
    gguf_test::write_file(dir / "other", "  hf_other  \n");

    auto t = find_hub_token(env_of({{"HF_TOKEN", " hf_env\n"}, {"HF_HOME", dir / "hf"}}));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->value, "hf_env");
    EXPECT_EQ(t->source, "HF_TOKEN");
    t = find_hub_token(env_of({{"HF_TOKEN", "\n"}, {"HUGGING_FACE_HUB_TOKEN", "hf_legacy"}}));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->value, "hf_legacy");
    EXPECT_EQ(t->source, "HUGGING_FACE_HUB_TOKEN");
    t = find_hub_token(env_of({{"HF_TOKEN", ""}, {"HF_HOME", dir / "hf"}}));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->value, "hf_from_file");
    EXPECT_EQ(t->source, dir / "hf/token");
    t = find_hub_token(env_of({{"HF_TOKEN_PATH", dir / "other"}, {"HF_HOME", dir / "hf"}}));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->value, "hf_other");
    std::filesystem::create_directories(dir / "xdg/huggingface");
    gguf_test::write_file(dir / "xdg/huggingface/token", "hf_xdg");
    t = find_hub_token(env_of({{"XDG_CACHE_HOME", dir / "xdg"}, {"HOME", dir / "nothome"}}));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->value, "hf_xdg");
    std::filesystem::create_directories(dir / "home/.cache/huggingface");
    gguf_test::write_file(dir / "home/.cache/huggingface/token", "hf_home");
    t = find_hub_token(env_of({{"HOME", dir / "home"}}));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->value, "hf_home");
    EXPECT_EQ(t->source, dir / "home/.cache/huggingface/token");
}

TEST(HubToken, SystemdCredentialComesAfterTheEnvironmentAndBeforeTheTokenFile) {
    gguf_test::TempDir dir;
    std::filesystem::create_directories(dir / "creds");
    std::filesystem::create_directories(dir / "hf");
    gguf_test::write_file(dir / "creds/hf-token", "hf_credential\n");
    gguf_test::write_file(dir / "hf/token", "hf_from_file");
    auto t = find_hub_token(env_of({{"CREDENTIALS_DIRECTORY", dir / "creds"}, {"HF_HOME", dir / "hf"}}));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->value, "hf_credential");
    EXPECT_EQ(t->source, dir / "creds/hf-token");
    t = find_hub_token(env_of({{"HF_TOKEN", "hf_env"}, {"CREDENTIALS_DIRECTORY", dir / "creds"}}));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->value, "hf_env");
    // An explicit HF_TOKEN_PATH wins over the credential.
    t = find_hub_token(env_of({{"HF_TOKEN_PATH", dir / "hf/token"}, {"CREDENTIALS_DIRECTORY", dir / "creds"}}));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->value, "hf_from_file");
    // An empty credential (a public source under the system unit) or none: the usual token file.
    gguf_test::write_file(dir / "creds/hf-token", "");
    t = find_hub_token(env_of({{"CREDENTIALS_DIRECTORY", dir / "creds"}, {"HF_HOME", dir / "hf"}}));
    ASSERT_TRUE(t);
    EXPECT_EQ(t->value, "hf_from_file");
    EXPECT_FALSE(find_hub_token(env_of({{"CREDENTIALS_DIRECTORY", dir / "none"}, {"HF_HOME", dir / "missing"}})));
}

TEST(HubToken, NoTokenIsNotAnError) {
    gguf_test::TempDir dir;
    EXPECT_FALSE(find_hub_token(env_of({})));
    EXPECT_FALSE(find_hub_token(env_of({{"HF_HOME", dir / "missing"}})));
    EXPECT_FALSE(find_hub_token(env_of({{"HF_TOKEN_PATH", dir / "no/such/file"}})));
    gguf_test::write_file(dir / "empty", " \r\n");
    EXPECT_FALSE(find_hub_token(env_of({{"HF_TOKEN_PATH", dir / "empty"}})));
}

TEST(HubToken, UnusableTokenFileFailsWithoutShowingTheToken) {
    gguf_test::TempDir dir;
    std::string message;
    std::filesystem::create_directories(dir / "isdir");
    EXPECT_EQ(code_of([&] { find_hub_token(env_of({{"HF_TOKEN_PATH", dir / "isdir"}})); }, &message), gguf::Code::Io);
    EXPECT_NE(message.find(dir / "isdir"), std::string::npos) << message;
    gguf_test::write_file(dir / "big", std::string(64 * 1024 + 1, 'a'));
    EXPECT_EQ(code_of([&] { find_hub_token(env_of({{"HF_TOKEN_PATH", dir / "big"}})); }, &message), gguf::Code::BadValue);
    gguf_test::write_file(dir / "spaces", "hf_secret part2\n");
    EXPECT_EQ(code_of([&] { find_hub_token(env_of({{"HF_TOKEN_PATH", dir / "spaces"}})); }, &message),
              gguf::Code::BadValue);
    EXPECT_EQ(message.find("hf_secret"), std::string::npos) << message;
    EXPECT_NE(message.find(dir / "spaces"), std::string::npos) << message;
    EXPECT_EQ(code_of([&] { find_hub_token(env_of({{"HF_TOKEN", "hf_x\x01y"}})); }, &message), gguf::Code::BadValue);
    EXPECT_EQ(message.find("hf_x"), std::string::npos) << message;
}

}  // namespace
