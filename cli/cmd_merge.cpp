// `gguf-mount merge [options] FIRST_SHARD GGUF_OUT`: llama.cpp's `gguf-split --merge`, byte for
// byte, written safely. The merged file is exactly the virtual file the mount serves
// (gguf::VirtualFile::merged), written to disk with gguf::write_virtual_file.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "cli/logging.hpp"
#include "cli/offline.hpp"
#include "cli/progress.hpp"
#include "gguf/error.hpp"
#include "gguf/output.hpp"
#include "gguf/reader.hpp"
#include "gguf/split_set.hpp"
#include "gguf/virtual_file.hpp"

namespace gguf_mount::cli {

namespace {

const char* const kMergeHelpTail =
    "\n"
    "Merges the split set whose first shard is FIRST_SHARD (PREFIX-00001-of-NNNNN.gguf) into\n"
    "GGUF_OUT, byte-identical to llama.cpp's `gguf-split --merge`. FIRST_SHARD may also be one\n"
    "file made by joining the shards with cat (cat x-0000{1,2,3}-of-00003.gguf > x.gguf); then\n"
    "--delete-splits is refused.\n"
    "\n"
    "Safer than the reference:\n"
    "  - every shard is validated first (names, split.no/split.count/split.tensors.count,\n"
    "    truncation, duplicate tensors); errors name the offending file;\n"
    "  - GGUF_OUT is never overwritten: an existing file is refused before anything is read;\n"
    "  - the output is written to a hidden temporary file in the same directory, fsynced and\n"
    "    renamed into place; on error or Ctrl-C nothing is left behind; after a kill -9 or a\n"
    "    power loss only a hidden .GGUF_OUT.tmp-XXXXXX file can remain, and the next merge to\n"
    "    the same GGUF_OUT removes it;\n"
    "  - --delete-splits removes the shards only after the merged file is complete, fsynced,\n"
    "    renamed and re-read successfully (the reference deletes each shard as it goes); if any\n"
    "    shard cannot be deleted (directory permissions, sticky bit, chattr +i), nothing is\n"
    "    written or deleted; shards that are symbolic links lose the link, not the target.\n"
    "Holes in sparse shards stay holes in the output. A progress bar is shown when stderr is a\n"
    "terminal. Exit status: 0 ok, 1 failed, 2 usage error.\n"
    "Environment (diagnostics): GGUF_MOUNT_COPY=buffered,dense copies with read/write instead\n"
    "of copy_file_range and/or writes zeros for holes.\n";

/// Re-reads the published output independently of the split set: strict header parse, size,
/// tensor count and the header bytes themselves. Throws gguf::Error on any mismatch.
void verify_output(const std::string& path, const gguf::VirtualFile& vf, uint64_t tensor_count) {
    gguf::Header h = gguf::read_header(path);
    if (h.file_size != vf.size()) {
        throw gguf::Error(gguf::Code::Io, path + ": verification failed: " + std::to_string(h.file_size) +
                                              " bytes on disk, expected " + std::to_string(vf.size()));
    }
    if (h.tensors.size() != tensor_count) {
        throw gguf::Error(gguf::Code::Io, path + ": verification failed: " + std::to_string(h.tensors.size()) +
                                              " tensors, expected " + std::to_string(tensor_count));
    }
    // Compared in 1 MiB pieces: a copy of a 20 MB header would be one more header in memory.
    const std::string& want = vf.layout().header();
    std::string got;
    gguf::UniqueFd fd = gguf::open_read_only(path);
    for (uint64_t at = 0; at < want.size();) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(want.size() - at, uint64_t{1} << 20));
        got.resize(n);
        if (gguf::pread_full(fd.get(), got.data(), n, at) != static_cast<ssize_t>(n) ||
            std::string_view(want).substr(at, n) != got) {
            throw gguf::Error(gguf::Code::Io, path + ": verification failed: the header on disk differs from the plan");
        }
        at += n;
    }
}

/// --delete-splits must delete every shard or none: throws gguf::Error(Io) naming the first
/// shard file that cannot be deleted and why (gguf::deletion_obstacle). `then` says what the
/// failure leaves: "nothing was written or deleted" before the merge, "no shard was deleted"
/// after it.
void ensure_shards_deletable(const std::vector<gguf::FilePart>& parts, const std::string& then) {
    for (const gguf::FilePart& p : parts) {
        const std::string why = gguf::deletion_obstacle(p.path);
        if (!why.empty()) {
            throw gguf::Error(gguf::Code::Io, "--delete-splits: cannot delete shard " + p.path + ": " + why + "; " + then);
        }
    }
}

/// Deletes the shards after a verified merge. Refuses if any shard changed since validation or
/// can no longer be deleted. Shards reached through symbolic links: the links are removed and the
/// files they point to are kept, and a warning says so.
void delete_shards(const std::vector<gguf::FilePart>& parts, bool quiet) {
    for (const gguf::FilePart& p : parts) {
        struct stat st {};
        if (::stat(p.path.c_str(), &st) != 0 || !gguf::same_file_state(st, p.st)) {
            throw gguf::Error(gguf::Code::BadSplit, p.path + ": changed during the merge; no shard was deleted");
        }
    }
    ensure_shards_deletable(parts, "the merged file is complete; no shard was deleted");
    size_t deleted = 0;
    size_t links = 0;
    for (const gguf::FilePart& p : parts) {
        checkpoint(deleted == 0 ? "delete-first" : "delete-next");
        struct stat lst {};
        const bool is_link = ::lstat(p.path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode);
        if (::unlink(p.path.c_str()) != 0) {
            int e = errno;
            throw gguf::Error(gguf::Code::Io, "the merged file is complete and verified, but deleting shard " + p.path +
                                                  " failed: " + std::strerror(e) + " (" + std::to_string(deleted) +
                                                  " of " + std::to_string(parts.size()) + " deleted)",
                              e);
        }
        ++deleted;
        if (is_link) ++links;
    }
    gguf::sync_directory(gguf::dir_name(parts.front().path));
    if (links > 0) {
        spdlog::warn("removed {} symbolic link(s); the files they point to were kept", links);
    }
    if (!quiet && deleted > links) spdlog::info("deleted {} shard file(s)", deleted - links);
}

