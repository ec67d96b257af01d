// Split options as tests/fixtures/MANIFEST.json writes them, for tests that plan splits.
#pragma once

#include <string>

#include "gguf/model/split_plan.hpp"

namespace gguf_test {

/// Split options from a MANIFEST split_options string such as
/// "--split-max-tensors 7 --no-tensor-first-split" (fails the current test on an unknown word).
gguf::SplitOptions parse_manifest_options(const std::string& text);

}  // namespace gguf_test
