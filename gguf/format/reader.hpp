// Bounds-checked GGUF header reader (GGUF v2 and v3).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "gguf/format/header.hpp"
#include "gguf/bytes/logical_file.hpp"

namespace gguf {

/// Every reader below returns a Header whose KV values share one copy of the header bytes
/// (SharedBytes): a header is held once in memory, whatever its values hold.
///
/// Reads and fully validates the header of the GGUF file at `path`.
/// Throws gguf::Error (see parse_header) and Code::Io when the file cannot be opened or read.
Header read_header(const std::string& path);

/// Same for an open descriptor; `name` is used in error messages. Reads only the header bytes
/// (4 KiB first, then doubling, at most 1 MiB more per read), never more than 1 MiB past them.
Header read_header(int fd, const std::string& name);

/// A pread(2)-like byte source: reads up to `len` bytes at `offset` into `dst` and returns the
/// number read (fewer only at the end of the data) or -errno.
using PreadFn = std::function<ssize_t(void* dst, size_t len, uint64_t offset)>;

/// Same for any byte source of `file_size` bytes (e.g. a concatenation of byte-split parts);
/// `name` is used in error messages. Reads only the header bytes, in chunks of up to 1 MiB.
Header read_header(const PreadFn& pread, uint64_t file_size, const std::string& name);

/// Same for an open logical file (one file or the concatenation of byte-split parts); error
/// messages name file.file().path, the logical name.
Header read_header(const OpenLogicalFile& file);

/// Parses a header from bytes already in memory: `bytes` is the start of a file whose total
/// size is `file_size` (>= bytes.size()); used by tests and fuzzers.
///
/// Validation follows ggml's strict reader (src/gguf.cpp), plus limits that each closed a
/// published parser vulnerability, and never trusts a length or a count:
///  - magic "GGUF" (a git-lfs pointer file is named as such); version 2 or 3; version 1,
///    0 and >3 are rejected, and a byte-swapped version is reported as a big-endian file;
///  - KV and tensor counts must fit in the bytes left; string lengths and array counts
///    <= 2^30 and within the file; keys non-empty, unique and without a NUL byte (ggml's
///    consumers cut names at the NUL, so "a\0x" and "a\0y" would be the same key to them);
///    value types known; no arrays of arrays; a bool may be any byte (ggml accepts 2..255;
///    the byte is kept as is); string VALUES may contain NUL (kept byte for byte);
///  - general.alignment, when present, a u32 non-zero power of two;
///  - tensor names non-empty, < 64 bytes, unique, without a NUL byte; n_dims 0..4; every
///    ne >= 0, and no 0 after the last dimension > 1 (ggml's writer drops such a dimension:
///    [8, 0] would be written as [8], disagreeing with the data); known,
///    non-removed ggml type; ne0 a multiple of the block size; element count and byte
///    size without int64 overflow; offsets exactly consecutive with padding to the
///    alignment, first offset 0; every tensor's data inside the file.
/// Every message names `name`, the byte offset and, where relevant, the key or tensor.
Header parse_header(std::string_view bytes, uint64_t file_size, const std::string& name);

}  // namespace gguf
