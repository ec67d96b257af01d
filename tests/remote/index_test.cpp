// remote/index: directory listings from nginx autoindex (HTML and JSON, captured from the real
// nginx of servers.hpp, once stored in tests/remote/pages and once live) and Apache
// mod_autoindex (table, <pre> and plain list pages written from its documented format).
#include <curl/curl.h>
#include <gtest/gtest.h>
#include <filesystem>
#include <functional>

#include "gguf/error.hpp"
#include "remote/expect_error.hpp"
#include "remote/index.hpp"
#include "remote/servers.hpp"
#include "remote/url_parts.hpp"
#include "support/support.hpp"

namespace {

using gguf_mount::remote::IndexEntry;
using gguf_mount::remote::parse_index;
using gguf_mount::remote::parse_index_html;
using gguf_mount::remote::parse_index_json;
using gguf_mount::remote::parse_url;
using gguf_mount::remote::url_for_message;
using remote_test::code_of;

std::string page(const std::string& name) {
    return gguf_test::read_file(
        (std::filesystem::path(GGUF_TEST_FIXTURES) / ".." / "remote" / "pages" / name).lexically_normal().string());
}

const std::string kLong =
    "long-long-long-long-long-long-long-long-long-long-long-long-long-long-long-long-name-00001-of-00002.gguf";

/// The tree behind pages/nginx-autoindex.*, in nginx's order (directories first, then names).
std::vector<IndexEntry> tricky_entries() {
    return {{"sub dir", true, std::nullopt},
            {"100%.gguf", false, 1234},
            {"a b.gguf", false, 5},
            {"caf\xc3\xa9-\xc3\xbc.gguf", false, 1},
            {kLong, false, 7},
            {"quote\"&<amp>.txt", false, 0},
            {"what?.gguf", false, 3},
            {"x#y.gguf", false, 2}};
}

void write_tricky_tree(const std::string& root) {
    std::filesystem::create_directory(root + "/sub dir");
    gguf_test::write_file(root + "/sub dir/inner.gguf", "z");
    for (const auto& e : tricky_entries())
        if (!e.directory) gguf_test::write_file(root + "/" + e.name, std::string(*e.size, 'x'));
}

std::string describe(const std::vector<IndexEntry>& v) {
    std::string s;
    for (const auto& e : v)
        s += "[" + e.name.substr(0, 40) + (e.directory ? "/" : "") + " " + (e.size ? std::to_string(*e.size) : "-") + (e.problem.empty() ? "" : " ! " + e.problem) + "] ";
    return s;
}

TEST(IndexHtml, NginxCapturedPageGivesDecodedNamesKindsAndExactSizes) {
    auto entries = parse_index_html(page("nginx-autoindex.html"), "http://127.0.0.1:18765/html/");
    EXPECT_EQ(entries, tricky_entries()) << describe(entries);
}

TEST(IndexJson, NginxCapturedPageGivesTheSameEntries) {
    auto entries = parse_index_json(page("nginx-autoindex.json"));
    EXPECT_EQ(entries, tricky_entries()) << describe(entries);
}

TEST(IndexHtml, NginxSizesNeedExactBytes) {
    // autoindex_exact_size off prints "1K": no size then, never a guess.
    std::string body = page("nginx-autoindex.html");
    const std::string exact = "                1234\r\n";
    auto at = body.find(exact);
    ASSERT_NE(at, std::string::npos);
    body.replace(at, exact.size(), "                  1K\r\n");
    auto entries = parse_index_html(body, "http://127.0.0.1:18765/html/");
    ASSERT_EQ(entries.size(), 8u);
    EXPECT_EQ(entries[1].name, "100%.gguf");
    EXPECT_EQ(entries[1].size, std::nullopt);
    EXPECT_EQ(entries[2].size, 5u);
}

TEST(IndexHtml, ApacheTablePreAndPlainPagesGiveNamesWithoutSizes) {
    const std::vector<IndexEntry> expected = {{"Q4_K_M", true, std::nullopt},
                                              {"README.md", false, std::nullopt},
                                              {"qwen v2-00001-of-00002.gguf", false, std::nullopt},
                                              {"qwen v2-00002-of-00002.gguf", false, std::nullopt}};
    // apache-pre-2.2.html: Apache 2.2 <pre> layout without icons, sort links or signature, with
    // nginx's date format and an exact "812": only the <hr> inside the <pre> tells it apart.
    for (const char* name : {"apache-table.html", "apache-pre.html", "apache-plain.html", "apache-pre-2.2.html"}) {
        auto entries = parse_index_html(page(name), "http://127.0.0.1:8080/models/qwen/");
        EXPECT_EQ(entries, expected) << name << ": " << describe(entries);
    }
    // The same page fetched without the trailing slash lists the same directory.
    EXPECT_EQ(parse_index_html(page("apache-table.html"), "http://127.0.0.1:8080/models/qwen"), expected);
}

TEST(IndexHtml, SkipsLinksThatAreNotDirectChildren) {
    const std::string body =
        "<html><body><hr><pre>"
        "<a href=\"../\">../</a>\n"
        "<a href=\"#top\">top</a>\n"
        "<a href=\"?C=N;O=D\">sort</a>\n"
        "<a href=\"x.gguf?download=1\">query</a>\n"
        "<a href=\"http://other.example/d/a.gguf\">other host</a>\n"
        "<a href=\"http://127.0.0.1:81/d/a.gguf\">other port</a>\n"
        "<a href=\"https://127.0.0.1/d/a.gguf\">other scheme</a>\n"
        "<a href=\"/elsewhere/a.gguf\">outside</a>\n"
        "<a href=\"sub/deeper.gguf\">deeper</a>\n"
        "<a href=\"a%2Fb.gguf\">slash in name</a>\n"
        "<a href=\"%2E%2E/\">dot dot</a>\n"
        "<a href=\"./\">self</a>\n"
        "<a href=\"mailto:x@y\">mail</a>\n"
        "<a href=\"javascript:void(0)\">js</a>\n"
        "<a>no href</a>\n"
        "<a href=\"/d/abs.gguf\">absolute path inside</a>\n"
        "<a href=\"http://127.0.0.1/d/full.gguf\">full URL inside</a>\n"
        "<a href=\"rel.gguf#frag\">fragment</a>\n"
        "<a href=\"raw name \xc3\xa9.gguf\">raw bytes</a>\n"
        "<a href=\"rel.gguf\">duplicate</a>\n"
        "<a href=\"dir/\">dir</a>\n"
        "</pre></body></html>";
    auto entries = parse_index_html(body, "http://127.0.0.1/d/?sort=1");
    const std::vector<IndexEntry> expected = {{"abs.gguf", false, std::nullopt},
                                              {"full.gguf", false, std::nullopt},
                                              {"rel.gguf", false, std::nullopt},
                                              {"raw name \xc3\xa9.gguf", false, std::nullopt},
                                              {"dir", true, std::nullopt}};
    EXPECT_EQ(entries, expected) << describe(entries);
}

std::string nested_page(int depth) {
    std::string body = "<html><body>";
    for (int i = 0; i < depth; ++i) body += "<div>";
    body += "<a href=\"deep.gguf\">deep</a>";
    for (int i = 0; i < depth; ++i) body += "</div>";
    return body + "<a href=\"after.gguf\">after</a></body></html>";
}

TEST(IndexHtml, TooDeepPageFailsInsteadOfListingPart) {
    const std::vector<IndexEntry> both = {{"deep.gguf", false, std::nullopt}, {"after.gguf", false, std::nullopt}};
    EXPECT_EQ(parse_index_html(nested_page(200), "http://127.0.0.1/d/"), both);
    // libxml2 stops at 256 levels: the links after that point would be missing.
    std::string message;
    EXPECT_EQ(code_of([] { parse_index_html(nested_page(100000), "http://127.0.0.1/d/?s=1"); }, &message),
              gguf::Code::BadValue);
    EXPECT_EQ(message.rfind("http://127.0.0.1/d/: index page cannot be parsed: ", 0), 0u) << message;
    EXPECT_NE(message.find("depth"), std::string::npos) << message;
}

TEST(IndexHtml, PageUrlMustBeAbsoluteHttp) {
    std::string message;
    EXPECT_EQ(code_of([] { parse_index_html("<html></html>", "models/"); }, &message), gguf::Code::BadValue);
    EXPECT_NE(message.find("models/"), std::string::npos) << message;
    EXPECT_EQ(code_of([] { parse_index_html("<html></html>", "ftp://127.0.0.1/x/"); }), gguf::Code::BadValue);
    EXPECT_TRUE(parse_index_html("<html><body>empty</body></html>", "http://127.0.0.1/x/").empty());
}

TEST(IndexJson, RejectsMalformedListingsNamingTheUrlWithoutQuery) {
    const std::string url = "http://127.0.0.1:9/json/?token=SECRET";
    for (const char* body : {"{\"name\":\"a\"}", "[1]", "[{\"type\":\"file\"}]", "[{\"name\":3,\"type\":\"file\"}]",
                             "[{\"name\":\"a\",\"type\":\"file\",\"size\":-1}]",
                             "[{\"name\":\"a\",\"type\":\"file\",\"size\":1.5}]",
                             "[{\"name\":\"a\",\"type\":\"file\",\"size\":\"12\"}]", "[{\"name\":\"a\"}]", "[",
                             "not json"}) {
        std::string message;
        EXPECT_EQ(code_of([&] { parse_index_json(body, url); }, &message), gguf::Code::BadValue) << body;
        EXPECT_EQ(message.rfind("http://127.0.0.1:9/json/: ", 0), 0u) << message;
        EXPECT_EQ(message.find("SECRET"), std::string::npos) << message;
    }
}

TEST(IndexJson, DeeplyNestedJsonIsAnErrorNotACrash) {
    const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
    EXPECT_EQ(code_of([&] { parse_index_json(deep); }), gguf::Code::BadValue);
    EXPECT_EQ(code_of([&] { parse_index("[" + deep + "]", "application/json", "http://127.0.0.1/j/"); }),
              gguf::Code::BadValue);
}

TEST(IndexJson, SkipsParentLinksAndOtherTypesAndMarksUnservableNamesAndSizes) {
    auto entries = parse_index_json(
        R"([{"name":"..","type":"directory"},{"name":"a/b","type":"file","size":1},{"name":"","type":"file","size":1},)"
        R"({"name":"fifo","type":"other"},{"name":"big.gguf","type":"file","size":18446744073709551615},)"
        R"({"name":"big.gguf","type":"file","size":1},{"name":"d","type":"directory","size":4096},)"
        R"({"name":"pib.gguf","type":"file","size":1125899906842624},{"name":"nul\u0000x","type":"file","size":1}])");
    const std::vector<IndexEntry> expected = {
        {"a/b", false, 1, "name holds a '/'"},
        {"big.gguf", false, UINT64_MAX,
         "claimed size of 18446744073709551615 bytes is above the limit of 1 PiB (1125899906842624 bytes)"},
        {"d", true, std::nullopt},
        {"pib.gguf", false, uint64_t{1} << 50},  // exactly 1 PiB is still a size
        {std::string("nul\0x", 5), false, 1, "name holds a NUL byte"}};
    EXPECT_EQ(entries, expected) << describe(entries);
}

TEST(IndexJson, ANameOverNameMaxIsAProblemNotAnEntry) {
    const std::string name(10000, 'n');
    auto entries = parse_index_json(R"([{"name":")" + name + R"(","type":"file","size":1},{"name":")" +
                                    std::string(255, 'k') + R"(","type":"file","size":2}])");
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0].problem, "name of 10000 bytes is longer than 255 bytes (NAME_MAX)");
    EXPECT_EQ(entries[1].problem, "");
}

