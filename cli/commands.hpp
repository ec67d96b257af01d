// Subcommands of the gguf-mount executable. Each parses its own options with cxxopts and
// returns the process exit status: 0 success, 1 operation failed, 2 usage error.
#pragma once

namespace gguf_mount::cli {

/// `gguf-mount [mount] SOURCE MOUNTPOINT [-f] [-d] [-o opt,...]` (cli/cmd_mount.cpp).
int run_mount(int argc, char** argv);
/// `gguf-mount split [options] GGUF_IN OUT_PREFIX` (cli/cmd_split.cpp).
int run_split(int argc, char** argv);
/// `gguf-mount merge [options] FIRST_SHARD GGUF_OUT` (cli/cmd_merge.cpp).
int run_merge(int argc, char** argv);
/// `gguf-mount check SOURCE [--json] [--show-shards]` (cli/cmd_check.cpp): exit 0 when SOURCE
/// has no problem, 1 otherwise.
int run_check(int argc, char** argv);
/// `gguf-mount prefetch SOURCE [--cache-dir DIR] [-q]` (cli/cmd_prefetch.cpp, remote builds
/// only): exit 0 when every block of every file SOURCE serves is in the block cache.
int run_prefetch(int argc, char** argv);
/// `gguf-mount cache list|trim --max-size N|clear [--cache-dir DIR] [--json]` (cli/cmd_cache.cpp,
/// remote builds only): exit 0 done, 1 failed or (trim, clear) kept what is in use above the
/// size asked for, 2 usage error.
int run_cache(int argc, char** argv);

/// `gguf-mount umount|unmount [--lazy] MOUNTPOINT...` (cli/cmd_umount.cpp, FUSE builds only):
/// fusermount3 -u [-z] for each gguf-mount mount; exit 0 when all were unmounted, 1 otherwise
/// (one line each: not mounted, not gguf-mount's, busy), 2 for a usage error.
int run_umount(int argc, char** argv);

}  // namespace gguf_mount::cli
