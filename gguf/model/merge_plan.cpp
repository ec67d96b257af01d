#include "gguf/model/merge_plan.hpp"

#include <string>
#include <utility>

#include "gguf/format/file_plan.hpp"
#include "gguf/error.hpp"
#include "gguf/format/format.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/format/writer.hpp"

namespace gguf {

VirtualLayout plan_merge(const SplitSet& set) { return plan_merge(set, KvOverrides{}); }

VirtualLayout plan_merge(const SplitSet& set, const KvOverrides& overrides) {
    const Header& h0 = set.shards().front().header;
    std::vector<KeyValue> kvs;
    kvs.reserve(h0.kvs.size());
    for (const auto& kv : h0.kvs) {
        if (kv.key != kKeySplitCount) kvs.push_back(kv);
    }
    kvs.push_back(KeyValue{std::string(kKeySplitCount), Value::u16(0)});
    if (!overrides.empty()) kvs = apply_kv_overrides(kvs, overrides);

    std::vector<PlacedTensor> tensors;
    tensors.reserve(set.tensor_count());
    std::vector<LogicalFile> files;
    files.reserve(set.shards().size());
    bool concatenations = false;
    for (uint32_t i = 0; i < set.shards().size(); ++i) {
        const Header& h = set.shards()[i].header;
        for (const auto& ti : h.tensors) {
            tensors.push_back(PlacedTensor{ti, i, h.data_offset + ti.offset});
        }
        files.push_back(set.shards()[i].file);
        const LogicalFile& f = set.shards()[i].file;
        concatenations = concatenations || f.is_concatenation() || f.parts.front().offset != 0;
    }
    VirtualLayout logical = plan_gguf_file(kvs, tensors, h0.alignment);
    // Shards of one file each: shard index == part index, nothing to cut.
    if (concatenations) return flatten_sources(std::move(logical), files);
    return logical;  // moved, not copied: the header of a large vocabulary is held once
}

std::vector<FilePart> set_parts(const SplitSet& set) {
    std::vector<FilePart> parts;
    parts.reserve(set.shards().size());
    for (const auto& s : set.shards()) parts.insert(parts.end(), s.file.parts.begin(), s.file.parts.end());
    return parts;
}

VirtualFile open_merged(const SplitSet& set) { return VirtualFile::open(plan_merge(set), set_parts(set)); }

VirtualFile open_merged(const SplitSet& set, const KvOverrides& overrides) {
    return VirtualFile::open(plan_merge(set, overrides), set_parts(set));
}

VirtualLayout plan_edited_file(const Header& header, const LogicalFile& file, const KvOverrides& overrides) {
    if (has_split_count_above_one(header)) {
        throw Error(Code::BadSplit, file.path + ": is one shard of a split set (split.count above 1); overrides "
                                                "apply to the merged set: give its first shard");
    }
    std::vector<KeyValue> kvs = apply_kv_overrides(header.kvs, overrides);
    if (header.tensors.empty()) return plan_gguf_file(kvs, {}, header.alignment);
    // The header with the original tensor infos (offsets are relative to the data section, so
    // they stay); its padding in memory unless the alignment is huge (as plan_gguf_file does).
    const uint64_t alignment = header.alignment;
    std::string bytes = render_header(kvs, header.tensors, alignment <= kMaxHeaderPadding ? alignment : 1);
    const uint64_t data_start = align_up(bytes.size(), alignment);
    const uint64_t data_size = file.size() > header.data_offset ? file.size() - header.data_offset : 0;
    if (data_start > static_cast<uint64_t>(INT64_MAX) - data_size) {
        throw Error(Code::TooLarge, file.path + ": the edited file would be larger than 2^63 - 1 bytes");
    }
    VirtualLayout logical;
    logical.append_header(std::move(bytes));
    logical.append_zeros(data_start - logical.size());
    logical.append_source(0, header.data_offset, data_size);
    return flatten_sources(std::move(logical), {file});
}

VirtualFile open_edited(const LogicalFile& file, const KvOverrides& overrides) {
    Header header = read_header(OpenLogicalFile::open(file));
    VirtualLayout layout = plan_edited_file(header, file, overrides);
    header = Header{};  // the parsed header is not needed once the new one is rendered
    return VirtualFile::open(std::move(layout), file.parts);
}

}  // namespace gguf