TEST(IndexJson, SixteenMibOfNestedArraysIsRefusedAtDepth64WithBoundedMemory) {
    // One 16 MiB page of nested arrays cost 650 MB when parsed into a DOM: the SAX gate stops
    // at the 65th level, before anything deeper is allocated.
    const size_t half = size_t{8} << 20;
    const std::string deep = std::string(half, '[') + std::string(half, ']');
    std::string message;
    EXPECT_EQ(code_of([&] { parse_index(deep, "application/json", "http://127.0.0.1/j/?sig=S"); }, &message),
              gguf::Code::BadValue);
    EXPECT_EQ(message, "http://127.0.0.1/j/: index is nested deeper than 64 levels");
    // The same parse with 64 MiB of address space to spare (the page itself is 16 MiB).
    EXPECT_EQ(gguf_test::in_bounded_child(
                  [&] {
                      try {
                          parse_index(deep, "application/json", "http://127.0.0.1/j/");
                      } catch (const gguf::Error&) {
                          return true;
                      }
                      return false;
                  },
                  size_t{64} << 20),
              0);
    // Many small values: refused past 2,000,000 of them.
    std::string flat = "[";
    for (size_t i = 0; i < 2000001; ++i) flat += "0,";
    flat.back() = ']';
    EXPECT_EQ(code_of([&] { parse_index_json(flat, "http://127.0.0.1/j/"); }, &message), gguf::Code::BadValue);
    EXPECT_EQ(message, "http://127.0.0.1/j/: index holds more than 2000000 JSON values");
}

