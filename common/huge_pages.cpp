#include "common/huge_pages.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace gguf {

char* map_huge_aligned(size_t size) {
    // Mapped a huge page wider, then trimmed to the aligned span: only that stays mapped.
    const size_t span = size + kHugePage;
    void* m = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    char* base = static_cast<char*>(m);
    char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + kHugePage - 1) & ~uintptr_t{kHugePage - 1});
    if (p > base) ::munmap(base, static_cast<size_t>(p - base));
    char* end = base + span;
    if (end > p + size) ::munmap(p + size, static_cast<size_t>(end - (p + size)));
#ifdef MADV_HUGEPAGE
    (void)::madvise(p, size, MADV_HUGEPAGE);
#endif
    return p;
}

}  // namespace gguf
