#include "support/dense_model.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "gguf/bytes/file_io.hpp"
#include "gguf/format/format.hpp"
#include "gguf/format/header.hpp"
#include "gguf/format/writer.hpp"

namespace gguf_test {

void write_dense_model(const std::string& path, const std::vector<std::pair<std::string, int64_t>>& f32_tensors,
                       uint64_t seed) {
    std::vector<gguf::KeyValue> kvs = {{"general.architecture", gguf::Value::string("synthetic")}};
    std::vector<gguf::TensorInfo> infos;
    uint64_t offset = 0;
    for (const auto& [name, n] : f32_tensors) {
        gguf::TensorInfo ti;
        ti.name = name;
        ti.n_dims = 1;
        ti.ne[0] = n;
        ti.type = 0;
        ti.nbytes = static_cast<uint64_t>(n) * 4;
        ti.offset = offset;
        offset += gguf::align_up(ti.nbytes, 32);
        infos.push_back(ti);
    }
    const std::string header = gguf::render_header(kvs, infos, 32);
    gguf::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd) << path << ": " << std::strerror(errno);
    ASSERT_EQ(gguf::write_full(fd.get(), header.data(), header.size()), 0) << path;
    std::mt19937_64 rng(seed);
    std::vector<uint64_t> chunk((uint64_t{1} << 20) / 8);
    for (const auto& t : infos) {
        uint64_t left = gguf::align_up(t.nbytes, 32);
        uint64_t data_left = t.nbytes;
        while (left > 0) {
            for (auto& w : chunk) w = rng();
            const uint64_t n = std::min<uint64_t>(left, chunk.size() * 8);
            auto* bytes = reinterpret_cast<char*>(chunk.data());
            if (data_left < n) std::memset(bytes + data_left, 0, n - data_left);  // the padding
            ASSERT_EQ(gguf::write_full(fd.get(), bytes, n), 0) << path;
            left -= n;
            data_left -= std::min(data_left, n);
        }
    }
}

}  // namespace gguf_test
