// Writes the seed corpora of the fuzz targets (run by scripts/fuzz.sh; nothing is kept in git).
//
//   fuzz_make_seeds FIXTURES_DIR READER_OUT_DIR SPLIT_OUT_DIR
//
// Reader seeds (one GGUF file each):
//   - every fixture tests/fixtures/**/*.gguf: whole when <= 64 KiB, else its first 64 KiB
//     (the reader then reports truncation after parsing the whole header);
//   - every fixture "shrunk": its real header (all KVs, all tensor names and types) with each
//     tensor cut down to one block, followed by zeroed data, so a complete valid file of a few
//     KiB that reaches the reader's success path and the render round trip;
//   - a few handcrafted files: version 2, alignment 64 and 1, no tensors, every value type,
//     a tensor of zero elements, n_dims 0, and a git-lfs pointer.
// Split seeds (fuzz_split_set's input format: a control byte, then shards separated by
// "\n--next-shard--\n"): the notensors two-shard fixture and the shrunk kvzoo model cut into
// 2, 3 and 4 shards the way gguf-split does it, each with control bytes 0, 2 and 4.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/error.hpp"
#include "gguf/format/format.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/format/writer.hpp"

namespace fs = std::filesystem;

namespace {

constexpr size_t kCut = 64 * 1024;
constexpr std::string_view kDelimiter = "\n--next-shard--\n";

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void spit(const fs::path& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + p.string());
}

/// A complete file from KVs and tensors: offsets packed at `alignment`, zeroed data.
std::string build(const std::vector<gguf::KeyValue>& kvs, std::vector<gguf::TensorInfo> tensors, uint64_t alignment) {
    uint64_t offset = 0;
    for (auto& t : tensors) {
        t.offset = offset;
        offset += gguf::align_up(t.nbytes, alignment);
    }
    std::string out = gguf::render_header(kvs, tensors, alignment);
    out.append(static_cast<size_t>(offset), '\0');
    return out;
}

/// Each tensor cut to a single block of its type (dims after the first become 1).
std::vector<gguf::TensorInfo> shrink(std::vector<gguf::TensorInfo> tensors) {
    for (auto& t : tensors) {
        auto tt = gguf::ggml_type(t.type);
        t.ne = {static_cast<int64_t>(tt->block_size), 1, 1, 1};
        t.nbytes = tt->type_size;
    }
    return tensors;
}

gguf::TensorInfo tensor(const std::string& name, std::vector<int64_t> ne, uint32_t type) {
    gguf::TensorInfo t;
    t.name = name;
    t.n_dims = static_cast<uint32_t>(ne.size());
    uint64_t elements = 1;
    for (size_t d = 0; d < ne.size(); ++d) {
        t.ne[d] = ne[d];
        elements *= static_cast<uint64_t>(ne[d]);
    }
    t.type = type;
    auto tt = gguf::ggml_type(type);
    t.nbytes = elements / tt->block_size * tt->type_size;
    return t;
}

template <typename T>
gguf::Value scalar(gguf::ValueType type, T v) {
    gguf::Value out;
    out.type = type;
    out.raw = gguf::SharedBytes(std::string(reinterpret_cast<const char*>(&v), sizeof v));
    return out;
}

/// An array value: element type, count, then the raw elements.
gguf::Value array(gguf::ValueType et, uint64_t count, const std::string& elements) {
    gguf::Value out;
    out.type = gguf::ValueType::Array;
    out.raw = gguf::SharedBytes(scalar(gguf::ValueType::U32, static_cast<uint32_t>(et)).raw.str() +
                                scalar(gguf::ValueType::U64, count).raw.str() + elements);
    return out;
}

/// gguf-split's way of cutting: shard 1 keeps every KV, the others only the split keys, which
/// end each KV list as split.no, split.tensors.count, split.count.
std::vector<std::string> split(const std::vector<gguf::KeyValue>& kvs, const std::vector<gguf::TensorInfo>& tensors,
                               size_t n_shards) {
    std::vector<std::string> out;
    size_t per = (tensors.size() + n_shards - 1) / n_shards;
    for (size_t s = 0; s < n_shards; ++s) {
        std::vector<gguf::KeyValue> skv = s == 0 ? kvs : std::vector<gguf::KeyValue>{};
        skv.push_back({"split.no", gguf::Value::u16(static_cast<uint16_t>(s))});
        skv.push_back({"split.tensors.count", gguf::Value::i32(static_cast<int32_t>(tensors.size()))});
        skv.push_back({"split.count", gguf::Value::u16(static_cast<uint16_t>(n_shards))});
        size_t from = std::min(tensors.size(), s * per), to = std::min(tensors.size(), from + per);
        out.push_back(build(skv, std::vector<gguf::TensorInfo>(tensors.begin() + static_cast<long>(from),
                                                               tensors.begin() + static_cast<long>(to)),
                            32));
    }
    return out;
}