int merge(const std::string& first, const std::string& output, bool delete_splits, bool quiet) {
    // Like the reference: refuse an existing output before reading anything.
    gguf::ensure_absent(output);
    if (gguf::parse_shard_name(output)) {
        spdlog::warn("{}: the output name looks like a shard name; llama.cpp loaders may look for sibling shards",
                     output);
    }
    // The set's parsed headers are dropped once the merged header is planned: with a 20 MB
    // vocabulary, keeping them would hold a second copy through the verification re-read.
    std::optional<gguf::SplitSet> set(gguf::SplitSet::open_first_or_joined(first));
    const bool joined = !gguf::parse_shard_name(first);
    if (joined && delete_splits) {
        throw gguf::Error(gguf::Code::BadArgument, first + ": holds a set joined with cat, not shard files; "
                                                          "--delete-splits is refused: delete it yourself after "
                                                          "checking " + output);
    }
    const std::vector<gguf::FilePart> parts = gguf::set_parts(*set);
    const size_t shard_count = set->shards().size();
    const uint64_t tensor_count = set->tensor_count();
    if (delete_splits) ensure_shards_deletable(parts, "nothing was written or deleted");
    const gguf::VirtualFile vf = gguf::VirtualFile::merged(*set);
    set.reset();
    if (cancelled()) return exit_for_signal();

    gguf::WriteOptions wopt = write_options_from_env();
    ProgressBar bar("merging", vf.size(), progress_wanted(quiet));
    uint64_t done = 0;
    wopt.progress = [&](uint64_t n) {
        bar.add(n);
        done += n;
        if (done >= vf.size() / 2 && done - n < vf.size() / 2) checkpoint("mid-copy");
    };

    // Temporary files of earlier runs of this merge that were killed (kill -9, power loss):
    // only ".NAME.tmp-XXXXXX" files of this output name that no live process has locked.
    for (const std::string& stale : gguf::remove_stale_temporaries(output)) {
        spdlog::info("removed {}, left behind by an interrupted earlier run", stale);
    }
    gguf::OutputFile out = gguf::OutputFile::create(output, publish_method_for(output));
    checkpoint("temp-created");
    gguf::write_virtual_file(vf, out, wopt);
    bar.set_label("syncing");
    out.commit();
    bar.set_label("merged");
    bar.finish();
    checkpoint("before-publish");
    if (cancelled()) throw gguf::Error(gguf::Code::Io, output + ": interrupted before publishing", EINTR);
    vf.ensure_sources_unchanged("merged");
    out.publish();
    checkpoint("published");
    if (!quiet) {
        spdlog::info("merged {} shard(s), {} tensors, {} bytes into {}", shard_count, tensor_count,
                     vf.size(), output);
    }
    if (delete_splits) {
        if (cancelled()) {
            print_error("interrupted after " + output + " was complete; no shard was deleted");
            return exit_for_signal();
        }
        verify_output(output, vf, tensor_count);
        checkpoint("verified");
        delete_shards(parts, quiet);
    }
    return 0;
}

}  // namespace

int run_merge(int argc, char** argv) {
    cxxopts::Options options("gguf-mount merge", "Merge a split GGUF model into one file (like gguf-split --merge).");
    options.custom_help("[options]");
    options.positional_help("FIRST_SHARD GGUF_OUT");
    options.add_options()
        ("delete-splits", "delete the shards after the merged file is complete and verified")
        ("q,quiet", "no progress bar and no info lines")
        ("h,help", "show this help")
        // Separate string positionals: a vector option would split file names at commas.
        ("pos1", "FIRST_SHARD", cxxopts::value<std::string>())
        ("pos2", "GGUF_OUT", cxxopts::value<std::string>())
        ("extra", "unexpected arguments", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"pos1", "pos2", "extra"});

    std::vector<std::string> args;
    bool delete_splits = false;
    bool quiet = false;
    try {
        auto r = options.parse(argc, argv);
        if (r.count("help")) {
            std::printf("%s%s", options.help().c_str(), kMergeHelpTail);
            return 0;
        }
        if (r.count("pos1")) args.push_back(r["pos1"].as<std::string>());
        if (r.count("pos2")) args.push_back(r["pos2"].as<std::string>());
        if (r.count("extra")) {
            return usage_error("merge", "expected FIRST_SHARD and GGUF_OUT, got more arguments (first extra: '" +
                                         r["extra"].as<std::vector<std::string>>().front() + "')");
        }
        delete_splits = r.count("delete-splits") > 0;
        quiet = r.count("quiet") > 0;
    } catch (const cxxopts::exceptions::exception& e) {
        return usage_error("merge", e.what());
    }
    if (args.size() != 2) {
        return usage_error("merge", "expected FIRST_SHARD and GGUF_OUT, got " + std::to_string(args.size()) +
                                        " argument(s)");
    }

    return run_offline(quiet, "interrupted; removed the unfinished output", [&] { return merge(args[0], args[1], delete_splits, quiet); });
}

}  // namespace gguf_mount::cli
