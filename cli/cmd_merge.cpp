// `gguf-mount merge [options] FIRST_SHARD GGUF_OUT`: llama.cpp's `gguf-split --merge`, byte for
// byte, written safely. The merged file is exactly the virtual file the mount serves
// (gguf::VirtualFile::merged), written to disk with gguf::write_virtual_file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <spdlog/spdlog.h>

#include "gguf/model/merge_plan.hpp"
#include "cli/commands.hpp"
#include "cli/completion.hpp"
#include "cli/kv_options.hpp"
#include "gguf/model/catalog_kv.hpp"
#include "cli/offline.hpp"
#include "cli/remote_options.hpp"
#include "cli/progress.hpp"
#include "cli/source.hpp"
#include "gguf/error.hpp"
#include "gguf/bytes/output.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/model/split_set.hpp"
#include "common/text.hpp"
#include "gguf/bytes/virtual_file.hpp"
#ifdef GGUF_MOUNT_WITH_REMOTE
#include "remote/catalog.hpp"
#include "remote/client.hpp"
#include "remote/digest.hpp"
#include "remote/url_parts.hpp"
#endif

namespace gguf_mount::cli {

namespace {

const char* const kMergeHelpTail =
    "\n"
    "Merges the split set whose first shard is FIRST_SHARD (PREFIX-00001-of-NNNNN.gguf) into\n"
    "GGUF_OUT, byte-identical to llama.cpp's `gguf-split --merge`. FIRST_SHARD may also be one\n"
    "file made by joining the shards with cat (cat x-0000{1,2,3}-of-00003.gguf > x.gguf); then\n"
    "--delete-splits is refused. With --override-kv, --remove-kv or --chat-template-file,\n"
    "FIRST_SHARD may also be a single unsplit .gguf file: GGUF_OUT is then that file with the\n"
    "edited metadata (see below).\n"
    "\n"
    "A KV sidecar beside a local FIRST_SHARD (PREFIX.gguf.kv, or FILE.kv for a single file) is\n"
    "applied first, as a mount serves the model, by the same rules (README \"Fixing metadata\");\n"
    "one that a mount would not apply (another user's, writable by others) is not applied here\n"
    "either, with a warning; --no-sidecar leaves it out.\n"
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
    "FIRST_SHARD may be an http(s):// URL of a first shard, s3://BUCKET/KEY of one,\n"
    "oci://REGISTRY/REPO[:TAG|@sha256:DIGEST] or ollama://[REGISTRY/][NS/]MODEL[:TAG] (the\n"
    "manifest's model, every blob checked against its digest), or hf://ORG/REPO[@REVISION]/PATH to one\n"
    "(the revision pinned to its commit; HF_TOKEN, HF_ENDPOINT): each shard is read once, in order,\n"
    "straight into the output (no shard copies on disk; peak disk use = the merged size; blocks\n"
    "already in the block cache, e.g. after `gguf-mount prefetch`, are read from it, and fetched\n"
    "blocks are not added to it). Interrupted (Ctrl-C, kill -9, network failure), the partial\n"
    "output is kept as .GGUF_OUT.tmp-XXXXXX with a .GGUF_OUT.merge-state file; running the same\n"
    "command again continues it, or starts from zero when a shard changed on the server.\n"
    "FIRST_SHARD may also be DIR/PATH.gguf of a local OCI image layout or Ollama store DIR (PATH\n"
    "as a mount of DIR shows the model; DIR alone when it holds one): its blobs are read in place,\n"
    "each checked against its digest.\n"
    "--delete-splits is refused for URLs. An hf:// set's shards are checked against the sha256\n"
    "the Hub lists (lfs.oid) as their bytes pass: on a mismatch nothing is written, exit status\n"
    "1 (a continued merge cannot check them; plain http(s) servers give no digest).\n"
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

#ifdef GGUF_MOUNT_WITH_REMOTE
/// Bytes between resume points of `merge URL` (fdatasync + state file); GGUF_MOUNT_RESUME_STEP
/// (bytes) overrides it for tests.
constexpr uint64_t kResumeStep = uint64_t{32} << 20;

/// The state file of a resumable `merge URL OUT`: "DIR/.BASENAME.merge-state".
std::string state_path(const std::string& output) {
    const std::string dir = gguf::dir_name(output);
    return (dir == "/" ? std::string() : dir) + "/." + gguf::base_name(output) + ".merge-state";
}

/// What a partial output was written from: the merged size and every shard's URL (without
/// credentials or query), size and validator. A partial output is continued only when this is
/// unchanged.
std::string plan_identity(const gguf::VirtualFile& vf, const gguf::KvOverrides& overrides) {
    std::string id = "gguf-mount merge-state v1\nsize " + std::to_string(vf.size()) + "\n";
    // With overrides the header is not determined by the shards alone: an output begun with
    // other overrides (even of the same length) must not be continued.
    if (!overrides.empty()) id += "header " + gguf::sha256_hex(vf.layout().header()) + "\n";
    for (const auto& s : vf.sources()) {
        id += "source " + std::to_string(s->size()) + " " + gguf::escape(s->validator()) + " " +
              gguf::escape(s->display_name()) + "\n";
    }
    return id;
}

/// Writes the state file atomically (temporary + fsync + rename): identity, temporary file
/// name, bytes done (already fdatasync()ed). Throws gguf::Error(Io) naming it.
void save_state(const std::string& path, const std::string& identity, const std::string& temp, uint64_t done) {
    const std::string text = identity + "temp " + gguf::base_name(temp) + "\ndone " + std::to_string(done) + "\n";
    const std::string tmp = path + ".new";
    gguf::UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
        ::fdatasync(fd.get()) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = errno;
        ::unlink(tmp.c_str());
        throw gguf::Error(gguf::Code::Io, path + ": cannot write the resume state: " + std::strerror(e), e);
    }
}

/// The resume point in the state file at `path` for a plan with `identity`: the temporary
/// file and the bytes done; nullopt (and `*why` says why, "" when there is no state file) when
/// it does not apply.
std::optional<std::pair<std::string, uint64_t>> load_state(const std::string& path, const std::string& identity,
                                                           const std::string& output, std::string* why) {
    why->clear();
    std::string text;
    {
        gguf::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
        if (!fd) return std::nullopt;
        char buf[4096];
        for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0 && text.size() < (size_t{64} << 20);) {
            text.append(buf, static_cast<size_t>(n));
        }
    }
    if (text.compare(0, identity.size(), identity) != 0) {
        *why = "the shards on the server or the plan changed since the interrupted run";
        return std::nullopt;
    }
    const std::string rest = text.substr(identity.size());
    char name[256] = {};
    unsigned long long done = 0;
    if (std::sscanf(rest.c_str(), "temp %255s\ndone %llu\n", name, &done) != 2) {
        *why = "its state file is damaged";
        return std::nullopt;
    }
    const std::string dir = gguf::dir_name(output);
    return std::make_pair((dir == "/" ? std::string() : dir) + "/" + name, static_cast<uint64_t>(done));
}

