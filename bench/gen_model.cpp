// bench_gen: writes the synthetic GGUF models of the benchmark (bench/run.sh).
//
//   bench_gen dense  OUT.gguf --bytes N [--vocab V] [--seed S]
//       A llama-shaped model of about N bytes: token_embd (f16, ~14.6 % of N; 600 MiB for
//       N = 4 GiB), rope_freqs (4 KiB), as many 9-tensor blocks (q4_K/q6_K/f32, 16 KiB to
//       46 MiB each) as fit, output_norm and output (q6_K). Tensor bytes come from a
//       xoshiro256** stream, so no compression or deduplication can shortcut a read.
//   bench_gen sparse OUT.gguf --tensors T --tensor-bytes B [--vocab V] [--seed S]
//       T f32 tensors of B bytes each whose data is a hole except the first 4 KiB, which is
//       random: the apparent size grows with B at no disk cost (for "mount-to-readable does
//       not depend on the data size").
//   bench_gen llama  OUT.gguf --bytes N --tokenizer-from TINY.gguf [--seed S]
//       A model llama.cpp loads and runs (the real-client rows: node-llama-cpp's time to first
//       token): llama architecture, n_embd 2048, 32 heads (8 KV heads), n_ff 5632, as many
//       layers as reach N bytes (at least 1; 86 MiB each), every matrix F16 with random finite
//       values of magnitude 2^-9..2^-5, norms F32 1.0. The tokenizer KV pairs (`tokenizer.*`)
//       are copied from TINY.gguf (tests/fixtures/tiny-llama), so the vocabulary is tiny and
//       nearly all bytes are layer weights.
//
// dense and sparse carry a llama-style header with a V-entry string vocabulary (tokenizer.ggml.tokens,
// token_type, scores; default V = 150000), rendered with the project's gguf::render_header.
// Prints one JSON line: {"path":..., "bytes":..., "tensors":..., "header_bytes":...}.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/format/format.hpp"
#include "gguf/format/header.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/format/writer.hpp"

namespace {

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "bench_gen: %s\n", msg.c_str());
    std::exit(1);
}

/// xoshiro256** (Blackman & Vigna), seeded through splitmix64: fast, good enough to defeat
/// compression, and reproducible from --seed.
class Rng {
public:
    explicit Rng(uint64_t seed) {
        for (auto& w : s_) {
            seed += 0x9e3779b97f4a7c15ull;
            uint64_t z = seed;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            w = z ^ (z >> 31);
        }
    }
    uint64_t next() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }
    void fill(char* dst, size_t n) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            uint64_t v = next();
            std::memcpy(dst + i, &v, 8);
        }
        if (i < n) {
            uint64_t v = next();
            std::memcpy(dst + i, &v, n - i);
        }
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t s_[4];
};

template <typename T>
gguf::Value scalar(gguf::ValueType type, T v) {
    gguf::Value out;
    out.type = type;
    out.raw = gguf::SharedBytes(std::string(reinterpret_cast<const char*>(&v), sizeof v));
    return out;
}

