// Anonymous mappings backed by transparent huge pages where the kernel allows: the daemon's
// large, long-lived I/O buffers (block buffers, FUSE reply buffers).
#pragma once

#include <cstddef>

namespace gguf {

/// Transparent huge pages are this size on x86-64 and arm64 with 4 KiB base pages (bytes).
constexpr size_t kHugePage = size_t{2} << 20;

/// A fresh private anonymous mapping of `size` bytes (a multiple of kHugePage for whole huge
/// pages) starting at a kHugePage boundary, advised MADV_HUGEPAGE: it faults in as huge pages,
/// the kernel pins it for O_DIRECT and for the FUSE reply copy in huge pages, and copies and
/// hashing walk it with fewer TLB misses (bench/README.md, "Huge-page buffers"). Where THP is
/// off or the advice is refused it works with small pages. Release it with munmap(p, size).
/// Throws std::bad_alloc when mmap fails.
char* map_huge_aligned(size_t size);

}  // namespace gguf
