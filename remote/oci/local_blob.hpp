// A blob of a local OCI image layout or Ollama store as a gguf::ByteSource: the file read in
// place (gguf::LocalFileSource, with its page-cache policy), its bytes checked against the
// digest that names it, as a registry's blobs are (remote::SequentialCheck). A blob is a content
// address: a file on disk whose bytes do not hash to its name is damaged (a bad disk, a partial
// copy, an edit), and its bytes are not served past the point where that is known.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "gguf/bytes/byte_source.hpp"
#include "gguf/bytes/logical_file.hpp"
#include "remote/digest.hpp"

namespace gguf_mount::remote::oci {

/// The blob file at `path` (stat `st` when listed), named by the digest "sha256:HEX" its
/// manifest and file name give. Opened on its first read (LocalFileSource::open, checked against
/// `st`: a file replaced since it was listed is not read). A reader that reads it in order to its
/// end has it checked as the bytes pass (SequentialCheck, not `whole`): a mismatch fails that
/// last read and every later one with EIO and logs both digests. verify_sha256 (merge, check)
/// checks every byte. Thread-safe.
class LocalBlobSource final : public gguf::ByteSource,
                              public DigestChecked,
                              public std::enable_shared_from_this<LocalBlobSource> {
public:
    /// `digest`: "sha256:HEX" (64 lowercase hex). Make it with std::make_shared (part() shares
    /// it). Throws std::runtime_error when OpenSSL cannot hash.
    /// `whole`: checked as verify_sha256 checks (every byte, a mismatch not logged) from the
    /// first read on.
    LocalBlobSource(std::string path, const struct stat& st, const std::string& digest, bool whole = false);

    ssize_t pread(void* dst, size_t len, uint64_t offset) const noexcept override;
    uint64_t size() const noexcept override { return static_cast<uint64_t>(st_.st_size); }
    /// The file changed since it was listed (its size or mtime; before the first read: its
    /// stat). Never throws.
    bool changed() const noexcept override;
    std::string display_name() const override { return path_; }
    /// "sha256:HEX": the content address (part of the inode fingerprint).
    std::string validator() const override { return "sha256:" + sha256_; }
    gguf::Served read_served(char* buf, size_t len, uint64_t offset, gguf::CopyKept kept,
                             bool whole_request) const noexcept override;
    void will_need(uint64_t offset, uint64_t len) const noexcept override;
    /// The digest mismatch, else why the file could not be opened, else the file's own reason.
    std::string failure_reason() const override;
    int64_t current_size() const noexcept override;
    int64_t seek(uint64_t offset, bool hole) const noexcept override;
    /// The kernel copy of the file, except while a check is armed and not over (its bytes must
    /// pass through the hash): -EOPNOTSUPP then, and the writer reads them with pread.
    ssize_t copy_to(int out_fd, uint64_t out_offset, size_t len, uint64_t offset) const noexcept override;
    size_t copy_chunk() const noexcept override { return size_t{128} << 10; }
    void update_stat(struct stat* st) const noexcept override { *st = st_; }
    bool is_local_file() const noexcept override { return true; }

    const std::string& sha256() const noexcept override { return sha256_; }
    void verify_sha256(std::string sha256) override;
    std::string finish_sha256() const noexcept override;
    std::string sha256_error() const override;

    /// The FilePart of this blob for a listing: path, stat, this source, its validator. The
    /// source must be owned by a shared_ptr.
    gguf::FilePart part() const;

private:
    /// The open file, opened on first use; null when it cannot be opened (open_errno_,
    /// open_error_ say why).
    const gguf::LocalFileSource* file() const noexcept;
    void arm_check(std::string sha256, bool whole);

    std::string path_;
    struct stat st_ {};
    std::string sha256_;  // HEX of the digest
    mutable std::once_flag opened_;
    mutable std::shared_ptr<const gguf::LocalFileSource> file_;
    mutable std::atomic<const gguf::LocalFileSource*> open_file_{nullptr};  // file_ once opened
    mutable int open_errno_ = 0;
    mutable std::string open_error_;
    std::unique_ptr<SequentialCheck> check_;  // set before reads start; last: destroyed first (its thread reads the file)
};

}  // namespace gguf_mount::remote::oci