TEST(IndexHtml, AMegabyteOfBlanksAfterALinkGivesNoSizeAndNoCrash) {
    // std::regex recursed once per character of the text after a link and overflowed the stack.
    const std::string page = "<html><body><h1>Index of /d/</h1><hr><pre><a href=\"a.gguf\">a.gguf</a>" +
                             std::string(1 << 20, ' ') + "01-Jan-2026 00:00    12\r\n<a href=\"b.gguf\">b.gguf</a>"
                             "   01-Jan-2026 00:00    34\r\n</pre><hr></body></html>";
    const std::vector<IndexEntry> expected = {{"a.gguf", false, std::nullopt}, {"b.gguf", false, 34}};
    EXPECT_EQ(parse_index_html(page, "http://127.0.0.1/d/"), expected);
    // An nginx size above 1 PiB is a problem, and a name over 255 bytes too (from the href).
    const std::string long_name(300, 'L');
    const std::string bad = "<html><body><h1>Index of /d/</h1><hr><pre><a href=\"big.gguf\">big.gguf</a>"
                            "   01-Jan-2026 00:00    9223372036854775808\r\n<a href=\"" +
                            long_name + "\">x</a>   01-Jan-2026 00:00    1\r\n</pre><hr></body></html>";
    auto entries = parse_index_html(bad, "http://127.0.0.1/d/");
    ASSERT_EQ(entries.size(), 2u) << describe(entries);
    EXPECT_EQ(entries[0].problem,
              "claimed size of 9223372036854775808 bytes is above the limit of 1 PiB (1125899906842624 bytes)");
    EXPECT_EQ(entries[1].problem, "name of 300 bytes is longer than 255 bytes (NAME_MAX)");
}

