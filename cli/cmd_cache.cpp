// `gguf-mount cache list|trim --max-size N|clear [--cache-dir DIR] [--json]`: what the block
// cache of remote sources holds per source, and its removal in least-recently-used order,
// never of what a running mount or prefetch reads (remote/store/cache_admin.hpp).
#ifdef GGUF_MOUNT_WITH_REMOTE
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/completion.hpp"
#include "cli/progress.hpp"
#include "cli/offline.hpp"
#include "cli/remote_options.hpp"
#include "common/text.hpp"
#include "gguf/error.hpp"
#include "remote/store/cache.hpp"
#include "remote/store/cache_admin.hpp"

namespace gguf_mount::cli {

namespace {

const char* const kCacheHelpTail =
    "\n"
    "  list    what is cached per SOURCE (as shown in messages: no query, no credentials):\n"
    "          remote files (objects), bytes of its blocks and records, last use; then totals\n"
    "  trim    remove least recently used blocks and records until the cache holds at most\n"
    "          --max-size N bytes (N as --cache-max-size: 500M, 20G)\n"
    "  clear   remove everything\n"
    "What a running mount or prefetch reads is never removed (each holds a lock on its SOURCE\n"
    "in the cache): trim and clear keep it, say so in one line and exit 1 when the cache could\n"
    "not get under the size asked for. Mounts and prefetch bound the cache with --cache-max-size;\n"
    "without it, by 25% of the size of the file system holding the cache, at most 100G.\n"
    "Exit status: 0 done, 1 failed (or kept in use), 2 usage error.\n";

/// `bytes` for people, in the units of every other gguf-mount message ("13.45 MiB",
/// cli/progress.hpp human_bytes), "512 bytes" below 1 KiB.
std::string human(uint64_t bytes) {
    return bytes < 1024 ? std::to_string(bytes) + " bytes" : human_bytes(static_cast<double>(bytes));
}

/// `t` as ISO 8601 UTC ("2026-12-01T11:40:02Z"); "-" for 0.
std::string iso_time(time_t t) {
    if (t == 0) return "-";
    struct tm tm {};
    ::gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

/// The cache directory: --cache-dir or the default, made absolute as BlockCache does.
std::string cache_dir_of(const cxxopts::ParseResult& r) {
    std::string dir = r.count("cache-dir") ? r["cache-dir"].as<std::string>() : remote::BlockCache::default_dir();
    if (!dir.empty() && dir.front() != '/') {
        char cwd[PATH_MAX];
        if (::getcwd(cwd, sizeof cwd)) dir = std::string(cwd) + "/" + dir;
    }
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir;
}

int list(const remote::CacheAdmin& admin, const std::string& dir, bool json) {
    const remote::CacheReport r = admin.list();
    const uint64_t bound = remote::BlockCache::default_max_bytes(dir);
    if (json) {
        nlohmann::ordered_json j;
        j["cache_dir"] = dir;
        j["default_max_bytes"] = bound;
        j["sources"] = nlohmann::ordered_json::array();
        for (const auto& s : r.sources) {
            j["sources"].push_back({{"source", s.name.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s.name)},
                                    {"objects", s.objects},
                                    {"bytes", s.bytes},
                                    {"last_use", iso_time(s.last_use)},
                                    {"last_use_unix", static_cast<int64_t>(s.last_use)},
                                    {"in_use", s.in_use}});
        }
        j["total"] = {{"sources", r.sources.size()}, {"objects", r.objects}, {"bytes", r.bytes}, {"records", r.records}};
        std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
        return 0;
    }
    if (!admin.exists() || r.sources.empty()) {
        std::printf("%s: nothing cached\n", gguf::escape(dir).c_str());
        return 0;
    }
    std::printf("%-60s %7s %10s  %-20s\n", "SOURCE", "OBJECTS", "BYTES", "LAST USE");
    for (const auto& s : r.sources) {
        const std::string name = s.name.empty() ? "(no source recorded)" : gguf::escape(s.name);
        std::printf("%-60s %7zu %10s  %-20s%s\n", name.c_str(), s.objects, human(s.bytes).c_str(),
                    iso_time(s.last_use).c_str(), s.in_use ? "  in use" : "");
    }
    uint64_t row_bytes = 0;
    size_t row_objects = 0;
    for (const auto& s : r.sources) {
        row_bytes += s.bytes;
        row_objects += s.objects;
    }
    std::printf("total: %zu source(s), %zu object(s), %s (%llu bytes, %zu record(s)) in %s; default bound %s\n",
                r.sources.size(), r.objects, human(r.bytes).c_str(), static_cast<unsigned long long>(r.bytes), r.records,
                gguf::escape(dir).c_str(), human(bound).c_str());
    if (row_bytes > r.bytes || row_objects > r.objects) {
        // Several sources (a folder and a first shard in it, a prefetch and a mount) share objects.
        std::printf("(the rows add up to more than the total: an object used by several sources is in each of "
                    "their rows, and counted once in the total)\n");
    }
    return 0;
}

int trim(remote::CacheAdmin& admin, const std::string& dir, uint64_t max_bytes, bool json) {
    const remote::TrimOutcome o = admin.trim(max_bytes);
    const bool reached = o.bytes_left <= max_bytes;
    if (json) {
        nlohmann::ordered_json j;
        j["cache_dir"] = dir;
        j["max_bytes"] = max_bytes;
        j["removed_files"] = o.removed_files;
        j["removed_bytes"] = o.removed_bytes;
        j["bytes_left"] = o.bytes_left;
        j["in_use_bytes"] = o.in_use_bytes;
        j["in_use"] = o.in_use;
        std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    } else {
        std::printf("%s: removed %zu file(s), %s; %s left\n", gguf::escape(dir).c_str(), o.removed_files,
                    human(o.removed_bytes).c_str(), human(o.bytes_left).c_str());
    }
    if (reached) return 0;
    std::string names;
    for (const auto& n : o.in_use) names += (names.empty() ? "" : ", ") + gguf::escape(n);
    // `cache clear` is a trim to 0: "above 0 bytes" says nothing.
    const std::string above = max_bytes == 0 ? std::string()
                                             : ", above " + human(max_bytes) + " (" + std::to_string(max_bytes) + " bytes)";
    print_error(dir + ": kept " + human(o.bytes_left) + " (" + std::to_string(o.bytes_left) + " bytes)" + above + ": " +
                human(o.in_use_bytes) + " of it in use by a running mount or prefetch" +
                (names.empty() ? std::string(" (blocks being read)") : " of " + names) +
                "; unmount it and run again");
    return 1;
}

}  // namespace

int run_cache(int argc, char** argv) {
    cxxopts::Options options("gguf-mount cache", "Show or trim the block cache of remote sources.");
    options.custom_help("[options]");
    options.positional_help("list | trim --max-size N | clear");
    options.add_options()
        ("max-size", "trim: bound to trim to, whole number + M (10^6 bytes) or G (10^9 bytes)",
         cxxopts::value<std::string>(), "N")
        ("json", "print one JSON document")
        ("h,help", "show this help")
        ("action", "list, trim or clear", cxxopts::value<std::string>())
        ("extra", "unexpected arguments", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"action", "extra"});
    add_remote_options(options, "", kCacheDirOption);
    if (completion_words_requested()) return print_completion_words(options, {"action", "extra"});
    try {
        auto r = options.parse(argc, argv);
        if (r.count("help")) {
            std::printf("%s%s", options.help().c_str(), kCacheHelpTail);
            return 0;
        }
        if (!r.count("action")) return usage_error("cache", "expected list, trim or clear");
        const std::string action = r["action"].as<std::string>();
        if (r.count("extra")) {
            return usage_error("cache", "unexpected argument '" + r["extra"].as<std::vector<std::string>>().front() + "'");
        }
        if (action != "list" && action != "trim" && action != "clear") {
            return usage_error("cache", "unknown action '" + action + "': expected list, trim or clear");
        }
        if ((action == "trim") != (r.count("max-size") > 0)) {
            return usage_error("cache", action == "trim" ? "trim needs --max-size N (e.g. 20G)"
                                                         : "--max-size is for trim only");
        }
        uint64_t max_bytes = 0;
        if (action == "trim") {
            try {
                max_bytes = parse_cache_size("--max-size", r["max-size"].as<std::string>());
            } catch (const gguf::Error& e) {
                return usage_error("cache", e.what());
            }
        }
        const std::string dir = cache_dir_of(r);
        const bool json = r.count("json") > 0;
        try {
            remote::CacheAdmin admin(dir);
            if (action == "list") return list(admin, dir, json);
            return trim(admin, dir, max_bytes, json);
        } catch (const std::exception& e) {
            print_error(e.what());
            return 1;
        }
    } catch (const cxxopts::exceptions::exception& e) {
        return usage_error("cache", e.what());
    }
}

}  // namespace gguf_mount::cli
#endif  // GGUF_MOUNT_WITH_REMOTE
