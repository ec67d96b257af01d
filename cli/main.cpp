// Placeholder entry point; replaced by the real subcommand dispatcher.
#include <cstdio>
int main() { std::puts("gguf-mount " GGUF_MOUNT_VERSION); return 0; }