TEST(IndexAny, ChoosesTheParserByContentTypeThenFirstByte) {
    const std::string json = page("nginx-autoindex.json");
    const std::string html = page("nginx-autoindex.html");
    const std::string url = "http://127.0.0.1:18765/html/";
    EXPECT_EQ(parse_index(json, "application/json", url), tricky_entries());
    EXPECT_EQ(parse_index(json, "application/vnd.listing+json; charset=utf-8", url), tricky_entries());
    EXPECT_EQ(parse_index(html, "text/html; charset=UTF-8", url), tricky_entries());
    EXPECT_EQ(parse_index(html, "TEXT/HTML", url), tricky_entries());
    EXPECT_EQ(parse_index("\n " + json, "application/octet-stream", url), tricky_entries());
    EXPECT_EQ(parse_index(html, "", url), tricky_entries());
    std::string message;
    EXPECT_EQ(code_of([&] { parse_index("GGUF\x03", "application/octet-stream", url + "?sig=abc"); }, &message),
              gguf::Code::BadValue);
    EXPECT_EQ(message, "http://127.0.0.1:18765/html/: not a directory index (content type \"application/octet-stream\")");
}

TEST(UrlParts, ParsesResolvesAndDecodes) {
    auto p = parse_url("HTTP://User:pw@LocalHost/a%20b/c%2Fd?x=1#f");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->scheme, "http");
    EXPECT_EQ(p->user, "User");
    EXPECT_EQ(p->host, "localhost");
    EXPECT_EQ(p->port, "80");
    EXPECT_EQ(p->path, "/a%20b/c%2Fd");
    EXPECT_EQ(p->path_decoded, "/a b/c/d");
    EXPECT_EQ(p->query, "x=1");
    EXPECT_EQ(p->fragment, "f");
    auto r = parse_url("../up/x y?q", "https://[::1]:8443/dir/sub/page");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->url, "https://[::1]:8443/dir/up/x%20y?q");
    EXPECT_EQ(r->host, "[::1]");
    EXPECT_EQ(r->port, "8443");
    EXPECT_EQ(parse_url("http://h")->path, "/");
    EXPECT_FALSE(parse_url("relative/only"));
    EXPECT_FALSE(parse_url("x", "not a base"));
}

