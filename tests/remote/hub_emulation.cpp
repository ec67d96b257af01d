#include "remote/hub_emulation.hpp"

#include <cstdlib>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "remote/hub.hpp"

namespace remote_test {

namespace fs = std::filesystem;
using gguf_mount::remote::url_quote;

namespace {

/// Text that may go inside a double-quoted nginx string and a map key without escaping.
bool config_safe(const std::string& s) {
    return std::none_of(s.begin(), s.end(), [](char c) {
        auto u = static_cast<unsigned char>(c);
        return u < 0x20 || u == 0x7f || c == '"' || c == '\'' || c == '\\' || c == '$' || c == '{' || c == '}';
    });
}

bool valid_path(const std::string& p) {
    if (p.empty() || p.front() == '/' || p.back() == '/') return false;
    std::istringstream in(p);
    std::string seg;
    while (std::getline(in, seg, '/'))
        if (seg.empty() || seg == "." || seg == "..") return false;
    return config_safe(p);
}

void symlink_to(const std::string& target, const fs::path& link) {
    fs::create_directories(link.parent_path());
    fs::create_symlink(target, link);
}

/// A stand-in git object id: 40 hex digits derived from the content hash (not a real git oid).
std::string fake_oid(const std::string& seed) { return gguf_test::sha256_hex("oid:" + seed).substr(0, 40); }

}  // namespace

void isolate_hub_environment(const std::string& root) {
    for (const char* v : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_ENDPOINT"}) ::unsetenv(v);
    ::setenv("HF_HOME", (root + "/hf-home").c_str(), 1);
    ::setenv("XDG_CACHE_HOME", (root + "/xdg").c_str(), 1);
}

HubEmulation::HubEmulation(HubRepoSpec spec) : spec_(std::move(spec)) {}

HubEmulation::~HubEmulation() { stop(); }

bool HubEmulation::available(std::string* why) { return NginxServer::available(why); }

std::vector<const HubEmulatedEntry*> HubEmulation::listing(const std::string& dir) const {
    std::vector<const HubEmulatedEntry*> out;
    for (const auto& e : entries_)
        if (dir.empty() || e.path.rfind(dir + "/", 0) == 0) out.push_back(&e);
    return out;
}

size_t HubEmulation::page_count(const std::string& dir) const {
    size_t n = listing(dir).size();
    return n == 0 ? 1 : (n + spec_.page_size - 1) / spec_.page_size;
}

bool HubEmulation::generate(std::string* error) {
    auto fail = [&](const std::string& why) {
        if (error) *error = "hub emulation: " + why;
        return false;
    };
    if (spec_.page_size == 0) return fail("page_size must be >= 1");
    if (spec_.commit.size() != 40) return fail("commit must be 40 hex digits");
    for (const auto& r : spec_.revisions)
        if (r.empty() || !config_safe(r)) return fail("revision \"" + r + "\" cannot be emulated");
    if (!config_safe(spec_.org) || !config_safe(spec_.repo)) return fail("org/repo cannot be emulated");
    if (spec_.required_token && !config_safe(*spec_.required_token)) return fail("token cannot be emulated");
    for (const std::string* v : {&spec_.api_error_code, &spec_.resolve_error_code, &spec_.renamed_from,
                                 &spec_.next_link_base})
        if (!config_safe(*v) || v->find(' ') != std::string::npos) return fail("\"" + *v + "\" cannot be emulated");
    auto missing = [&](const std::string& path) {
        return std::find(spec_.missing_files.begin(), spec_.missing_files.end(), path) != spec_.missing_files.end();
    };

    // Entries: files (size + sha256) and every directory above them, sorted by path.
    std::map<std::string, HubEmulatedEntry> by_path;
    for (const auto& f : spec_.files) {
        if (!valid_path(f.path)) return fail("path \"" + f.path + "\" cannot be emulated");
        std::error_code ec;
        uint64_t size = fs::file_size(f.local_file, ec);
        if (ec) return fail(f.local_file + ": " + ec.message());
        by_path[f.path] = HubEmulatedEntry{f.path, false, size, gguf_test::sha256_file(f.local_file), f.lfs};
        for (size_t slash = f.path.find('/'); slash != std::string::npos; slash = f.path.find('/', slash + 1)) {
            std::string d = f.path.substr(0, slash);
            by_path.emplace(d, HubEmulatedEntry{d, true, 0, "", false});
        }
    }
    entries_.clear();
    for (auto& [p, e] : by_path) entries_.push_back(e);
    std::set<std::string> dirs = {""};
    for (const auto& e : entries_)
        if (e.directory) dirs.insert(e.path);

    const fs::path api_root = fs::path(dir_.path()) / "api";
    const fs::path cdn_root = fs::path(dir_.path()) / "cdn";
    fs::create_directories(api_root);
    fs::create_directories(cdn_root / "blobs");
    const std::string repo_id = spec_.org + "/" + spec_.repo;

    std::ostringstream link_map, target_map, size_map, etag_map, cache_map, missing_map;
    const std::string link_base = spec_.next_link_base.empty() ? "$scheme://$http_host" : spec_.next_link_base;
    std::vector<std::string> revs = spec_.revisions;
    revs.push_back(spec_.commit);
    for (const auto& rev : revs) {
        const fs::path api_repo = api_root / "api/models" / spec_.org / spec_.repo;
        fs::create_directories(api_repo / "revision" / rev);
        gguf_test::write_file((api_repo / "revision" / rev / "__page.json").string(),
                              nlohmann::json{{"id", repo_id}, {"sha", spec_.commit}}.dump());
        for (const auto& d : dirs) {
            auto items = listing(d);
            const fs::path tree_dir = d.empty() ? api_repo / "tree" / rev : api_repo / "tree" / rev / d;
            fs::create_directories(tree_dir);
            const std::string uri = "/api/models/" + repo_id + "/tree/" + rev + (d.empty() ? "" : "/" + d);
            const std::string next_base = "/api/models/" + repo_id + "/tree/" + url_quote(rev, false) +
                                          (d.empty() ? "" : "/" + url_quote(d, false)) + "?recursive=true&cursor=";
            const size_t pages = page_count(d);
            for (size_t page = 1; page <= pages; ++page) {
                nlohmann::json arr = nlohmann::json::array();
                for (size_t i = (page - 1) * spec_.page_size; i < std::min(items.size(), page * spec_.page_size); ++i) {
                    const auto& e = *items[i];
                    nlohmann::json j = {{"type", e.directory ? "directory" : "file"},
                                        {"oid", fake_oid(e.directory ? e.path : e.sha256)},
                                        {"size", e.size},
                                        {"path", e.path}};
                    if (e.lfs) j["lfs"] = {{"oid", e.sha256}, {"size", e.size}, {"pointerSize", 134}};
                    arr.push_back(j);
                }
                const std::string cursor = page == 1 ? "" : std::to_string(page);
                gguf_test::write_file((tree_dir / ("__page" + cursor + ".json")).string(), arr.dump());
                if (page < pages)
                    link_map << "    \"" << uri << ":" << cursor << "\" '<" << link_base << next_base << page + 1
                             << ">; rel=\"next\"';\n";
            }
        }
        for (const auto& f : spec_.files) {
            const HubEmulatedEntry& e = by_path[f.path];
            const std::string key = "/" + repo_id + "/resolve/" + rev + "/" + f.path;
            if (missing(f.path)) {
                missing_map << "    \"" << key << "\" EntryNotFound;\n";
            } else if (!f.lfs && spec_.relative_redirects) {
                const std::string cached = "/api/resolve-cache/models/" + repo_id + "/" + spec_.commit + "/" + f.path;
                cache_map << "    \"" << key << "\" \"" << cached << "\";\n";
                if (!fs::exists(api_root / cached.substr(1))) symlink_to(f.local_file, api_root / cached.substr(1));
            } else if (f.lfs) {
                target_map << "    \"" << key << "\" \"" << cdn_base_url() << "/blobs/" << e.sha256
                           << "?X-Amz-Signature=" << (spec_.cdn_fault_server ? "$request_id" : "emulated")
                           << "&Expires=4102444800\";\n";
                size_map << "    \"" << key << "\" \"" << e.size << "\";\n";
                etag_map << "    \"" << key << "\" '\"" << e.sha256 << "\"';\n";
            } else {
                symlink_to(f.local_file, api_root / spec_.org / spec_.repo / "resolve" / rev / f.path);
            }
        }
    }
    for (const auto& e : entries_) {
        if (e.directory || !e.lfs || missing(e.path) || fs::exists(cdn_root / "blobs" / e.sha256)) continue;
        auto it = std::find_if(spec_.files.begin(), spec_.files.end(), [&](const HubRepoFile& f) { return f.path == e.path; });
        if (spec_.cdn_fault_server) {
            fs::copy_file(it->local_file, cdn_root / "blobs" / e.sha256);  // it serves files under its root only
        } else {
            symlink_to(it->local_file, cdn_root / "blobs" / e.sha256);
        }
    }

    std::ostringstream http;
    http << "  map_hash_bucket_size 512;\n  map_hash_max_size 262144;\n"
         << "  map \"$hub_api_uri:$arg_cursor\" $hub_link {\n    default \"\";\n" << link_map.str() << "  }\n"
         << "  map $uri $hub_cdn_target {\n    default \"\";\n" << target_map.str() << "  }\n"
         << "  map $uri $hub_linked_size {\n    default \"\";\n" << size_map.str() << "  }\n"
         << "  map $uri $hub_linked_etag {\n    default \"\";\n" << etag_map.str() << "  }\n"
         << "  map $uri $hub_cache_target {\n    default \"\";\n" << cache_map.str() << "  }\n"
         << "  map $uri $hub_missing {\n    default \"\";\n" << missing_map.str() << "  }\n";
    std::string auth;
    if (spec_.required_token) {
        // The accepted tokens are files in tokens/ (accept_tokens rewrites them while running).
        http << "  map $http_authorization $hub_token {\n    default \"-\";\n    \"~^Bearer (?<t>[A-Za-z0-9_]+)$\" $t;\n  }\n";
        auth = "    if (!-f " + (fs::path(dir_.path()) / "tokens").string() + "/$hub_token) { return 401; }\n";
        if (!accept_tokens({*spec_.required_token})) return fail("cannot write the accepted tokens");
    }
    // The Hub's error answers carry X-Error-Code and X-Error-Message (nginx sends no header
    // whose value is empty).
    auto error_answer = [](const std::string& code, const std::string& message, int status) {
        return "    add_header X-Error-Code " + code + " always;\n    add_header X-Error-Message \"" + message +
               "\" always;\n    return " + std::to_string(status) + ";\n";
    };
    std::string api_error, resolve_error;
    if (!spec_.api_error_code.empty()) {
        api_error = error_answer(spec_.api_error_code, "Repository Not Found for url: emulated.", 401);
        resolve_error = api_error;
    } else if (!spec_.resolve_error_code.empty()) {
        resolve_error = error_answer(spec_.resolve_error_code,
                                     "Access to model " + repo_id + " is restricted and you are not in the authorized "
                                     "list. Visit the repo page to ask for access.",
                                     403);
    }
    // Padding for long Link headers: 4,000 bytes doubled four times (nginx's configuration
    // tokens are at most 4 KiB).
    std::string padding;
    if (spec_.link_padding_headers > 0) {
        padding = "    set $hub_pad0 \"" + std::string(4000, 'p') + "\";\n";
        for (int k = 1; k <= 4; ++k)
            padding += "    set $hub_pad" + std::to_string(k) + " \"$hub_pad" + std::to_string(k - 1) + "$hub_pad" +
                       std::to_string(k - 1) + "\";\n";
        for (size_t k = 0; k < spec_.link_padding_headers; ++k)
            padding += "    add_header Link '<http://127.0.0.1:9/related>; rel=\"related\"; title=\"$hub_pad4\"' always;\n";
    }
    std::ostringstream server;
    // try_files rewrites $uri to the file it found: keep the request's $uri for the Link map.
    server << "  absolute_redirect off;\n" << (spec_.ignore_range ? "  max_ranges 0;\n" : "")
           << "  location /api/ {\n    default_type application/json;\n    set $hub_api_uri $uri;\n" << auth
           << api_error << padding << "    add_header Link $hub_link always;\n"
           << "    try_files $uri/__page$arg_cursor.json =404;\n  }\n"
           << "  location /api/resolve-cache/ {\n" << auth << "    try_files $uri =404;\n  }\n"
           << "  location /" << repo_id << "/resolve/ {\n"
           << "    add_header X-Repo-Commit " << spec_.commit << " always;\n"
           << "    add_header X-Linked-Size $hub_linked_size always;\n"
           << "    add_header X-Linked-Etag $hub_linked_etag always;\n"
           << "    add_header X-Error-Code $hub_missing always;\n"
           << auth << resolve_error << "    if ($hub_cache_target != \"\") { return 307 $hub_cache_target; }\n"
           << "    if ($hub_cdn_target != \"\") { return 302 $hub_cdn_target; }\n  }\n";
    if (!spec_.renamed_from.empty()) {
        const std::string old_id = spec_.org + "/" + spec_.renamed_from;
        server << "  location ~ ^/api/models/" << old_id << "/(.*)$ {\n    return 307 /api/models/" << repo_id
               << "/$1$is_args$args;\n  }\n"
               << "  location ~ ^/" << old_id << "/(.*)$ {\n    return 307 /" << repo_id << "/$1$is_args$args;\n  }\n";
    }

    NginxOptions api_options{api_root.string()};
    api_options.extra_http_config = http.str();
    api_options.extra_server_config = server.str();
    api_ = std::make_unique<NginxServer>(api_options);
    return true;
}

bool HubEmulation::start(std::string* error) {
    NginxOptions cdn_options{(fs::path(dir_.path()) / "cdn").string()};
    cdn_options.limit_rate = spec_.cdn_limit_rate;
    if (spec_.ignore_range) cdn_options.extra_server_config = "  max_ranges 0;\n";
    fs::create_directories(cdn_options.root);
    // The API config needs the CDN's port.
    if (spec_.cdn_fault_server) {
        fault_cdn_ = std::make_unique<FaultServer>(cdn_options.root);
        if (!fault_cdn_->start(error)) return false;
    } else {
        cdn_ = std::make_unique<NginxServer>(cdn_options);
        if (!cdn_->start(error)) return false;
    }
    if (!generate(error)) return false;
    return api_->start(error);
}

void HubEmulation::stop() {
    if (api_) api_->stop();
    if (cdn_) cdn_->stop();
    if (fault_cdn_) fault_cdn_->stop();
}

bool HubEmulation::move_revision(const std::string& revision, const std::string& sha) {
    if (!api_) return false;
    const fs::path page = fs::path(dir_.path()) / "api" / "api/models" / spec_.org / spec_.repo / "revision" / revision /
                          "__page.json";
    if (!fs::exists(page)) return false;
    gguf_test::write_file(page.string(), nlohmann::json{{"id", spec_.org + "/" + spec_.repo}, {"sha", sha}}.dump());
    return true;
}

bool HubEmulation::accept_tokens(const std::vector<std::string>& tokens) {
    const fs::path dir = fs::path(dir_.path()) / "tokens";
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir, ec);
    if (ec) return false;
    for (const auto& t : tokens) {
        if (t.empty() || !std::all_of(t.begin(), t.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }))
            return false;
        gguf_test::write_file((dir / t).string(), "");
    }
    return true;
}

std::string HubEmulation::endpoint() const { return api_ ? api_->base_url() : ""; }

std::string HubEmulation::cdn_base_url() const {
    return cdn_ ? cdn_->base_url() : fault_cdn_ ? fault_cdn_->base_url() : "";
}

std::vector<AccessEntry> HubEmulation::cdn_access_log() const {
    return cdn_ ? cdn_->access_log() : fault_cdn_ ? fault_cdn_->access_log() : std::vector<AccessEntry>{};
}

}  // namespace remote_test
