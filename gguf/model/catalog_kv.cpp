#include "gguf/model/catalog_kv.hpp"

#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cerrno>
#include <cstring>

#include "gguf/bytes/byte_source.hpp"
#include "common/text.hpp"
#include "gguf/error.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/bytes/file_io.hpp"
#include "gguf/model/merge_plan.hpp"
#include "gguf/model/split_set.hpp"

namespace gguf {

namespace {

constexpr std::string_view kGgufSuffix = ".gguf";

/// The whole part `part` through its ByteSource, at most kMaxSidecarBytes. Throws Io naming it.
std::string read_part_bytes(const FilePart& part) {
    if (part.size > kMaxSidecarBytes) {
        throw Error(Code::TooLarge, part.path + ": " + std::to_string(part.size) + " bytes, more than the " +
                                        std::to_string(kMaxSidecarBytes) + " a sidecar may have");
    }
    std::string bytes(static_cast<size_t>(part.size), '\0');
    const auto source = open_part(part, false);
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = source->pread(bytes.data() + done, bytes.size() - done, part.offset + done);
        if (n < 0) {
            const int e = static_cast<int>(-n);
            throw Error(Code::Io, part.path + ": read failed: " + std::strerror(e), e);
        }
        if (n == 0) throw Error(Code::Io, part.path + ": shorter than listed (" + std::to_string(done) + " bytes)");
        done += static_cast<size_t>(n);
    }
    return bytes;
}

}  // namespace

bool is_kv_sidecar_name(std::string_view name) noexcept {
    constexpr size_t kSuffix = kGgufSuffix.size() + kKvSidecarSuffix.size();
    return name.size() > kSuffix && ends_with(name, kKvSidecarSuffix) &&
           ends_with(name.substr(0, name.size() - kKvSidecarSuffix.size()), kGgufSuffix);
}

std::string sidecar_model_name(const std::string& sidecar_name) {
    return sidecar_name.substr(0, sidecar_name.size() - kKvSidecarSuffix.size());
}

bool is_gguf_name(std::string_view name) noexcept { return name.size() > kGgufSuffix.size() && ends_with(name, kGgufSuffix); }

KvOverrides read_sidecar(const FilePart& part, const KvSidecarRules& rules) {
    if (part_has_local_path(part) && part.offset == 0) return read_kv_sidecar(part.path, rules);
    return parse_kv_sidecar(read_part_bytes(part), part.path);
}

std::string sidecar_path_for(const std::string& first) {
    if (const auto sn = parse_shard_name(first)) {
        return sn->index == 1 ? sn->prefix + ".gguf" + std::string(kKvSidecarSuffix) : std::string();
    }
    return is_gguf_name(base_name(first)) ? first + std::string(kKvSidecarSuffix) : std::string();
}

KvOverrides concat_overrides(const KvOverrides& first, const KvOverrides& then) {
    KvOverrides out = first;
    out.edits.insert(out.edits.end(), then.edits.begin(), then.edits.end());
    out.files.insert(out.files.end(), then.files.begin(), then.files.end());
    return out;
}

std::string sha256_hex(std::string_view bytes) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr) != 1) {
        throw Error(Code::Io, "sha256 failed (OpenSSL EVP_Digest)");
    }
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * n);
    for (unsigned int i = 0; i < n; ++i) {
        out += kHex[md[i] >> 4];
        out += kHex[md[i] & 15];
    }
    return out;
}

void record_kv_edits(CatalogEntry& e, const KvOverrides& overrides, const VirtualLayout& layout) {
    std::vector<std::string> spelled;
    spelled.reserve(overrides.edits.size());
    for (const KvEdit& edit : overrides.edits) spelled.push_back(edit.spelled());
    e.kv_edits = SharedStrings(std::move(spelled));
    e.header_digest = sha256_hex(layout.header());
    e.edit_files.clear();
    for (const KvSourceFile& f : overrides.files) {
        if (!f.folder) continue;
        FilePart p;
        p.path = f.path;
        p.st = f.st;
        p.size = static_cast<uint64_t>(f.st.st_size);
        p.source = f.source;
        e.edit_files.push_back(std::move(p));
    }
}

std::vector<std::string> kv_edit_files(const KvOverrides& overrides) {
    std::vector<std::string> out;
    for (const KvEdit& e : overrides.edits) {
        if (!e.from_file.empty()) out.push_back(e.from_file);
    }
    return out;
}

CatalogEntry edited_file_entry(const Header& header, const LogicalFile& file, const std::string& path,
                               EntryKind kind, const KvOverrides& overrides) {
    CatalogEntry e;
    e.path = path;
    e.kind = kind;
    e.tensor_count = header.tensors.size();
    e.members.push_back(file);
    e.layout = plan_edited_file(header, file, overrides);
    e.bytes = e.layout.size();
    record_kv_edits(e, overrides, e.layout);
    return e;
}

