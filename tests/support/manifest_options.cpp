#include "support/manifest_options.hpp"

#include <sstream>

#include <gtest/gtest.h>

namespace gguf_test {

gguf::SplitOptions parse_manifest_options(const std::string& text) {
    gguf::SplitOptions o;
    std::istringstream in(text);
    for (std::string word; in >> word;) {
        std::string v;
        if (word == "--split-max-tensors" && in >> v) {
            o.mode = gguf::SplitOptions::Mode::Tensors;
            o.max_tensors = gguf::parse_split_max_tensors(v);
        } else if (word == "--split-max-size" && in >> v) {
            o.mode = gguf::SplitOptions::Mode::Size;
            o.max_bytes = gguf::parse_split_max_size(v);
        } else if (word == "--no-tensor-first-split") {
            o.no_tensor_first_split = true;
        } else {
            ADD_FAILURE() << "unknown option in MANIFEST: " << word;
        }
    }
    return o;
}

}  // namespace gguf_test
