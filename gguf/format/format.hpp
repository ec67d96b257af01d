// GGUF on-disk format: constants, value types and the ggml tensor type table.
//
// Layout of a GGUF file (all integers little-endian), after the GGUF specification
// (ggml docs/gguf.md, include/gguf.h):
//   1. magic "GGUF" (4 bytes)
//   2. version (u32): 3 today, 2 still readable (same encoding), 1 obsolete (32-bit counts)
//   3. tensor count (i64), KV count (i64)
//   4. KV pairs: key (string), value type (i32), value;
//      an array value is: element type (i32), element count (u64), elements
//   5. tensor infos: name (string), n_dims (u32, <= 4), n_dims x ne (i64),
//      ggml type (i32), offset (u64, relative to the start of the data section)
//   6. zero padding up to the alignment
//   7. data section: each tensor's bytes followed by zero padding to the alignment
// A string is a u64 byte length followed by that many bytes, no terminator.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace gguf {

/// "GGUF" read as a little-endian u32.
inline constexpr uint32_t kMagic = 0x46554747u;
/// Version written by this project (and by llama.cpp's gguf-split).
inline constexpr uint32_t kWriteVersion = 3;
/// Alignment used when `general.alignment` is absent (GGUF spec).
inline constexpr uint64_t kDefaultAlignment = 32;
/// ggml's GGML_MAX_DIMS.
inline constexpr uint32_t kMaxDims = 4;
/// ggml's GGML_MAX_NAME: tensor names must be shorter than this (bytes).
inline constexpr uint64_t kMaxTensorName = 64;
/// Longest string and largest array element count the reader accepts (ggml reader limit).
inline constexpr uint64_t kMaxStringLength = uint64_t{1} << 30;
inline constexpr uint64_t kMaxArrayCount = uint64_t{1} << 30;
/// Largest header (everything before the data section) the reader will buffer, in bytes.
inline constexpr uint64_t kMaxHeaderBytes = uint64_t{1} << 30;

inline constexpr std::string_view kKeyAlignment = "general.alignment";
inline constexpr std::string_view kKeySplitNo = "split.no";
inline constexpr std::string_view kKeySplitCount = "split.count";
inline constexpr std::string_view kKeySplitTensorsCount = "split.tensors.count";

/// GGUF metadata value types (GGUF spec, `enum gguf_type`).
enum class ValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
    String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
};
inline constexpr uint32_t kValueTypeCount = 13;

/// Name of a value type ("u16", "string", ...), or "unknown".
std::string_view value_type_name(ValueType t);

/// Byte size of one scalar of type `t` (u8 -> 1 ... f64 -> 8); 0 for String and Array,
/// whose size depends on their content.
uint64_t scalar_size(ValueType t);

/// One row of ggml's type table: block size in elements and bytes per block.
struct GgmlType {
    std::string_view name;
    uint64_t block_size;  // elements per block
    uint64_t type_size;   // bytes per block
};

/// Looks up ggml tensor type `id` (source: enum ggml_type in ggml/include/ggml.h and type_traits
/// in ggml/src/ggml.c). Returns nullopt for unknown and removed ids (4, 5, 31-33, 36-38,
/// and anything above 42).
std::optional<GgmlType> ggml_type(uint32_t id);

/// Rounds `n` up to a multiple of `alignment` (a power of two). Caller guarantees no overflow.
constexpr uint64_t align_up(uint64_t n, uint64_t alignment) {
    return (n + alignment - 1) & ~(alignment - 1);
}

constexpr bool is_power_of_two(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

}  // namespace gguf
