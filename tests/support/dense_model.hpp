// Dense synthetic GGUF models: every tensor byte is pseudo-random, so a missing, zero-filled or
// misplaced byte always changes the file's sha256 (unlike the sparse models of sparse_model.hpp,
// whose data is mostly holes). Used by the crash-safety and full-disk tests.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gguf_test {

/// Writes a GGUF v3 file at `path` with general.architecture = "synthetic" and one 1-D F32
/// tensor per entry of `f32_tensors` (name, element count), alignment 32. The data section holds
/// pseudo-random bytes from `seed` (zero padding between tensors, as the format requires).
/// Fails the current test on any error.
void write_dense_model(const std::string& path, const std::vector<std::pair<std::string, int64_t>>& f32_tensors,
                       uint64_t seed);

}  // namespace gguf_test
