// `gguf-mount split [options] GGUF_IN OUT_PREFIX`: llama.cpp's gguf-split, byte for byte,
// written safely. Each shard is gguf::plan_split's layout over the input file (the same
// plan_gguf_file planner the mount uses), written with gguf::write_virtual_file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <spdlog/spdlog.h>

#include "gguf/format/file_plan.hpp"
#include "cli/commands.hpp"
#include "cli/completion.hpp"
#include "cli/offline.hpp"
#include "cli/progress.hpp"
#include "cli/split_options.hpp"
#include "gguf/error.hpp"
#include "gguf/bytes/output.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/model/split_plan.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "common/text.hpp"

namespace gguf_mount::cli {

namespace {

const char* const kSplitHelpTail =
    "\n"
    "Splits GGUF_IN into OUT_PREFIX-00001-of-NNNNN.gguf ... exactly like llama.cpp's gguf-split\n"
    "(same cutting rules, same bytes). Default: --split-max-tensors 128. The two split modes\n"
    "are mutually exclusive.\n"
    "\n"
    "  --split-max-size takes a whole number with the unit M (10^6 bytes) or G (10^9 bytes).\n"
    "  Fractions such as 1.5G are REJECTED (the reference silently reads 1.5G as 1G): write\n"
    "  1500M instead. It limits the padded tensor bytes per shard (metadata not counted); a\n"
    "  tensor larger than the limit gets a shard of its own, except as the very first tensor.\n"
    "\n"
    "Differences from the reference (all on the safe side):\n"
    "  - existing shard files are never overwritten: if any output name exists, nothing is\n"
    "    written (the reference overwrites silently);\n"
    "  - all shards are written to hidden temporary files in the output directory, fsynced,\n"
    "    and only then renamed to their final names, shard 1 last; on error or Ctrl-C nothing is\n"
    "    left behind; after a kill -9 or a power loss hidden .NAME.tmp-XXXXXX files can remain\n"
    "    (the next split to the same names removes them), or, if killed while renaming, the\n"
    "    last shards without shard 1;\n"
    "  - general.alignment other than 32 is honoured (the reference writes shards a strict\n"
    "    reader rejects); for alignment 32 the output is identical;\n"
    "  - an input that is itself one shard of a larger set is refused.\n"
    "The plan (n_split and one line per shard) is printed on stdout, as the reference does;\n"
    "--dry-run prints only the plan and writes nothing. A progress bar is shown when stderr is a\n"
    "terminal. Exit status: 0 ok, 1 failed, 2 usage error.\n"
    "Environment (diagnostics): GGUF_MOUNT_COPY=buffered,dense copies with read/write instead\n"
    "of copy_file_range and/or writes zeros for holes.\n";

struct SplitArgs {
    gguf::SplitOptions options;
    std::string input;
    std::string prefix;
    bool dry_run = false;
    bool quiet = false;
};

int split(const SplitArgs& a) {
    gguf::UniqueFd in = gguf::open_read_only(a.input);
    struct stat in_st {};
    if (::fstat(in.get(), &in_st) != 0) {
        int e = errno;
        throw gguf::Error(gguf::Code::Io, a.input + ": cannot stat: " + std::strerror(e), e);
    }
    const gguf::Header header = gguf::read_header(in.get(), a.input);
    std::vector<gguf::ShardPlan> plans = gguf::plan_split(header, a.options);
    const auto count = static_cast<uint32_t>(plans.size());

    if (a.dry_run) {
        std::fputs(gguf::split_summary(plans).c_str(), stdout);
        std::fflush(stdout);
        return 0;
    }
    std::vector<std::string> finals;
    finals.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
        finals.push_back(gguf::shard_path(a.prefix, i + 1, count));
        gguf::ensure_absent(finals.back());
    }
    // Temporary files that killed earlier runs left for these names (see gguf/bytes/output.hpp),
    // removed before the probe below creates files of the same pattern.
    for (const std::string& name : finals) remove_stale_outputs(name);
    // A missing output folder (and a file system where nothing can be published) is refused
    // before the plan is printed: a plan followed by "does not exist" reads as if work began.
    const gguf::PublishMethod method = publish_method_for(finals.front());
    if (!a.quiet) {
        std::fputs(gguf::split_summary(plans).c_str(), stdout);
        std::fflush(stdout);
    }

    uint64_t total = 0;
    for (const auto& p : plans) total += p.layout.size();
    gguf::WriteOptions wopt = write_options_from_env();
    ProgressBar bar("splitting", total, progress_wanted(a.quiet));
    uint64_t done = 0;
    wopt.progress = [&](uint64_t n) {
        bar.add(n);
        done += n;
        if (done >= total / 2 && done - n < total / 2) checkpoint("mid-copy");
    };

