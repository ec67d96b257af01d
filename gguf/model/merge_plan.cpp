#include "gguf/model/merge_plan.hpp"

#include <string>
#include <utility>

#include "gguf/format/file_plan.hpp"
#include "gguf/format/format.hpp"

namespace gguf {

VirtualLayout plan_merge(const SplitSet& set) {
    const Header& h0 = set.shards().front().header;
    std::vector<KeyValue> kvs;
    kvs.reserve(h0.kvs.size());
    for (const auto& kv : h0.kvs) {
        if (kv.key != kKeySplitCount) kvs.push_back(kv);
    }
    kvs.push_back(KeyValue{std::string(kKeySplitCount), Value::u16(0)});

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

}  // namespace gguf
