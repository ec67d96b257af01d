#include "cli/remote_options.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "gguf/error.hpp"
#include "gguf/model/split_plan.hpp"

#ifdef GGUF_MOUNT_WITH_REMOTE
#include "remote/oci/reference.hpp"
#include "remote/store/cache.hpp"
#endif

namespace gguf_mount::cli {

namespace {

constexpr size_t kMaxSourceFileBytes = size_t{64} << 10;

/// Where an http:// or https:// URL starts in `s` (ASCII case-insensitive), or npos.
size_t find_http_url(const std::string& s) {
    std::string lower(s);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const size_t a = lower.find("http://");
    const size_t b = lower.find("https://");
    return std::min(a, b);
}

}  // namespace

std::string without_url_secrets(const std::string& arg) {
    const size_t at = find_http_url(arg);
    if (at == std::string::npos) return arg;
    std::string url = arg.substr(at);
    url = url.substr(0, url.find_first_of("?#"));
    const size_t authority = url.find("://") + 3;
    const size_t path = url.find('/', authority);
    const size_t user_end = url.rfind('@', path == std::string::npos ? std::string::npos : path);
    if (user_end != std::string::npos && user_end >= authority) url.erase(authority, user_end + 1 - authority);
    return arg.substr(0, at) + url;
}

void hide_url_secrets(int argc, char** argv) noexcept {
    for (int i = 0; i < argc && argv[i]; ++i) {
        const size_t len = std::strlen(argv[i]);
        try {
            const std::string shown = without_url_secrets(argv[i]);
            if (shown.size() >= len) continue;  // nothing removed
            std::memcpy(argv[i], shown.data(), shown.size());
            std::memset(argv[i] + shown.size(), 0, len - shown.size());
        } catch (...) {
            std::memset(argv[i], 0, len);  // out of memory: better an empty argument than a secret
        }
    }
}

std::string read_source_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        const int e = errno;
        throw gguf::Error(gguf::Code::Io, "--source-file " + path + ": " + std::strerror(e), e);
    }
    std::string text;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int e = errno;
            ::close(fd);
            throw gguf::Error(gguf::Code::Io, "--source-file " + path + ": " + std::strerror(e), e);
        }
        if (n == 0) break;
        text.append(buf, static_cast<size_t>(n));
        if (text.size() > kMaxSourceFileBytes) {
            ::close(fd);
            throw gguf::Error(gguf::Code::BadArgument, "--source-file " + path + ": larger than 64 KiB (it holds one "
                                                                                 "SOURCE on its first line)");
        }
    }
    ::close(fd);
    std::string line = text.substr(0, text.find('\n'));
    const size_t b = line.find_first_not_of(" \t\r");
    const size_t e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos) {
        throw gguf::Error(gguf::Code::BadArgument, "--source-file " + path + ": empty (its first line must be the SOURCE)");
    }
    return line.substr(b, e - b + 1);
}

std::vector<std::string> source_and_positionals(const cxxopts::ParseResult& parsed,
                                                const std::vector<std::string>& names) {
    std::vector<std::string> out;
    if (parsed.count("source-file")) out.push_back(read_source_file(parsed["source-file"].as<std::string>()));
    for (const std::string& n : names) {
        if (parsed.count(n)) out.push_back(parsed[n].as<std::string>());
    }
    return out;
}

