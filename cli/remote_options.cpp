#include "cli/remote_options.hpp"

#include <algorithm>
#include <chrono>

namespace gguf_mount::cli {

void add_remote_options(cxxopts::Options& options, const std::string& prefix) {
    // clang-format off
    options.add_options()
        ("cache-dir", prefix + "block cache directory (default: $CACHE_DIRECTORY as systemd sets it, else "
                      "$XDG_CACHE_HOME/gguf-mount, else ~/.cache/gguf-mount)", cxxopts::value<std::string>())
        ("net-timeout", prefix + "seconds before a connection attempt or a stalled transfer fails (also the window of "
                                      "the 32 KiB/s rate floor)",
         cxxopts::value<unsigned>()->default_value("30"))
        ("ca-cert", prefix + "extra CA certificate file (PEM) for https", cxxopts::value<std::string>());
    // clang-format on
}

#ifdef GGUF_MOUNT_WITH_REMOTE
void read_remote_options(const cxxopts::ParseResult& parsed, remote::RemoteOptions* ro) {
    if (parsed.count("cache-dir")) ro->cache_dir = parsed["cache-dir"].as<std::string>();
    if (parsed.count("ca-cert")) ro->http.ca_cert = parsed["ca-cert"].as<std::string>();
    ro->http.net_timeout = std::chrono::seconds(std::max(1u, parsed["net-timeout"].as<unsigned>()));
}
#endif

}  // namespace gguf_mount::cli
