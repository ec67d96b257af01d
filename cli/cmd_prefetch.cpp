// `gguf-mount prefetch SOURCE [--cache-dir DIR] [-q]`: fills the block cache with every block of
// every file a mount of the remote SOURCE serves, so that `gguf-mount SOURCE MNT --offline`
// serves every byte without the server.
#ifdef GGUF_MOUNT_WITH_REMOTE
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <cxxopts.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "cli/completion.hpp"
#include "cli/offline.hpp"
#include "cli/remote_options.hpp"
#include "cli/progress.hpp"
#include "cli/source.hpp"
#include "gguf/model/catalog.hpp"
#include "gguf/error.hpp"
#include "remote/source.hpp"
#include "remote/url_parts.hpp"
#include "common/text.hpp"

namespace gguf_mount::cli {

namespace {

const char* const kPrefetchHelpTail =
    "\n"
    "SOURCE is a remote first-shard URL (http(s)://HOST/PATH/NAME-00001-of-0000N.gguf), a\n"
    "directory URL ending in '/', hf://ORG/REPO[@REVISION][/PATH] (HF_TOKEN, HF_ENDPOINT), or\n"
    "s3://BUCKET/PREFIX/ or s3://BUCKET/KEY-00001-of-0000N.gguf (AWS credentials as the AWS CLI),\n"
    "or oci://REGISTRY/REPO[:TAG|@sha256:DIGEST] or ollama://[REGISTRY/][NS/]MODEL[:TAG] (every\n"
    "blob checked against its digest; docker/podman credentials).\n"
    "Every block of every file a mount of SOURCE serves (split sets, companions) is fetched,\n"
    "several at a time, into the block cache (--cache-dir, as for mounts; blocks already cached\n"
    "are not fetched again). A SOURCE larger than the cache's bound (--cache-max-size, else 25%\n"
    "of the cache's file system, at most 100G) is refused before its data is fetched. Exit\n"
    "status 0 only when every block is cached and SOURCE has no problem (a file that cannot be\n"
    "read, an incomplete set: what 'check' lists); then\n"
    "'gguf-mount SOURCE MOUNTPOINT --offline --cache-dir DIR' serves every byte with the server\n"
    "down. Files whose sha256 the Hub lists (lfs.oid) are checked whole: on a mismatch their\n"
    "cached blocks are dropped and the exit status is 1 (plain http(s) servers give no digest:\n"
    "nothing is checked beyond sizes and validators). A progress bar is shown when stderr is a\n"
    "terminal.\n"
    "Exit status: 0 all cached, 1 failed, 2 usage error.\n";

/// Fetches blocks in flight at once (each a 4 MiB ranged GET stored durably).
constexpr unsigned kPrefetchThreads = 4;

/// Every RemoteSource `catalog` reads, each once.
std::vector<std::shared_ptr<const remote::RemoteSource>> sources_of(const gguf::Catalog& catalog) {
    std::vector<std::shared_ptr<const remote::RemoteSource>> out;
    std::set<const gguf::ByteSource*> seen;
    for (const gguf::CatalogEntry& e : catalog.entries) {
        for (const gguf::FilePart& p : e.parts()) {
            auto r = std::dynamic_pointer_cast<const remote::RemoteSource>(p.source);
            if (r && seen.insert(r.get()).second) out.push_back(r);
        }
    }
    return out;
}

/// Every RemoteSource a mount of `source` would read, each once (the context that reads them:
/// source->context): a folder (http(s) directory URL, hf:// repo or folder) through its listing,
/// a first shard (http(s), or an hf:// file at its pinned commit) through its set (its shards'
/// sha256() the one their Hub folder lists, source->sha256s). A folder's catalog problems go to
/// `*problems`. Throws gguf::Error naming the source (a local path is refused: prefetch fills
/// the cache of remote sources only).
std::vector<std::shared_ptr<const remote::RemoteSource>> served_sources(ResolvedSource* source,
                                                                        std::vector<gguf::Problem>* problems) {
    if (source->oci_local()) {
        throw gguf::Error(gguf::Code::BadArgument, source->shown + ": a local OCI layout or Ollama store, read in "
                                                                   "place (prefetch fills the cache of remote "
                                                                   "sources only); 'gguf-mount check " +
                                                                   source->shown + "' checks every blob's digest");
    }
    if (!source->remote()) {
        throw gguf::Error(gguf::Code::BadArgument, source->argument + ": not an http(s)://, hf://, s3://, oci:// or ollama:// source "
                                                                      "(prefetch fills the cache of remote sources "
                                                                      "only)");
    }
    // A folder's files, and its problems (files not served are not cached either).
    gguf::Catalog catalog = source->catalog(gguf::CatalogOptions{});
    if (source->directory()) *problems = std::move(catalog.problems);
    return sources_of(catalog);
}

/// Throws gguf::Error(Io) naming the first of `sources` whose bytes failed their sha256 check
/// (and how many more did), after dropping their cached blocks again (stores that were
/// queued when the mismatch was found are committed by now). With `finish`, every checked
/// source is finished first (its bytes not read by the jobs, the blocks already cached, are
/// read from the cache and hashed).
void throw_sha256_mismatches(const std::vector<std::shared_ptr<const remote::RemoteSource>>& sources, bool finish) {
    std::vector<std::string> bad;
    for (const auto& s : sources) {
        const std::string e = finish ? s->finish_sha256() : s->sha256_error();
        if (e.empty()) continue;
        s->drop_cached();
        bad.push_back(e);
    }
    if (bad.empty()) return;
    throw gguf::Error(gguf::Code::Io,
                      bad.front() + (bad.size() > 1 ? " (and " + std::to_string(bad.size() - 1) + " more file(s))" : ""),
                      EIO);
}

/// Throws gguf::Error(Io) with one line when every block of `sources` (with its checksum
/// record) cannot fit under the cache bound `max_bytes` (0: none) at once: fetching them would
/// evict what was just fetched. `bound_given`: --cache-max-size was given (else the default
/// bound is named).
void check_fits(const std::string& shown, const std::vector<std::shared_ptr<const remote::RemoteSource>>& sources,
                uint64_t max_bytes, bool bound_given, const std::string& dir) {
    if (max_bytes == 0) return;
    uint64_t need = 0;
    for (const auto& s : sources) need += s->size() + s->block_count() * remote::cache_files::kTrailerSize;
    if (need <= max_bytes) return;
    throw gguf::Error(gguf::Code::Io,
                      shown + ": needs " + size_for_humans(need) + " in the cache " +
                          dir + ", more than its bound of " + size_for_humans(max_bytes) + " (" +
                          (bound_given ? std::string("--cache-max-size")
                                       : std::string("the default: 25% of its file system, at most 100G")) +
                          "); its data was not fetched: give a larger --cache-max-size (0: no bound) or another --cache-dir",
                      EFBIG);
}

int prefetch(const std::string& argument, SourceOptions options, bool quiet, bool bound_given) {
    ResolvedSource resolved = resolve_source(argument, options);
    resolved.options.remote.cache_source = resolved.shown;  // a trim leaves what this fetches alone
    std::vector<gguf::Problem> problems;  // files not served: not cached either
    const auto sources = served_sources(&resolved, &problems);
    const std::shared_ptr<remote::RemoteContext>& context = resolved.context;
    check_fits(resolved.shown, sources, context->options().cache_max_bytes, bound_given, context->cache().dir());
    for (const auto& s : sources) context->cache().keep_whole(s->cache_key());
    // Files whose sha256 is known (the Hub's lfs.oid) are checked whole as their bytes pass.
    for (const auto& s : sources) {
        if (!s->sha256().empty()) std::const_pointer_cast<remote::RemoteSource>(s)->verify_sha256(s->sha256());
    }
    // A job: up to run_blocks (RemoteOptions) missing blocks in a row, read at once (one
    // ranged GET: each request costs a registry or S3 server more than its bytes,
    // bench/README.md "Read-ahead runs").
    struct Job {
        const remote::RemoteSource* source;
        uint64_t block;
        uint64_t count;
    };
    const uint64_t run_blocks = std::max(1u, context->options().run_blocks);
    std::vector<Job> jobs;
    uint64_t total = 0;
    uint64_t cached = 0;  // bytes of the blocks the cache holds now (not read again)
    for (const auto& s : sources) {
        total += s->size();
        for (uint64_t b = 0; b < s->block_count(); ++b) {
            if (s->cached(b)) {
                cached += s->block_length(b);
            } else if (!jobs.empty() && jobs.back().source == s.get() && jobs.back().block + jobs.back().count == b &&
                       jobs.back().count < run_blocks) {
                ++jobs.back().count;
            } else {
                jobs.push_back({s.get(), b, 1});
            }
        }
    }
    ProgressBar bar("prefetching", total - cached, progress_wanted(quiet));
    std::atomic<size_t> next{0};
    std::atomic<uint64_t> done{0};
    std::atomic<unsigned> finished{0};
    std::mutex error_mutex;
    std::string first_error;
    auto work = [&] {
        std::unique_ptr<char[]> buf(new char[run_blocks * remote::BlockCache::kBlockSize]);
        for (size_t i; !cancelled() && (i = next.fetch_add(1)) < jobs.size();) {
            const Job& j = jobs[i];
            const uint64_t at = j.block * remote::BlockCache::kBlockSize;
            const size_t len = static_cast<size_t>(
                std::min(j.count * remote::BlockCache::kBlockSize, j.source->size() - at));
            const ssize_t n = j.source->pread(buf.get(), len, at);
            if (n != static_cast<ssize_t>(len)) {
                std::lock_guard<std::mutex> lock(error_mutex);
                if (first_error.empty()) {
                    first_error = j.source->display_name() + ": block" + (j.count > 1 ? "s " : " ") +
                                  std::to_string(j.block) +
                                  (j.count > 1 ? "-" + std::to_string(j.block + j.count - 1) : std::string()) +
                                  " (bytes " +
                                  std::to_string(at) + "-" + std::to_string(at + len - 1) + ") could not be fetched: " +
                                  (n < 0 ? std::strerror(static_cast<int>(-n)) : "short read");
                }
            }
            done += len;
        }
        ++finished;
    };
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < kPrefetchThreads; ++t) threads.emplace_back(work);
    uint64_t shown = 0;
    while (finished.load() < kPrefetchThreads) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const uint64_t d = done.load();
        bar.add(d - shown);
        shown = d;
    }
    for (auto& t : threads) t.join();
    bar.add(done.load() - shown);
    bar.finish();
    if (cancelled()) throw gguf::Error(gguf::Code::Io, "interrupted", EINTR);
    context->flush();  // every fetched block staged and committed (durable) before judging
    throw_sha256_mismatches(sources, false);  // wrong bytes fail their last reads: said first
    if (!first_error.empty()) throw gguf::Error(gguf::Code::Io, first_error, EIO);
    throw_sha256_mismatches(sources, true);
    // The cache is the judge: a block stored and evicted at once (--cache-max-size too small)
    // or not stored (disk full) is not cached.
    for (const auto& s : sources) {
        const uint64_t b = s->first_uncached_block();
        if (b < s->block_count()) {
            throw gguf::Error(gguf::Code::Io, s->display_name() + ": block " + std::to_string(b) + " is not in the cache " +
                                                  context->cache().dir() + " after fetching (disk full, or "
                                                  "--cache-max-size smaller than the model?)",
                              EIO);
        }
    }
    if (!problems.empty()) {
        const gguf::Problem& p = problems.front();
        // The reason often names the source (or the file) already: said once.
        std::string where;
        if (p.reason.find(resolved.shown) == std::string::npos) where = resolved.shown + ": ";
        if (!p.path.empty() && p.reason.find(p.path) == std::string::npos) where += p.path + ": ";
        throw gguf::Error(gguf::Code::Io,
                          where + p.reason +
                              (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) +
                                                         " more problem(s): 'gguf-mount check SOURCE' lists them)"
                                                   : "") +
                              (sources.empty() ? std::string("; nothing was cached")
                                               : "; the other " + std::to_string(sources.size()) + " file(s) are cached"),
                          EIO);
    }
    if (!quiet) {
        uint64_t fetched = 0;
        for (const auto& s : sources) fetched += s->bytes_fetched();
        spdlog::info("{}: {} remote file(s), {} (as stored on the server) cached in {}; {} fetched now",
                     gguf::quote_name(resolved.shown), sources.size(), size_for_humans(total),
                     gguf::quote_name(context->cache().dir()), size_for_humans(fetched));
    }
    return 0;
}

}  // namespace

