// The catalog of a remote first-shard URL: what `gguf-mount URL MOUNTPOINT` serves. The gguf/
// catalog never learns HTTP: this builds a gguf::Catalog whose parts are RemoteSources.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "gguf/model/catalog.hpp"
#include "gguf/model/split_set.hpp"
#include "remote/source.hpp"

namespace gguf_mount::remote {

/// The set whose first shard is at `first_url` ("http(s)://HOST/PATH/NAME-00001-of-0000N.gguf",
/// optionally with a query string, which is kept for every shard URL but never shown): one
/// MergedSet entry NAME.gguf at the root. Shard URLs follow from the name; the shards' first
/// blocks (their headers) are fetched several at a time. Reads only headers and sizes.
/// Throws gguf::Error with one line naming the (without credentials or query) URL: Code::Io for network and HTTP
/// failures of shard 1 (ENOENT for 404/410), BadSplit for a name that is not a first shard or a
/// set that does not validate (a missing shard is "URL: missing shard i of N").
/// `overrides` (the command line's --override-kv family) edit the merged header as for a local
/// set (gguf::merged_set_entry); one that does not fit the set throws its gguf::Error with the
/// merged name in front ("NAME.gguf: --override-kv: KEY: ...").
/// `sha256s` (shown shard URL -> content sha256, as remote_source_url gives for an hf:// file):
/// each shard listed there is checked by a reader that reads it in order to its end
/// (RemoteSource::expect_sha256), as the files of an hf:// folder mount are.
gguf::Catalog remote_set_catalog(const std::string& first_url, const std::shared_ptr<RemoteContext>& context,
                                 const gguf::KvOverrides& overrides = {},
                                 const std::map<std::string, std::string>& sha256s = {});

/// The http(s) URL that `merge` and `prefetch` read for the command-line SOURCE `source`:
/// `source` itself for an http(s):// URL; for `hf://ORG/REPO[@REV]/PATH` (PATH a file, e.g.
/// the first shard), the revision is pinned to its commit now and the answer is
/// {HF_ENDPOINT}/ORG/REPO/resolve/COMMIT/PATH, with the Hub token (if any) put into
/// `ro->http` for the endpoint's host only (hub_setup); "" for anything else (a local path).
/// The hf:// PATH must name a first shard (checked before any request: Code::BadArgument for
/// a PATH that is not a .gguf file, Code::BadSplit for a single-file model or another shard,
/// one line naming the source and what to give instead). With `ro->offline` the commit comes
/// from the cache (HubListing::fetch_commit).
/// Throws gguf::Error as hub_setup and HubListing::fetch_commit do (one line, no token).
/// With `sha256s`, an hf:// source also has its folder's tree listed at that commit, and
/// (*sha256s)[shown resolve URL] = lfs.oid for each LFS file of it (the shards' expected
/// content sha256, RemoteSource::verify_sha256); nothing is added for other sources. With
/// `ro->offline` the tree comes from the cache's record of it, and nothing is added (one info
/// line) when the cache has none.
std::string remote_source_url(const std::string& source, RemoteOptions* ro,
                              std::map<std::string, std::string>* sha256s = nullptr);

/// The validated split set behind remote_set_catalog (shards named by their shown URLs, each
/// with one part whose `source` is a RemoteSource). Also what `merge URL OUT` plans from.
/// `sha256s`: as for remote_set_catalog (armed before the headers are read). Throws as
/// remote_set_catalog.
gguf::SplitSet open_remote_set(const std::string& first_url, const std::shared_ptr<RemoteContext>& context,
                               const std::map<std::string, std::string>& sha256s = {});

}  // namespace gguf_mount::remote
