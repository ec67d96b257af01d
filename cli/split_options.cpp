#include "cli/split_options.hpp"

#include <string>

#include "gguf/error.hpp"

namespace gguf_mount::cli {

void add_split_view_options(cxxopts::Options& options) {
    // clang-format off
    options.add_options("shard view")
        ("split-max-tensors", "show every model as gguf-split shards of at most N tensors each, byte-identical "
                              "to 'gguf-mount split' (no copy is written)", cxxopts::value<std::string>(), "N")
        ("split-max-size", "show every model as gguf-split shards of at most N(M|G) tensor bytes each "
                           "(M = 10^6, G = 10^9 bytes; whole numbers only)", cxxopts::value<std::string>(), "N(M|G)")
        ("no-tensor-first-split", "with a shard view: the first shard holds only the metadata");
    // clang-format on
}

std::optional<gguf::SplitOptions> read_split_options(const cxxopts::ParseResult& r, bool need_mode) {
    const bool by_size = r.count("split-max-size") > 0;
    const bool by_tensors = r.count("split-max-tensors") > 0;
    if (by_size && by_tensors) {
        throw gguf::Error(gguf::Code::BadArgument, "--split-max-size and --split-max-tensors cannot be used together");
    }
    const bool no_first = r.count("no-tensor-first-split") > 0;
    if (!by_size && !by_tensors) {
        if (no_first && need_mode) {
            throw gguf::Error(gguf::Code::BadArgument,
                              "--no-tensor-first-split needs --split-max-tensors N or --split-max-size N(M|G)");
        }
        if (need_mode) return std::nullopt;
    }
    gguf::SplitOptions o;
    if (by_size) {
        o.mode = gguf::SplitOptions::Mode::Size;
        o.max_bytes = gguf::parse_split_max_size(r["split-max-size"].as<std::string>());
    } else if (by_tensors) {
        o.max_tensors = gguf::parse_split_max_tensors(r["split-max-tensors"].as<std::string>());
    }
    o.no_tensor_first_split = no_first;
    return o;
}

}  // namespace gguf_mount::cli
