// KV edits in the catalog (rule 11 of gguf/model/catalog.hpp): which sidecar belongs to which
// model, reading it (a local file, or a file of a remote listing), and the entries of models
// served with edits. The walker of catalog.cpp calls these; the rule itself is
// gguf/model/kv_override.hpp.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/format/header.hpp"
#include "gguf/error.hpp"
#include "gguf/model/catalog.hpp"
#include "gguf/model/kv_override.hpp"

namespace gguf {

/// True when `name` names a sidecar: "NAME.gguf.kv" with NAME not empty.
bool is_kv_sidecar_name(std::string_view name) noexcept;

/// The model a sidecar applies to: "x.gguf.kv" -> "x.gguf" (`sidecar_name` must be one).
std::string sidecar_model_name(const std::string& sidecar_name);

/// True when `name` may name a model that edits apply to: it ends in ".gguf".
bool is_gguf_name(std::string_view name) noexcept;

/// Reads the sidecar `part`. A local file (part_has_local_path): read_kv_sidecar by `rules`
/// (str:@FILE beneath its folder, owner rule, budget; Code::Untrusted when it may not apply). Otherwise (a remote listing) its bytes through its ByteSource, at
/// most kMaxSidecarBytes, str:@FILE refused (parse_kv_sidecar without a base directory). Throws
/// gguf::Error like those (Io naming it when it cannot be read, BadArgument "PATH:LINE: ...").
KvOverrides read_sidecar(const FilePart& part, const KvSidecarRules& rules = {});

/// The sidecar a mount applies to the model `first` names, for tools that take a model file
/// (`merge`): PREFIX.gguf.kv beside a first shard PREFIX-00001-of-N.gguf, FILE.kv beside any
/// other FILE ending in .gguf; "" for other names.
std::string sidecar_path_for(const std::string& first);

/// `first`'s edits followed by `then`'s.
KvOverrides concat_overrides(const KvOverrides& first, const KvOverrides& then);

/// Lowercase hex sha256 of `bytes` (OpenSSL).
std::string sha256_hex(std::string_view bytes);

/// Marks `e` as served with `overrides` (not empty): kv_edits = each KvEdit::spelled() in
/// order, header_digest = sha256_hex of `layout`'s header bytes (its identity, rule 11).
void record_kv_edits(CatalogEntry& e, const KvOverrides& overrides, const VirtualLayout& layout);

/// The local files the edits read (str:@FILE), for change detection.
std::vector<std::string> kv_edit_files(const KvOverrides& overrides);

/// The entry serving the single GGUF file `file` (header `header`, split.count at most 1) at
/// relative path `path` with `overrides` (not empty): kind `kind` (Companion for a plain file,
/// ByteSplit for pieces), layout plan_edited_file, tensor_count, kv_edits and header_digest.
/// Attributes are left for the caller (rule 8). Throws like plan_edited_file.
CatalogEntry edited_file_entry(const Header& header, const LogicalFile& file, const std::string& path,
                               EntryKind kind, const KvOverrides& overrides);

/// The edits of the models of one directory being scanned: its sidecars (by model name) and
/// the edits for every model (CatalogOptions::overrides). Sidecars are read when a model of
/// their name is planned, once.
class DirectoryEdits {
public:
    /// `global`: the edits of every model (kept by reference); `budget`: the scan's bound on the
    /// bytes sidecars and @FILEs may take (nullptr: per-file limits only).
    explicit DirectoryEdits(const KvOverrides& global, KvReadBudget* budget = nullptr)
        : global_(global), budget_(budget) {}

    /// When `name` is a sidecar's name, records `part` as the sidecar of its model and returns
    /// true (a sidecar is never served); else false.
    bool add_if_sidecar(const std::string& name, const FilePart& part);

    /// True when the model `name` is served with edits: a sidecar of its name, or global ones.
    bool applies_to(const std::string& name) const { return !global_.empty() || sidecars_.count(name) > 0; }

    /// The edits of the model `name` shown at relative path `rp`, whose first part is owned by
    /// `model_owner`: its sidecar's (read now by the rules of kv_override.hpp, with a fresh
    /// per-model budget), then the global ones; empty when none apply. A sidecar that may not
    /// speak for the model (Code::Untrusted) is left out and recorded in notes(). Throws
    /// gguf::Error for a sidecar that cannot be read or has a bad line (read_sidecar).
    KvOverrides for_model(const std::string& name, const std::string& rp, uid_t model_owner);

    /// Notes of the models served without their sidecar's edits (for_model), for Catalog::notes.
    std::vector<Problem>& notes() { return notes_; }

    /// The Problem of model `name` at relative path `path` that could not be planned: `error`'s
    /// message + "; not shown". refused_override is set when the message is about an edit of
    /// the global ones (it starts with their origin, "--override-kv: " and the like) rather
    /// than the model's sidecar.
    Problem problem(const std::string& path, const std::string& name, const Error& error) const;

    /// Sidecars whose model was never planned and that have no Problem of their own in
    /// `problems` (relative model path `rel`/NAME): one Problem each, "PATH: a sidecar, but
    /// there is no model NAME here; not applied".
    std::vector<Problem> orphans(const std::string& rel, const std::vector<Problem>& problems) const;

    /// True when the model `name` has a sidecar.
    bool has_sidecar(const std::string& name) const { return sidecars_.count(name) > 0; }

    /// For a SOURCE that is one file (not a directory listing): records FILE.kv beside the
    /// local file `file` as its sidecar when it is a regular file, and returns what to watch
    /// (FILE.kv, existing or not, so that adding one is seen).
    WatchedPath add_beside(const std::string& file);

    /// The local files the edits read so far (str:@FILE), stat()ed now, for change detection.
    std::vector<WatchedPath> watched_files() const;

private:
    const KvOverrides& global_;
    KvReadBudget* budget_ = nullptr;
    std::vector<Problem> notes_;
    std::map<std::string, FilePart> sidecars_;  // model name -> its sidecar
    std::set<std::string> planned_;             // model names for_model was asked about
    std::set<std::string> files_;
};

/// What edit_single_file made of a file.
struct EditedFile {
    std::optional<CatalogEntry> entry;  // served edited (attributes left to the caller)
    std::optional<Problem> problem;     // not shown
    // Neither: no edit applies, or it is not a GGUF file and has no sidecar: served as it is.
};

/// Rule 11 for the regular file `part` named `name`, shown at relative path `rp`, that rules 4
/// and 9 make a companion: when it is named *.gguf and edits apply to it, it is served edited
/// (edited_file_entry, kind Companion); a sidecar that cannot be applied (bad line, an edit that
/// does not fit, a file that is no readable GGUF) or a global edit that does not fit
/// (refused_override) make it a Problem. Never throws gguf::Error.
EditedFile edit_single_file(DirectoryEdits& edits, const FilePart& part, const std::string& name,
                            const std::string& rp);

}  // namespace gguf
