// `gguf-mount SOURCE MOUNTPOINT [options]`: validate every split set in SOURCE, then serve the
// complete ones as merged read-only files through FUSE (fs/).
//
// Also reached as `gguf-mount mount ...` and as `mount.gguf-mount SOURCE MOUNTPOINT -o opts`
// (mount(8) runs /sbin/mount.<type> for an fstab entry of type gguf-mount and may add -n, -v).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "cli/logging.hpp"
#include "cli/offline.hpp"
#include "gguf/error.hpp"
#include "gguf/file_io.hpp"
#include "gguf/split_set.hpp"
#include "gguf/virtual_file.hpp"

#ifdef GGUF_MOUNT_WITH_FUSE
#include "fs/filesystem.hpp"
#include "fs/session.hpp"
#endif

namespace gguf_mount::cli {

namespace {

constexpr const char* kProgram = "gguf-mount";
constexpr unsigned kMaxReadaheadKb = 1u << 20;  // 1 GiB: anything above is a typo

/// The -o options after filtering, and what was dropped.
struct FilteredOptions {
    std::vector<std::string> keep;     // passed to libfuse
    bool has_fsname = false;
    bool has_subtype = false;
};

/// Sorts the user's -o options (already split at commas) into those for libfuse and those to
/// drop. Dropped silently: options that only mean something to mount(8), systemd or fstab
/// (_netdev, nofail, auto, noauto, user, users, nouser, owner, group, defaults, x-*,
/// comment=*; as in mountpoint-s3's fstab.rs option_allowed), access-time policies that
/// libfuse 3.14 rejects (relatime, strictatime, lazytime, nodiratime and their negations),
/// FUSE 2's nonempty, and "ro" and "default_permissions" (always added).
/// Dropped with a warning: "rw" (the mount is read-only), "max_read=*" (fixed at 1 MiB to
/// match the daemon's buffers) and empty items.
FilteredOptions filter_mount_options(const std::vector<std::string>& given) {
    static const std::set<std::string> mount8_only = {
        "_netdev", "nofail", "auto", "noauto", "user", "users", "nouser", "owner", "group", "defaults",
        "ro", "default_permissions",
        // access-time policies mean nothing on a read-only file system, and libfuse 3.14 rejects
        // these; "nonempty" is a FUSE 2 option (FUSE 3 always allows a non-empty mount point).
        "relatime", "norelatime", "strictatime", "nostrictatime", "lazytime", "nolazytime", "diratime",
        "nodiratime", "nonempty"};
    FilteredOptions out;
    for (const auto& o : given) {
        if (o.empty()) continue;
        if (mount8_only.count(o) || o.rfind("x-", 0) == 0 || o.rfind("comment=", 0) == 0) {
            spdlog::debug("ignoring mount option '{}' (meant for mount(8)/systemd or always set)", o);
            continue;
        }
        if (o == "rw") {
            spdlog::warn("ignoring mount option 'rw': gguf-mount file systems are read-only");
            continue;
        }
        if (o.rfind("max_read=", 0) == 0) {
            spdlog::warn("ignoring mount option '{}': gguf-mount always uses max_read=1048576", o);
            continue;
        }
        if (o.rfind("fsname=", 0) == 0) out.has_fsname = true;
        if (o.rfind("subtype=", 0) == 0) out.has_subtype = true;
        out.keep.push_back(o);
    }
    return out;
}

std::string real_path(const std::string& p) {
    std::unique_ptr<char, decltype(&std::free)> r(::realpath(p.c_str(), nullptr), &std::free);
    return r ? std::string(r.get()) : p;
}

cxxopts::Options make_options() {
    cxxopts::Options options(kProgram, "Serve every complete llama.cpp gguf-split set in SOURCE as one merged, "
                                       "read-only GGUF file, byte-identical to `gguf-split --merge`.\n"
                                       "SOURCE is a directory, or the first shard of one set.");
    options.positional_help("SOURCE MOUNTPOINT");
    // clang-format off
    options.add_options()
        ("f,foreground", "stay in the foreground, log to stderr (default: daemonize, log to syslog)")
        ("d,debug", "print every FUSE request (libfuse -d); implies --foreground")
        ("s,single-thread", "serve requests on one thread")
        ("o", "mount options, comma separated: allow_other, fsname=..., ... (always ro); fstab-only options "
              "such as nofail, _netdev, noauto, x-* are ignored", cxxopts::value<std::vector<std::string>>(), "OPT[,OPT...]")
        ("v,verbose", "log at debug level (same as --log-level debug)")
        ("log-level", "trace, debug, info, warn, error or off", cxxopts::value<std::string>()->default_value("info"), "L")
        ("readahead-kb", "FUSE readahead window in KiB set after mounting (needs root); 0 keeps the kernel default",
         cxxopts::value<unsigned>()->default_value(std::to_string(4096)), "N")
        ("n", "ignored (mount(8) compatibility)")
        ("h,help", "print this help")
        ("V,version", "print the version")
        ("source", "", cxxopts::value<std::string>())
        ("mountpoint", "", cxxopts::value<std::string>());
    // clang-format on
    options.parse_positional({"source", "mountpoint"});
    return options;
}

#ifdef GGUF_MOUNT_WITH_FUSE
/// Bytes of each shard whose reading prefetch_shard_heads starts: a shard header after the
/// first one is a few hundred bytes (three split keys and its tensor infos).
constexpr off_t kPrefetchBytes = 4096;

/// Starts reading the first kPrefetchBytes of every shard in directory `dir` (of the set with
/// prefix `only_prefix` when it is not empty) with posix_fadvise(POSIX_FADV_WILLNEED), which
/// queues the reads without waiting. Validation then reads the headers one shard at a time
/// from the page cache instead of waiting for one disk read per shard in turn: from cold
/// caches, 1,200 shards took ~120 ms to open and read one after the other and ~20 ms with
/// this (bench/run.sh, mount-to-readable). Best effort: errors are ignored.
void prefetch_shard_heads(const std::string& dir, const std::string& only_prefix) noexcept {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return;
    std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
    while (const dirent* ent = ::readdir(d)) {
        if (ent->d_type != DT_REG && ent->d_type != DT_UNKNOWN) continue;
        auto name = gguf::parse_shard_name(ent->d_name);
        if (!name || (!only_prefix.empty() && name->prefix != only_prefix)) continue;
        int fd = ::open((base + ent->d_name).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (fd < 0) continue;
        ::posix_fadvise(fd, 0, kPrefetchBytes, POSIX_FADV_WILLNEED);
        ::close(fd);
    }
    ::closedir(d);
}

/// Validates SOURCE and opens every set to serve. Logs one error line per problem. Returns the
/// files to serve (possibly none).
std::vector<fs::ServedFile> collect_files(const std::string& source, const struct stat& source_st) {
    std::vector<fs::ServedFile> files;
    std::set<std::string> names;
    auto add = [&](const gguf::SplitSet& set) {
        std::string name = set.merged_name();
        const std::string& first = set.shards().front().path;
        if (names.count(name)) {
            spdlog::error("{}: merged name {} is already served by another set; not serving this one", first, name);
            return;
        }
        try {
            auto vf = std::make_shared<const gguf::VirtualFile>(gguf::VirtualFile::merged(set));
            spdlog::info("serving {}: {} shard{}, {} bytes, {} tensors (from {})", name, set.shards().size(),
                         set.shards().size() == 1 ? "" : "s", vf->size(), set.tensor_count(), first);
            names.insert(name);
            files.push_back(fs::ServedFile{name, std::move(vf)});
        } catch (const gguf::Error& e) {
            spdlog::error("{}", e.what());
        }
    };

    if (S_ISDIR(source_st.st_mode)) {
        prefetch_shard_heads(source, "");
    } else if (auto name = gguf::parse_shard_name(gguf::base_name(source))) {
        prefetch_shard_heads(gguf::dir_name(source), name->prefix);
    }
    if (S_ISDIR(source_st.st_mode)) {
        std::vector<gguf::SetScan> scans;
        try {
            scans = gguf::scan_directory(source);
        } catch (const gguf::Error& e) {
            spdlog::error("{}", e.what());
            return files;
        }
        for (const auto& scan : scans) {
            if (scan.set) {
                add(*scan.set);
            } else {
                spdlog::error("{}", scan.error);
            }
        }
    } else {
        try {
            add(gguf::SplitSet::open(source));
        } catch (const gguf::Error& e) {
            spdlog::error("{}", e.what());
        }
    }
    return files;
}
#endif

}  // namespace

int run_mount(int argc, char** argv) {
    cxxopts::Options options = make_options();
    cxxopts::ParseResult args;
    try {
        args = options.parse(argc, argv);
        if (!args.unmatched().empty()) {
            throw cxxopts::exceptions::exception("unexpected argument '" + args.unmatched().front() + "'");
        }
    } catch (const cxxopts::exceptions::exception& e) {
        std::fprintf(stderr, "%s: %s (see '%s --help')\n", kProgram, e.what(), kProgram);
        return 2;
    }
    if (args.count("help")) {
        std::printf("%s\n%s", options.help().c_str(),
                    "Every set is validated before mounting; bad sets are reported (one line each) and\n"
                    "skipped; with no valid set nothing is mounted and the exit status is 1.\n"
                    "Unmount with 'fusermount3 -u MOUNTPOINT' (or umount, or SIGTERM to the daemon).\n"
                    "\n"
                    "Examples:\n"
                    "  gguf-mount /models /mnt/models                      every set in /models\n"
                    "  gguf-mount /models/qwen-00001-of-00003.gguf /mnt/q  just qwen.gguf\n"
                    "  gguf-mount /models /mnt/models -f -o allow_other    foreground, other users may read\n");
        return 0;
    }
    if (args.count("version")) {
        std::printf("%s %s\n", kProgram, GGUF_MOUNT_VERSION);
        return 0;
    }
    if (!args.count("source") || !args.count("mountpoint")) {
        std::fprintf(stderr, "%s: SOURCE and MOUNTPOINT are required (see '%s --help')\n", kProgram, kProgram);
        return 2;
    }

    std::string level = args["log-level"].as<std::string>();
    if (args.count("verbose") && !args.count("log-level")) level = "debug";
    try {
        setup_logging(level, false);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s (see '%s --help')\n", kProgram, e.what(), kProgram);
        return 2;
    }
    const unsigned readahead_kb = args["readahead-kb"].as<unsigned>();
    if (readahead_kb > kMaxReadaheadKb) {
        std::fprintf(stderr, "%s: --readahead-kb %u is larger than %u (see '%s --help')\n", kProgram, readahead_kb,
                     kMaxReadaheadKb, kProgram);
        return 2;
    }

#ifndef GGUF_MOUNT_WITH_FUSE
    spdlog::error("this gguf-mount was built without FUSE support (GGUF_MOUNT_WITH_FUSE=OFF)");
    return 1;
#else
    const std::string source_arg = args["source"].as<std::string>();
    const std::string mount_arg = args["mountpoint"].as<std::string>();

    // Before anything is opened: a shard must never get fd 0, 1 or 2 (fuse_daemonize reuses them).
    if (!fs::ensure_standard_fds_open()) {
        std::fprintf(stderr, "%s: /dev/null: cannot open\n", kProgram);
        return 1;
    }
    // Every shard stays open while mounted: a set of more than ~1,000 shards needs more than the
    // usual soft limit of 1024 descriptors (bench/run.sh mounts a 1,200-shard set).
    raise_open_file_limit();

    struct stat source_st {};
    if (::stat(source_arg.c_str(), &source_st) != 0) {
        spdlog::error("{}: {}", source_arg, std::strerror(errno));
        return 1;
    }
    if (!S_ISDIR(source_st.st_mode) && !S_ISREG(source_st.st_mode)) {
        spdlog::error("{}: not a directory or a regular file", source_arg);
        return 1;
    }
    struct stat mount_st {};
    if (::stat(mount_arg.c_str(), &mount_st) != 0) {
        spdlog::error("{}: {}", mount_arg, std::strerror(errno));
        return 1;
    }
    if (!S_ISDIR(mount_st.st_mode)) {
        spdlog::error("{}: mount point is not a directory", mount_arg);
        return 1;
    }
    const std::string source = real_path(source_arg);
    const std::string mountpoint = real_path(mount_arg);

    FilteredOptions mo =
        filter_mount_options(args.count("o") ? args["o"].as<std::vector<std::string>>() : std::vector<std::string>{});

    std::vector<fs::ServedFile> files = collect_files(source, source_st);
    if (files.empty()) {
        spdlog::error("{}: no complete gguf-split set to serve; nothing mounted", source_arg);
        return 1;
    }

    // The root directory takes the owner of the SOURCE directory (of the shard's directory
    // when SOURCE is a shard).
    struct stat root_st = source_st;
    if (!S_ISDIR(source_st.st_mode)) {
        std::string dir = gguf::dir_name(source);
        if (::stat(dir.c_str(), &root_st) != 0) root_st = source_st;
    }

    try {
        fs::Filesystem filesystem(std::move(files), root_st);

        fs::SessionOptions so;
        so.mountpoint = mountpoint;
        so.mount_options = std::move(mo.keep);
        if (!mo.has_fsname) so.mount_options.push_back("fsname=" + fs::escape_option_value(source));
        if (!mo.has_subtype) so.mount_options.push_back("subtype=gguf-mount");
        so.debug = args.count("debug") > 0;
        so.foreground = args.count("foreground") > 0 || so.debug;
        so.single_thread = args.count("single-thread") > 0;
        so.readahead_kb = readahead_kb;
        so.before_daemonize = [level] {
            spdlog::drop(kProgram);
            setup_logging(level, true);
        };
        return fs::run_session(filesystem, so);
    } catch (const std::exception& e) {
        spdlog::error("{}: {}", mountpoint, e.what());
        return 1;
    }
#endif
}

}  // namespace gguf_mount::cli
