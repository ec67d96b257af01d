// `gguf-mount SOURCE MOUNTPOINT [options]`: serve the model directory SOURCE read-only through
// FUSE (fs/): every complete gguf-split set merged, byte-split parts joined, every other file as
// it is (gguf/model/catalog.hpp), kept up to date while mounted (fs/watcher.hpp).
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
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "cli/completion.hpp"
#include "cli/kv_options.hpp"
#include "cli/logging.hpp"
#include "cli/offline.hpp"
#include "cli/progress.hpp"
#include "cli/remote_options.hpp"
#include "cli/source.hpp"
#include "cli/split_options.hpp"
#include "common/text.hpp"
#include "common/threads.hpp"
#include "gguf/error.hpp"
#include "gguf/bytes/file_io.hpp"
#include "gguf/bytes/page_cache.hpp"
#include "gguf/error.hpp"
#include "gguf/model/catalog.hpp"
#include "gguf/model/shard_view.hpp"

#ifdef GGUF_MOUNT_WITH_REMOTE
#include "remote/folder_listing.hpp"
#include "remote/url_parts.hpp"
#endif

#ifdef GGUF_MOUNT_WITH_FUSE
#include "fs/live.hpp"
#include "fs/mount_point.hpp"
#include "fs/session.hpp"
#include "fs/watcher.hpp"
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
/// and "ro" and "default_permissions" (always added). gguf-mount's own options given as -o
/// items were taken out before (own_options_as_arguments).
/// "rw" is dropped with a debug line: mount(8) passes it whenever "ro" is not given, and the
/// mount is read-only whatever the options say.
/// Dropped with a warning: "max_read=*" (fixed at 1 MiB to
/// match the daemon's buffers) and empty items.
[[maybe_unused]] FilteredOptions filter_mount_options(const std::vector<std::string>& given) {
    static const std::set<std::string> mount8_only = {
        "_netdev", "nofail", "auto", "noauto", "user", "users", "nouser", "owner", "group", "defaults",
        "ro", "default_permissions",
        // access-time policies mean nothing on a read-only file system, and libfuse 3.14 rejects
        // these.
        "relatime", "norelatime", "strictatime", "nostrictatime", "lazytime", "nolazytime", "diratime",
        "nodiratime"};
    FilteredOptions out;
    for (const auto& o : given) {
        if (o.empty()) continue;
        if (mount8_only.count(o) || o.rfind("x-", 0) == 0 || o.rfind("comment=", 0) == 0) {
            spdlog::debug("ignoring mount option '{}' (meant for mount(8)/systemd or always set)", o);
            continue;
        }
        if (o == "rw") {
            spdlog::debug("ignoring mount option 'rw': gguf-mount file systems are read-only");
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

/// True (and logged, one line each) when an edit given on the command line does not fit a model
/// of the first scan (gguf::Problem::refused_override): then nothing is mounted.
[[maybe_unused]] bool refused_overrides(const std::vector<gguf::Problem>& problems) {
    bool refused = false;
    for (const auto& p : problems) {
        if (!p.refused_override) continue;
        std::string reason = p.reason;
        static const std::string kNotShown = "; not shown";
        if (reason.size() > kNotShown.size() && reason.compare(reason.size() - kNotShown.size(), kNotShown.size(), kNotShown) == 0) {
            reason.resize(reason.size() - kNotShown.size());
        }
        spdlog::error("{}: {}; nothing mounted", gguf::quote_name(p.path), reason);
        refused = true;
    }
    return refused;
}

#if defined(GGUF_MOUNT_WITH_REMOTE) && defined(GGUF_MOUNT_WITH_FUSE)
/// Why a remote folder that serves nothing after its first scan `first` must not be mounted: the
/// definite failure of its root listing (remote::FolderListing), else the first problem of a
/// server that ignores Range (its files cannot be read, whichever listing found them); "" when
/// the server could not be reached or simply holds nothing to serve (yet).
std::string definite_folder_failure(const gguf::DirectoryListing* listing, const fs::RescanResult& first) {
    if (const auto* folder = dynamic_cast<const remote::FolderListing*>(listing)) {
        if (std::string why = folder->definite_failure(); !why.empty()) return why;
    }
    static const std::string kNotShown = "; not shown";
    for (const auto& p : first.new_problems) {
        if (p.reason.find(remote::kRangeIgnored) == std::string::npos) continue;
        std::string reason = p.reason;
        if (reason.size() > kNotShown.size() && reason.compare(reason.size() - kNotShown.size(), kNotShown.size(), kNotShown) == 0)
            reason.resize(reason.size() - kNotShown.size());
        return reason;
    }
    for (const auto& e : first.errors)
        if (e.find(remote::kRangeIgnored) != std::string::npos) return e;
    return "";
}
#endif

/// The -o spellings of the mount command's own long options: each declared long name with '-'
/// and with '_' ("cache-dir", "cache_dir"), and FUSE 2's "nonempty" for --allow-non-empty
/// (libfuse 3 rejects it; fstab lines carry it). Built from `options` as declared, so that
/// every option a later change adds is accepted too. Not: -o itself, --help, --version and the
/// positionals.
std::map<std::string, std::string> own_option_spellings(const cxxopts::Options& options) {
    std::map<std::string, std::string> table = {{"nonempty", "allow-non-empty"}};
    static const std::set<std::string> not_as_o = {"o", "help", "version", "source", "mountpoint"};
    for (const std::string& group : options.groups()) {
        for (const auto& o : options.group_help(group).options) {
            for (const std::string& name : o.l) {
                if (not_as_o.count(name)) continue;
                std::string underscores = name;
                std::replace(underscores.begin(), underscores.end(), '-', '_');
                table[name] = name;
                table[underscores] = name;
            }
        }
    }
    return table;
}

/// The -o items of `given` that name one of the mount's own options (own_option_spellings), as
/// command-line arguments ("cache_dir=/x" -> "--cache-dir=/x", a flag "offline" -> "--offline");
/// those items are removed from `given`, the others (FUSE and mount(8) options) stay. What
/// mount(8) and fstab pass reaches every option this way. Throws cxxopts' exception type for
/// an option that takes a value given without one, naming it.
std::vector<std::string> own_options_as_arguments(const cxxopts::Options& options, std::vector<std::string>* given) {
    const auto table = own_option_spellings(options);
    std::set<std::string> flags;
    for (const std::string& group : options.groups()) {
        for (const auto& o : options.group_help(group).options) {
            if (o.is_boolean && !o.l.empty()) flags.insert(o.l.front());
        }
    }
    std::vector<std::string> args, rest;
    for (const std::string& item : *given) {
        const size_t eq = item.find('=');
        auto it = table.find(item.substr(0, eq));
        if (it == table.end()) {
            rest.push_back(item);
            continue;
        }
        if (eq == std::string::npos && !flags.count(it->second)) {
            throw cxxopts::exceptions::exception("-o " + item + ": needs a value (-o " + item + "=VALUE, as --" +
                                                 it->second + " VALUE)");
        }
        args.push_back("--" + it->second + (eq == std::string::npos ? "" : item.substr(eq)));
    }
    *given = std::move(rest);
    return args;
}

/// The -o items given (each -o split at commas by cxxopts).
std::vector<std::string> o_items(const cxxopts::ParseResult& args) {
    return args.count("o") ? args["o"].as<std::vector<std::string>>() : std::vector<std::string>{};
}

cxxopts::Options make_options() {
    // Wrapped here: cxxopts prints the description as given, and help2man keeps it as one line.
    cxxopts::Options options(kProgram,
                             "Serve the model directory SOURCE read-only: every complete llama.cpp gguf-split set\n"
                             "as one merged GGUF file (byte-identical to `gguf-split --merge`), byte-split parts\n"
                             "joined, every other file as it is, nested folders mirrored; kept up to date while\n"
                             "mounted.\n"
                             "SOURCE is a directory, or the first shard of one set, local or an http(s):// URL, or\n"
                             "hf://ORG/REPO[@REVISION][/PATH] (a Hugging Face Hub repo; HF_TOKEN, HF_ENDPOINT), or\n"
                             "s3://BUCKET/PREFIX/ or s3://BUCKET/KEY-00001-of-N.gguf (AWS credentials and config as\n"
                             "the AWS CLI reads them), or oci://REGISTRY/REPO[:TAG|@sha256:DIGEST] or\n"
                             "ollama://[REGISTRY/][NS/]MODEL[:TAG] (a registry's model: one merged .gguf and its\n"
                             "companion layers; docker/podman credentials), or an Ollama store (~/.ollama/models)\n"
                             "or OCI image layout directory (MODEL-TAG.gguf per tag).");
    options.custom_help("[options]");
    options.positional_help("SOURCE MOUNTPOINT");
    // clang-format off
    options.add_options()
        ("f,foreground", "stay in the foreground, log to stderr with timestamps (default: daemonize, log to syslog)")
        ("log-file", "also append every message to FILE, one timestamped line each; a daemonized mount logs there "
                     "instead of syslog (for hosts without a syslog daemon: containers, microVMs)",
         cxxopts::value<std::string>(), "FILE")
        ("d,debug", "print every FUSE request (libfuse -d); implies --foreground")
        ("s,single-thread", "serve requests on one thread")
        ("o", "mount options, comma separated: FUSE's (allow_other, fsname=..., ...; always ro), and every long "
              "option of this command as NAME=VALUE or a bare flag, '-' or '_' ('cache_dir=DIR,offline', as fstab "
              "needs); fstab-only options such as nofail, _netdev, noauto, x-* are ignored; an unknown one is "
              "refused before any request", cxxopts::value<std::vector<std::string>>(), "OPT[,OPT...]")
        ("allow-non-empty", "mount over a non-empty mount point, hiding its files (refused otherwise; "
                            "same as -o nonempty)")
        ("show-shards", "also show the shard files and byte pieces themselves (hidden by default)")
        ("v,verbose", "log at debug level (same as --log-level debug)")
        ("log-level", "trace, debug, info, warn, error or off", cxxopts::value<std::string>()->default_value("info"), "LEVEL")
        ("readahead-kb", "FUSE readahead window in KiB set after mounting (needs root); 0 keeps the kernel default",
         cxxopts::value<unsigned>()->default_value(std::to_string(4096)), "N")
        ("n", "ignored (mount(8) compatibility)")
        ("h,help", "show this help")
        ("V,version", "show the version")
        ("source", "", cxxopts::value<std::string>())
        ("mountpoint", "", cxxopts::value<std::string>());
    // clang-format on
    options.parse_positional({"source", "mountpoint"});
    add_kv_override_options(options);
    add_remote_options(options, "remote SOURCE: ", kMountOptions);
    add_split_view_options(options);
    return options;
}

}  // namespace

int run_mount(int argc, char** argv) {
    cxxopts::Options options = make_options();
    if (completion_words_requested()) return print_completion_words(options, {"source", "mountpoint"});
    cxxopts::ParseResult args;
    std::vector<std::string> o_given;  // the -o items left for libfuse and mount(8)
    try {
        args = options.parse(argc, argv);
        if (!args.unmatched().empty()) {
            throw cxxopts::exceptions::exception("unexpected argument '" + args.unmatched().front() + "'");
        }
        // fstab and `mount -t fuse.gguf-mount ... -o cache_dir=DIR,offline`: gguf-mount's own
        // options as -o items, parsed again as the arguments they stand for.
        o_given = o_items(args);
        const std::vector<std::string> own = own_options_as_arguments(options, &o_given);
        if (!own.empty()) {
            std::vector<const char*> again(argv, argv + argc);
            for (const std::string& a : own) again.push_back(a.c_str());
            args = options.parse(static_cast<int>(again.size()), again.data());
        }
    } catch (const cxxopts::exceptions::exception& e) {
        std::fprintf(stderr, "%s: %s (see '%s mount --help')\n", kProgram, gguf::escape(e.what()).c_str(), kProgram);
        return 2;
    }
    if (args.count("help")) {
        std::printf("%s\n%s%s%s", options.help().c_str(),
                    "What is served (run 'gguf-mount check SOURCE' to see it without mounting):\n"
                    "  PREFIX-00001-of-0000N.gguf ... -> PREFIX.gguf, the merged set (shards hidden)\n"
                    "  NAME.gguf-split-a, -b, ... or NAME.gguf.part1ofN ... -> NAME.gguf, concatenated\n"
                    "  every other file (README.md, *.json, mmproj-*.gguf, ...) as it is; folders mirrored\n"
                    "  with --split-max-tensors N or --split-max-size N(M|G): every model (set, single or\n"
                    "  byte-split GGUF file) as NAME-00001-of-0000N.gguf ..., the bytes 'gguf-mount split'\n"
                    "  writes with the same options, without writing them\n"
                    "Incomplete or invalid sets are not shown and are logged once with the reason. While\n"
                    "mounted, changes in a directory SOURCE show within about a second (an OCI layout or\n"
                    "Ollama store: at SIGHUP only); SIGHUP rescans at once. A\n"
                    "directory SOURCE is mounted even when nothing in it is complete yet; a first-shard\n"
                    "SOURCE must be a valid set (else exit status 1, nothing mounted).\n"
                    "MOUNTPOINT must be an empty directory (else --allow-non-empty) with nothing mounted\n"
                    "on it; a dead gguf-mount mount there (its daemon was killed) is cleared first. It may\n"
                    "lie inside SOURCE (it is never scanned); SOURCE may not lie inside it.\n"
                    "Unmount with 'gguf-mount umount MOUNTPOINT' (or fusermount3 -u, umount, or SIGTERM to the daemon).\n"
                    "\n"
                    "Examples:\n"
                    "  gguf-mount /models /mnt/models                      the whole model directory\n"
                    "  gguf-mount /models/qwen-00001-of-00003.gguf /mnt/q  just qwen.gguf\n"
                    "  gguf-mount /models /mnt/models -f -o allow_other    foreground, other users may read\n"
                    "  gguf-mount big.gguf /mnt/up --split-max-size 45G     big.gguf as shards to upload\n"
                    "  gguf-mount https://host/m/qwen-00001-of-00003.gguf /mnt/q   remote set, fetched lazily into\n"
                    "                                                      the block cache\n"
                    "  gguf-mount ollama://gemma3:1b /mnt/g                 a model of Ollama's library\n"
                    "  gguf-mount oci://ghcr.io/org/models:q4 /mnt/q        a model artifact of a registry\n"
                    "  gguf-mount ~/.ollama/models /mnt/ollama              every pulled model (kill -HUP after a pull)\n"
                    "  gguf-mount /models /mnt/m --chat-template-file fixed.jinja   every model with a new template\n",
                    kKvOverrideHelp,
                    "  These apply to every model served (merged sets and single .gguf files), after the\n"
                    "  edits of its sidecar NAME.gguf.kv (one KEY=TYPE:VALUE or -KEY per line, # comments;\n"
                    "  beside the first shard or the file; never shown). An edit that does not fit a model\n"
                    "  found at mount time mounts nothing (exit status 1); one that does not fit a model\n"
                    "  added later, or a bad sidecar, hides that model (logged; 'check' shows it).\n");
        return 0;
    }
    if (args.count("version")) {
        std::printf("%s %s\n", kProgram, GGUF_MOUNT_VERSION);
        return 0;
    }
    std::optional<gguf::SplitOptions> split_view;  // a shard view (gguf/model/shard_view.hpp)
    gguf::KvOverrides overrides;
    try {
        split_view = read_split_options(args, true);
        overrides = read_kv_override_options(args);
    } catch (const gguf::Error& e) {  // a bad split option, a malformed --override-kv, or its @FILE unreadable
        std::fprintf(stderr, "%s: %s (see '%s mount --help')\n", kProgram, gguf::escape(e.what()).c_str(), kProgram);
        return 2;
    }
    std::vector<std::string> given;
    try {
        given = source_and_positionals(args, {"source", "mountpoint"});
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", kProgram, gguf::escape(e.what()).c_str());
        return 1;
    }
    if (given.size() != 2) {
        std::fprintf(stderr, "%s: %s (see '%s mount --help')\n", kProgram,
                     given.size() < 2 ? "SOURCE and MOUNTPOINT are required"
                                      : "--source-file gives SOURCE: MOUNTPOINT is the only argument then",
                     kProgram);
        return 2;
    }

#ifdef GGUF_MOUNT_WITH_REMOTE
    if (const std::string m = misplaced_source_option(args, given[0]); !m.empty()) {
        std::fprintf(stderr, "%s: %s (see '%s mount --help')\n", kProgram, m.c_str(), kProgram);
        return 2;
    }
#endif

    std::string level = args["log-level"].as<std::string>();
    if (args.count("verbose") && !args.count("log-level")) level = "debug";
    const bool foreground = args.count("foreground") > 0 || args.count("debug") > 0;
    LogTargets log_targets;
    log_targets.timestamps = foreground;
    try {
        setup_logging(level, log_targets);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s (see '%s mount --help')\n", kProgram, gguf::escape(e.what()).c_str(), kProgram);
        return 2;
    }
    const unsigned readahead_kb = args["readahead-kb"].as<unsigned>();
    if (readahead_kb > kMaxReadaheadKb) {
        std::fprintf(stderr, "%s: --readahead-kb %u is larger than %u (see '%s mount --help')\n", kProgram, readahead_kb,
                     kMaxReadaheadKb, kProgram);
        return 2;
    }

#ifndef GGUF_MOUNT_WITH_FUSE
    spdlog::error("this gguf-mount was built without FUSE support (GGUF_MOUNT_WITH_FUSE=OFF)");
    return 1;
#else
    const std::string source_arg = given[0];
    const std::string mount_arg = given[1];

    // Before anything is opened: a shard must never get fd 0, 1 or 2 (daemonizing reuses them).
    if (!fs::ensure_standard_fds_open()) {
        std::fprintf(stderr, "%s: /dev/null: cannot open\n", kProgram);
        return 1;
    }
    // Shards of served sets stay open while the descriptor budget allows (fs/live.hpp
    // descriptor_budget): a higher soft limit keeps more of them open (bench/run.sh mounts a
    // 1,200-shard set).
    raise_open_file_limit();
    if (args.count("log-file")) {
        // Opened after the standard descriptors are safe, by absolute path (the daemon runs in /).
        log_targets.file = real_path(gguf::dir_name(args["log-file"].as<std::string>())) + "/" +
                           gguf::base_name(args["log-file"].as<std::string>());
        try {
            setup_logging(level, log_targets);
        } catch (const std::exception& e) {
            spdlog::error("{}; nothing mounted", e.what());
            return 1;
        }
    }

    FilteredOptions mo = filter_mount_options(o_given);
    // Options libfuse does not know are refused now, before any request to a remote SOURCE.
    if (std::string bad = fs::unknown_mount_options(mo.keep); !bad.empty()) {
        spdlog::error("-o {}: unknown mount option (neither a gguf-mount option, see '{} mount --help', nor a FUSE "
                      "or mount(8) one); nothing mounted", bad, kProgram);
        return 2;
    }
    const std::string mountpoint = fs::absolute_mount_path(mount_arg);

    std::unique_ptr<fs::LiveFilesystem> live;
    SourceOptions sopt;
    sopt.hub_digests = true;  // an hf:// first shard: its shards' lfs.oid, checked by in-order readers
    // Planning reads (and checks) the models before the session forks into the background: no
    // thread that outlives a call may start until it has (common/threads.hpp).
    gguf::hold_threads_until_fork();
    ResolvedSource resolved = resolve_source(source_arg, sopt);
    // The name in logs and the default fsname (a remote URL: without credentials or query).
    const std::string source = resolved.canonical;
    // A registry model is one manifest: a mount that serves nothing of it is refused like a set's.
    bool single_set = !resolved.directory() || resolved.kind == SourceKind::OciModel;
    std::chrono::milliseconds revalidate{0};  // remote SOURCE only: nothing local watches a URL
    const bool remote_source = resolved.remote();
    if (!remote_source && !resolved.local_problem.empty()) {
        spdlog::error("SOURCE {}: {}; nothing mounted", gguf::quote_name(source_arg), resolved.local_problem);
        return 1;
    }

    // The mount point first: a bad one is refused before a remote SOURCE sends any request.
    fs::MountPointCheck mp = fs::prepare_mount_point(mountpoint, source, args.count("allow-non-empty") > 0);
    for (const auto& line : mp.cleared) spdlog::info("{}", line);
    if (!mp.refusal.empty()) {
        spdlog::error("{}; nothing mounted", mp.refusal);
        return 1;
    }

#ifdef GGUF_MOUNT_WITH_REMOTE
    if (remote_source) {
        remote::RemoteOptions& ro = resolved.options.remote;
        ro.cache_source = resolved.shown;  // held for the mount's life: a trim leaves its blocks alone
        // Planning fetches headers (and, under a small --cache-max-size, blocks evicted at once)
        // before the daemonizing fork: no thread may exist then (so.after_daemonize).
        ro.defer_threads = true;
        gguf::CatalogOptions dopt;
        dopt.show_shards = args.count("show-shards") > 0;
        try {
            read_remote_options(args, &ro);
            // Offline, the server is never asked: there is nothing to revalidate.
            if (!ro.offline) revalidate = std::chrono::seconds(args["revalidate"].as<unsigned>());
            resolved.connect();
        } catch (const std::exception& e) {
            spdlog::error("{}; nothing mounted", e.what());
            return 1;
        }
        if (resolved.kind == SourceKind::HubRepo) {
            spdlog::info("{}: revision {} pinned to commit {} ({} tree page(s)); cache {}", gguf::quote_name(source),
                         resolved.hub.source.revision, resolved.commit, resolved.tree_pages,
                         gguf::quote_name(resolved.context->cache().dir()));
        }
        dopt.overrides = overrides;
        dopt.split_view = split_view;
        auto build = resolved.catalog_builder(dopt);
        if (!single_set) {
            live = fs::LiveFilesystem::with_builder(source, build);
        } else {
            // A first shard: planned now, so that a failure exits before mounting.
            std::shared_ptr<gguf::Catalog> first_catalog;
            // What the source is (its shards and size), said before a shard view replaces the
            // entry: one line per view shard under the source URL read as if the source were one.
            std::vector<std::string> planned;
            const bool hub_file = resolved.kind == SourceKind::HubFile;
            try {
                first_catalog = std::make_shared<gguf::Catalog>(build());
                for (const auto& e : first_catalog->entries) {
                    planned.push_back(fmt::format("{}: {} shard(s), {}{}", gguf::quote_name(source), e.members.size(),
                                                  size_for_humans(e.size()),
                                                  hub_file ? " at " + remote::url_for_message(resolved.url) : std::string()));
                }
                if (split_view) {
                    gguf::apply_shard_view(*first_catalog, *split_view, true);
                    for (auto& line : planned) {
                        line += fmt::format("; shown as {} shard(s) of the view", first_catalog->entries.size());
                    }
                }
            } catch (const std::exception& e) {
                // An override that does not fit is said as for a local set (kv_mount tests).
                spdlog::error("{}{}", e.what(), overrides.empty() ? "" : "; nothing mounted");
                return 1;
            }
            for (const auto& line : planned) {
                spdlog::info("{}; cache {}", line, gguf::quote_name(resolved.context->cache().dir()));
            }
            live = fs::LiveFilesystem::with_builder(source, [first_catalog, build, split_view]() mutable {
                if (first_catalog) {  // the catalog planned before mounting, then fresh ones (SIGHUP)
                    gguf::Catalog c = std::move(*first_catalog);
                    first_catalog.reset();
                    return c;
                }
                gguf::Catalog c = build();
                if (split_view) gguf::apply_shard_view(c, *split_view, true);
                return c;
            });
        }
    }
#endif
    // SOURCE in messages: a URL without credentials or query.
    const std::string shown_arg = remote_source ? source : source_arg;
    gguf::CatalogOptions copt;
    copt.show_shards = args.count("show-shards") > 0;
    copt.overrides = overrides;
    copt.split_view = split_view;
#ifdef GGUF_MOUNT_WITH_REMOTE
    if (!live && resolved.oci_local()) live = fs::LiveFilesystem::with_builder(source, resolved.catalog_builder(copt));
#endif
    if (!live) {
        // A mount point inside SOURCE is never walked (README "Mount point rules"); once mounted,
        // run_session adds the mount's root as well.
        struct stat mount_st {};
        if (::stat(mountpoint.c_str(), &mount_st) == 0) copt.skip.emplace_back(mount_st.st_dev, mount_st.st_ino);
        copt.skip_paths.push_back(real_path(mountpoint));
        live = std::make_unique<fs::LiveFilesystem>(source, copt);
    }
    fs::RescanResult first;
    try {
        first = live->rescan();
    } catch (const std::exception& e) {
        spdlog::error("{}: {}", gguf::quote_name(shown_arg), e.what());
        return 1;
    }
    if (refused_overrides(first.new_problems)) return 1;
    const size_t served = live->current()->file_count();
#ifdef GGUF_MOUNT_WITH_REMOTE
    // A remote folder whose server gave a definite answer (a 4xx, no such bucket, a listing that
    // does not parse, no Range) fails now, as a first shard does; only one that could not be
    // reached mounts empty and fills in.
    if (remote_source && !single_set && served == 0) {
        if (const std::string why = definite_folder_failure(resolved.listing.get(), first); !why.empty()) {
            spdlog::error("{}; nothing mounted", why);
            return 1;
        }
    }
#endif
    if (served == 0 && single_set) {
        // A first-shard SOURCE names one set: say what is wrong with it, once, and stop.
        for (const auto& p : first.new_problems) spdlog::error("{}; nothing mounted", p.reason);
        for (const auto& e : first.errors) {
            spdlog::error("{}: cannot be opened: {}; nothing mounted", gguf::quote_name(shown_arg), e);
        }
        if (first.new_problems.empty() && first.errors.empty()) {
            spdlog::error("{}: nothing to serve; nothing mounted", gguf::quote_name(shown_arg));
        }
        return 1;
    }
    // Only once the mount is certain to go ahead: no "serving" line before "nothing mounted".
    for (const auto& n : live->current()->nodes()) {
        if (n.directory) continue;
        // An edited single file is not a file "as it is" (what "companion" means in README).
        const std::string kind = !n.edited ? gguf::entry_label(n.kind, n.path)
                                 : n.kind == gguf::EntryKind::Companion
                                     ? "single model with edited metadata"
                                     : std::string(gguf::entry_kind_name(n.kind)) + " with edited metadata";
        spdlog::info("serving {}: {}, {}", gguf::quote_name(n.path), kind, size_for_humans(n.file->size()));
    }
    if (!remote_source && !gguf::cachestat_supported()) {
        spdlog::info("{}: cachestat(2) is unavailable (Linux < 6.5, or refused): reads through the mount drop "
                     "the shard pages they pass, also those another program had cached", shown_arg);
    }
    for (const auto& p : first.new_problems) fs::log_problem(p);
    for (const auto& n : first.new_notes) spdlog::warn("{}", n.reason);
    for (const auto& e : first.errors) spdlog::error("{}: not served: {}", gguf::quote_name(shown_arg), e);
    if (first.unpinned) {
        spdlog::warn(
            "{}: too many files to keep open: {} set(s) have their shards opened on demand (raise the "
            "descriptor limit, LimitNOFILE=, to keep them open)",
            gguf::quote_name(shown_arg), first.unpinned);
    }
    if (served == 0) {
        spdlog::warn("{}: nothing to serve yet; mounting an empty directory and watching for changes",
                     gguf::quote_name(shown_arg));
    }

    if (!foreground && log_targets.file.empty()) {
        // syslog(3) drops every message without a word when nobody listens on its socket: said
        // once, while stderr still reaches the user.
        if (std::string why = syslog_unavailable(); !why.empty()) {
            spdlog::warn("no syslog daemon ({}): this mount's messages after it starts are lost; mount with -f, or "
                         "give --log-file FILE (-o log_file=FILE)", why);
        }
    }
    try {
        fs::SessionOptions so;
        so.mountpoint = mountpoint;
        so.mount_options = std::move(mo.keep);
        if (!mo.has_fsname) so.mount_options.push_back("fsname=" + fs::escape_option_value(source));
        if (!mo.has_subtype) so.mount_options.push_back("subtype=gguf-mount");
        so.debug = args.count("debug") > 0;
        so.foreground = args.count("foreground") > 0 || so.debug;
        so.single_thread = args.count("single-thread") > 0;
        so.readahead_kb = readahead_kb;
        so.watch.revalidate = revalidate;
        so.before_daemonize = [level, log_targets]() mutable {
            log_targets.to_syslog = true;
            setup_logging(level, log_targets);
        };
        so.after_daemonize = [] { gguf::release_threads_after_fork(); };
#ifdef GGUF_MOUNT_WITH_REMOTE
        if (auto context = resolved.context) {
            so.after_daemonize = [context] {
                gguf::release_threads_after_fork();
                context->allow_threads();
            };
        }
#endif
        return fs::run_session(*live, so);
    } catch (const std::exception& e) {
        spdlog::error("{}: {}", gguf::quote_name(mountpoint), e.what());
        return 1;
    }
#endif
}

}  // namespace gguf_mount::cli
