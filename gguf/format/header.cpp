#include "gguf/format/header.hpp"

#include <cstring>

namespace gguf {

namespace {
template <typename T>
Value scalar(ValueType type, T v) {
    Value out;
    out.type = type;
    std::string bytes(sizeof v, '\0');
    std::memcpy(bytes.data(), &v, sizeof v);  // x86-64/aarch64 hosts are little-endian
    out.raw = SharedBytes(std::move(bytes));
    return out;
}

template <typename T>
T load(const SharedBytes& raw, size_t at = 0) {
    T v;
    std::memcpy(&v, raw.data() + at, sizeof v);
    return v;
}
}  // namespace

SharedBytes::SharedBytes(std::string s) {
    auto owned = std::make_shared<const std::string>(std::move(s));
    data_ = owned->data();
    size_ = owned->size();
    owner_ = std::move(owned);
}

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gguf-mount assumes a little-endian host");

Value Value::u16(uint16_t v) { return scalar(ValueType::U16, v); }
Value Value::i32(int32_t v) { return scalar(ValueType::I32, v); }
Value Value::u32(uint32_t v) { return scalar(ValueType::U32, v); }

Value Value::string(std::string_view s) {
    Value out;
    out.type = ValueType::String;
    uint64_t n = s.size();
    std::string bytes(reinterpret_cast<const char*>(&n), sizeof n);
    bytes.append(s);
    out.raw = SharedBytes(std::move(bytes));
    return out;
}

std::optional<int64_t> Value::as_int() const {
    if (raw.size() != scalar_size(type)) return std::nullopt;
    switch (type) {
        case ValueType::U8: return load<uint8_t>(raw);
        case ValueType::I8: return load<int8_t>(raw);
        case ValueType::U16: return load<uint16_t>(raw);
        case ValueType::I16: return load<int16_t>(raw);
        case ValueType::U32: return load<uint32_t>(raw);
        case ValueType::I32: return load<int32_t>(raw);
        case ValueType::I64: return load<int64_t>(raw);
        case ValueType::U64: {
            uint64_t v = load<uint64_t>(raw);
            if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
            return static_cast<int64_t>(v);
        }
        default: return std::nullopt;
    }
}

std::optional<std::string_view> Value::as_string() const {
    if (type != ValueType::String || raw.size() < 8) return std::nullopt;
    return raw.substr(8);
}

std::optional<std::pair<ValueType, uint64_t>> Value::array_info() const {
    if (type != ValueType::Array || raw.size() < 12) return std::nullopt;
    return std::make_pair(static_cast<ValueType>(load<uint32_t>(raw)), load<uint64_t>(raw, 4));
}

uint32_t TensorInfo::effective_dims() const {
    uint32_t n = n_dims;
    while (n > 1 && ne[n - 1] == 1) --n;
    return n == 0 ? 1 : n;
}

const KeyValue* Header::find(std::string_view key) const {
    for (const auto& kv : kvs) {
        if (kv.key == key) return &kv;
    }
    return nullptr;
}

}  // namespace gguf
