#include "gguf/model/shard_view.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "gguf/bytes/file_io.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "common/text.hpp"
#include "gguf/error.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/model/catalog_kv.hpp"
#include "gguf/model/split_set.hpp"

namespace gguf {

namespace {

/// The header of the file `entry` serves (its layout over its parts), read as a reader of the
/// mount would read it. Throws like VirtualFile::open and read_header.
Header served_header(const CatalogEntry& entry) {
    const VirtualFile file = VirtualFile::open(entry.layout, entry.parts());
    auto pread = [&file](void* dst, size_t len, uint64_t offset) -> ssize_t {
        return file.read(offset, len, static_cast<char*>(dst));
    };
    return read_header(pread, file.size(), entry.path);
}

/// `in` with its header bytes, Header and Zeros extents kept and each Source extent `e`
/// replaced by what `source(e, out)` appends to `out`.
template <typename Fn>
VirtualLayout rewrite_sources(VirtualLayout in, Fn&& source) {
    VirtualLayout out;
    out.set_header(in.take_header());
    for (const Extent& e : in.extents()) {
        if (e.kind == Extent::Kind::Header) {
            out.append_header_range(e.source_offset, e.length);
        } else if (e.kind == Extent::Kind::Zeros) {
            out.append_zeros(e.length);
        } else {
            source(e, out);
        }
    }
    return out;
}

/// `shard` (Source extents: source 0, offsets in the model's served file) with every Source
/// extent replaced by what `model` (the model's layout over its physical parts) has there.
VirtualLayout map_through(VirtualLayout shard, const VirtualLayout& model, const std::string& name) {
    return rewrite_sources(std::move(shard), [&](const Extent& e, VirtualLayout& out) {
        uint64_t mapped = 0;
        model.for_each_piece(e.source_offset, e.length, [&](const Piece& p) {
            mapped += p.length;
            if (p.extent->kind == Extent::Kind::Zeros) {
                out.append_zeros(p.length);
            } else if (p.extent->kind == Extent::Kind::Source) {
                out.append_source(p.extent->source, p.extent->source_offset + p.skip, p.length);
            } else {
                // Tensor data never lies in a synthesized header; a layout that says so is a bug.
                throw Error(Code::BadArgument, name + ": tensor data inside the served header at byte " +
                                                   std::to_string(p.extent->start + p.skip));
            }
        });
        if (mapped != e.length) {
            throw Error(Code::Truncated, name + ": tensor data at byte " + std::to_string(e.source_offset) +
                                             " runs past the end of the file (" +
                                             std::to_string(model.size()) + " bytes)");
        }
    });
}

/// Keeps of `model_members` only those `layout` reads (and member 0 when `keep_first`: the KV
/// pairs of shard 1 come from its header), renumbering the Source extents to the kept members'
/// parts, so that opening a shard opens only the files it reads. Returns the kept members.
std::vector<LogicalFile> compact_members(VirtualLayout& layout, const std::vector<LogicalFile>& model_members,
                                         bool keep_first) {
    std::vector<uint32_t> member_of;  // part index -> member index
    std::vector<uint32_t> first_part;  // member index -> index of its first part
    for (uint32_t m = 0; m < model_members.size(); ++m) {
        first_part.push_back(static_cast<uint32_t>(member_of.size()));
        member_of.insert(member_of.end(), model_members[m].parts.size(), m);
    }
    std::vector<bool> used(model_members.size(), false);
    if (keep_first && !used.empty()) used[0] = true;
    for (const Extent& e : layout.extents()) {
        if (e.kind == Extent::Kind::Source) used.at(member_of.at(e.source)) = true;
    }
    std::vector<LogicalFile> kept;
    std::vector<uint32_t> new_first(model_members.size(), 0);
    uint32_t parts = 0;
    for (uint32_t m = 0; m < model_members.size(); ++m) {
        if (!used[m]) continue;
        new_first[m] = parts;
        parts += static_cast<uint32_t>(model_members[m].parts.size());
        kept.push_back(model_members[m]);
    }
    layout = rewrite_sources(std::move(layout), [&](const Extent& e, VirtualLayout& out) {
        const uint32_t m = member_of[e.source];
        out.append_source(new_first[m] + (e.source - first_part[m]), e.source_offset, e.length);
    });
    return kept;
}

/// Frees `e`'s layout (e.bytes keeps the size); moved out so no capacity is kept.
void release(CatalogEntry& e) { VirtualLayout released(std::move(e.layout)); }

}  // namespace

std::string split_options_text(const SplitOptions& o) {
    std::string s = o.mode == SplitOptions::Mode::Tensors ? "--split-max-tensors " + std::to_string(o.max_tensors)
                                                          : "--split-max-size " + std::to_string(o.max_bytes);
    if (o.no_tensor_first_split) s += " --no-tensor-first-split";
    return s;
}

bool is_shard_view_model(const CatalogEntry& entry) {
    if (entry.kind == EntryKind::MergedSet || entry.kind == EntryKind::ByteSplit) return true;
    if (entry.kind != EntryKind::Companion) return false;
    const std::string name = base_name(entry.path);
    if (!ends_with(name, ".gguf") || name.rfind("mmproj", 0) == 0) return false;
    try {
        const OpenLogicalFile file = OpenLogicalFile::open(entry.members.front());
        char magic[4] = {};
        if (file.pread(magic, sizeof magic, 0) != 4 || std::string(magic, 4) != "GGUF") return false;
        return !has_split_count_above_one(read_header(file));
    } catch (const Error&) {
        return false;  // served as it is, like any unreadable companion
    }
}

std::vector<CatalogEntry> shard_view_entries(const CatalogEntry& model, const SplitOptions& options) {
    std::vector<ShardPlan> plans;
    {
        const Header header = served_header(model);
        plans = plan_split(header, options);
    }
    const auto count = static_cast<uint32_t>(plans.size());
    const std::string prefix =
        ends_with(model.path, ".gguf") ? model.path.substr(0, model.path.size() - 5) : model.path;
    const std::string opts = split_options_text(options);
    // The state of every file of the model, as a digest: the text names each file, and every
    // shard's identity (kept twice, in its node and the inode table) holding all of it made a
    // view of N files keep N^2 file states (bench/README.md has the figure).
    const std::string model_state = sha256_hex(files_state(model.members));
    std::vector<CatalogEntry> out;
    out.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
        CatalogEntry e;
        e.path = shard_path(prefix, i + 1, count);
        e.kind = EntryKind::SplitShard;
        e.layout = map_through(std::move(plans[i].layout), model.layout, model.path);
        e.members = compact_members(e.layout, model.members, i == 0);
        e.bytes = e.layout.size();
        e.tensor_count = plans[i].tensors.size();
        e.attr = model.attr;
        // The model's KV edits make its header, and so every shard's bytes (shard 1 carries the
        // KV pairs): the shards show them and carry the model's header digest in their identity.
        e.kv_edits = model.kv_edits;  // shared, not copied
        e.header_digest = model.header_digest;
        e.edit_files = model.edit_files;  // judged and checked like the model (rule 8)
        e.view_of = model.path;
        // Every shard is a new generation when any file of the model changes.
        e.identity = "split-view " + opts + " shard " + std::to_string(i + 1) + " of " + std::to_string(count) +
                     " model files " + model_state;
        out.push_back(std::move(e));
    }
    return out;
}

