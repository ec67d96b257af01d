// An independent model of a GGUF file's bytes for the KV override tests: a file cut into its
// KV pairs (raw bytes), its tensor-info bytes and its data section, and put back together.
// Written apart from gguf/ (no production reader or writer): the expected bytes of an edited
// file are built here, by hand, from the rule in gguf/model/kv_override.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gguf_test {

/// One KV pair as bytes: key, GGUF value type id, and the value bytes that follow the type.
struct RawKv {
    std::string key;
    uint32_t type = 0;
    std::string value;
};

/// A GGUF v3 file in pieces.
struct RawGguf {
    std::vector<RawKv> kvs;
    uint64_t tensor_count = 0;
    std::string tensor_infos;  // the tensor-info bytes, as in the file
    std::string data;          // from the data section start to the end of the file ("" without tensors)
    uint64_t alignment = 32;   // general.alignment (u32) or 32
};

/// Cuts `file` (a valid GGUF v2/v3 file) into pieces; fails the current test on a malformed one.
RawGguf cut_gguf(const std::string& file);

/// The file: "GGUF", version 3, counts, the KV pairs in order, the tensor infos, zero padding
/// to `alignment` (to 32 without tensors), then the data bytes.
std::string join_gguf(const RawGguf& g);

/// Index of `key` in g.kvs; fails the test when absent.
size_t kv_index(const RawGguf& g, const std::string& key);

/// Values as GGUF bytes.
RawKv raw_string(const std::string& key, const std::string& s);  // type 8
RawKv raw_u32(const std::string& key, uint32_t v);               // type 4
RawKv raw_i32(const std::string& key, int32_t v);                // type 5
RawKv raw_u64(const std::string& key, uint64_t v);               // type 10
RawKv raw_f32(const std::string& key, float v);                  // type 6
RawKv raw_bool(const std::string& key, bool v);                  // type 7

}  // namespace gguf_test