/// The merged file of the set whose first shard is at `url` (remote::open_remote_set), and its
/// tensor count. Throws as open_remote_set and open_merged do.
gguf::VirtualFile remote_set_file(const std::string& url, const std::shared_ptr<remote::RemoteContext>& context,
                                  const gguf::KvOverrides& overrides, uint64_t* tensor_count) {
    gguf::SplitSet set = remote::open_remote_set(url, context);
    *tensor_count = set.tensor_count();
    return gguf::open_merged(set, overrides);
}

/// The model file of a registry manifest (ResolvedSource::oci_model: its merged weight layers or
/// its one GGUF layer, with `overrides` applied as a mount applies them), and its tensor count.
/// Throws gguf::Error naming the source when the catalog does not serve it (its problem).
gguf::VirtualFile oci_model_file(ResolvedSource& source, const gguf::KvOverrides& overrides, uint64_t* tensor_count) {
    gguf::CatalogOptions copt;
    copt.overrides = overrides;
    gguf::Catalog catalog = source.catalog(copt);
    if (source.oci_model.empty()) {
        // A layout or store given as DIR: its one model, else the names to choose from.
        std::vector<std::string> models;
        for (const gguf::CatalogEntry& e : catalog.entries) {
            const bool gguf_name = e.path.size() > 5 && e.path.compare(e.path.size() - 5, 5, ".gguf") == 0;
            if (gguf_name && (e.kind == gguf::EntryKind::MergedSet || e.kind == gguf::EntryKind::Companion))
                models.push_back(e.path);
        }
        if (models.size() != 1) {
            std::string names;
            for (size_t i = 0; i < models.size() && i < 5; ++i) names += (i ? ", " : "") + gguf::escape(models[i]);
            if (models.size() > 5) names += ", ...";
            throw gguf::Error(gguf::Code::BadArgument,
                              source.shown + ": " +
                                  (models.empty() ? std::string("serves no model ('gguf-mount check " + source.shown +
                                                                "' says why)")
                                                  : "holds " + std::to_string(models.size()) + " models (" + names +
                                                        "): give one as " + source.shown + "/NAME.gguf"));
        }
        source.oci_model = models.front();
    }
    for (const gguf::CatalogEntry& e : catalog.entries) {
        if (e.path != source.oci_model) continue;
        gguf::VirtualFile vf = gguf::VirtualFile::open(e.layout, e.parts());
        *tensor_count = e.tensor_count;
        if (e.kind != gguf::EntryKind::MergedSet) {
            gguf::Header h = gguf::read_header(
                [&vf](void* dst, size_t len, uint64_t offset) { return vf.read(offset, len, static_cast<char*>(dst)); },
                vf.size(), source.shown);
            *tensor_count = h.tensors.size();
        }
        return vf;
    }
    for (const gguf::Problem& p : catalog.problems) {
        if (p.path == source.oci_model) throw gguf::Error(gguf::Code::BadSplit, p.reason);
    }
    throw gguf::Error(gguf::Code::BadSplit, source.shown + ": its model " + source.oci_model + " is not served");
}

