// In-memory model of a GGUF header: KV pairs, tensor infos and the derived layout facts.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <ostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/format/format.hpp"

namespace gguf {

/// Immutable bytes that share their storage: a view plus an owner that keeps it alive. A parsed
/// header's values all point into the one buffer the header was read into (see read_header), so
/// copying a KeyValue, or a whole list of them (split and merge plans), copies no KV bytes: a
/// 20 MB vocabulary array is held once. Copying costs a reference count.
class SharedBytes {
public:
    SharedBytes() = default;
    /// Owns `s` (for values built in memory).
    explicit SharedBytes(std::string s);
    /// `size` bytes at `data`, kept alive by `owner` (which must own them).
    SharedBytes(std::shared_ptr<const void> owner, const char* data, size_t size)
        : owner_(std::move(owner)), data_(data), size_(size) {}

    const char* data() const noexcept { return data_; }
    size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    std::string_view view() const noexcept { return {data_, size_}; }
    operator std::string_view() const noexcept { return view(); }  // NOLINT(google-explicit-constructor)
    std::string str() const { return std::string(view()); }
    std::string_view substr(size_t pos, size_t n = std::string_view::npos) const { return view().substr(pos, n); }

    friend bool operator==(const SharedBytes& a, const SharedBytes& b) noexcept { return a.view() == b.view(); }
    friend bool operator!=(const SharedBytes& a, const SharedBytes& b) noexcept { return a.view() != b.view(); }
    friend bool operator==(const SharedBytes& a, std::string_view b) noexcept { return a.view() == b; }
    friend bool operator!=(const SharedBytes& a, std::string_view b) noexcept { return a.view() != b; }
    friend std::ostream& operator<<(std::ostream& os, const SharedBytes& b) { return os << b.view(); }

private:
    std::shared_ptr<const void> owner_;
    const char* data_ = "";
    size_t size_ = 0;
};

/// A metadata value, kept as the exact bytes that follow the value type in the file so that
/// writing it back is byte-identical whatever its type.
///   scalar: the little-endian scalar (1, 2, 4 or 8 bytes)
///   string: u64 length + bytes
///   array:  element type (i32) + element count (u64) + elements
struct Value {
    ValueType type = ValueType::U8;
    SharedBytes raw;

    /// Builders for the values this project writes itself.
    static Value u16(uint16_t v);
    static Value i32(int32_t v);
    static Value u32(uint32_t v);
    static Value string(std::string_view s);

    /// For scalar integer types: the value widened to int64 (u64 above INT64_MAX is not
    /// representable and returns nullopt). nullopt for every other type.
    std::optional<int64_t> as_int() const;
    /// For strings: the content. nullopt for every other type.
    std::optional<std::string_view> as_string() const;
    /// For arrays: element type and count. nullopt for every other type.
    std::optional<std::pair<ValueType, uint64_t>> array_info() const;
};

/// One KV pair. Keys are unique and non-empty within a header.
struct KeyValue {
    std::string key;
    Value value;
};

/// One tensor info. `ne` holds `n_dims` dimensions, the rest are 1.
struct TensorInfo {
    std::string name;
    uint32_t n_dims = 1;
    std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};
    uint32_t type = 0;    // ggml type id
    uint64_t offset = 0;  // bytes, relative to the data section start
    uint64_t nbytes = 0;  // bytes of tensor data (unpadded), derived from type and ne

    /// Number of dimensions without trailing 1s (at least 1), as ggml_n_dims() counts them and
    /// as ggml's writer (and so gguf-split) writes them.
    uint32_t effective_dims() const;
};

/// A parsed GGUF header with everything needed to locate tensor data.
struct Header {
    uint32_t version = kWriteVersion;
    std::vector<KeyValue> kvs;
    std::vector<TensorInfo> tensors;
    uint64_t alignment = kDefaultAlignment;  // general.alignment, or 32
    uint64_t header_size = 0;   // bytes from file start to the end of the tensor infos
    uint64_t data_offset = 0;   // start of the data section: header_size aligned up
    uint64_t file_size = 0;     // size of the file the header was read from

    /// The KV pair with this key, or nullptr.
    const KeyValue* find(std::string_view key) const;
};

}  // namespace gguf
