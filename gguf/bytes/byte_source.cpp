#include "gguf/bytes/byte_source.hpp"

#include <cerrno>
#include <cstring>

#include "gguf/error.hpp"

namespace gguf {

LocalFileSource::LocalFileSource(const std::string& path) : path_(path), fd_(open_read_only(path)) {
    if (::fstat(fd_.get(), &st_) != 0) {
        int e = errno;
        throw Error(Code::Io, path + ": cannot stat: " + std::strerror(e), e);
    }
}

ssize_t LocalFileSource::pread(void* dst, size_t len, uint64_t offset) const noexcept {
    return pread_full(fd_.get(), dst, len, offset);
}

bool LocalFileSource::changed() const noexcept {
    struct stat now {};
    if (::fstat(fd_.get(), &now) != 0) return true;
    return now.st_size != st_.st_size || now.st_mtim.tv_sec != st_.st_mtim.tv_sec ||
           now.st_mtim.tv_nsec != st_.st_mtim.tv_nsec;
}

}  // namespace gguf