bool DirectoryEdits::add_if_sidecar(const std::string& name, const FilePart& part) {
    if (!is_kv_sidecar_name(name)) return false;
    sidecars_[sidecar_model_name(name)] = part;
    return true;
}

KvOverrides DirectoryEdits::for_model(const std::string& name, const std::string& rp, uid_t model_owner) {
    planned_.insert(name);
    auto it = sidecars_.find(name);
    if (it == sidecars_.end()) return global_;
    KvSidecarRules rules;
    rules.model_owner = model_owner;
    rules.budget = budget_;
    if (budget_) budget_->start_model();
    KvOverrides own;
    try {
        own = read_sidecar(it->second, rules);
    } catch (const Error& e) {
        if (e.code() != Code::Untrusted) throw;
        // Whoever may write the folder wrote it, not the model's owner: served unedited, said.
        notes_.push_back(Problem{rp, std::string(e.what()) + " (served without its edits)"});
        // Still watched: a fixed owner or mode is seen.
        return global_;
    }
    if (!part_has_local_path(it->second)) {
        // A remote sidecar: its time counts in the served mtime (rule 8), like a local one's.
        KvSourceFile f;
        f.path = it->second.path;
        f.st = it->second.st;
        f.folder = true;
        f.source = it->second.source;
        own.files.push_back(std::move(f));
    }
    for (const std::string& f : kv_edit_files(own)) files_.insert(f);
    return concat_overrides(own, global_);
}

Problem DirectoryEdits::problem(const std::string& path, const std::string& name, const Error& error) const {
    Problem p{path, std::string(error.what()) + "; not shown"};
    auto it = sidecars_.find(name);
    const std::string what = error.what();
    if (it != sidecars_.end() && what.compare(0, it->second.path.size() + 1, it->second.path + ":") == 0) return p;
    for (const KvEdit& e : global_.edits) {
        if (what.compare(0, e.origin.size() + 2, e.origin + ": ") == 0) p.refused_override = true;
    }
    return p;
}

WatchedPath DirectoryEdits::add_beside(const std::string& file) {
    WatchedPath w;
    w.path = file + std::string(kKvSidecarSuffix);
    if (::stat(w.path.c_str(), &w.st) != 0) {
        w.exists = false;
        w.st = {};
        return w;
    }
    if (S_ISREG(w.st.st_mode)) {
        FilePart part;
        part.path = w.path;
        part.st = w.st;
        part.size = static_cast<uint64_t>(w.st.st_size);
        const size_t slash = w.path.rfind('/');
        add_if_sidecar(slash == std::string::npos ? w.path : w.path.substr(slash + 1), part);
    }
    return w;
}

std::vector<WatchedPath> DirectoryEdits::watched_files() const {
    std::vector<WatchedPath> out;
    for (const std::string& f : files_) {
        WatchedPath w;
        w.path = f;
        w.exists = ::stat(f.c_str(), &w.st) == 0;
        if (!w.exists) w.st = {};
        out.push_back(std::move(w));
    }
    return out;
}

std::vector<Problem> DirectoryEdits::orphans(const std::string& rel, const std::vector<Problem>& problems) const {
    std::vector<Problem> out;
    for (const auto& [name, part] : sidecars_) {
        if (planned_.count(name)) continue;
        const std::string path = rel.empty() ? name : rel + "/" + name;
        bool explained = false;
        for (const Problem& p : problems) explained = explained || p.path == path;
        if (explained) continue;
        out.push_back(Problem{path + std::string(kKvSidecarSuffix),
                              part.path + ": a KV sidecar, but no model " + name + " is served here; not applied"});
    }
    return out;
}

EditedFile edit_single_file(DirectoryEdits& edits, const FilePart& part, const std::string& name,
                            const std::string& rp) {
    EditedFile out;
    if (!is_gguf_name(name) || !edits.applies_to(name)) return out;
    LogicalFile lf;
    lf.path = part.path;
    lf.parts.push_back(part);
    Header header;
    try {
        header = read_header(OpenLogicalFile::open(lf));
    } catch (const Error& e) {
        // Not a model (or not readable now): only its own sidecar makes that a problem.
        if (edits.has_sidecar(name)) {
            out.problem = Problem{rp, std::string(e.what()) + "; its KV sidecar cannot apply; not shown"};
        }
        return out;
    }
    try {
        const KvOverrides overrides = edits.for_model(name, rp, part.st.st_uid);
        if (overrides.empty()) return out;  // its sidecar is not applied: served as it is
        out.entry = edited_file_entry(header, lf, rp, EntryKind::Companion, overrides);
    } catch (const Error& e) {
        out.problem = edits.problem(rp, name, e);
    }
    return out;
}

}  // namespace gguf
