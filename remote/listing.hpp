// A directory URL ("http(s)://HOST/PATH/") as a gguf::DirectoryListing: each directory's index
// page (nginx HTML or JSON autoindex, Apache) parsed by remote/index.hpp, each file opened as a
// RemoteSource. The gguf/ catalog applies its usual rules to it and never learns HTTP.
#pragma once

#include <memory>
#include <string>

#include "gguf/model/catalog.hpp"
#include "remote/source.hpp"

namespace gguf_mount::remote {

class HttpDirectoryListing final : public gguf::DirectoryListing {
public:
    /// `root_url` must end with '/'. Nothing is fetched until list().
    HttpDirectoryListing(std::shared_ptr<RemoteContext> context, std::string root_url);

    /// GETs the index page of ROOT/PATH/ and opens every file in it (RemoteSource::open, several
    /// at a time: size and validator from the first ranged GET or the cache). A file that
    /// cannot be opened is left out with one warning naming it. Throws gguf::Error(Io) naming
    /// the page URL when the page cannot be fetched or parsed. Each page fetched is stored in the
    /// cache as the last good listing of its URL (BlockCache::save_listing); with --offline the
    /// stored listing is used instead of the network (Io with ENOENT naming the URL when none is
    /// stored).
    std::vector<Item> list(const std::string& path) override;
    std::string root() const override;

private:
    std::shared_ptr<RemoteContext> context_;
    std::string root_url_;  // as given, with '/' at the end (may hold a query: kept, never shown)
};

}  // namespace gguf_mount::remote