/// `merge URL OUT` for a remote `source` (pinned first: an hf:// file at its commit): the remote
/// set planned like a mount (remote::open_remote_set), its bytes
/// read through the same RemoteSource (block cache read, never written: it would double the
/// disk use) and written in offset order with resume points (see kMergeHelpTail). Sets
/// `*interrupted` to the message for a signal once a partial output is kept.
int merge_url(ResolvedSource& source, const std::string& output, bool delete_splits, bool quiet,
              const gguf::KvOverrides& overrides, std::string* interrupted) {
    source.pin();
    const std::string& url = source.url;
    const std::map<std::string, std::string>& sha256s = source.sha256s;
    if (delete_splits) {
        throw gguf::Error(gguf::Code::BadArgument,
                          source.shown + (source.oci_local()
                                              ? ": --delete-splits is refused for an OCI layout or Ollama store (its "
                                                "blobs belong to it: remove the model with the tool that pulled it)"
                                              : ": --delete-splits is refused for a URL (nothing on this machine to "
                                                "delete)"));
    }
    const bool oci = source.kind == SourceKind::OciModel || source.oci_local();
    if (source.directory() && !oci) {
        throw gguf::Error(gguf::Code::BadArgument,
                          source.shown + ": a directory URL; merge takes the URL of a set's first shard "
                                                         "(NAME-00001-of-NNNNN.gguf): 'gguf-mount check URL' lists "
                                                         "the sets in it");
    }
    gguf::ensure_absent(output);
    source.options.remote.store_blocks = false;
    source.options.remote.cache_source = source.shown;  // a trim leaves the blocks it reads alone
    source.connect();
    uint64_t tensor_count = 0;
    if (!quiet && !oci) {
        // Planning reads each shard's first block before the first output byte: seconds on a
        // slow link with nothing else shown.
        const auto name = gguf::parse_shard_name(source.shown);
        spdlog::info("{}: reading the header of each of its {} shard(s)", source.shown, name ? name->count : 1);
    }
    const gguf::VirtualFile vf = [&] {
        if (oci) return oci_model_file(source, overrides, &tensor_count);
        try {
            return remote_set_file(url, source.context, overrides, &tensor_count);
        } catch (const gguf::Error& e) {
            if (std::string(e.what()).find(remote::kRangeIgnored) == std::string::npos) throw;
            // merge reads every byte once, but plans from the headers first (README "Remote models").
            throw gguf::Error(e.code(), std::string(e.what()) + "; without Range, download the shards (curl -O, wget) "
                                                                "and merge them locally: gguf-mount merge FIRST_SHARD "
                                                                "GGUF_OUT", e.sys_errno());
        }
    }();
    const size_t shard_count = vf.sources().size();
    if (cancelled()) return exit_for_signal();

    const std::string state = state_path(output);
    const std::string identity = plan_identity(vf, overrides);
    std::string why;  // why an interrupted merge is not continued ("" when there was none)
    const auto point = load_state(state, identity, output, &why);
    // Temporary files of killed earlier runs (not the partial output this merge may continue),
    // removed before the probe creates files of their pattern.
    remove_stale_outputs(output, point ? point->first : std::string());
    const gguf::PublishMethod method = publish_method_for(output);
    std::optional<gguf::OutputFile> out;
    uint64_t resume_from = 0;
    if (point) {
        struct stat st {};
        if (point->second <= vf.size() && ::lstat(point->first.c_str(), &st) == 0 &&
            static_cast<uint64_t>(st.st_size) >= point->second) {
            try {
                out.emplace(gguf::OutputFile::resume(output, point->first, method));
                resume_from = point->second;
            } catch (const gguf::Error& e) {
                why = e.what();
            }
        } else {
            why = "its partial output " + point->first + " is missing or shorter than recorded";
        }
    }
    if (!why.empty()) {
        spdlog::warn("{}: not continuing the interrupted merge ({}); starting from zero", gguf::quote_name(output),
                     why);
    }
    // Shards whose sha256 the Hub lists are checked whole as their bytes pass (a continued merge
    // does not read the bytes written before: it cannot check them).
    std::vector<const remote::DigestChecked*> checked;
    for (const auto& s : vf.sources()) {
        auto r = dynamic_cast<const remote::DigestChecked*>(s.get());
        auto it = r ? sha256s.find(s->display_name()) : sha256s.end();
        // A registry or layout blob carries its own digest (sha256(), from the manifest).
        const std::string expected = it != sha256s.end() ? it->second : r && oci ? r->sha256() : std::string();
        if (expected.empty()) continue;
        if (resume_from > 0) {
            if (!quiet) {
                spdlog::info("{}: continued merge: the shards' sha256 is not checked", gguf::quote_name(output));
            }
            checked.clear();
            break;
        }
        const_cast<remote::DigestChecked*>(r)->verify_sha256(expected);
        checked.push_back(r);
    }
    // The first shard whose bytes are wrong: its line, else "".
    auto sha256_mismatch = [&checked](bool finish) {
        for (const remote::DigestChecked* r : checked) {
            std::string e = finish ? r->finish_sha256() : r->sha256_error();
            if (!e.empty()) return e;
        }
        return std::string();
    };
    if (!out) {
        ::unlink(state.c_str());
        remove_stale_outputs(output);  // the partial output that was not continued
        out.emplace(gguf::OutputFile::create(output, method));
    }
    if (resume_from > 0 && !quiet) {
        spdlog::info("continuing {} at byte {} of {}", gguf::quote_name(out->temp_path()), resume_from, vf.size());
    }
    checkpoint("temp-created");

    gguf::WriteOptions wopt;
    wopt.cancel = cancel_flag();
    ProgressBar bar("downloading", vf.size(), progress_wanted(quiet));
    uint64_t done = 0;
    wopt.progress = [&](uint64_t n) {
        // The bytes of the earlier run come first: done already, not downloaded now.
        const uint64_t old = done < resume_from ? std::min(n, resume_from - done) : 0;
        if (old) bar.skip(old);
        if (n > old) bar.add(n - old);
        done += n;
        if (done >= vf.size() / 2 && done - n < vf.size() / 2) checkpoint("mid-copy");
    };
    wopt.resume_from = resume_from;
    wopt.durable_step = kResumeStep;
    if (const char* step = std::getenv("GGUF_MOUNT_RESUME_STEP")) wopt.durable_step = std::strtoull(step, nullptr, 10);
    bool resumable = resume_from > 0;
    const std::string temp = out->temp_path();
    wopt.durable = [&](uint64_t end) {
        save_state(state, identity, temp, end);
        resumable = true;
    };
    try {
        gguf::write_virtual_file(vf, *out, wopt);
        const std::string wrong = sha256_mismatch(true);
        if (!wrong.empty()) throw gguf::Error(gguf::Code::Io, wrong + "; nothing was written", EIO);
        bar.set_label("syncing");
        out->commit();
        verify_output(out->temp_path(), vf, tensor_count);
        vf.ensure_sources_unchanged("merged");
    } catch (const gguf::Error& e) {
        // Wrong bytes: nothing of this output is worth continuing.
        const std::string wrong = sha256_mismatch(false);
        if (!wrong.empty()) {
            ::unlink(state.c_str());
            throw gguf::Error(gguf::Code::Io, wrong + "; nothing was written", EIO);
        }
        // Kept for the next run of the same command (unless nothing durable was written yet).
        if (!resumable) throw;
        out->keep();
        const std::string kept = "the partial output is kept: run the same command again to continue";
        *interrupted = "interrupted; " + kept;
        throw gguf::Error(e.code(), std::string(e.what()) + "; " + kept, e.sys_errno());
    } catch (const std::exception& e) {
        // Not a gguf::Error (an HTTP failure, out of memory): kept all the same.
        if (!resumable) throw;
        out->keep();
        const std::string kept = "the partial output is kept: run the same command again to continue";
        *interrupted = "interrupted; " + kept;
        throw gguf::Error(gguf::Code::Io, std::string(e.what()) + "; " + kept);
    }
    bar.set_label("merged");
    bar.finish();
    checkpoint("before-publish");
    if (cancelled()) throw gguf::Error(gguf::Code::Io, output + ": interrupted before publishing", EINTR);
    out->publish();
    ::unlink(state.c_str());
    gguf::sync_directory(gguf::dir_name(output));
    checkpoint("published");
    if (!quiet) {
        spdlog::info("merged {} shard(s), {} tensors, {} from {} into {}", shard_count, tensor_count,
                     size_for_humans(vf.size()), gguf::quote_name(source.shown), gguf::quote_name(output));
    }
    return 0;
}
#endif

