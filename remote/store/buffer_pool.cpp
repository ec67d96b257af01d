#include "remote/store/buffer_pool.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

#include "common/huge_pages.hpp"
#include "remote/store/cache.hpp"

namespace gguf_mount::remote {

struct BufferPool::State {
    explicit State(size_t pooled) : cap(pooled) {}
    ~State() {
        for (char* p : idle) ::munmap(p, BlockCache::kBlockSize);
    }
    /// Keeps `p` for reuse, or unmaps it when more than `cap` are mapped. Never throws.
    void give_back(char* p) noexcept {
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (mapped <= cap) {
                try {
                    idle.push_back(p);
                    return;
                } catch (...) {
                }
            }
            --mapped;
        }
        ::munmap(p, BlockCache::kBlockSize);
    }
    mutable std::mutex mutex;
    std::vector<char*> idle;  // under mutex
    size_t mapped = 0;        // under mutex: in use and idle
    size_t cap;
};

BufferPool::BufferPool(size_t pooled, size_t idle)
    : state_(std::make_shared<State>(std::max(pooled, idle))), idle_(idle) {}

std::shared_ptr<char[]> BufferPool::take() {
    char* p = nullptr;
    {
        std::lock_guard<std::mutex> lock(state_->mutex);
        if (!state_->idle.empty()) {
            p = state_->idle.back();
            state_->idle.pop_back();
        }
    }
    if (!p) {
        p = gguf::map_huge_aligned(BlockCache::kBlockSize);  // 2 huge pages, not 1,024 small ones
        std::lock_guard<std::mutex> lock(state_->mutex);
        ++state_->mapped;
    }
    std::shared_ptr<State> state = state_;
    try {
        return std::shared_ptr<char[]>(p, [state](char* q) { state->give_back(q); });
    } catch (...) {
        state_->give_back(p);
        throw;
    }
}

void BufferPool::trim() noexcept {
    std::vector<char*> unmap;
    {
        std::lock_guard<std::mutex> lock(state_->mutex);
        while (state_->idle.size() > idle_) {
            try {
                unmap.push_back(state_->idle.back());
            } catch (...) {
                break;
            }
            state_->idle.pop_back();
            --state_->mapped;
        }
    }
    for (char* p : unmap) ::munmap(p, BlockCache::kBlockSize);
}

std::pair<size_t, size_t> BufferPool::mapped() const noexcept {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return {state_->mapped, state_->idle.size()};
}

}  // namespace gguf_mount::remote
