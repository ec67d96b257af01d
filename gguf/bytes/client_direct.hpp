// The page-cache wish of an O_DIRECT client, carried to the local files that serve its read.
#pragma once

namespace gguf {

/// While an object of this class lives on a thread, LocalFileSource::read_served calls made on
/// that thread with CopyKept::None read a whole request whose bytes are not all in the file's
/// page cache with O_DIRECT, and any other (bytes all cached, a piece of a request spanning
/// several pieces) with preadv2(RWF_DONTCACHE) where the kernel has it: pages cached before stay,
/// no new page stays. The FUSE read handler opens one for a client that opened the served file with
/// O_DIRECT (fs/ops.cpp): that client asked for no cache, so a direct-I/O load through the mount
/// leaves the shards uncached, as the same load from a local file leaves that file, and the
/// daemon copies each byte once (disk to its buffer) instead of twice (disk to page cache to
/// buffer; bench/README.md has the daemon CPU it saves). Sequential requests are read direct
/// too: such a client sends many requests at once (the kernel's async direct I/O), which keeps
/// the disk busy without readahead. Other readers (a merge) never set it. Nests; never throws.
class ClientDirectScope {
public:
    ClientDirectScope() noexcept { ++depth(); }
    ~ClientDirectScope() { --depth(); }
    ClientDirectScope(const ClientDirectScope&) = delete;
    ClientDirectScope& operator=(const ClientDirectScope&) = delete;
    /// True on a thread inside at least one such scope.
    static bool on() noexcept { return depth() != 0; }

private:
    /// How many scopes are open on the calling thread.
    static unsigned& depth() noexcept {
        thread_local unsigned open_scopes = 0;
        return open_scopes;
    }
};

}  // namespace gguf