void apply_shard_view(Catalog& catalog, const SplitOptions& options, bool keep_layouts) {
    std::vector<CatalogEntry> kept, models;
    for (CatalogEntry& e : catalog.entries) {
        (is_shard_view_model(e) ? models : kept).push_back(std::move(e));
    }
    // Names served by something else: other entries and every directory.
    std::set<std::string> taken;
    for (const CatalogEntry& e : kept) taken.insert(e.path);
    for (const CatalogDirectory& d : catalog.directories) taken.insert(d.path);

    for (CatalogEntry& model : models) {
        const std::string first = model.members.front().parts.empty() ? model.members.front().path
                                                                       : model.members.front().parts.front().path;
        std::vector<CatalogEntry> shards;
        try {
            shards = shard_view_entries(model, options);
        } catch (const Error& err) {
            std::string what = err.what();
            // Messages of the reader already name the file; plan_split's do not.
            if (what.rfind(first, 0) != 0 && what.rfind(model.path, 0) != 0) what = first + ": " + what;
            catalog.problems.push_back(Problem{model.path, what + "; not shown"});
            continue;
        }
        auto clash = std::find_if(shards.begin(), shards.end(),
                                  [&](const CatalogEntry& s) { return taken.count(s.path) > 0; });
        if (clash != shards.end()) {
            catalog.problems.push_back(Problem{model.path, first + ": name clash: " + clash->path +
                                                               " is already served; its shards are not shown"});
            continue;
        }
        for (CatalogEntry& s : shards) {
            taken.insert(s.path);
            if (!keep_layouts) release(s);
            kept.push_back(std::move(s));
        }
        release(model);
    }
    std::sort(kept.begin(), kept.end(), [](const CatalogEntry& a, const CatalogEntry& b) { return a.path < b.path; });
    catalog.entries = std::move(kept);
    std::sort(catalog.problems.begin(), catalog.problems.end(),
              [](const Problem& a, const Problem& b) { return std::tie(a.path, a.reason) < std::tie(b.path, b.reason); });
}

}  // namespace gguf
