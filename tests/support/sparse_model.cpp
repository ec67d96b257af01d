#include "support/sparse_model.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include "gguf/format/format.hpp"
#include "gguf/format/reader.hpp"
#include "gguf/format/writer.hpp"

namespace gguf_test {

gguf::Header write_sparse_model(const std::string& path, const std::vector<SparseTensor>& tensors, uint64_t alignment,
                                const std::vector<gguf::KeyValue>& kvs) {
    std::vector<gguf::KeyValue> all;
    all.push_back({"general.architecture", gguf::Value::string("synthetic")});
    if (alignment != gguf::kDefaultAlignment) {
        all.push_back({"general.alignment", gguf::Value::u32(static_cast<uint32_t>(alignment))});
    }
    all.insert(all.end(), kvs.begin(), kvs.end());

    std::vector<gguf::TensorInfo> infos;
    uint64_t offset = 0;
    for (const auto& t : tensors) {
        gguf::TensorInfo ti;
        ti.name = t.name;
        ti.n_dims = static_cast<uint32_t>(t.ne.size());
        uint64_t elements = 1;
        for (size_t d = 0; d < t.ne.size(); ++d) {
            ti.ne[d] = t.ne[d];
            elements *= static_cast<uint64_t>(t.ne[d]);
        }
        auto type = gguf::ggml_type(t.type);
        EXPECT_TRUE(type.has_value()) << "type " << t.type;
        ti.type = t.type;
        ti.nbytes = elements / type->block_size * type->type_size;
        ti.offset = offset;
        offset += gguf::align_up(ti.nbytes, alignment);
        infos.push_back(ti);
    }
    const std::string header = gguf::render_header(all, infos, alignment);

    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
    if (fd < 0) return {};
    EXPECT_EQ(::pwrite(fd, header.data(), header.size(), 0), static_cast<ssize_t>(header.size()));
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(header.size() + offset)), 0);
    std::string mark;
    for (size_t i = 0; i < infos.size(); ++i) {
        const uint64_t n = infos[i].nbytes;
        const uint64_t base = header.size() + infos[i].offset;
        for (uint64_t start : {uint64_t{0}, n > kMarkerBytes ? n - kMarkerBytes : 0}) {
            const uint64_t len = std::min(kMarkerBytes, n - start);
            mark.resize(len);
            for (uint64_t p = 0; p < len; ++p) mark[p] = marker_byte(i, start + p);
            EXPECT_EQ(::pwrite(fd, mark.data(), len, static_cast<off_t>(base + start)), static_cast<ssize_t>(len));
        }
    }
    ::close(fd);
    return gguf::read_header(path);
}

}  // namespace gguf_test