/// What the local merge writes: the merged set, or (with overrides) one unsplit file edited.
struct MergeInput {
    gguf::VirtualFile vf;
    std::vector<gguf::FilePart> parts;  // the shards' parts (--delete-splits deletes them)
    size_t shard_count = 0;             // 0: a single unsplit file
    uint64_t tensor_count = 0;
};

/// `overrides` with the KV sidecar of the local model `first` in front (gguf::sidecar_path_for),
/// applied by the rules a mount applies it with: read by gguf::read_kv_sidecar with the model's
/// owner; one that may not speak for the model (Code::Untrusted) is left out with a warning, as
/// the mount serves the model without it. Prints which sidecar applies. Throws gguf::Error for a
/// sidecar with a bad line (naming file and line; nothing is written).
gguf::KvOverrides with_sidecar(const std::string& first, const gguf::KvOverrides& overrides) {
    const std::string sidecar = gguf::sidecar_path_for(first);
    struct stat lst {};
    if (sidecar.empty() || ::lstat(sidecar.c_str(), &lst) != 0) return overrides;
    struct stat model {};
    gguf::KvSidecarRules rules;
    if (::stat(first.c_str(), &model) == 0) rules.model_owner = model.st_uid;
    try {
        gguf::KvOverrides own = gguf::read_kv_sidecar(sidecar, rules);
        spdlog::info("applying the KV sidecar {} ({} edit{}; --no-sidecar leaves it out)", gguf::escape(sidecar),
                     own.edits.size(), own.edits.size() == 1 ? "" : "s");
        return gguf::concat_overrides(own, overrides);
    } catch (const gguf::Error& e) {
        if (e.code() != gguf::Code::Untrusted) throw;
        spdlog::warn("{} (a mount serves the model without it too)", gguf::escape(e.what()));
        return overrides;
    }
}

