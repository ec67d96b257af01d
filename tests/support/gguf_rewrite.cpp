#include "support/gguf_rewrite.hpp"

#include <cstring>

#include <gtest/gtest.h>

namespace gguf_test {

namespace {

struct Cursor {
    const std::string& b;
    size_t at = 0;
    bool ok = true;

    template <typename T>
    T get() {
        T v{};
        if (at + sizeof v > b.size()) {
            ok = false;
            return v;
        }
        std::memcpy(&v, b.data() + at, sizeof v);
        at += sizeof v;
        return v;
    }
    std::string bytes(uint64_t n) {
        if (n > b.size() - at) {
            ok = false;
            return {};
        }
        std::string s = b.substr(at, n);
        at += n;
        return s;
    }
    std::string str() { return bytes(get<uint64_t>()); }
};

/// Skips one value of GGUF type `t`.
void skip_value(Cursor& c, uint32_t t) {
    static const uint64_t kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (t == 8) {
        c.str();
    } else if (t == 9) {
        const auto et = c.get<uint32_t>();
        const auto n = c.get<uint64_t>();
        for (uint64_t i = 0; i < n && c.ok; ++i) skip_value(c, et);
    } else if (t < 13) {
        c.bytes(kSize[t]);
    } else {
        c.ok = false;
    }
}

template <typename T>
RawKv raw(const std::string& key, uint32_t type, T v) {
    std::string s(sizeof v, '\0');
    std::memcpy(s.data(), &v, sizeof v);
    return RawKv{key, type, s};
}

}  // namespace

RawGguf cut_gguf(const std::string& file) {
    RawGguf g;
    Cursor c{file};
    EXPECT_EQ(c.bytes(4), "GGUF");
    const auto version = c.get<uint32_t>();
    EXPECT_TRUE(version == 2 || version == 3) << version;
    g.tensor_count = c.get<uint64_t>();
    const auto n_kv = c.get<uint64_t>();
    for (uint64_t i = 0; i < n_kv && c.ok; ++i) {
        RawKv kv;
        kv.key = c.str();
        kv.type = c.get<uint32_t>();
        const size_t start = c.at;
        skip_value(c, kv.type);
        kv.value = file.substr(start, c.at - start);
        if (kv.key == "general.alignment" && kv.type == 4) {
            uint32_t a = 0;
            std::memcpy(&a, kv.value.data(), 4);
            g.alignment = a;
        }
        g.kvs.push_back(std::move(kv));
    }
    const size_t infos = c.at;
    for (uint64_t i = 0; i < g.tensor_count && c.ok; ++i) {
        c.str();
        const auto n_dims = c.get<uint32_t>();
        c.bytes(uint64_t{8} * n_dims + 4 + 8);
    }
    EXPECT_TRUE(c.ok) << "malformed GGUF in the test";
    g.tensor_infos = file.substr(infos, c.at - infos);
    if (g.tensor_count > 0) {
        const size_t data = (c.at + g.alignment - 1) / g.alignment * g.alignment;
        g.data = data <= file.size() ? file.substr(data) : std::string();
    }
    return g;
}

std::string join_gguf(const RawGguf& g) {
    std::string out = "GGUF";
    auto put = [&out](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(uint32_t{3});
    put(static_cast<uint64_t>(g.tensor_count));
    put(static_cast<uint64_t>(g.kvs.size()));
    for (const RawKv& kv : g.kvs) {
        put(static_cast<uint64_t>(kv.key.size()));
        out += kv.key;
        put(kv.type);
        out += kv.value;
    }
    out += g.tensor_infos;
    const uint64_t a = g.tensor_count > 0 ? g.alignment : 32;
    out.resize((out.size() + a - 1) / a * a, '\0');
    return out + g.data;
}

size_t kv_index(const RawGguf& g, const std::string& key) {
    for (size_t i = 0; i < g.kvs.size(); ++i) {
        if (g.kvs[i].key == key) return i;
    }
    ADD_FAILURE() << "no key " << key;
    return 0;
}

RawKv raw_string(const std::string& key, const std::string& s) {
    RawKv kv = raw(key, 8, static_cast<uint64_t>(s.size()));
    kv.value += s;
    return kv;
}
RawKv raw_u32(const std::string& key, uint32_t v) { return raw(key, 4, v); }
RawKv raw_i32(const std::string& key, int32_t v) { return raw(key, 5, v); }
RawKv raw_u64(const std::string& key, uint64_t v) { return raw(key, 10, v); }
RawKv raw_f32(const std::string& key, float v) { return raw(key, 6, v); }
RawKv raw_bool(const std::string& key, bool v) { return raw(key, 7, static_cast<uint8_t>(v ? 1 : 0)); }

}  // namespace gguf_test
