// gguf-mount entry point: dispatches to a subcommand. Invoked as mount.gguf-mount or
// mount.fuse.gguf-mount (by mount(8)), it behaves as `gguf-mount mount`.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/completion.hpp"
#include "cli/remote_options.hpp"
#include "common/text.hpp"

namespace {

void print_usage() {
    std::printf(
        "gguf-mount %s: serve split GGUF models as merged files, or split and merge them offline\n"
        "\n"
        "usage:\n"
        "  gguf-mount SOURCE MOUNTPOINT [options]       mount a model directory: split sets merged,\n"
        "                                               byte-split parts joined, other files as they are\n"
        "  gguf-mount check [options] SOURCE            what a mount of SOURCE would serve, and why not\n"
        "  gguf-mount split [options] GGUF_IN PREFIX    split a model like llama.cpp's gguf-split\n"
        "  gguf-mount merge [options] SHARD1 OUT        merge a split set like gguf-split --merge\n"
        "                                               (SHARD1 may be a URL: a resumable download)\n"
        "  gguf-mount prefetch [options] URL            fill the block cache for --offline mounts\n"
        "                                               (http(s)://, hf://, s3://, oci://, ollama://)\n"
        "  gguf-mount cache list|trim|clear [options]   what the block cache holds per source; trim it\n"
        "  gguf-mount umount [--lazy] MOUNTPOINT        unmount (fusermount3 -u; also 'unmount')\n"
        "\n"
        "Run 'gguf-mount mount --help' for the mount options (-f, -o, ...), and 'gguf-mount split\n"
        "--help', 'merge --help', 'check --help', 'prefetch --help', 'cache --help', 'umount --help'\n"
        "for the others.\n",
        GGUF_MOUNT_VERSION);
}

constexpr const char* kCommands[] = {"split", "merge", "check", "prefetch", "cache", "mount", "umount", "unmount"};

/// Levenshtein distance of `a` and `b` (insert, delete, substitute: 1 each).
size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

/// The command `word` is most likely a typo of: the closest one within 2 edits, or "" when
/// `word` names an existing path (a SOURCE), contains '/' or is close to no command.
std::string mistyped_command(const std::string& word) {
    struct stat st {};
    if (word.empty() || word[0] == '-' || word.find('/') != std::string::npos || ::lstat(word.c_str(), &st) == 0) {
        return "";
    }
    std::string best;
    size_t best_distance = 3;
    for (const char* c : kCommands) {
        size_t d = edit_distance(word, c);
        if (d < best_distance) {
            best_distance = d;
            best = c;
        }
    }
    return best;
}

}  // namespace

namespace {

int run(int argc, char** argv) {
    using namespace gguf_mount::cli;
    std::string self = argc > 0 ? argv[0] : "gguf-mount";
    std::string base = self.substr(self.find_last_of('/') == std::string::npos ? 0 : self.find_last_of('/') + 1);
    if (base.rfind("mount.", 0) == 0) {
        // mount(8) helper conventions (mount(8) "EXTERNAL HELPERS"): -s means "sloppy"
        // (tolerate unknown options, which gguf-mount's filter does anyway), not
        // --single-thread; drop it before the mount options are parsed.
        int out = 1;
        for (int i = 1; i < argc; ++i) {
            if (std::strcmp(argv[i], "-s") != 0) argv[out++] = argv[i];
        }
        argv[out] = nullptr;
        return run_mount(out, argv);
    }

    if (argc < 2) {
        print_usage();
        return 2;
    }
    std::string cmd = argv[1];
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
        print_usage();
        return 0;
    }
    if (cmd == "-V" || cmd == "--version") {
        std::printf("gguf-mount %s\n", GGUF_MOUNT_VERSION);
        return 0;
    }
    if (cmd == "--completion-words") {
        // Hidden, for the bash completion: the words COMMAND declares (cli/completion.hpp), or
        // the subcommands with no COMMAND.
        if (argc < 3) {
            for (const char* c : kCommands) std::printf("%s\n", c);
            return 0;
        }
        request_completion_words();
        argc = 2;
        ++argv;
        cmd = argv[1];
        if (cmd != "split" && cmd != "merge" && cmd != "check" && cmd != "prefetch" && cmd != "cache" &&
            cmd != "umount" && cmd != "unmount") {
            return run_mount(1, argv + 1);
        }
    }
    // Subcommands see argv shifted by one, so their argv[0] is "gguf-mount split" etc.
    if (cmd == "split") return run_split(argc - 1, argv + 1);
    if (cmd == "merge") return run_merge(argc - 1, argv + 1);
    if (cmd == "check") return run_check(argc - 1, argv + 1);
#ifdef GGUF_MOUNT_WITH_REMOTE
    if (cmd == "prefetch") return run_prefetch(argc - 1, argv + 1);
    if (cmd == "cache") return run_cache(argc - 1, argv + 1);
#endif
    if (cmd == "mount") return run_mount(argc - 1, argv + 1);
#ifdef GGUF_MOUNT_WITH_FUSE
    if (cmd == "umount" || cmd == "unmount") return run_umount(argc - 1, argv + 1);
#endif
    // `gguf-mount SOURCE MOUNTPOINT`: the first word is a path, unless it is a typo of a command.
    std::string guess = mistyped_command(cmd);
    if (!guess.empty()) {
        std::fprintf(stderr,
                     "gguf-mount: unknown command '%s' (and no file or directory of that name); did you mean '%s'? "
                     "(commands: split, merge, check, prefetch, cache, mount, umount; see 'gguf-mount --help')\n",
                     cmd.c_str(), guess.c_str());
        return 2;
    }
    // One word alone that names no file and is no option, path or URL: a command nobody has, not
    // a SOURCE without its MOUNTPOINT.
    struct stat st {};
    if (argc == 2 && cmd[0] != '-' && cmd.find('/') == std::string::npos && cmd.find(':') == std::string::npos &&
        ::stat(cmd.c_str(), &st) != 0) {
        std::fprintf(stderr,
                     "gguf-mount: unknown command '%s' (and no file or directory of that name); "
                     "commands: split, merge, check, prefetch, cache, mount, umount; see 'gguf-mount --help'\n",
                     gguf::escape(cmd).c_str());
        return 2;
    }
    return run_mount(argc, argv);
}

}  // namespace

int main(int argc, char** argv) {
    // The commands read copies of the arguments; the originals, which every local user reads
    // in /proc/PID/cmdline for the life of the process, lose the credentials and query strings
    // of URLs at once.
    std::vector<std::string> copies(argv, argv + argc);
    std::vector<char*> args;
    for (std::string& c : copies) args.push_back(c.data());
    args.push_back(nullptr);
    gguf_mount::cli::hide_url_secrets(argc, argv);
    // Every remote context is destroyed, its threads joined, when its last holder lets go, on
    // that holder's thread (remote/context.hpp): nothing of it outlives run().
    return run(argc, args.data());
}
