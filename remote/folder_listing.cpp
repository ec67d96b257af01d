#include "remote/folder_listing.hpp"

namespace gguf_mount::remote {

bool definite_answer(const HttpError& e) noexcept {
    return e.status() > 0 && e.status() < 500 && e.status() != 429 && !e.retryable();
}

std::string FolderListing::definite_failure() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
}

void FolderListing::set_definite_failure(std::string line) {
    std::lock_guard<std::mutex> lock(mutex_);
    failure_ = std::move(line);
}

}  // namespace gguf_mount::remote
