// Hand-built GGUF bytes for tests: a little-endian byte writer and a whole-file builder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/format/header.hpp"

namespace gguf_test {

/// Appends little-endian GGUF primitives; used to handcraft valid and corrupt headers.
class Bytes {
public:
    Bytes& raw(const std::string& s) { out_ += s; return *this; }
    Bytes& u8(uint8_t v) { return put(v); }
    Bytes& u16(uint16_t v) { return put(v); }
    Bytes& u32(uint32_t v) { return put(v); }
    Bytes& i32(int32_t v) { return put(v); }
    Bytes& u64(uint64_t v) { return put(v); }
    Bytes& i64(int64_t v) { return put(v); }
    /// GGUF string: u64 length + bytes.
    Bytes& str(const std::string& s) { u64(s.size()); out_ += s; return *this; }
    /// Magic, version, tensor count, KV count.
    Bytes& preamble(uint32_t version, int64_t n_tensors, int64_t n_kv) {
        out_ += "GGUF";
        return u32(version).i64(n_tensors).i64(n_kv);
    }
    /// Pads with zeros to a multiple of `alignment`.
    Bytes& pad(uint64_t alignment) { out_.resize((out_.size() + alignment - 1) / alignment * alignment, '\0'); return *this; }
    const std::string& str() const { return out_; }
    size_t size() const { return out_.size(); }

private:
    template <typename T>
    Bytes& put(T v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); return *this; }
    std::string out_;
};

/// A tensor to put in a built file: data bytes are derived from `seed`.
struct TestTensor {
    std::string name;
    std::vector<int64_t> ne;  // 1..4 dims
    uint32_t type = 0;        // ggml type id (0 = f32)
};

/// Builds a complete, valid GGUF v3 file: header from gguf::render_header (offsets packed at
/// `alignment`), then each tensor's bytes (pseudo-random from `seed`) zero padded.
std::string build_gguf(const std::vector<gguf::KeyValue>& kvs, const std::vector<TestTensor>& tensors,
                       uint64_t alignment = 32, uint32_t seed = 1);

}  // namespace gguf_test