std::string join(uint8_t control, const std::vector<std::string>& shards) {
    std::string out(1, static_cast<char>(control));
    for (size_t i = 0; i < shards.size(); ++i) {
        if (i) out += kDelimiter;
        out += shards[i];
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::cerr << "usage: fuzz_make_seeds FIXTURES_DIR READER_OUT_DIR SPLIT_OUT_DIR\n";
        return 2;
    }
    const fs::path fixtures = argv[1], reader_dir = argv[2], split_dir = argv[3];
    fs::create_directories(reader_dir);
    fs::create_directories(split_dir);
    int n_reader = 0, n_split = 0;
    auto seed = [&](const std::string& name, const std::string& bytes) {
        spit(reader_dir / name, bytes);
        ++n_reader;
    };
    auto split_seed = [&](const std::string& name, const std::string& bytes) {
        spit(split_dir / name, bytes);
        ++n_split;
    };

    try {
        std::vector<fs::path> files;
        for (const auto& e : fs::recursive_directory_iterator(fixtures)) {
            if (e.is_regular_file() && e.path().extension() == ".gguf") files.push_back(e.path());
        }
        std::sort(files.begin(), files.end());
        gguf::Header kvzoo;
        for (const auto& p : files) {
            std::string rel = fs::relative(p, fixtures).string();
            std::replace(rel.begin(), rel.end(), '/', '_');
            std::string bytes = slurp(p);
            seed("fixture_" + rel, bytes.substr(0, kCut));
            gguf::Header h = gguf::parse_header(bytes, bytes.size(), p.string());
            seed("shrunk_" + rel, build(h.kvs, shrink(h.tensors), h.alignment));
            if (rel == "kvzoo_original.gguf") kvzoo = h;
        }

        using VT = gguf::ValueType;
        std::vector<gguf::KeyValue> zoo = {
            {"u8", scalar(VT::U8, uint8_t{1})},       {"i8", scalar(VT::I8, int8_t{-1})},
            {"u16", scalar(VT::U16, uint16_t{2})},    {"i16", scalar(VT::I16, int16_t{-2})},
            {"u32", scalar(VT::U32, uint32_t{3})},    {"i32", scalar(VT::I32, int32_t{-3})},
            {"f32", scalar(VT::F32, 1.5f)},           {"bool", scalar(VT::Bool, uint8_t{1})},
            {"str", gguf::Value::string("hello")},    {"u64", scalar(VT::U64, uint64_t{4})},
            {"i64", scalar(VT::I64, int64_t{-4})},    {"f64", scalar(VT::F64, 2.5)},
            {"arr.str", array(VT::String, 2, gguf::Value::string("a").raw.str() + gguf::Value::string("bc").raw.str())},
            {"arr.u8", array(VT::U8, 3, std::string("\x01\x02\x03", 3))},
            {"arr.bool", array(VT::Bool, 2, std::string("\x00\x01", 2))},
            {"arr.empty", array(VT::I32, 0, "")},
        };
        std::vector<gguf::TensorInfo> few = {tensor("a", {8}, 0), tensor("b", {32, 2}, 8), tensor("c", {256}, 12),
                                             tensor("d", {4, 1, 2, 3}, 1), tensor("e", {0, 5}, 0)};
        seed("zoo_a32", build(zoo, few, 32));
        auto with_alignment = [&](uint32_t a) {
            auto kvs = zoo;
            kvs.push_back({"general.alignment", gguf::Value::u32(a)});
            return kvs;
        };
        seed("zoo_a64", build(with_alignment(64), few, 64));
        seed("zoo_a1", build(with_alignment(1), few, 1));
        seed("zoo_notensors", build(zoo, {}, 32));
        seed("empty_v3", build({}, {}, 32));
        std::string v2 = build(zoo, few, 32);
        v2[4] = 2;
        seed("zoo_v2", v2);
        // n_dims 0 (a scalar; ggml accepts it, the renderer would write n_dims 1): by hand.
        std::string nd0 = "GGUF";
        nd0 += scalar(VT::U32, uint32_t{3}).raw.str() + scalar(VT::I64, int64_t{1}).raw.str() +
               scalar(VT::I64, int64_t{0}).raw.str();
        nd0 += gguf::Value::string("s").raw.str() + scalar(VT::U32, uint32_t{0}).raw.str() +
               scalar(VT::U32, uint32_t{0}).raw.str() + scalar(VT::U64, uint64_t{0}).raw.str();
        nd0.resize(gguf::align_up(nd0.size(), 32), '\0');
        nd0.append(32, '\0');
        seed("ndims0", nd0);
        seed("lfs_pointer", "version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 4096\n");

        // Split sets.
        std::string nt1 = slurp(fixtures / "notensors/t7-ntfs/notensors-00001-of-00002.gguf");
        std::string nt2 = slurp(fixtures / "notensors/t7-ntfs/notensors-00002-of-00002.gguf");
        std::vector<gguf::TensorInfo> small = shrink(kvzoo.tensors);
        for (uint8_t control : {uint8_t{0}, uint8_t{2}, uint8_t{4}}) {
            std::string c = std::to_string(control);
            split_seed("notensors_2_c" + c, join(control, {nt1, nt2}));
            for (size_t n = 1; n <= 4; ++n) {
                split_seed("kvzoo_" + std::to_string(n) + "_c" + c, join(control, split(kvzoo.kvs, small, n)));
            }
            split_seed("zoo_3_c" + c, join(control, split(zoo, few, 3)));
        }
        split_seed("kvzoo_missing_last", join(1, split(kvzoo.kvs, small, 2)));
    } catch (const std::exception& e) {
        std::cerr << "fuzz_make_seeds: " << e.what() << "\n";
        return 1;
    }
    std::cout << "fuzz_make_seeds: " << n_reader << " reader seeds, " << n_split << " split-set seeds\n";
    return 0;
}
