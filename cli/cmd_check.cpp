// `gguf-mount check SOURCE [--json] [--show-shards]`: prints what a mount of SOURCE would show
// (gguf::build_catalog): every served file with its shards or pieces and its size, every
// directory, every problem, and every note (served narrower than its mode bits). Exit status 0 when there is no problem, 1 otherwise, 2 for usage
// errors.
#include <sys/stat.h>

#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/completion.hpp"
#include "cli/kv_options.hpp"
#include "cli/logging.hpp"
#include "cli/offline.hpp"
#include "cli/progress.hpp"
#include "cli/remote_options.hpp"
#include "cli/source.hpp"
#include "cli/split_options.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/model/catalog.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/model/shard_view.hpp"
#include "gguf/error.hpp"
#include "common/text.hpp"
#ifdef GGUF_MOUNT_WITH_REMOTE
#include "remote/digest.hpp"
#endif


namespace gguf_mount::cli {

namespace {

const char* const kCheckHelpTail =
    "\n"
    "Prints what 'gguf-mount SOURCE MOUNTPOINT' would serve: each file with its kind (merged-set,\n"
    "byte-split, single-file model, companion, shard; JSON says companion for a single-file\n"
    "model), size in bytes and tensor count, the shards or byte pieces it is\n"
    "made of, the KV overrides in force (its NAME.gguf.kv sidecar's, then the flags'), the mode\n"
    "served (read bits only where every directory on the way lets that class through), every\n"
    "problem (incomplete or invalid set, name clash, symlink loop, dangling link, unreadable\n"
    "directory, bad KV sidecar) and every note (served narrower than its mode bits: a POSIX\n"
    "ACL on the way; or served without its sidecar's edits: a sidecar of another user, a link),\n"
    "one line each. Nothing is mounted or written.\n"
    "SOURCE may also be an http(s):// URL (first shard or directory ending in '/') or\n"
    "hf://ORG/REPO[@REVISION][/PATH] or s3://BUCKET/PREFIX/ or s3://BUCKET/KEY (a first shard)\n"
    "or oci://REGISTRY/REPO[:TAG|@sha256:DIGEST] or ollama://[REGISTRY/][NS/]MODEL[:TAG]:\n"
    "only headers are read, through the block cache\n"
    "($XDG_CACHE_HOME/gguf-mount). A local OCI image layout or Ollama store: every blob of a\n"
    "served model is read and checked against its sha256 digest (a mismatch is a problem).\n"
    "Names are escaped (see README, 'Names in output'). --json always prints one document, also\n"
    "when SOURCE cannot be read (ok false, the reason under problems).\n"
    "Exit status: 0 when there is no problem, 1 when there is at least one, 2 usage error\n"
    "(usage errors print the usage on stderr and no JSON).\n";

/// `path` relative to `source` when it lies under it, else unchanged.
std::string relative(const std::string& source, const std::string& path) {
    if (path.size() > source.size() + 1 && path.compare(0, source.size(), source) == 0 && path[source.size()] == '/') {
        return path.substr(source.size() + 1);
    }
    return path;
}

#ifdef GGUF_MOUNT_WITH_REMOTE
/// A local OCI layout or Ollama store: every blob a served file reads is read whole and checked
/// against its digest (remote::DigestChecked); a mismatch is a problem of that file, one line
/// with both digests.
void verify_blobs(gguf::Catalog* catalog) {
    std::set<const gguf::ByteSource*> seen;
    for (const gguf::CatalogEntry& e : catalog->entries) {
        for (const gguf::FilePart& p : e.parts()) {
            auto* blob = dynamic_cast<const remote::DigestChecked*>(p.source.get());
            if (!blob || blob->sha256().empty() || !seen.insert(p.source.get()).second) continue;
            auto* armed = const_cast<remote::DigestChecked*>(blob);
            armed->verify_sha256(blob->sha256());
            const std::string error = blob->finish_sha256();
            if (!error.empty()) catalog->problems.push_back(gguf::Problem{e.path, error});
        }
    }
}
#endif

std::string octal(mode_t mode) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
    return buf;
}

/// Where the catalog's source paths are relative to: SOURCE, or its directory for a file.
std::string base_dir(const gguf::Catalog& c) {
    struct stat st {};
    if (::stat(c.source.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return gguf::dir_name(c.source);
    return c.source;
}

/// Sets j[key] to `name` escaped (gguf::escape, the rule of the text output) and, when escaping
/// changed it, j[key + "_hex"] to the exact bytes in hex: so "path" is always valid JSON and
/// distinct for distinct names, and "path_hex" gives non-UTF-8 names byte for byte.
void put_name(nlohmann::ordered_json& j, const std::string& key, const std::string& name) {
    j[key] = gguf::escape(name);
    if (!gguf::needs_no_escape(name)) j[key + "_hex"] = gguf::hex_bytes(name);
}

nlohmann::ordered_json named(const std::string& path) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    put_name(j, "path", path);
    return j;
}

nlohmann::ordered_json to_json(const gguf::Catalog& c) {
    const std::string base = base_dir(c);
    nlohmann::ordered_json j;
    put_name(j, "source", c.source);
    j["ok"] = c.problems.empty();
    j["entries"] = nlohmann::ordered_json::array();
    for (const auto& e : c.entries) {
        nlohmann::ordered_json je = named(e.path);
        je["kind"] = gguf::entry_kind_name(e.kind);
        je["size"] = e.size();
        je["tensors"] = e.tensor_count;
        je["mode"] = octal(e.attr.mode);
        je["uid"] = e.attr.uid;
        je["gid"] = e.attr.gid;
        nlohmann::ordered_json members = nlohmann::ordered_json::array();
        for (const auto& m : e.members) {
            nlohmann::ordered_json jm = named(relative(base, m.path));
            jm["size"] = m.size();
            nlohmann::ordered_json parts = nlohmann::ordered_json::array();
            for (const auto& p : m.parts) {
                nlohmann::ordered_json jp = named(relative(base, p.path));
                jp["offset"] = p.offset;
                jp["size"] = p.size;
                parts.push_back(jp);
            }
            jm["parts"] = parts;
            members.push_back(jm);
        }
        if (e.kind == gguf::EntryKind::SplitShard) put_name(je, "view_of", e.view_of);
        je[e.kind == gguf::EntryKind::MergedSet || e.kind == gguf::EntryKind::SplitShard ? "shards" : "files"] =
            members;
        if (!e.kv_edits.empty()) {
            nlohmann::ordered_json edits = nlohmann::ordered_json::array();
            for (const auto& k : e.kv_edits) edits.push_back(gguf::escape(k));
            je["overrides"] = edits;
        }
        j["entries"].push_back(je);
    }
    j["directories"] = nlohmann::ordered_json::array();
    for (const auto& d : c.directories) {
        nlohmann::ordered_json jd = named(d.path);
        jd["mode"] = octal(d.attr.mode);
        j["directories"].push_back(jd);
    }
    j["problems"] = nlohmann::ordered_json::array();
    for (const auto& p : c.problems) {
        nlohmann::ordered_json jp = named(p.path);
        jp["reason"] = gguf::escape(p.reason);
        j["problems"].push_back(jp);
    }
    j["notes"] = nlohmann::ordered_json::array();
    for (const auto& n : c.notes) {
        nlohmann::ordered_json jn = named(n.path);
        jn["reason"] = gguf::escape(n.reason);
        j["notes"].push_back(jn);
    }
    return j;
}

/// Prints `j` on stdout. Every string in it is escaped (valid UTF-8), so dump() cannot throw.
void print_json(const nlohmann::ordered_json& j) { std::printf("%s\n", j.dump(2).c_str()); }

/// " at byte N" for a part that is a range inside its file (a shard of a cat-joined file).
std::string at_offset(const gguf::FilePart& p) {
    return p.offset == 0 ? std::string() : ", at byte " + std::to_string(p.offset);
}

/// The text output. Every name and reason is escaped (gguf::escape).
void print_text(const gguf::Catalog& c, bool remote_directory) {
    const std::string base = base_dir(c);
    auto esc = [](const std::string& s) { return gguf::escape(s); };
    // A remote folder or prefix as it was given, with its '/' (the listing's root has none).
    const bool slash = remote_directory && !c.source.empty() && c.source.back() != '/';
    std::printf("source %s%s\n", esc(c.source).c_str(), slash ? "/" : "");
    size_t counts[5] = {0, 0, 0, 0, 0};
    size_t single_models = 0;  // companions that are .gguf models (counted apart from them)
    for (const auto& e : c.entries) {
        std::string what = gguf::entry_label(e.kind, e.path);
        if (what != gguf::entry_kind_name(e.kind)) {
            ++single_models;
        } else {
            ++counts[static_cast<size_t>(e.kind)];
        }
        if (e.kind == gguf::EntryKind::MergedSet) {
            what += " of " + std::to_string(e.members.size()) + " shard" + (e.members.size() == 1 ? "" : "s");
        } else if (e.kind == gguf::EntryKind::ByteSplit) {
            what += " of " + std::to_string(e.members.front().parts.size()) + " pieces";
        } else if (e.kind == gguf::EntryKind::SplitShard) {
            what += " of " + esc(e.view_of);
        }
        std::printf("%s: %s, %llu bytes", esc(e.path).c_str(), what.c_str(),
                    static_cast<unsigned long long>(e.size()));
        if (e.kind == gguf::EntryKind::MergedSet || e.kind == gguf::EntryKind::ByteSplit ||
            e.kind == gguf::EntryKind::SplitShard || !e.kv_edits.empty()) {
            std::printf(", %llu tensors", static_cast<unsigned long long>(e.tensor_count));
        }
        std::printf(", mode %s\n", octal(e.attr.mode).c_str());
        for (const auto& k : e.kv_edits) std::printf("  override %s\n", esc(k).c_str());
        if (e.kind == gguf::EntryKind::MergedSet || e.kind == gguf::EntryKind::SplitShard) {
            for (size_t i = 0; i < e.members.size(); ++i) {
                const auto& m = e.members[i];
                std::printf("  %s %zu: %s, %llu bytes%s", e.kind == gguf::EntryKind::SplitShard ? "source" : "shard",
                            i + 1, esc(relative(base, m.path)).c_str(),
                            static_cast<unsigned long long>(m.size()),
                            m.is_concatenation() ? "" : at_offset(m.parts.front()).c_str());
                if (m.is_concatenation()) std::printf(", %zu byte pieces", m.parts.size());
                std::printf("\n");
                if (m.is_concatenation()) {
                    for (const auto& p : m.parts) {
                        std::printf("    piece %s, %llu bytes\n", esc(relative(base, p.path)).c_str(),
                                    static_cast<unsigned long long>(p.size));
                    }
                }
            }
        } else if (e.kind == gguf::EntryKind::ByteSplit) {
            for (const auto& p : e.members.front().parts) {
                std::printf("  piece %s, %llu bytes\n", esc(relative(base, p.path)).c_str(),
                            static_cast<unsigned long long>(p.size));
            }
        }
    }
    if (!c.problems.empty()) {
        std::printf("%zu problem%s:\n", c.problems.size(), c.problems.size() == 1 ? "" : "s");
        for (const auto& p : c.problems) std::printf("  %s: %s\n", esc(p.path).c_str(), esc(p.reason).c_str());
    }
    if (!c.notes.empty()) {
        std::printf("%zu note%s (served, but not as the files alone say: narrower than their mode bits, or without a sidecar):\n", c.notes.size(),
                    c.notes.size() == 1 ? "" : "s");
        for (const auto& n : c.notes) std::printf("  %s: %s\n", esc(n.path).c_str(), esc(n.reason).c_str());
    }
    // A first-shard SOURCE is served as one file at the mount root: no directory to count.
    std::string dirs;
    if (base == c.source) {
        dirs = std::to_string(c.directories.size()) + (c.directories.size() == 1 ? " directory, " : " directories, ");
    }
    std::printf("summary: %s%zu merged set(s), %zu byte-split file(s), %zu companion file(s), %zu shard file(s) shown, "
                "%s%s%zu problem(s)\n",
                single_models ? (std::to_string(single_models) + " single-file model(s), ").c_str() : "", counts[0],
                counts[1], counts[2], counts[3],
                counts[4] ? (std::to_string(counts[4]) + " split shard(s), ").c_str() : "", dirs.c_str(),
                c.problems.size());
}

}  // namespace

int run_check(int argc, char** argv) {
    cxxopts::Options options("gguf-mount check", "Check a model directory: list what a mount would serve and why "
                                                 "anything would not be served.");
    options.custom_help("[options]");
    options.positional_help("SOURCE");
    // clang-format off
    options.add_options()
        ("json", "print the result as one JSON document")
        ("show-shards", "also list shard files and byte pieces as files (as 'gguf-mount --show-shards' serves them)")
        ("h,help", "show this help")
        ("source", "SOURCE", cxxopts::value<std::string>())
        ("extra", "unexpected arguments", cxxopts::value<std::vector<std::string>>());
    // clang-format on
    options.parse_positional({"source", "extra"});
    add_remote_options(options, "URL, hf://, s3://, oci://: ");
    add_kv_override_options(options);
    add_split_view_options(options);
    std::string source;
    gguf::CatalogOptions copt;
    bool json = false;
    SourceOptions sopt;
    sopt.verify_blobs = true;  // a local layout's or store's blobs: each read whole and checked
    if (completion_words_requested()) return print_completion_words(options, {"source", "extra"});
    try {
        auto r = options.parse(argc, argv);
        if (r.count("help")) {
            std::printf("%s%s%s", options.help().c_str(), kCheckHelpTail, kKvOverrideHelp);
            return 0;
        }
        if (r.count("extra")) {
            return usage_error("check", "expected one SOURCE, got more arguments (first extra: '" +
                                            r["extra"].as<std::vector<std::string>>().front() + "')");
        }
        const std::vector<std::string> given = source_and_positionals(r, {"source"});
        if (given.empty()) return usage_error("check", "SOURCE is required (or --source-file FILE)");
        if (given.size() > 1) return usage_error("check", "expected one SOURCE: --source-file gives it already");
        source = given.front();
        json = r.count("json") > 0;
        copt.show_shards = r.count("show-shards") > 0;
        try {
            copt.split_view = read_split_options(r, true);
            copt.overrides = read_kv_override_options(r);
        } catch (const gguf::Error& e) {  // a bad split option, a malformed --override-kv, or its @FILE unreadable
            return usage_error("check", e.what());
        }
#ifdef GGUF_MOUNT_WITH_REMOTE
        if (const std::string m = misplaced_source_option(r, source); !m.empty()) return usage_error("check", m);
        read_remote_options(r, &sopt.remote);
#endif
    } catch (const cxxopts::exceptions::exception& e) {
        return usage_error("check", e.what());
    } catch (const gguf::Error& e) {
        print_error(e.what());
        return 1;
    }
    // Warnings (a retried request, a hint about SOURCE) as "gguf-mount: warning: ..." on stderr.
    setup_logging("warn", false);
    ResolvedSource resolved = resolve_source(source, sopt);
    source = resolved.shown;  // the name in the JSON document of a failure
#ifdef GGUF_MOUNT_WITH_REMOTE
    resolved.options.remote.cache_source = resolved.shown;  // what it caches is listed under SOURCE
#endif

    raise_open_file_limit();
    copt.keep_layouts = false;  // sizes, shards and problems only: no header kept per set
    // A single unsplit GGUF file is fine as it is: say so (it is not a set to merge, but not a
    // problem either); a mount of its directory serves it.
    struct stat sidecar {};  // NAME.gguf.kv beside it: the catalog shows the edits
    if (resolved.kind == SourceKind::LocalFile && resolved.local_problem.empty() && !copt.split_view &&
        copt.overrides.empty() && !gguf::parse_shard_name(resolved.path) &&
        ::stat((resolved.path + ".kv").c_str(), &sidecar) != 0) {
        std::optional<gguf::Header> h;
        try {
            h = gguf::read_header(resolved.path);
        } catch (const gguf::Error&) {
            // not a GGUF file, or a damaged one: the catalog below says why
        }
        if (h && !gguf::has_split_count_above_one(*h)) {
            struct stat st {};
            const uint64_t size = ::stat(resolved.path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
            if (json) {
                nlohmann::ordered_json j;
                put_name(j, "source", source);
                j["ok"] = true;
                j["single_file"] = {{"tensors", h->tensors.size()}, {"size", size}};
                j["entries"] = nlohmann::ordered_json::array();
                j["directories"] = nlohmann::ordered_json::array();
                j["problems"] = nlohmann::ordered_json::array();
                print_json(j);
            } else {
                std::printf("%s: a valid GGUF file, %zu tensors, %s: a single file, nothing to merge (a mount of "
                            "its directory serves it as it is)\n",
                            gguf::escape(resolved.path).c_str(), h->tensors.size(), size_for_humans(size).c_str());
            }
            return 0;
        }
    }
    gguf::Catalog catalog;
    try {
        // A remote SOURCE: headers only, through the block cache ($XDG_CACHE_HOME/gguf-mount),
        // the same listings a mount uses.
        catalog = resolved.catalog(copt);
        // A remote first shard is one set, not a listing: its view is applied here.
        if (copt.split_view && (resolved.remote() && !resolved.directory())) {
            gguf::apply_shard_view(catalog, *copt.split_view, false);
        }
#ifdef GGUF_MOUNT_WITH_REMOTE
        if (resolved.oci_local()) verify_blobs(&catalog);
#endif
    } catch (const std::exception& e) {
        // SOURCE missing, not a directory or file, out of memory...: still one document for a
        // program, and the one-line error for a person.
        if (json) {
            nlohmann::ordered_json j;
            put_name(j, "source", source);
            j["ok"] = false;
            j["entries"] = nlohmann::ordered_json::array();
            j["directories"] = nlohmann::ordered_json::array();
            nlohmann::ordered_json jp = named(".");
            jp["reason"] = gguf::escape(e.what());
            j["problems"] = nlohmann::ordered_json::array({jp});
            print_json(j);
        } else {
            print_error(e.what());
        }
        return 1;
    }
    if (json) {
        print_json(to_json(catalog));
    } else {
        print_text(catalog, resolved.remote() && resolved.directory());
    }
    return catalog.problems.empty() ? 0 : 1;
}

}  // namespace gguf_mount::cli