    // Write every shard under a temporary name first; publish only when all are complete.
    std::vector<gguf::OutputFile> outs;
    outs.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
        int fd = ::fcntl(in.get(), F_DUPFD_CLOEXEC, 0);
        if (fd < 0) {
            int e = errno;
            throw gguf::Error(gguf::Code::Io, a.input + ": cannot duplicate descriptor: " + std::strerror(e), e);
        }
        std::vector<std::shared_ptr<const gguf::ByteSource>> sources{
            std::make_shared<const gguf::LocalFileSource>(gguf::UniqueFd(fd), a.input, in_st)};
        gguf::VirtualFile vf(std::move(plans[i].layout), std::move(sources));
        outs.push_back(gguf::OutputFile::create(finals[i], method));
        checkpoint("temp-created");
        gguf::write_virtual_file(vf, outs.back(), wopt);
        bar.set_label("syncing");
        outs.back().commit();
        bar.set_label("splitting");
    }
    bar.set_label("split");
    bar.finish();
    struct stat now {};
    if (::fstat(in.get(), &now) != 0 || !gguf::same_file_state(now, in_st)) {
        throw gguf::Error(gguf::Code::Io, a.input + ": changed while it was being split; nothing was written");
    }
    checkpoint("before-publish");
    if (cancelled()) throw gguf::Error(gguf::Code::Io, "interrupted before publishing", EINTR);
    // Publish the last shard first and shard 1 last: readers of a set (merge, the mount, llama.cpp)
    // start from shard 1, so a set interrupted here by kill -9 is never taken for a complete one.
    size_t published = 0;
    try {
        for (size_t k = outs.size(); k-- > 0;) {
            outs[k].publish(false);
            ++published;
            if (published == 1 && outs.size() > 1) checkpoint("mid-publish");
        }
        gguf::sync_directory(gguf::dir_name(a.prefix));
    } catch (...) {
        // Take back the shards already published: they are ours (we refused existing names),
        // and an incomplete set must not look like a finished split.
        for (size_t i = 0; i < published; ++i) ::unlink(finals[outs.size() - 1 - i].c_str());
        throw;
    }
    if (!a.quiet) {
        spdlog::info("wrote {} shard(s) with {} tensors, {}: {} ... {}", count, header.tensors.size(),
                     size_for_humans(total), gguf::quote_name(finals.front()),
                     gguf::quote_name(gguf::base_name(finals.back())));
    }
    return 0;
}

}  // namespace

int run_split(int argc, char** argv) {
    cxxopts::Options options("gguf-mount split", "Split a GGUF model into shards (like llama.cpp's gguf-split).");
    options.custom_help("[options]");
    options.positional_help("GGUF_IN OUT_PREFIX");
    options.add_options()
        ("split-max-tensors", "max tensors in each split (default: 128)", cxxopts::value<std::string>(), "N")
        ("split-max-size", "max size per split: whole number + M (10^6 bytes) or G (10^9 bytes); "
                           "fractions are rejected", cxxopts::value<std::string>(), "N(M|G)")
        ("no-tensor-first-split", "do not add tensors to the first split (metadata only)")
        ("dry-run", "only print the split plan; write nothing")
        ("q,quiet", "no progress bar, no plan and no info lines (except with --dry-run)")
        ("h,help", "show this help")
        // Separate string positionals: a vector option would split file names at commas.
        ("pos1", "GGUF_IN", cxxopts::value<std::string>())
        ("pos2", "OUT_PREFIX", cxxopts::value<std::string>())
        ("extra", "unexpected arguments", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"pos1", "pos2", "extra"});

    SplitArgs a;
    std::vector<std::string> args;
    if (completion_words_requested()) return print_completion_words(options, {"pos1", "pos2", "extra"});
    try {
        auto r = options.parse(argc, argv);
        if (r.count("help")) {
            std::printf("%s%s", options.help().c_str(), kSplitHelpTail);
            return 0;
        }
        if (r.count("pos1")) args.push_back(r["pos1"].as<std::string>());
        if (r.count("pos2")) args.push_back(r["pos2"].as<std::string>());
        if (r.count("extra")) {
            return usage_error("split", "expected GGUF_IN and OUT_PREFIX, got more arguments (first extra: '" +
                                         r["extra"].as<std::vector<std::string>>().front() + "')");
        }
        try {
            a.options = *read_split_options(r, false);
        } catch (const gguf::Error& e) {
            return usage_error("split", e.what());
        }
        a.dry_run = r.count("dry-run") > 0;
        a.quiet = r.count("quiet") > 0;
    } catch (const cxxopts::exceptions::exception& e) {
        return usage_error("split", e.what());
    }
    if (args.size() != 2) {
        return usage_error("split", "expected GGUF_IN and OUT_PREFIX, got " + std::to_string(args.size()) +
                                        " argument(s)");
    }
    a.input = args[0];
    a.prefix = args[1];
    if (a.prefix.empty() || a.prefix.back() == '/') {
        return usage_error("split", "OUT_PREFIX '" + a.prefix + "' must end in a file name prefix, e.g. out/model");
    }

    return run_offline(a.quiet, "interrupted; removed the unfinished shards", [&] { return split(a); });
}

}  // namespace gguf_mount::cli