TEST(UrlParts, UrlForMessageDropsCredentialsQueryAndFragment) {
    EXPECT_EQ(url_for_message("https://user:pw@127.0.0.1:8443/a%20b/x.gguf?X-Amz-Signature=1#f"),
              "https://127.0.0.1:8443/a%20b/x.gguf");
    EXPECT_EQ(url_for_message("not a url?sig=1"), "not a url");
}

TEST(IndexLive, RealNginxHtmlAndJsonListingsMatchTheTree) {
    std::string why;
    if (!remote_test::NginxServer::available(&why)) GTEST_SKIP() << why;
    gguf_test::TempDir root;
    write_tricky_tree(root.path());
    remote_test::NginxServer server({root.path()});
    std::string error;
    ASSERT_TRUE(server.start(&error)) << error;

    const std::string html_url = server.base_url() + "/html/";
    auto html = remote_test::http_get(html_url);
    ASSERT_EQ(html.status, 200);
    auto from_html = parse_index(html.body, html.header("content-type"), html_url);
    auto json = remote_test::http_get(server.base_url() + "/json/");
    ASSERT_EQ(json.status, 200);
    auto from_json = parse_index(json.body, json.header("content-type"), server.base_url() + "/json/");
    // nginx sorts HTML and JSON the same way; both must list exactly the tree.
    EXPECT_EQ(from_html, tricky_entries()) << describe(from_html);
    EXPECT_EQ(from_json, tricky_entries()) << describe(from_json);

    // Every name's URL (page URL + escaped name) serves that file: the decoding round-trips.
    for (const auto& e : from_html) {
        if (e.directory) continue;
        char* escaped = curl_easy_escape(nullptr, e.name.c_str(), static_cast<int>(e.name.size()));
        auto r = remote_test::http_get(server.base_url() + "/" + escaped);
        curl_free(escaped);
        EXPECT_EQ(r.status, 200) << e.name;
        EXPECT_EQ(r.body.size(), *e.size) << e.name;
    }
    const std::string sub_url = server.base_url() + "/html/sub%20dir/";
    auto sub = parse_index_html(remote_test::http_get(sub_url).body, sub_url);
    EXPECT_EQ(sub, (std::vector<IndexEntry>{{"inner.gguf", false, 1}})) << describe(sub);
}

}  // namespace

TEST(UrlParts, QuoteKeepsEmptySegmentsEmpty) {
    // curl_easy_escape takes a length of 0 as "up to the NUL": an empty segment once encoded
    // the rest of the text, slashes included.
    EXPECT_EQ(gguf_mount::remote::url_quote("/team a/x+y.gguf", true), "/team%20a/x%2By.gguf");
    EXPECT_EQ(gguf_mount::remote::url_quote("a//b/", true), "a//b/");
    EXPECT_EQ(gguf_mount::remote::url_quote("", true), "");
    EXPECT_EQ(gguf_mount::remote::url_quote("a/b", false), "a%2Fb");
}
