// Shard views: every model of a catalog shown as the gguf-split shards `gguf-mount split` would
// write for it, without writing them. Each shard is a synthesized header plus byte ranges of the
// model's physical parts, so it is read, cached and access-checked like the merged view.
//
// Example (--split-max-tensors 7): SOURCE holding kvzoo-0000k-of-00007.gguf (a set, served
// merged as kvzoo.gguf) and README.md becomes
//   kvzoo-00001-of-00007.gguf ... kvzoo-00007-of-00007.gguf   (kind split-shard)
//   README.md                                                 (companion, as it is)
// and each shard's bytes equal `gguf-mount split --split-max-tensors 7 kvzoo.gguf kvzoo`.
//
// Rules:
//  - A model is a merged set, a byte-split GGUF file, or a companion whose name ends in
//    ".gguf" and whose header reads as a GGUF file that is not a shard (split.count <= 1);
//    companions named mmproj* are kept as they are (llama.cpp opens a projector as one file);
//  - the plan is plan_split over the header of the model's served file (the merged view for a
//    set), so the shards are byte-identical to splitting that file; each shard's Source
//    extents are mapped through the model's layout to its physical parts;
//  - shard NAME-0000i-of-0000N.gguf sits where the model is, NAME being the model's name
//    without ".gguf"; a shard name already served by another entry (or directory) makes the
//    model a Problem (no partial sets);
//  - a plan the options cannot make (a first tensor larger than --split-max-size, ...) is a
//    Problem carrying plan_split's message, as `split` refuses it;
//  - a shard's members are the model's files it reads (and, for shard 1, the file its KV pairs
//    come from), so opening it opens only those and access is checked on them; its mode is the
//    model's (narrowed by every part, as the merged view's); its identity names the state of
//    every file of the model, so a change to any of them is a new generation of every shard.
#pragma once

#include <string>
#include <vector>

#include "gguf/model/catalog.hpp"
#include "gguf/model/split_plan.hpp"

namespace gguf {

/// The identity of split options in entry fingerprints and messages, e.g.
/// "--split-max-tensors 7 --no-tensor-first-split" or "--split-max-size 5000000".
std::string split_options_text(const SplitOptions& options);

/// True when `entry` is shown as shards in a shard view (rules above). May read the header of
/// a companion (a short read of its first bytes); false when it cannot be read or parsed.
bool is_shard_view_model(const CatalogEntry& entry);

/// The shard entries of model `model`, whose layout must be planned (CatalogOptions::
/// keep_layouts): kind SplitShard, path NAME-0000i-of-0000N.gguf beside the model, layout over
/// its members' parts (the model's members it reads), attr and KV edits of the model,
/// tensor_count of the shard, view_of the model's path, identity naming the options, the shard
/// and the sha256 of the state of the model's files (sha256_hex of gguf::files_state: a fixed
/// 64 characters, whatever the number of files). Reads only the model's header.
/// Throws gguf::Error: plan_split's errors (Code::BadArgument), and the header reader's
/// (the model's parts cannot be opened or changed).
std::vector<CatalogEntry> shard_view_entries(const CatalogEntry& model, const SplitOptions& options);

/// Replaces every model of `catalog` by its shard entries (shard_view_entries), keeping the
/// documented sort order; a model that cannot be planned, or whose shard names clash, becomes a
/// Problem (path: the model's path; reason: its first part, what went wrong, "; not shown").
/// Without `keep_layouts` the shards' layouts are released once their sizes are known.
void apply_shard_view(Catalog& catalog, const SplitOptions& options, bool keep_layouts);

}  // namespace gguf
