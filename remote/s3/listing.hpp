// An S3 prefix ("s3://BUCKET/PREFIX/") as a gguf::DirectoryListing: each folder is one
// ListObjectsV2 walk (list-type=2, prefix, delimiter=/, continuation tokens followed until
// IsTruncated is false), its Contents the files (opened from the listed Size and ETag, no request
// per file), its CommonPrefixes the sub-folders. The gguf/ catalog applies its usual rules to it.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "gguf/model/catalog.hpp"
#include "remote/bounds.hpp"
#include "remote/folder_listing.hpp"
#include "remote/s3/signer.hpp"
#include "remote/source.hpp"

namespace gguf_mount::remote::s3 {

/// Files of one listing opened (and their first blocks fetched) at the same time: 32. S3
/// serves thousands of GETs per second per prefix and AWS advises parallel connections for
/// throughput ("Best practices design patterns: optimizing Amazon S3 performance"); 32
/// connections keep a 1,200-shard prefix latency-bound (1,200 / 32 x RTT) while bounding the
/// threads, sockets and 4 MiB buffers in flight.
inline constexpr size_t kListingFetches = 32;

class S3Listing final : public FolderListing {
public:
    /// `prefix`: "" (the bucket) or ending in '/'. `signer`: the one of the context's client
    /// (it builds the URLs). Nothing is fetched until list(). `max_names`: names one walk may
    /// list (as HttpDirectoryListing).
    S3Listing(std::shared_ptr<RemoteContext> context, std::shared_ptr<const S3Signer> signer, std::string bucket,
              std::string prefix, size_t max_names = kMaxListedNames);

    /// Lists PREFIX + `path` + "/": every page (at most 10,000 pages), files as RemoteSources
    /// opened from the listed size and ETag (RemoteSource::open_listed), sub-prefixes as
    /// folders. A key ending in '/' (a folder marker), a name starting with '.' and an empty name
    /// ("a//b") are not listed; a name over 255 bytes or a size above 1 PiB is an Item with an
    /// error. Past `max_names` names in a walk the rest is cut as HttpDirectoryListing does.
    /// The files are opened and their first blocks (their headers, which the catalog reads
    /// next) fetched kListingFetches at a time before list() returns.
    /// The folder's entries are stored in the cache as its last good listing; with --offline
    /// that listing is used instead of the network (Io with ENOENT when none is stored). Throws
    /// gguf::Error(Io) naming s3://BUCKET/PREFIX when a page cannot be fetched (the S3 error in
    /// one line), BadValue/TooLarge when a page cannot be parsed (list_objects.hpp). A root
    /// (PREFIX itself) answered with a definite error (definite_answer: SignatureDoesNotMatch,
    /// InvalidAccessKeyId, NoSuchBucket, a wrong region, AccessDenied) or a page that does not
    /// parse is the root's definite failure (FolderListing::definite_failure).
    std::vector<Item> list(const std::string& path) override;
    /// "s3://BUCKET/PREFIX" without the trailing '/'.
    std::string root() const override;

private:
    struct Entry {
        std::string name;
        bool directory = false;
        uint64_t size = 0;
        std::string etag, last_modified;
        std::string problem;
    };
    std::vector<Entry> fetch(const std::string& prefix);
    /// The name of the cache record (BlockCache::save_listing) of the folder `prefix`: one per
    /// endpoint, bucket and prefix ("s3 ListObjectsV2 of http://HOST/BUCKET/PREFIX/").
    std::string listing_record(const std::string& prefix) const;
    /// Opens the listed files of `files` (item index, entry) as RemoteSources into
    /// items[index].part and fetches each one's block 0 when not cached, kListingFetches at a
    /// time.
    void open_files(const std::string& prefix, const std::vector<std::pair<size_t, const Entry*>>& files,
                    std::vector<Item>& items) const;

    std::shared_ptr<RemoteContext> context_;
    std::shared_ptr<const S3Signer> signer_;
    std::string bucket_, prefix_;
    size_t max_names_;
    std::mutex mutex_;
    size_t listed_ = 0;  // names listed in this walk (under mutex_)
};

}  // namespace gguf_mount::remote::s3
