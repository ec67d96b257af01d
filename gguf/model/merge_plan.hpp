// The merge plan: the merged GGUF file of a split set, as `gguf-split --merge` writes it. The
// mount serves this plan and `gguf-mount merge` writes it to disk, so both give the same bytes.
#pragma once

#include <vector>

#include "gguf/bytes/layout.hpp"
#include "gguf/bytes/logical_file.hpp"
#include "gguf/bytes/virtual_file.hpp"
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

/// The physical parts of every shard of `set`, in shard order: the sources of plan_merge(set).
std::vector<FilePart> set_parts(const SplitSet& set);

/// The merged file of a validated split set, ready to read: VirtualFile::open(plan_merge(set),
/// set_parts(set)), every physical part of every shard opened once. Throws like
/// VirtualFile::open (gguf::Error(Io) naming a part that cannot be opened, Code::BadSplit when a
/// part changed since the set was read).
VirtualFile open_merged(const SplitSet& set);

}  // namespace gguf
