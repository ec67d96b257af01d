#include "gguf/format/format.hpp"

#include <array>

namespace gguf {

std::string_view value_type_name(ValueType t) {
    switch (t) {
        case ValueType::U8: return "u8";
        case ValueType::I8: return "i8";
        case ValueType::U16: return "u16";
        case ValueType::I16: return "i16";
        case ValueType::U32: return "u32";
        case ValueType::I32: return "i32";
        case ValueType::F32: return "f32";
        case ValueType::Bool: return "bool";
        case ValueType::String: return "string";
        case ValueType::Array: return "array";
        case ValueType::U64: return "u64";
        case ValueType::I64: return "i64";
        case ValueType::F64: return "f64";
    }
    return "unknown";
}

uint64_t scalar_size(ValueType t) {
    switch (t) {
        case ValueType::U8: case ValueType::I8: case ValueType::Bool: return 1;
        case ValueType::U16: case ValueType::I16: return 2;
        case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
        case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
        case ValueType::String: case ValueType::Array: return 0;
    }
    return 0;
}

namespace {
// Indexed by ggml type id; block_size 0 marks a removed id.
constexpr std::array<GgmlType, 43> kTypes = {{
    {"f32", 1, 4},       {"f16", 1, 2},        {"q4_0", 32, 18},     {"q4_1", 32, 20},
    {"", 0, 0},          {"", 0, 0},           {"q5_0", 32, 22},     {"q5_1", 32, 24},
    {"q8_0", 32, 34},    {"q8_1", 32, 36},     {"q2_K", 256, 84},    {"q3_K", 256, 110},
    {"q4_K", 256, 144},  {"q5_K", 256, 176},   {"q6_K", 256, 210},   {"q8_K", 256, 292},
    {"iq2_xxs", 256, 66}, {"iq2_xs", 256, 74}, {"iq3_xxs", 256, 98}, {"iq1_s", 256, 50},
    {"iq4_nl", 32, 18},  {"iq3_s", 256, 110},  {"iq2_s", 256, 82},   {"iq4_xs", 256, 136},
    {"i8", 1, 1},        {"i16", 1, 2},        {"i32", 1, 4},        {"i64", 1, 8},
    {"f64", 1, 8},       {"iq1_m", 256, 56},   {"bf16", 1, 2},       {"", 0, 0},
    {"", 0, 0},          {"", 0, 0},           {"tq1_0", 256, 54},   {"tq2_0", 256, 66},
    {"", 0, 0},          {"", 0, 0},           {"", 0, 0},           {"mxfp4", 32, 17},
    {"nvfp4", 64, 36},   {"q1_0", 128, 18},    {"q2_0", 64, 18},
}};
}  // namespace

std::optional<GgmlType> ggml_type(uint32_t id) {
    if (id >= kTypes.size() || kTypes[id].block_size == 0) return std::nullopt;
    return kTypes[id];
}

}  // namespace gguf
