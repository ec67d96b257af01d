// A directory URL ("http(s)://HOST/PATH/") as a gguf::DirectoryListing: each directory's index
// page (nginx HTML or JSON autoindex, Apache) parsed by remote/index.hpp, each file opened as a
// RemoteSource. The gguf/ catalog applies its usual rules to it and never learns HTTP.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "gguf/model/catalog.hpp"
#include "remote/bounds.hpp"
#include "remote/folder_listing.hpp"
#include "remote/source.hpp"

namespace gguf_mount::remote {

class HttpDirectoryListing final : public FolderListing {
public:
    /// `root_url` must end with '/'. Nothing is fetched until list(). `max_names`: the names
    /// one walk may list (kMaxListedNames, the catalog's CatalogOptions::max_entries; tests
    /// give less).
    HttpDirectoryListing(std::shared_ptr<RemoteContext> context, std::string root_url,
                         size_t max_names = kMaxListedNames);

    /// GETs the index page of ROOT/PATH/ and opens the files in it (RemoteSource::open, several
    /// at a time: size and validator from the first ranged GET or the cache). A walk starts at
    /// list("") and may list `max_names` names (not starting with '.') in all: they are counted
    /// before any file is opened; the first name past the budget is returned unopened with an
    /// error (the catalog reports the cut as its limit, one Problem, and walks no further), the
    /// rest of that page and every later page are neither fetched nor listed, and the cut is
    /// logged once. A file that cannot be opened, an entry with IndexEntry::problem (a name over
    /// 255 bytes, a listed size above 1 PiB) and a file whose answered size is above 1 PiB are
    /// Items with an error (a Problem naming them, never an entry). Throws gguf::Error(Io)
    /// naming the page URL when the page cannot be fetched or parsed (ENOMEM for std::bad_alloc).
    /// Each page fetched is stored in the cache as the last good listing of its URL
    /// (BlockCache::save_listing, the kept names only); with --offline the stored listing is used
    /// instead of the network (Io with ENOENT naming the URL when none is stored).
    /// The root's definite failure (FolderListing::definite_failure) is its index page answered
    /// with a definite error (definite_answer: a 404, a 403) or that does not parse.
    std::vector<Item> list(const std::string& path) override;
    std::string root() const override;

private:
    std::vector<Item> list_bounded(const std::string& path);

    std::shared_ptr<RemoteContext> context_;
    std::string root_url_;  // as given, with '/' at the end (may hold a query: kept, never shown)
    size_t max_names_;
    std::mutex mutex_;
    size_t listed_ = 0;  // names listed in this walk (under mutex_)
};

}  // namespace gguf_mount::remote
