// The merge plan: the merged GGUF file of a split set, as `gguf-split --merge` writes it. The
// mount serves this plan and `gguf-mount merge` writes it to disk, so both give the same bytes.
#pragma once

#include <vector>

#include "gguf/bytes/layout.hpp"
#include "gguf/bytes/logical_file.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "gguf/model/kv_override.hpp"
#include "gguf/model/split_set.hpp"

namespace gguf {

/// The merged file of a split set, exactly as `gguf-split --merge` writes it:
///  - GGUF v3; the KV pairs of shard 1 in order, except split.count, which is rewritten to
///    u16 0 and so moves to the end of the list (the reference "sets" it, which removes and
///    re-appends the key); split.no and split.tensors.count stay;
///  - tensor infos of shard 1, then shard 2, ..., each in file order, offsets re-packed;
///  - each tensor's bytes from its shard, zero padded.
/// Alignment: shard 1's general.alignment, or 32 (the reference always uses 32; for 32 the
/// result is byte-identical, for other values ours is the one a strict reader accepts).
/// Extent sources index the flattened list of physical parts of the shards
/// (gguf::flatten_sources over the shards' files; for shards of one file each, the shard
/// index), as set_parts(set) lists them.
VirtualLayout plan_merge(const SplitSet& set);

/// The merged file of `set` with KV overrides: the KV list above (split.count rewritten to 0 at
/// the end, as the merge writes it) edited by apply_kv_overrides, the rest as plan_merge(set);
/// only the padding before the data section follows the new header size. Empty `overrides`
/// give exactly plan_merge(set). Throws what apply_kv_overrides throws.
VirtualLayout plan_merge(const SplitSet& set, const KvOverrides& overrides);

/// The physical parts of every shard of `set`, in shard order: the sources of plan_merge(set).
std::vector<FilePart> set_parts(const SplitSet& set);

/// The merged file of a validated split set, ready to read: VirtualFile::open(plan_merge(set),
/// set_parts(set)), every physical part of every shard opened once. Throws like
/// VirtualFile::open (gguf::Error(Io) naming a part that cannot be opened, Code::BadSplit when a
/// part changed since the set was read).
VirtualFile open_merged(const SplitSet& set);

/// open_merged with KV overrides (plan_merge(set, overrides)). Throws like both.
VirtualFile open_merged(const SplitSet& set, const KvOverrides& overrides);

/// A single unsplit GGUF file (one file, or byte-split parts read as one) whose header was read
/// as `header`, served with KV overrides: the header rendered from
/// apply_kv_overrides(header.kvs, overrides) and the same tensor infos (offsets unchanged;
/// n_dims written without trailing 1s, as ggml's writer writes them), zero padding to the
/// file's alignment, then the original bytes [header.data_offset, end of file) as they are.
/// A file without tensors has no data section: it is the new header padded to 32 bytes (what
/// ggml's writer writes). Source extents index file.parts. Throws gguf::Error(Code::BadSplit)
/// when `header` has split.count above 1 (a shard: merge its set instead), Code::TooLarge when
/// the result would exceed 2^63 - 1 bytes, and what apply_kv_overrides throws.
VirtualLayout plan_edited_file(const Header& header, const LogicalFile& file, const KvOverrides& overrides);

/// The edited single file, ready to read: reads the header of `file` (read_header, strict),
/// plans it (plan_edited_file) and opens its parts (VirtualFile::open). Throws like those.
VirtualFile open_edited(const LogicalFile& file, const KvOverrides& overrides);

}  // namespace gguf