/// With overrides, a local FILE that is not a shard and whose header has no split.count above 1
/// is edited alone (gguf::open_edited); everything else is a split set as without them.
MergeInput open_merge_input(const std::string& first, const std::string& output, bool delete_splits,
                            const gguf::KvOverrides& overrides) {
    if (!overrides.empty() && !gguf::parse_shard_name(first)) {
        const uint64_t tensors = [&]() -> uint64_t {
            const gguf::Header h = gguf::read_header(first);
            return gguf::has_split_count_above_one(h) ? UINT64_MAX : h.tensors.size();
        }();
        if (tensors != UINT64_MAX) {
            if (delete_splits) {
                throw gguf::Error(gguf::Code::BadArgument, first + ": a single unsplit file; --delete-splits is refused "
                                                                  "(there are no shards to delete)");
            }
            return MergeInput{gguf::open_edited(gguf::LogicalFile::single(first), overrides), {}, 0, tensors};
        }
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
    std::vector<gguf::FilePart> parts = gguf::set_parts(*set);
    if (delete_splits) ensure_shards_deletable(parts, "nothing was written or deleted");
    return MergeInput{gguf::open_merged(*set, overrides), std::move(parts), set->shards().size(), set->tensor_count()};
}

/// The input is checked before the output: arguments given the wrong way round (`merge OUT.gguf
/// NAME-00001-of-N.gguf`, or `merge OUT.gguf URL`) are named as such, before the output rule
/// would call the first shard an existing output to remove. Throws gguf::Error (BadArgument for
/// a swap naming both, Code::Io for a missing local input naming it); touches nothing.
void check_input_before_output(const ResolvedSource& source, const std::string& first, const std::string& output) {
    const ResolvedSource out = resolve_source(output, SourceOptions{});
    const bool input_missing = !source.remote() && !source.local_problem.empty();
    const bool output_is_input = out.remote() || (gguf::parse_shard_name(output) && out.local_problem.empty());
    if (output_is_input && (input_missing || !gguf::parse_shard_name(first))) {
        throw gguf::Error(gguf::Code::BadArgument,
                          "GGUF_OUT " + out.shown + " is " + (out.remote() ? "a URL" : "an existing shard") +
                              " and FIRST_SHARD " + first + (input_missing ? " does not exist" : " is not a shard") +
                              "; did you swap them? The order is 'gguf-mount merge FIRST_SHARD GGUF_OUT'; "
                              "nothing written");
    }
    if (input_missing) throw gguf::Error(gguf::Code::Io, first + ": " + source.local_problem + "; nothing written");
}

int merge(const std::string& first, const std::string& output, bool delete_splits, bool quiet,
          const SourceOptions& options, const gguf::KvOverrides& given, bool use_sidecar, std::string* interrupted) {
    ResolvedSource source = resolve_source(first, options);
    check_input_before_output(source, first, output);
#ifdef GGUF_MOUNT_WITH_REMOTE
    if (source.remote() || source.oci_local()) return merge_url(source, output, delete_splits, quiet, given, interrupted);
#else
    (void)interrupted;
#endif
    // Like the reference: refuse an existing output before reading anything.
    gguf::ensure_absent(output);
    if (gguf::parse_shard_name(output)) {
        spdlog::warn("{}: the output name looks like a shard name; llama.cpp loaders may look for sibling shards",
                     gguf::quote_name(output));
    }
    const gguf::KvOverrides overrides = use_sidecar ? with_sidecar(first, given) : given;
    const MergeInput in = open_merge_input(first, output, delete_splits, overrides);
    const gguf::VirtualFile& vf = in.vf;
    const std::vector<gguf::FilePart>& parts = in.parts;
    const size_t shard_count = in.shard_count;
    const uint64_t tensor_count = in.tensor_count;
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
    remove_stale_outputs(output);
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
    if (!quiet && shard_count == 0) {
        spdlog::info("wrote {} with the edited metadata, {} tensors, {}", gguf::quote_name(output), tensor_count,
                     size_for_humans(vf.size()));
    } else if (!quiet) {
        spdlog::info("merged {} shard(s), {} tensors, {} into {}", shard_count, tensor_count,
                     size_for_humans(vf.size()), gguf::quote_name(output));
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
    options.positional_help("FIRST_SHARD|URL GGUF_OUT");
    options.add_options()
        ("delete-splits", "delete the shards after the merged file is complete and verified")
        ("no-sidecar", "do not apply the KV sidecar beside FIRST_SHARD (PREFIX.gguf.kv)")
        ("q,quiet", "no progress bar and no info lines")
        ("h,help", "show this help")
        // Separate string positionals: a vector option would split file names at commas.
        ("pos1", "FIRST_SHARD", cxxopts::value<std::string>())
        ("pos2", "GGUF_OUT", cxxopts::value<std::string>())
        ("extra", "unexpected arguments", cxxopts::value<std::vector<std::string>>());
    options.parse_positional({"pos1", "pos2", "extra"});
    add_remote_options(options, "URL: ");
    add_kv_override_options(options);

    std::vector<std::string> args;
    bool delete_splits = false;
    bool use_sidecar = true;
    bool quiet = false;
    SourceOptions sopt;
    sopt.verify_blobs = true;  // a local layout's or store's blobs: every byte checked
    sopt.files_only = true;   // an hf:// folder is refused, naming the file to give
    sopt.hub_digests = true;  // an hf:// set: its shards' lfs.oid
    gguf::KvOverrides overrides;
    if (completion_words_requested()) return print_completion_words(options, {"pos1", "pos2", "extra"});
    try {
        auto r = options.parse(argc, argv);
        if (r.count("help")) {
            std::printf("%s%s%s", options.help().c_str(), kMergeHelpTail, kKvOverrideHelp);
            return 0;
        }
        args = source_and_positionals(r, {"pos1", "pos2"});
        if (r.count("extra")) {
            return usage_error("merge", "expected FIRST_SHARD and GGUF_OUT, got more arguments (first extra: '" +
                                         r["extra"].as<std::vector<std::string>>().front() + "')");
        }
        delete_splits = r.count("delete-splits") > 0;
        use_sidecar = r.count("no-sidecar") == 0;
        quiet = r.count("quiet") > 0;
#ifdef GGUF_MOUNT_WITH_REMOTE
        if (!args.empty()) {
            if (const std::string m = misplaced_source_option(r, args.front()); !m.empty()) return usage_error("merge", m);
        }
        read_remote_options(r, &sopt.remote);
#endif
        try {
            overrides = read_kv_override_options(r);
        } catch (const gguf::Error& e) {  // a malformed --override-kv, or its @FILE unreadable
            return usage_error("merge", e.what());
        }
    } catch (const cxxopts::exceptions::exception& e) {
        return usage_error("merge", e.what());
    } catch (const gguf::Error& e) {
        print_error(e.what());
        return 1;
    }
    if (args.size() != 2) {
        return usage_error("merge", "expected FIRST_SHARD and GGUF_OUT, got " + std::to_string(args.size()) +
                                        " argument(s)");
    }

    // Read by run_offline after the body failed: merge() changes it when it keeps a partial output.
    std::string interrupted = "interrupted; removed the unfinished output";
    return run_offline(quiet, interrupted,
                       [&] { return merge(args[0], args[1], delete_splits, quiet, sopt, overrides, use_sidecar,
                                                    &interrupted); });
}

}  // namespace gguf_mount::cli