template <typename T>
void put(std::string& s, T v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

/// An array value: element type (u32) + count (u64) + `elements` (already encoded).
gguf::Value array_of(gguf::ValueType elem, uint64_t count, const std::string& elements) {
    std::string raw;
    put(raw, static_cast<uint32_t>(elem));
    put(raw, count);
    raw += elements;
    gguf::Value v;
    v.type = gguf::ValueType::Array;
    v.raw = gguf::SharedBytes(std::move(raw));
    return v;
}

/// The llama-style KV pairs with a `vocab`-entry tokenizer.
std::vector<gguf::KeyValue> make_kvs(uint32_t n_layers, uint32_t vocab, Rng& rng) {
    using VT = gguf::ValueType;
    std::vector<gguf::KeyValue> kvs;
    kvs.push_back({"general.architecture", gguf::Value::string("llama")});
    kvs.push_back({"general.name", gguf::Value::string("gguf-mount bench synthetic model")});
    kvs.push_back({"general.file_type", gguf::Value::u32(15)});
    kvs.push_back({"llama.block_count", gguf::Value::u32(n_layers)});
    kvs.push_back({"llama.context_length", gguf::Value::u32(131072)});
    kvs.push_back({"llama.embedding_length", gguf::Value::u32(4096)});
    kvs.push_back({"llama.feed_forward_length", gguf::Value::u32(14336)});
    kvs.push_back({"llama.attention.head_count", gguf::Value::u32(32)});
    kvs.push_back({"llama.attention.head_count_kv", gguf::Value::u32(8)});
    kvs.push_back({"llama.rope.freq_base", scalar(VT::F32, 500000.0f)});
    kvs.push_back({"llama.attention.layer_norm_rms_epsilon", scalar(VT::F32, 1e-5f)});
    kvs.push_back({"llama.vocab_size", gguf::Value::u32(vocab)});
    kvs.push_back({"tokenizer.ggml.model", gguf::Value::string("gpt2")});
    kvs.push_back({"tokenizer.ggml.pre", gguf::Value::string("llama-bpe")});

    std::string tokens, types, scores;
    static const char letters[] = "abcdefghijklmnopqrstuvwxyz";
    for (uint32_t i = 0; i < vocab; ++i) {
        // A random word of 1-12 letters, made unique with the index (real vocabularies average
        // 6-8 bytes per token).
        std::string tok;
        uint64_t r = rng.next();
        size_t len = 1 + (r % 12);
        for (size_t k = 0; k < len; ++k) tok += letters[(r >> (8 + 4 * (k % 12))) % 26];
        tok += std::to_string(i);
        put(tokens, static_cast<uint64_t>(tok.size()));
        tokens += tok;
        put(types, static_cast<int32_t>(i < 256 ? 6 : 1));
        put(scores, -static_cast<float>(i));
    }
    kvs.push_back({"tokenizer.ggml.tokens", array_of(VT::String, vocab, tokens)});
    kvs.push_back({"tokenizer.ggml.token_type", array_of(VT::I32, vocab, types)});
    kvs.push_back({"tokenizer.ggml.scores", array_of(VT::F32, vocab, scores)});
    kvs.push_back({"tokenizer.ggml.bos_token_id", gguf::Value::u32(1)});
    kvs.push_back({"tokenizer.ggml.eos_token_id", gguf::Value::u32(2)});
    return kvs;
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
    auto tt = gguf::ggml_type(type);
    if (!tt || ne[0] % static_cast<int64_t>(tt->block_size) != 0) die("bad tensor shape for " + name);
    t.type = type;
    t.nbytes = elements / tt->block_size * tt->type_size;
    return t;
}

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4K = 12, kQ6K = 14;

/// The tensors of the dense model for a target size of `bytes`.
std::vector<gguf::TensorInfo> dense_tensors(uint64_t bytes, uint32_t* n_layers) {
    const int64_t dim = 4096, ff = 14336, kv = 1024;
    // token_embd is ~14.6 % of the model (600 MiB at 4 GiB); rows a multiple of 256 (q6_K output).
    int64_t rows = static_cast<int64_t>(static_cast<double>(bytes) * 0.1465 / (dim * 2));
    rows = rows < 256 ? 256 : rows / 256 * 256;
    std::vector<gguf::TensorInfo> fixed = {
        tensor("token_embd.weight", {dim, rows}, kF16),
        tensor("rope_freqs.weight", {1024}, kF32),
        tensor("output_norm.weight", {dim}, kF32),
        tensor("output.weight", {dim, rows}, kQ6K),
    };
    auto block = [&](uint32_t i) {
        std::string p = "blk." + std::to_string(i) + ".";
        return std::vector<gguf::TensorInfo>{
            tensor(p + "attn_norm.weight", {dim}, kF32),
            tensor(p + "attn_q.weight", {dim, dim}, kQ4K),
            tensor(p + "attn_k.weight", {dim, kv}, kQ4K),
            tensor(p + "attn_v.weight", {dim, kv}, kQ6K),
            tensor(p + "attn_output.weight", {dim, dim}, kQ4K),
            tensor(p + "ffn_norm.weight", {dim}, kF32),
            tensor(p + "ffn_gate.weight", {dim, ff}, kQ4K),
            tensor(p + "ffn_up.weight", {dim, ff}, kQ4K),
            tensor(p + "ffn_down.weight", {ff, dim}, kQ6K),
        };
    };
    uint64_t used = 0;
    for (const auto& t : fixed) used += gguf::align_up(t.nbytes, 32);
    uint64_t per_block = 0;
    for (const auto& t : block(0)) per_block += gguf::align_up(t.nbytes, 32);
    uint32_t layers = used >= bytes ? 1 : static_cast<uint32_t>((bytes - used) / per_block);
    if (layers == 0) layers = 1;

    std::vector<gguf::TensorInfo> out = {fixed[0], fixed[1]};
    for (uint32_t i = 0; i < layers; ++i) {
        for (auto& t : block(i)) out.push_back(std::move(t));
    }
    out.push_back(fixed[2]);
    out.push_back(fixed[3]);
    *n_layers = layers;
    return out;
}

/// The KV pairs and tensors of the `llama` mode: `layers` blocks of a 2048-wide llama with the
/// tokenizer KV pairs of `tok` (every `tokenizer.*` key, in order; its vocabulary size becomes
/// llama.vocab_size and the rows of token_embd / output). Throws nothing; dies on a tokenizer
/// without tokenizer.ggml.tokens.
void llama_model(const gguf::Header& tok, uint32_t layers, std::vector<gguf::KeyValue>* kvs,
                 std::vector<gguf::TensorInfo>* infos) {
    const int64_t dim = 2048, heads = 32, kv_heads = 8, ff = 5632;
    const int64_t kv_dim = dim / heads * kv_heads;
    const gguf::KeyValue* tokens = tok.find("tokenizer.ggml.tokens");
    auto arr = tokens ? tokens->value.array_info() : std::nullopt;
    if (!arr) die("--tokenizer-from: no tokenizer.ggml.tokens array");
    const auto vocab = static_cast<int64_t>(arr->second);
    using VT = gguf::ValueType;
    *kvs = {
        {"general.architecture", gguf::Value::string("llama")},
        {"general.name", gguf::Value::string("gguf-mount bench random llama")},
        {"general.file_type", gguf::Value::u32(1)},  // mostly F16
        {"llama.vocab_size", gguf::Value::u32(static_cast<uint32_t>(vocab))},
        {"llama.context_length", gguf::Value::u32(2048)},
        {"llama.embedding_length", gguf::Value::u32(static_cast<uint32_t>(dim))},
        {"llama.block_count", gguf::Value::u32(layers)},
        {"llama.feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(ff))},
        {"llama.rope.dimension_count", gguf::Value::u32(static_cast<uint32_t>(dim / heads))},
        {"llama.rope.freq_base", scalar(VT::F32, 10000.0f)},
        {"llama.attention.head_count", gguf::Value::u32(static_cast<uint32_t>(heads))},
        {"llama.attention.head_count_kv", gguf::Value::u32(static_cast<uint32_t>(kv_heads))},
        {"llama.attention.layer_norm_rms_epsilon", scalar(VT::F32, 1e-5f)},
    };
    for (const auto& kv : tok.kvs) {
        if (kv.key.rfind("tokenizer.", 0) == 0) kvs->push_back(kv);
    }
    infos->clear();
    infos->push_back(tensor("token_embd.weight", {dim, vocab}, kF16));
    for (uint32_t i = 0; i < layers; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        infos->push_back(tensor(p + "attn_norm.weight", {dim}, kF32));
        infos->push_back(tensor(p + "attn_q.weight", {dim, dim}, kF16));
        infos->push_back(tensor(p + "attn_k.weight", {dim, kv_dim}, kF16));
        infos->push_back(tensor(p + "attn_v.weight", {dim, kv_dim}, kF16));
        infos->push_back(tensor(p + "attn_output.weight", {dim, dim}, kF16));
        infos->push_back(tensor(p + "ffn_norm.weight", {dim}, kF32));
        infos->push_back(tensor(p + "ffn_gate.weight", {dim, ff}, kF16));
        infos->push_back(tensor(p + "ffn_up.weight", {dim, ff}, kF16));
        infos->push_back(tensor(p + "ffn_down.weight", {ff, dim}, kF16));
    }
    infos->push_back(tensor("output_norm.weight", {dim}, kF32));
    infos->push_back(tensor("output.weight", {dim, vocab}, kF16));
}

/// Bytes of one `llama` mode block (F16 matrices, F32 norms), for choosing the layer count.
constexpr uint64_t kLlamaLayerBytes = 2 * (2048 * 2048 * 2 + 2048 * 512 * 2 + 2048 * 5632 * 3) + 2 * 2048 * 4;

/// Fills `n` bytes (a multiple of 2) with F16 values: random sign and mantissa, exponent field
/// 6..10 (2^-9 to 2^-5): finite, never subnormal, small enough that 60 random layers stay finite.
void fill_f16(Rng& rng, char* dst, size_t n) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t r = rng.next();
        for (int k = 0; k < 4; ++k) {
            const auto bits = static_cast<uint16_t>(r >> (16 * k));
            const uint16_t exponent = static_cast<uint16_t>(6 + (bits >> 10) % 5);
            const uint16_t h = static_cast<uint16_t>((bits & 0x8000) | (exponent << 10) | (bits & 0x3ff));
            std::memcpy(dst + i + 2 * k, &h, 2);
        }
    }
}

