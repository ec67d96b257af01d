// Temporary placeholder so the tree links while this subcommand is being written.
#include <cstdio>
#include "cli/commands.hpp"
namespace gguf_mount::cli {
int run_merge(int, char**) { std::fprintf(stderr, "gguf-mount: 'merge' is not built yet\n"); return 1; }
}  // namespace gguf_mount::cli