int run_prefetch(int argc, char** argv) {
    cxxopts::Options options("gguf-mount prefetch", "Fill the block cache with every byte of a remote source.");
    options.custom_help("[options]");
    options.positional_help("SOURCE");
    options.add_options()
        ("q,quiet", "no progress bar and no info lines")
        ("h,help", "show this help")
        ("pos1", "SOURCE", cxxopts::value<std::string>())
        ("extra", "unexpected arguments", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"pos1", "extra"});
    add_remote_options(options, "", kOfflineCommandOptions | kCacheMaxSizeOption);
    std::string source;
    SourceOptions sopt;
    sopt.remote.readahead_blocks = 0;  // prefetch drives its own fetches
    sopt.hub_digests = true;           // an hf:// first shard: its folder's lfs.oid
    bool quiet = false;
    bool bound_given = false;
    if (completion_words_requested()) return print_completion_words(options, {"pos1", "extra"});
    try {
        auto r = options.parse(argc, argv);
        if (r.count("help")) {
            std::printf("%s%s", options.help().c_str(), kPrefetchHelpTail);
            return 0;
        }
        if (r.count("extra")) {
            return usage_error("prefetch", "expected one SOURCE, got more arguments (first extra: '" +
                                               r["extra"].as<std::vector<std::string>>().front() + "')");
        }
        const std::vector<std::string> given = source_and_positionals(r, {"pos1"});
        if (given.empty()) return usage_error("prefetch", "expected SOURCE (or --source-file FILE)");
        if (given.size() > 1) return usage_error("prefetch", "expected one SOURCE: --source-file gives it already");
        source = given.front();
        if (const std::string m = misplaced_source_option(r, source); !m.empty()) return usage_error("prefetch", m);
        read_remote_options(r, &sopt.remote);
        quiet = r.count("quiet") > 0;
        bound_given = r.count("cache-max-size") > 0;
    } catch (const cxxopts::exceptions::exception& e) {
        return usage_error("prefetch", e.what());
    } catch (const gguf::Error& e) {
        print_error(e.what());
        return 1;
    }
    return run_offline(quiet, "interrupted; the blocks fetched so far stay cached",
                       [&] { return prefetch(source, sopt, quiet, bound_given); });
}

}  // namespace gguf_mount::cli
#endif  // GGUF_MOUNT_WITH_REMOTE
