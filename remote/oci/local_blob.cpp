#include "remote/oci/local_blob.hpp"

#include <cerrno>
#include <utility>

#include "gguf/error.hpp"

namespace gguf_mount::remote::oci {

LocalBlobSource::LocalBlobSource(std::string path, const struct stat& st, const std::string& digest, bool whole)
    : path_(std::move(path)), st_(st), sha256_(digest.rfind("sha256:", 0) == 0 ? digest.substr(7) : digest) {
    arm_check(sha256_, whole);
}

void LocalBlobSource::arm_check(std::string sha256, bool whole) {
    SequentialCheck::Hooks hooks;
    hooks.read = [this](void* dst, size_t len, uint64_t offset) { return pread(dst, len, offset); };
    hooks.describe = [this](const std::string& got) {
        return path_ + ": sha256 mismatch: expected " + check_->expected() + " (the blob's digest), the " +
               std::to_string(size()) + " bytes on disk hash to " + got +
               " (the file is damaged or was changed: pull the model again)";
    };
    check_ = std::make_unique<SequentialCheck>(std::move(sha256), whole, size(), path_, std::move(hooks));
}

const gguf::LocalFileSource* LocalBlobSource::file() const noexcept {
    std::call_once(opened_, [this] {
        try {
            file_ = gguf::LocalFileSource::open(path_, st_);
            open_file_ = file_.get();
        } catch (const gguf::Error& e) {
            open_errno_ = e.sys_errno() > 0 ? e.sys_errno() : EIO;
            try {
                open_error_ = e.what();
            } catch (...) {
            }
        } catch (...) {
            open_errno_ = ENOMEM;
        }
    });
    return file_.get();
}

ssize_t LocalBlobSource::pread(void* dst, size_t len, uint64_t offset) const noexcept {
    if (check_->failed()) return -EIO;
    const gguf::LocalFileSource* f = file();
    if (!f) return -open_errno_;
    const ssize_t r = f->pread(dst, len, offset);
    return r > 0 ? check_->after_read(dst, offset, static_cast<size_t>(r)) : r;
}

gguf::Served LocalBlobSource::read_served(char* buf, size_t len, uint64_t offset, gguf::CopyKept kept,
                                          bool whole_request) const noexcept {
    gguf::Served s;
    if (check_->failed()) {
        s.result = -EIO;
        return s;
    }
    const gguf::LocalFileSource* f = file();
    if (!f) {
        s.result = -open_errno_;
        return s;
    }
    s = f->read_served(buf, len, offset, kept, whole_request);
    if (s.result > 0) s.result = check_->after_read(s.data, offset, static_cast<size_t>(s.result));
    return s;
}

bool LocalBlobSource::changed() const noexcept {
    if (const gguf::LocalFileSource* f = open_file_.load()) return f->changed();
    // Not opened yet: the path as listed (a file replaced meanwhile is not this blob's bytes).
    struct stat now {};
    return ::stat(path_.c_str(), &now) != 0 || !gguf::same_file_state(now, st_);
}

void LocalBlobSource::will_need(uint64_t offset, uint64_t len) const noexcept {
    if (const gguf::LocalFileSource* f = file()) f->will_need(offset, len);
}

std::string LocalBlobSource::failure_reason() const {
    if (check_->failed()) {
        const std::string e = check_->error();
        return e.rfind(path_ + ": ", 0) == 0 ? e.substr(path_.size() + 2) : e;
    }
    const gguf::LocalFileSource* f = file();
    if (!f) return open_error_;
    return f->failure_reason();
}

int64_t LocalBlobSource::current_size() const noexcept {
    const gguf::LocalFileSource* f = file();
    return f ? f->current_size() : -1;
}

int64_t LocalBlobSource::seek(uint64_t offset, bool hole) const noexcept {
    const gguf::LocalFileSource* f = file();
    return f ? f->seek(offset, hole) : -open_errno_;
}

ssize_t LocalBlobSource::copy_to(int out_fd, uint64_t out_offset, size_t len, uint64_t offset) const noexcept {
    if (!check_->settled()) return -EOPNOTSUPP;  // the bytes go through the hash: pread
    if (check_->failed()) return -EIO;
    const gguf::LocalFileSource* f = file();
    return f ? f->copy_to(out_fd, out_offset, len, offset) : -open_errno_;
}

void LocalBlobSource::verify_sha256(std::string sha256) { arm_check(std::move(sha256), true); }

std::string LocalBlobSource::finish_sha256() const noexcept { return check_->finish(); }

std::string LocalBlobSource::sha256_error() const { return check_->error(); }

gguf::FilePart LocalBlobSource::part() const {
    gguf::FilePart p;
    p.path = path_;
    p.size = size();
    p.st = st_;
    p.source = shared_from_this();
    p.validator = validator();
    return p;
}

}  // namespace gguf_mount::remote::oci
