#include "remote/fleet_tier.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "gguf/bytes/virtual_file.hpp"
#include "gguf/model/merge_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "remote/store/cache.hpp"
#include "remote/url_parts.hpp"
#include "support/support.hpp"

namespace remote_test {

namespace fs = std::filesystem;

namespace {

constexpr const char* kNjsModule = "/usr/lib/nginx/modules/ngx_http_js_module.so";

}  // namespace

std::string local_merge_sha256(const std::string& first) {
    gguf::VirtualFile vf = gguf::open_merged(gguf::SplitSet::open(first));
    std::string out(vf.size(), '\0');
    EXPECT_EQ(vf.read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    return gguf_test::sha256_hex(out);
}

std::string fleet_dir() {
    return fs::weakly_canonical(fs::path(GGUF_TEST_FIXTURES) / ".." / ".." / "docs" / "fleet").string();
}

std::string fleet_config(const std::string& file, const std::map<std::string, std::string>& values) {
    std::string text = gguf_test::read_file(fleet_dir() + "/" + file);
    EXPECT_FALSE(text.empty()) << fleet_dir() << "/" << file << " is missing or empty";
    for (const auto& [key, value] : values) {
        const std::string token = "@" + key + "@";
        for (size_t at = text.find(token); at != std::string::npos; at = text.find(token, at + value.size()))
            text.replace(at, token.size(), value);
    }
    std::smatch left;
    if (std::regex_search(text, left, std::regex("@[A-Z0-9_]+@")))
        ADD_FAILURE() << file << ": no value for the placeholder " << left.str();
    return text;
}

bool njs_available(std::string* why) {
    if (fs::exists(kNjsModule)) return true;
    if (why) *why = std::string("nginx's njs module is not installed (") + kNjsModule +
                    "; Debian package libnginx-mod-http-js, scripts/install-deps.sh installs it)";
    return false;
}

std::string njs_main_config(const std::vector<std::string>& names) {
    std::string c = std::string("load_module ") + kNjsModule + ";\n";
    for (const auto& name : names) c += "env " + name + ";\n";
    return c;
}

std::string njs_sign_example(const std::string& target) {
    gguf_test::TempDir dir;
    // A test-only module that calls the shipped signer with AWS's example values.
    gguf_test::write_file(dir / "example.js",
                          "import s3 from 's3_sigv4.js';\n"
                          "function sign(r) {\n"
                          "  const c = s3.canonical(r.args.target);\n"
                          "  r.return(200, s3.sign({method: 'GET', path: c.path, query: c.query,\n"
                          "    host: 'examplebucket.s3.amazonaws.com', amzDate: '20130524T000000Z',\n"
                          "    region: 'us-east-1', accessKey: 'AKIAIOSFODNN7EXAMPLE',\n"
                          "    secret: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', token: '',\n"
                          "    payloadHash: s3.EMPTY_SHA256}));\n"
                          "}\n"
                          "export default {sign};\n");
    NginxOptions o;
    o.root = dir.path();
    o.extra_main_config = njs_main_config({});
    o.extra_http_config = "js_path " + fleet_dir() + ";\njs_path " + dir.path() + ";\njs_import example.js;\n";
    o.extra_server_config = "location = /sign { js_content example.sign; }\n";
    NginxServer nginx(o);
    std::string error;
    if (!nginx.start(&error)) {
        ADD_FAILURE() << error;
        return "";
    }
    HttpResponse r = http_get(nginx.base_url() + "/sign?target=" + gguf_mount::remote::url_quote(target, true));
    EXPECT_EQ(r.status, 200) << r.body << nginx.error_log();
    return r.body;
}

void expect_cache_friendly(const std::vector<AccessEntry>& requests, const std::map<std::string, uint64_t>& sizes) {
    const uint64_t block = gguf_mount::remote::BlockCache::kBlockSize;
    const std::regex range("bytes=(\\d+)-(\\d+)");
    for (const auto& e : requests) {
        EXPECT_EQ(e.cache_control, "") << e.request_line << ": Cache-Control defeats a shared cache";
        EXPECT_EQ(e.pragma, "") << e.request_line << ": Pragma defeats a shared cache";
        const std::string path = e.uri.substr(0, e.uri.find('?'));
        auto file = sizes.find(path.substr(path.rfind('/') + 1));
        if (e.method != "GET" || file == sizes.end()) continue;
        EXPECT_EQ(e.uri.find('?'), std::string::npos) << e.request_line << ": a query string in a data request";
        std::smatch m;
        if (!std::regex_match(e.range, m, range)) {
            ADD_FAILURE() << e.request_line << ": a data request without one byte range (Range: \"" << e.range << "\")";
            continue;
        }
        const uint64_t first = std::stoull(m[1]), last = std::stoull(m[2]);
        EXPECT_EQ(first % block, 0u) << e.request_line << " " << e.range << ": not block-aligned";
        EXPECT_TRUE((last + 1) % block == 0 || last + 1 == file->second)
            << e.request_line << " " << e.range << ": does not end on a block boundary or the end of the file";
    }
}

}  // namespace remote_test
