#include "support/catalog_support.hpp"

#include <gtest/gtest.h>

#include "gguf/bytes/virtual_file.hpp"

namespace gguf_test {

const gguf::CatalogEntry* find_entry(const gguf::Catalog& c, const std::string& path) {
    for (const auto& e : c.entries) {
        if (e.path == path) return &e;
    }
    return nullptr;
}

std::string problems_text(const gguf::Catalog& c) {
    std::string s;
    for (const auto& p : c.problems) s += p.path + " | " + p.reason + "\n";
    return s;
}

std::string bytes_of(const gguf::CatalogEntry& e) {
    auto vf = gguf::VirtualFile::open(e.layout, e.parts());
    std::string out(vf.size(), '\0');
    EXPECT_EQ(vf.read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    return out;
}

}  // namespace gguf_test