void add_remote_options(cxxopts::Options& options, const std::string& prefix, unsigned which) {
    auto add = options.add_options();
    if (which & kSourceFileOption) {
        add("source-file", "read SOURCE from the first line of FILE instead of the command line (a URL with "
                           "credentials or a signed query stays out of `ps`)",
            cxxopts::value<std::string>(), "FILE");
    }
    if (which & kCacheDirOption) {
        add("cache-dir", prefix + "block cache directory (default $CACHE_DIRECTORY as systemd sets it, else "
                                  "$XDG_CACHE_HOME/gguf-mount, else ~/.cache/gguf-mount; created mode 0700)",
            cxxopts::value<std::string>(), "DIR");
    }
    if (which & kCacheMaxSizeOption) {
        add("cache-max-size", prefix + "bound of the cache (blocks and listing records), whole number + M (10^6 "
                                       "bytes) or G (10^9 bytes), 0 for none; least recently used files are "
                                       "evicted (default: 25% of the cache's file system, at most 100G)",
            cxxopts::value<std::string>(), "N(M|G)");
    }
    if (which & kOfflineOption) {
        add("offline", prefix + "no network; serve what the cache holds, other reads fail with EIO");
    }
    if (which & kCaCertOption) {
        add("ca-cert", prefix + "extra CA certificate (PEM) trusted besides the system store",
            cxxopts::value<std::string>(), "FILE");
    }
    if (which & kNetTimeoutOption) {
        add("net-timeout", prefix + "connect timeout, stall limit and the window of the 32 KiB/s rate floor, in "
                                    "seconds; a block request ends within 2 x SECONDS + 128 s",
            cxxopts::value<unsigned>()->default_value("30"), "SECONDS");
    }
    if (which & kS3Options) {
        add("no-sign-request", "s3:// SOURCE: send requests unsigned (a public bucket), as the AWS CLI does");
        add("endpoint-url", "s3:// SOURCE: the S3 endpoint (MinIO, Ceph RGW, R2, ...; default: "
                                     "AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS)",
            cxxopts::value<std::string>(), "URL");
        add("region", "s3:// SOURCE: the bucket's region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile's "
                               "region, else us-east-1)",
            cxxopts::value<std::string>(), "REGION");
        add("profile", "s3:// SOURCE: the AWS profile of ~/.aws/credentials and ~/.aws/config to use (default: "
                                "AWS_PROFILE, else the environment's keys, else \"default\")",
            cxxopts::value<std::string>(), "NAME");
    }
    if (which & kOciOptions) {
        add("plain-http", "oci:// or ollama:// SOURCE: the registry speaks plain http, not https (as oras and "
                          "skopeo's --tls-verify=false registries; credentials then travel in the clear)");
    }
    if (which & kRevalidateOption) {
        add("revalidate", prefix + "ask the server again every SECONDS (a HEAD per file, the index pages): a changed "
                                   "file appears as a new version, a server down at mount is retried; 0: only on "
                                   "SIGHUP",
            cxxopts::value<unsigned>()->default_value("60"), "SECONDS");
    }
}

uint64_t parse_cache_size(const std::string& option, const std::string& value) {
    if (value == "0") return 0;
    return gguf::parse_split_max_size(value, option);
}

#ifdef GGUF_MOUNT_WITH_REMOTE
void read_remote_options(const cxxopts::ParseResult& parsed, remote::RemoteOptions* ro) {
    if (parsed.count("cache-dir")) ro->cache_dir = parsed["cache-dir"].as<std::string>();
    if (parsed.count("ca-cert")) ro->http.ca_cert = parsed["ca-cert"].as<std::string>();
    ro->http.net_timeout = std::chrono::seconds(std::max(1u, parsed["net-timeout"].as<unsigned>()));
    ro->offline = parsed.count("offline") > 0;
    if (parsed.count("no-sign-request")) ro->s3.no_sign_request = true;
    if (parsed.count("plain-http")) ro->plain_http = true;
    if (parsed.count("endpoint-url")) ro->s3.endpoint_url = parsed["endpoint-url"].as<std::string>();
    if (parsed.count("region")) ro->s3.region = parsed["region"].as<std::string>();
    if (parsed.count("profile")) ro->s3.profile = parsed["profile"].as<std::string>();
    if (parsed.count("cache-max-size")) {
        ro->cache_max_bytes = parse_cache_size("--cache-max-size", parsed["cache-max-size"].as<std::string>());
    } else {
        ro->cache_max_bytes = remote::BlockCache::default_max_bytes(
            ro->cache_dir.empty() ? remote::BlockCache::default_dir() : ro->cache_dir);
    }
}

std::string misplaced_source_option(const cxxopts::ParseResult& parsed, const std::string& source) {
    if (source.rfind("s3://", 0) != 0) {
        for (const char* name : {"no-sign-request", "endpoint-url", "region", "profile"}) {
            if (parsed.count(name)) return std::string("--") + name + " is an option of s3:// sources; SOURCE is not one";
        }
    }
    if (!remote::oci::is_oci_source(source) && parsed.count("plain-http"))
        return "--plain-http is an option of oci:// and ollama:// sources; SOURCE is not one";
    return "";
}
#endif

}  // namespace gguf_mount::cli