/// Fills `n` bytes (a multiple of 4) with F32 1.0 (norm weights).
void fill_ones(char* dst, size_t n) {
    const float one = 1.0f;
    for (size_t i = 0; i + 4 <= n; i += 4) std::memcpy(dst + i, &one, 4);
}

void write_all(int fd, const char* p, size_t n, uint64_t at, const std::string& path) {
    while (n > 0) {
        ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(at));
        if (w < 0) {
            if (errno == EINTR) continue;
            die(path + ": write failed: " + std::strerror(errno));
        }
        p += w;
        n -= static_cast<size_t>(w);
        at += static_cast<uint64_t>(w);
    }
}

uint64_t parse_u64(const char* s, const char* what) {
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (errno || !end || *end) die(std::string("bad number for ") + what + ": " + s);
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr,
                     "usage: bench_gen dense OUT --bytes N [--vocab V] [--seed S]\n"
                     "       bench_gen sparse OUT --tensors T --tensor-bytes B [--vocab V] [--seed S]\n"
                     "       bench_gen llama OUT --bytes N --tokenizer-from TINY.gguf [--seed S]\n");
        return 2;
    }
    const std::string mode = argv[1], path = argv[2];
    uint64_t bytes = 0, tensors = 0, tensor_bytes = 4096, vocab = 150000, seed = 1;
    std::string tokenizer_from;
    for (int i = 3; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        if (k == "--bytes") bytes = parse_u64(argv[i + 1], "--bytes");
        else if (k == "--tensors") tensors = parse_u64(argv[i + 1], "--tensors");
        else if (k == "--tensor-bytes") tensor_bytes = parse_u64(argv[i + 1], "--tensor-bytes");
        else if (k == "--vocab") vocab = parse_u64(argv[i + 1], "--vocab");
        else if (k == "--seed") seed = parse_u64(argv[i + 1], "--seed");
        else if (k == "--tokenizer-from") tokenizer_from = argv[i + 1];
        else die("unknown option " + k);
    }
    Rng rng(seed);
    std::vector<gguf::TensorInfo> infos;
    uint32_t layers = 0;
    const bool sparse = mode == "sparse", llama = mode == "llama";
    std::vector<gguf::KeyValue> llama_kvs;
    if (llama) {
        if (bytes == 0 || tokenizer_from.empty()) die("llama needs --bytes and --tokenizer-from");
        gguf::Header tok;
        try {
            tok = gguf::read_header(tokenizer_from);
        } catch (const std::exception& e) {
            die(e.what());
        }
        layers = static_cast<uint32_t>(std::max<uint64_t>(1, bytes / kLlamaLayerBytes));
        llama_model(tok, layers, &llama_kvs, &infos);
    } else if (mode == "dense") {
        if (bytes == 0) die("--bytes is required");
        infos = dense_tensors(bytes, &layers);
    } else if (sparse) {
        if (tensors == 0 || tensor_bytes < 4 || tensor_bytes % 4) die("--tensors and --tensor-bytes (multiple of 4)");
        for (uint64_t i = 0; i < tensors; ++i) {
            infos.push_back(tensor("blk." + std::to_string(i) + ".weight", {static_cast<int64_t>(tensor_bytes / 4)}, kF32));
        }
        layers = static_cast<uint32_t>(tensors);
    } else {
        die("unknown mode " + mode);
    }
    uint64_t offset = 0;
    for (auto& t : infos) {
        t.offset = offset;
        offset += gguf::align_up(t.nbytes, 32);
    }
    const std::string header = gguf::render_header(
        llama ? llama_kvs : make_kvs(layers, static_cast<uint32_t>(vocab), rng), infos, 32);

    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) die(path + ": cannot create: " + std::strerror(errno));
    write_all(fd, header.data(), header.size(), 0, path);
    const uint64_t total = header.size() + offset;
    if (::ftruncate(fd, static_cast<off_t>(total)) != 0) die(path + ": ftruncate: " + std::strerror(errno));

    // Tensor data: random bytes (dense) or a random first 4 KiB (sparse). Padding stays zero.
    constexpr size_t kChunk = size_t{4} << 20;
    std::vector<char> buf(kChunk);
    for (const auto& t : infos) {
        uint64_t at = header.size() + t.offset;
        uint64_t left = sparse ? std::min<uint64_t>(t.nbytes, 4096) : t.nbytes;
        while (left > 0) {
            size_t n = static_cast<size_t>(std::min<uint64_t>(left, kChunk));
            if (!llama) rng.fill(buf.data(), n);
            else if (t.type == kF16) fill_f16(rng, buf.data(), n);
            else fill_ones(buf.data(), n);
            write_all(fd, buf.data(), n, at, path);
            at += n;
            left -= n;
        }
    }
    if (::close(fd) != 0) die(path + ": close: " + std::strerror(errno));
    std::printf("{\"path\":\"%s\",\"bytes\":%" PRIu64 ",\"tensors\":%zu,\"header_bytes\":%zu,\"layers\":%u}\n",
                path.c_str(), total, infos.size(), header.size(), layers);
    return 0;
}
