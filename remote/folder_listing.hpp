// What a remote folder (an http(s) directory URL, an s3:// prefix) answered at the root of its
// last walk, for the mount's start: a definite answer (the server said no: HTTP 4xx, a bucket
// that does not exist, an answer that does not parse, a server that ignores Range) fails a mount
// at once with that line; only a server that cannot be reached (connection refused, timeout,
// DNS, or a 5xx/429 that retries may outlast) may mount an empty directory that fills in later
// (README "Remote sources").
#pragma once

#include <mutex>
#include <string>

#include "gguf/model/catalog.hpp"
#include "remote/client.hpp"

namespace gguf_mount::remote {

/// True when `e` is the server's definite answer, not a failure to reach it: an HTTP status
/// (a 2xx that is wrong, such as 200 to a Range request; a redirect not followed; a 4xx) below
/// 500 that the client does not retry. False for a transport error (status 0: connection
/// refused, timeout, DNS) and for 5xx and 429 answers.
bool definite_answer(const HttpError& e) noexcept;

/// A gguf::DirectoryListing of a remote folder that records the definite failure of its root.
class FolderListing : public gguf::DirectoryListing {
public:
    /// The one line (naming the folder, what the server answered and what to do) of the
    /// definite failure of the root of the last walk (list("")), "" when the root listed, or
    /// failed only in a way that may pass (definite_answer false). Thread-safe.
    std::string definite_failure() const;

protected:
    /// Records `line` as the root's definite failure ("" clears it: a new walk starts).
    void set_definite_failure(std::string line);

private:
    mutable std::mutex mutex_;
    std::string failure_;
};

}  // namespace gguf_mount::remote
