#include "gguf/model/catalog.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

#include "gguf/model/merge_plan.hpp"
#include "gguf/model/byte_split.hpp"
#include "gguf/model/catalog_dir.hpp"
#include "gguf/model/catalog_kv.hpp"
#include "gguf/error.hpp"
#include "gguf/bytes/file_io.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/model/shard_view.hpp"
#include "gguf/model/split_set.hpp"

namespace gguf {

namespace {

using catalog_dir::DirectoryNames;
using catalog_dir::join;
using catalog_dir::Listed;
using catalog_dir::Subdir;

/// Most directories one catalog walks (aliases through links included); the rest is a Problem.
constexpr size_t kMaxDirectories = 100000;

EntryAttributes directory_attributes(const struct stat& st) {
    EntryAttributes a;
    a.mode = st.st_mode & 0555;
    a.uid = st.st_uid;
    a.gid = st.st_gid;
    a.mtime = st.st_mtim;
    a.ctime = st.st_ctim;
    return a;
}

/// A candidate for a served name before clash resolution.
struct Candidate {
    std::string name;        // in its directory
    std::string first_part;  // base name of its first physical file (rule 6 ordering)
    CatalogEntry entry;
};

/// The first 4 bytes of `part` are "GGUF". Throws gguf::Error(Io) when it cannot be read.
bool starts_with_gguf_magic(const FilePart& part) {
    const std::string& path = part.path;
    char magic[4] = {};
    const ssize_t n = open_part(part, false)->pread(magic, sizeof magic, 0);
    if (n < 0) {
        int e = static_cast<int>(-n);
        throw Error(Code::Io, path + ": read failed: " + std::strerror(e), e);
    }
    return n == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

class Walker {
public:
    Walker(const CatalogOptions& options, Catalog& out, DirectoryListing* listing = nullptr)
        : options_(options), out_(out), listing_(listing) {}

    /// Walks directory `abs` shown at `rel` ("" for the root).
    void walk(const std::string& abs, const std::string& rel, const struct stat& st, unsigned depth) {
        ++directories_;
        visited_.emplace(std::make_pair(st.st_dev, st.st_ino), rel);
        add_directory(rel, abs, st);
        if (!listing_) out_.watched.push_back(WatchedPath{abs, true, true, st});
        ancestors_.push_back({st.st_dev, st.st_ino, rel});

        DirectoryNames names;
        if (list(abs, rel, &names)) scan_files(abs, rel, names.files, names.real_names, nullptr);
        for (const Subdir& sub : names.subdirs) {
            const std::string sub_rel = join(rel, sub.name);
            auto loop = std::find_if(ancestors_.begin(), ancestors_.end(), [&](const Ancestor& a) {
                return a.dev == sub.st.st_dev && a.ino == sub.st.st_ino;
            });
            auto seen = visited_.find({sub.st.st_dev, sub.st.st_ino});
            if (loop != ancestors_.end()) {
                problem(sub_rel, sub.full + ": symlink loop: it is the directory '" +
                                     (loop->rel.empty() ? std::string(".") : loop->rel) +
                                     "' again; not followed");
            } else if (seen != visited_.end()) {
                // Each directory is walked once: links that fan out (two links per level to the
                // next, 16 levels) would otherwise expand to 2^16 copies of the deepest level.
                problem(sub_rel, sub.full + ": the directory '" + seen->second +
                                     "' again (another link to it); shown there only, not here");
            } else if (budget_.cut) {
                continue;  // reported once, where the cut happened
            } else if (depth + 1 > options_.max_depth) {
                problem(sub_rel, sub.full + ": nested deeper than " + std::to_string(options_.max_depth) +
                                     " directories; not walked");
            } else if (directories_ >= kMaxDirectories) {
                problem(sub_rel, sub.full + ": more than " + std::to_string(kMaxDirectories) +
                                     " directories under SOURCE; not walked");
            } else {
                walk(sub.full, sub_rel, sub.st, depth + 1);
            }
        }
        ancestors_.pop_back();
    }

    /// The catalog of a single first shard `path` whose directory is `dir_abs`.
    void single_set(const std::string& path, const struct stat& dir_st) {
        const std::string dir = dir_name(path);
        const std::string base = base_name(path);
        add_directory("", dir, dir_st);
        out_.watched.push_back(WatchedPath{dir, true, true, dir_st});
        auto sn = parse_shard_name(base);
        if (!sn) {
            Listed l;
            l.name = base;
            l.part.path = path;
            if (::stat(path.c_str(), &l.part.st) == 0) {
                l.part.size = static_cast<uint64_t>(l.part.st.st_size);
                out_.watched.push_back(WatchedPath{path, false, true, l.part.st});
                DirectoryEdits edits(options_.overrides, &kv_budget_);
                edits_ = &edits;
                out_.watched.push_back(edits.add_beside(path));
                const bool served = joined_set(l, base) || edited_single(l, base);
                finish_edits();
                if (served) return;
                // A shard view splits a single GGUF file too (gguf/model/shard_view.hpp).
                if (options_.split_view) {
                    add_as_is(l, base, EntryKind::Companion);
                    return;
                }
            }
        }
        if (!sn || sn->index != 1) {
            try {
                SplitSet::open(path);  // throws the usual "not a first shard" message
                problem(base, path + ": not the first shard of a gguf-split set");
            } catch (const Error& e) {
                problem(base, e.what());
            }
            return;
        }
        DirectoryNames names;
        const size_t before = out_.problems.size();
        if (list(dir, "", &names)) scan_files(dir, "", names.files, names.real_names, &base);
        // The catalog of one set shows nothing else, so "not shown" would say nothing.
        static const std::string kNotShown = "; not shown";
        for (size_t i = before; i < out_.problems.size(); ++i) {
            std::string& r = out_.problems[i].reason;
            if (r.size() > kNotShown.size() && r.compare(r.size() - kNotShown.size(), kNotShown.size(), kNotShown) == 0) {
                r.resize(r.size() - kNotShown.size());
            }
        }
    }

private:
    struct Ancestor {
        dev_t dev;
        ino_t ino;
        std::string rel;
    };

    void add_directory(const std::string& rel, const std::string& abs, const struct stat& st) {
        // A listed (remote) directory has no local path whose access could be judged.
        CatalogDirectory d{rel, directory_attributes(st), listing_ ? std::string() : abs};
        if (!listing_) note(rel.empty() ? "." : rel, judge_.narrow_directory(abs, &d.attr));
        out_.directories.push_back(std::move(d));
    }

    /// Rule 8 attributes of the file `rel` made of `parts`: narrowed by the directories on the
    /// way of a local file, also one a listing names (a local OCI layout's or Ollama store's
    /// blob: part_has_local_path).
    EntryAttributes attributes(const std::string& rel, const std::vector<FilePart>& parts) {
        EntryAttributes a = file_attributes(parts);
        const bool local = !listing_ || (!parts.empty() && std::all_of(parts.begin(), parts.end(), part_has_local_path));
        if (local) note(rel, judge_.narrow_file(parts, &a));
        return a;
    }

    /// Sets `e`'s size from its planned layout; without keep_layouts the layout (for a merged
    /// set, its whole rendered header) is released at once, so a catalog of many sets never
    /// holds more than one header.
    void set_layout(CatalogEntry& e, VirtualLayout layout) const {
        e.bytes = layout.size();
        if (options_.keep_layouts) e.layout = std::move(layout);
    }

    /// Without keep_layouts, frees `e`'s planned layout (e.bytes keeps its size). Moved out
    /// into a temporary rather than assigned an empty one: a std::string move-assigned from an
    /// empty (small) string keeps its old capacity, which held the whole rendered header
    /// (so each released set would keep its header's size allocated).
    void release_layout(CatalogEntry& e) const {
        if (options_.keep_layouts) return;
        VirtualLayout released(std::move(e.layout));
    }

    /// Rule 9 for the regular file `f`, shown at `rp`: when it is a GGUF file whose header says
    /// split.count > 1, it is served as the merged model of the cat-joined set it holds
    /// (SplitSet::open_concatenated), or is a Problem saying what to run instead; returns true.
    /// Returns false (a companion) for any other file, including unreadable or broken GGUF.
    bool joined_set(const Listed& f, const std::string& rp) {
        LogicalFile lf;
        lf.path = f.part.path;
        lf.parts.push_back(f.part);
        try {
            if (!starts_with_gguf_magic(f.part)) return false;
        } catch (const Error& e) {
            // A listed (remote) file that cannot be read (its server answers 404, 403) is not
            // served; a local one is a companion that its reader's own open judges.
            if (!listing_) return false;
            problem(rp, std::string(e.what()) + "; not shown");
            return true;
        }
        try {
            if (!has_split_count_above_one(read_header(OpenLogicalFile::open(lf)))) return false;
        } catch (const Error&) {
            return false;
        }
        try {
            CatalogEntry e = merged_set_entry(SplitSet::open_concatenated(lf), rp, edits_for(f.name, rp, f.part.st.st_uid));
            release_layout(e);
            e.attr = attributes(rp, e.judged_parts());
            out_.entries.push_back(std::move(e));
        } catch (const Error& e) {
            model_problem(rp, f.name, e, "");
        }
        return true;
    }

    // ---- rule 11: KV edits (gguf/model/catalog_kv.hpp) --------------------------------------

    /// The edits of the model `name` shown at `rp` (first part owned by `owner`) of the
    /// directory being scanned (none outside a scan). Throws for a bad sidecar.
    KvOverrides edits_for(const std::string& name, const std::string& rp, uid_t owner) {
        return edits_ ? edits_->for_model(name, rp, owner) : KvOverrides{};
    }

    /// The end of a directory's edits: watches the files they read, keeps their notes.
    void finish_edits() {
        watch_edit_files();
        if (edits_) {
            for (Problem& n : edits_->notes()) out_.notes.push_back(std::move(n));
            edits_->notes().clear();
        }
        edits_ = nullptr;
    }

    /// A model that could not be planned: the Problem (rule 11 marks a refused global edit).
    /// `suffix` is appended to the reason when no edit was involved (the caller's own wording).
    void model_problem(const std::string& rp, const std::string& name, const Error& e, const char* suffix) {
        if (edits_ && edits_->applies_to(name)) {
            out_.problems.push_back(edits_->problem(rp, name, e));
        } else {
            problem(rp, std::string(e.what()) + suffix);
        }
    }

    /// A single GGUF file `f` (a companion by rules 4 and 9) with edits: served edited at `rp`
    /// (or a Problem); returns true. False: serve it as it is (edit_single_file).
    bool edited_single(const Listed& f, const std::string& rp) {
        if (!edits_) return false;
        EditedFile r = edit_single_file(*edits_, f.part, f.name, rp);
        if (r.entry) {
            release_layout(*r.entry);
            r.entry->attr = attributes(rp, r.entry->judged_parts());
            out_.entries.push_back(std::move(*r.entry));
        }
        if (r.problem) out_.problems.push_back(std::move(*r.problem));
        return r.entry || r.problem;
    }

    /// Watches the local files the edits read (str:@FILE), so that changing one is seen.
    void watch_edit_files() {
        if (!listing_ && edits_) {
            for (WatchedPath& w : edits_->watched_files()) out_.watched.push_back(std::move(w));
        }
    }

    /// Why the real entry at `path` may not take the name of a merged set whose first shard is
    /// owned by `owner` (kv_file_trust_problem on its lstat), or "" when it may. A directory, a
    /// listed (remote) entry, or one that cannot be lstat()ed keeps rule 6 as it is.
    std::string shadow_problem(const std::string& path, uid_t owner) const {
        if (listing_) return "";
        struct stat st {};
        if (::lstat(path.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) return "";
        return kv_file_trust_problem(st, owner);
    }

    void problem(const std::string& path, const std::string& reason) {
        out_.problems.push_back(Problem{path, reason});
    }

    /// Records a Note (rule 8) for `path` unless `reason` is empty.
    void note(const std::string& path, std::string reason) {
        if (!reason.empty()) out_.notes.push_back(Problem{path, std::move(reason)});
    }

    /// Reads directory `abs` shown at `rel` (catalog_dir.hpp): of the listing, else local.
    bool list(const std::string& abs, const std::string& rel, DirectoryNames* names) {
        if (listing_) {
            return catalog_dir::list_listed(*listing_, abs, rel, options_, budget_, &listed_directories_, names, out_);
        }
        return catalog_dir::list_local(abs, rel, options_, budget_, names, out_);
    }

    /// Rules 2-6 for the regular files of one directory. With `only_first`, just the set whose
    /// first shard has that name is looked at (no companions, no byte-split files).
    void scan_files(const std::string& abs, const std::string& rel, const std::vector<Listed>& files,
                    const std::set<std::string>& real_names, const std::string* only_first) {
        std::map<std::string, const Listed*> by_name;
        std::vector<std::string> names;
        for (const Listed& f : files) {
            by_name[f.name] = &f;
            names.push_back(f.name);
        }
        std::set<std::string> hidden;  // shard files and byte pieces (rule 4)
        DirectoryEdits edits(options_.overrides, &kv_budget_);  // rule 11
        edits_ = &edits;
        for (const Listed& f : files) edits.add_if_sidecar(f.name, f.part);

        // Rule 2: byte-split groups -> logical files.
        std::map<std::string, std::vector<LogicalFile>> group_files;
        // With only_first, only pieces of that set's shards matter.
        std::optional<ShardName> wanted = only_first ? parse_shard_name(*only_first) : std::nullopt;
        auto relevant = [&](const std::string& logical_name) {
            if (!wanted) return true;
            auto sn = parse_shard_name(logical_name);
            return sn && sn->prefix == wanted->prefix && sn->count == wanted->count;
        };
        for (const ByteSplitGroup& g : detect_byte_splits(names)) {
            hidden.insert(g.pieces.begin(), g.pieces.end());
            if (!relevant(g.logical)) continue;
            if (!g.problem.empty()) {
                problem(join(rel, g.logical), abs + "/" + g.problem + "; not shown");
                continue;
            }
            LogicalFile lf;
            lf.path = abs + "/" + g.logical;
            for (const std::string& p : g.pieces) lf.parts.push_back(by_name.at(p)->part);
            try {
                for (size_t i = 1; i < lf.parts.size(); ++i) {
                    if (starts_with_gguf_magic(lf.parts[i])) {
                        throw Error(Code::BadMagic, lf.parts[i].path + ": starts with GGUF, so it is a GGUF file of " +
                                                        "its own, not a byte piece of " + g.logical + "; not shown");
                    }
                }
            } catch (const Error& e) {
                problem(join(rel, g.logical), e.what());
                continue;
            }
            group_files[g.logical].push_back(std::move(lf));
        }

        // The logical files by name, for finding shards: real files, then byte-split shards.
        std::map<std::string, LogicalFile> logical;
        for (const Listed& f : files) {
            if (hidden.count(f.name)) continue;
            LogicalFile lf;
            lf.path = f.part.path;
            lf.parts.push_back(f.part);
            logical.emplace(f.name, std::move(lf));
        }
        std::vector<Candidate> candidates;
        for (auto& [name, lfs] : group_files) {
            const std::string rp = join(rel, name);
            if (parse_shard_name(name)) {
                // A shard made of pieces: resolved by name, validated with its set.
                if (real_names.count(name)) {
                    for (const auto& lf : lfs) {
                        problem(rp, lf.parts.front().path + ": name clash: a real file " + name +
                                        " exists, so these byte pieces are not used");
                    }
                    continue;
                }
                std::sort(lfs.begin(), lfs.end(), [](const LogicalFile& a, const LogicalFile& b) {
                    return base_name(a.parts.front().path) < base_name(b.parts.front().path);
                });
                for (size_t i = 1; i < lfs.size(); ++i) {
                    problem(rp, lfs[i].parts.front().path + ": name clash: shard " + name + " is already made of " +
                                    lfs[0].parts.front().path + " and its pieces; not used");
                }
                logical.emplace(name, std::move(lfs[0]));
                continue;
            }
            if (only_first) continue;
            for (auto& lf : lfs) {
                try {
                    OpenLogicalFile open = OpenLogicalFile::open(lf);
                    Header h = read_header(open);
                    if (has_split_count_above_one(h)) {
                        throw Error(Code::BadSplit, lf.path + ": is a shard of a gguf-split set (key 'split.count' "
                                                    "above 1) under a name that is not a shard name");
                    }
                    Candidate c;
                    c.name = name;
                    c.first_part = base_name(lf.parts.front().path);
                    const KvOverrides overrides = edits.applies_to(name)
                                                      ? edits.for_model(name, rp, lf.parts.front().st.st_uid)
                                                      : KvOverrides{};
                    if (!overrides.empty()) {
                        c.entry = edited_file_entry(h, open.file(), rp, EntryKind::ByteSplit, overrides);
                        release_layout(c.entry);
                    } else {
                        c.entry.kind = EntryKind::ByteSplit;
                        c.entry.tensor_count = h.tensors.size();
                        c.entry.members.push_back(open.file());
                        set_layout(c.entry, concatenation_layout(open.file()));
                    }
                    candidates.push_back(std::move(c));
                } catch (const Error& e) {
                    model_problem(rp, name, e, "; not shown");
                }
            }
        }

        // Rule 3: split sets among the logical names.
        struct SetSeen {
            bool has_first = false;
            std::set<uint32_t> indexes;  // the shard numbers listed
        };
        std::map<std::pair<std::string, uint32_t>, SetSeen> sets;  // (prefix, count) -> its shards
        for (const auto& [name, lf] : logical) {
            auto sn = parse_shard_name(name);
            if (!sn) continue;
            if (by_name.count(name)) hidden.insert(name);
            SetSeen& seen = sets[{sn->prefix, sn->count}];
            seen.has_first = seen.has_first || sn->index == 1;
            seen.indexes.insert(sn->index);
        }
        auto resolve = [&](const std::string& path) -> std::optional<LogicalFile> {
            if (path.size() <= abs.size() + 1 || path.compare(0, abs.size() + 1, abs + "/") != 0) return std::nullopt;
            auto it = logical.find(path.substr(abs.size() + 1));
            if (it == logical.end()) return std::nullopt;
            return it->second;
        };
        for (const auto& [key, seen] : sets) {
            const bool has_first = seen.has_first;
            const bool incomplete = seen.indexes.size() < key.second;
            const std::string merged = key.first + ".gguf";
            const std::string first = shard_path(key.first, 1, key.second);
            if (only_first && first != *only_first) continue;
            const std::string rp = join(rel, merged);
            if (!has_first) {
                problem(rp, abs + "/" + first + ": missing shard 1 of " + std::to_string(key.second) + "; not shown");
                out_.problems.back().incomplete = true;
                continue;
            }
            try {
                SplitSet set = SplitSet::open(abs + "/" + first, resolve);
                Candidate c;
                c.name = merged;
                c.entry = merged_set_entry(set, join(rel, merged),
                                           edits.for_model(merged, rp, set.shards().front().file.parts.front().st.st_uid));
                release_layout(c.entry);
                c.first_part = base_name(c.entry.members.front().parts.front().path);
                candidates.push_back(std::move(c));
            } catch (const Error& e) {
                model_problem(rp, merged, e, "; not shown");
                if (incomplete) out_.problems.back().incomplete = true;
            }
        }
        if (wanted && !sets.count({wanted->prefix, wanted->count})) {
            problem(*only_first, abs + "/" + *only_first + ": not found in the listing of its directory");
        }

        // Rule 6: real names win; then the first source name in byte order.
        std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
            return std::tie(a.name, a.first_part) < std::tie(b.name, b.first_part);
        });
        std::map<std::string, std::string> taken;  // virtual name -> first source path
        std::set<std::string> refused_shadows;     // real files that may not hide a merged set
        for (Candidate& c : candidates) {
            const std::string rp = join(rel, c.name);
            const std::string first_path = c.entry.members.front().parts.front().path;
            if (real_names.count(c.name) && !refused_shadows.count(c.name)) {
                // Rule 11's owner rule: in a shared folder, another user's file must not hide
                // (or stand in for) the model.
                const std::string why = shadow_problem(abs + "/" + c.name, c.entry.members.front().parts.front().st.st_uid);
                if (why.empty()) {
                    // In a shard view the real file is not served under its name but as its view's
                    // shards (README "Publishing a model as shards").
                    problem(rp, first_path + ": name clash: a real file " + c.name + " exists in " + abs +
                                    (options_.split_view ? " and wins (it is served as the shards of its view)"
                                                         : " and is served instead") +
                                    "; not shown");
                    continue;
                }
                refused_shadows.insert(c.name);
                problem(rp, abs + "/" + c.name + ": " + why + ", so it does not hide the merged model from " +
                                first_path + ", which is served; not shown");
            }
            auto it = taken.find(c.name);
            if (it != taken.end()) {
                problem(rp, first_path + ": name clash: " + c.name + " is already served from " + it->second +
                                "; not shown");
                continue;
            }
            taken.emplace(c.name, first_path);
            c.entry.path = rp;
            c.entry.attr = attributes(rp, c.entry.judged_parts());
            out_.entries.push_back(std::move(c.entry));
        }
        if (only_first) {
            finish_edits();
            return;
        }

        // Rule 4: companions, and with show_shards the hidden files; rule 9 first.
        for (const Listed& f : files) {
            bool is_hidden = hidden.count(f.name) > 0;
            if (is_hidden && !options_.show_shards) continue;
            if (!is_hidden && is_kv_sidecar_name(f.name)) continue;  // rule 11
            if (!is_hidden && refused_shadows.count(f.name)) continue;  // rule 11's owner rule
            if (!is_hidden && joined_set(f, join(rel, f.name))) continue;
            if (!is_hidden && edited_single(f, join(rel, f.name))) continue;
            add_as_is(f, join(rel, f.name), is_hidden ? EntryKind::Shard : EntryKind::Companion);
        }
        for (Problem& p : edits.orphans(rel, out_.problems)) out_.problems.push_back(std::move(p));
        finish_edits();
    }

    /// Serves the regular file `f` as it is at `rp` (rule 4).
    void add_as_is(const Listed& f, const std::string& rp, EntryKind kind) {
        CatalogEntry e;
        e.path = rp;
        e.kind = kind;
        LogicalFile lf;
        lf.path = f.part.path;
        lf.parts.push_back(f.part);
        set_layout(e, concatenation_layout(lf));
        e.members.push_back(std::move(lf));
        e.attr = attributes(e.path, e.judged_parts());
        out_.entries.push_back(std::move(e));
    }

    const CatalogOptions& options_;
    Catalog& out_;
    DirectoryListing* listing_ = nullptr;
    DirectoryEdits* edits_ = nullptr;  // rule 11: the directory being scanned (scan_files, single_set)
    ino_t listed_directories_ = 0;
    std::vector<Ancestor> ancestors_;
    std::map<std::pair<dev_t, ino_t>, std::string> visited_;  // every directory walked -> its path
    size_t directories_ = 0;
    AccessJudge judge_;
    catalog_dir::NameBudget budget_;  // rule 7, over all directories
    KvReadBudget kv_budget_;          // rule 11: bytes of sidecars and @FILEs, over all directories
};

}  // namespace

CatalogEntry merged_set_entry(const SplitSet& set, const std::string& path) {
    return merged_set_entry(set, path, KvOverrides{});
}

CatalogEntry merged_set_entry(const SplitSet& set, const std::string& path, const KvOverrides& overrides) {
    CatalogEntry e;
    e.path = path;
    e.kind = EntryKind::MergedSet;
    e.tensor_count = set.tensor_count();
    for (const Shard& s : set.shards()) e.members.push_back(s.file);
    e.layout = plan_merge(set, overrides);
    e.bytes = e.layout.size();
    if (!overrides.empty()) record_kv_edits(e, overrides, e.layout);
    e.attr = file_attributes(e.judged_parts());
    return e;
}

const char* entry_kind_name(EntryKind kind) noexcept {
    switch (kind) {
        case EntryKind::MergedSet: return "merged-set";
        case EntryKind::ByteSplit: return "byte-split";
        case EntryKind::Companion: return "companion";
        case EntryKind::Shard: return "shard";
        case EntryKind::SplitShard: return "split-shard";
    }
    return "?";
}

const char* entry_label(EntryKind kind, const std::string& path) noexcept {
    static const std::string kExt = ".gguf";
    const bool gguf_name = path.size() > kExt.size() && path.compare(path.size() - kExt.size(), kExt.size(), kExt) == 0;
    return kind == EntryKind::Companion && gguf_name ? "single-file model" : entry_kind_name(kind);
}

std::vector<std::string> CatalogEntry::access_paths() const {
    std::vector<std::string> out;
    for (const LogicalFile& m : members) {
        for (const FilePart& p : m.parts) {
            if (part_has_local_path(p)) out.push_back(p.path);
        }
    }
    for (const FilePart& p : edit_files) {
        if (part_has_local_path(p)) out.push_back(p.path);
    }
    return out;
}

std::vector<FilePart> CatalogEntry::judged_parts() const {
    std::vector<FilePart> out = parts();
    out.insert(out.end(), edit_files.begin(), edit_files.end());
    return out;
}

namespace {

/// The documented order: directories and entries by path, problems and notes by path then reason.
void sort_catalog(Catalog& out) {
    auto by_path = [](const auto& a, const auto& b) { return a.path < b.path; };
    std::sort(out.directories.begin(), out.directories.end(), by_path);
    std::sort(out.entries.begin(), out.entries.end(), by_path);
    auto by_path_reason = [](const Problem& a, const Problem& b) {
        return std::tie(a.path, a.reason) < std::tie(b.path, b.reason);
    };
    std::sort(out.problems.begin(), out.problems.end(), by_path_reason);
    std::sort(out.notes.begin(), out.notes.end(), by_path_reason);
}

/// The options of the walk: a shard view plans its shards from the models' layouts.
CatalogOptions walk_options(const CatalogOptions& options) {
    CatalogOptions o = options;
    if (o.split_view) o.keep_layouts = true;
    return o;
}

}  // namespace

Catalog build_catalog(const std::string& source, const CatalogOptions& options) {
    Catalog out;
    out.source = source;
    struct stat st {};
    if (::stat(source.c_str(), &st) != 0) {
        int e = errno;
        throw Error(Code::Io, source + ": " + std::strerror(e), e);
    }
    const CatalogOptions walk = walk_options(options);  // outlives the walker, which keeps a reference
    Walker w(walk, out);
    if (S_ISDIR(st.st_mode)) {
        w.walk(source, "", st, 0);
    } else if (S_ISREG(st.st_mode)) {
        struct stat dir_st {};
        if (::stat(dir_name(source).c_str(), &dir_st) != 0) dir_st = st;
        w.single_set(source, dir_st);
    } else {
        throw Error(Code::Io, source + ": not a directory or a regular file");
    }
    sort_catalog(out);
    if (options.split_view) apply_shard_view(out, *options.split_view, options.keep_layouts);
    return out;
}

namespace {

/// A listing's directories have no time of their own (a server lists files, not folders): each
/// gets the newest mtime and ctime of the files beneath it, or the time of the listing when it
/// holds none, so that `ls -l`, make and rsync never see 1970-01-01.
void date_listed_directories(Catalog& out) {
    std::map<std::string, std::pair<timespec, timespec>> newest;  // directory path -> mtime, ctime
    auto later = [](const timespec& a, const timespec& b) {
        return a.tv_sec != b.tv_sec ? a.tv_sec > b.tv_sec : a.tv_nsec > b.tv_nsec;
    };
    for (const CatalogEntry& e : out.entries) {
        std::string dir = e.path;
        do {
            const size_t slash = dir.rfind('/');
            dir = slash == std::string::npos ? std::string() : dir.substr(0, slash);
            auto& [m, c] = newest[dir];
            if (later(e.attr.mtime, m)) m = e.attr.mtime;
            if (later(e.attr.ctime, c)) c = e.attr.ctime;
        } while (!dir.empty());
    }
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    for (CatalogDirectory& d : out.directories) {
        auto it = newest.find(d.path);
        const bool dated = it != newest.end() && it->second.first.tv_sec > 0;
        d.attr.mtime = dated ? it->second.first : now;
        d.attr.ctime = dated && it->second.second.tv_sec > 0 ? it->second.second : d.attr.mtime;
    }
}

}  // namespace

Catalog build_catalog(DirectoryListing& listing, const CatalogOptions& options) {
    Catalog out;
    out.source = listing.root();
    const CatalogOptions walk = walk_options(options);
    Walker w(walk, out, &listing);
    struct stat st {};
    st.st_mode = S_IFDIR | 0555;
    st.st_uid = ::getuid();
    st.st_gid = ::getgid();
    w.walk(out.source, "", st, 0);
    date_listed_directories(out);
    sort_catalog(out);
    if (options.split_view) apply_shard_view(out, *options.split_view, options.keep_layouts);
    return out;
}

}  // namespace gguf
