// Helpers for tests of gguf::build_catalog: finding entries, problems as text, served bytes.
#pragma once

#include <string>

#include "gguf/model/catalog.hpp"

namespace gguf_test {

/// The entry of `c` at mount path `path`, or nullptr.
const gguf::CatalogEntry* find_entry(const gguf::Catalog& c, const std::string& path);

/// Every problem of `c` as "PATH | REASON\n" lines (raw bytes), for assertions and messages.
std::string problems_text(const gguf::Catalog& c);

/// All bytes of a catalog entry, read the way the mount reads them (VirtualFile over
/// entry.layout and entry.parts()). Fails the current test on a short read.
std::string bytes_of(const gguf::CatalogEntry& e);

}  // namespace gguf_test
