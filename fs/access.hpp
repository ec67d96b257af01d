// Deciding access the way a direct open would, on the credentials of the process that made a
// FUSE request (README "Permissions"; path_resolution(7), faccessat(2), setfsuid(2), acl(5)).
//
// With default_permissions the kernel only checks the mode, owner and group the daemon reports;
// a daemon running as root then opens any source file. So, when the daemon may take on other
// credentials (root, or CAP_SETUID and CAP_SETGID), open, opendir and lookup switch the handling
// thread's fsuid, fsgid and supplementary groups to the caller's and ask faccessat(AT_EACCESS)
// about every source path of the node: directory search rights from / down, through every
// symlink, POSIX ACLs, as the kernel evaluates them for an open. The switch is per thread
// (setfsuid/setfsgid and the raw setgroups system call; glibc's setgroups would change every
// thread) and undone before the handler replies.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace gguf_mount::fs {

/// True when this process can switch a thread's file-system credentials to another user's:
/// probed once (first call) by switching the calling thread to uid/gid 65534 and back.
bool can_switch_credentials() noexcept;

/// RAII: the calling thread's fsuid, fsgid and supplementary groups set to `uid`, `gid`,
/// `groups` for the object's lifetime, then restored to the process's effective ids and groups.
/// When fsuid leaves 0 the kernel clears the thread's CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH
/// (capabilities(7)), so checks made meanwhile are the caller's. Not copyable; must be destroyed
/// on the thread that created it. If the restore fails the process aborts: a worker thread
/// left with another user's credentials must never serve a request.
class CallerCredentials {
public:
    CallerCredentials(uid_t uid, gid_t gid, const std::vector<gid_t>& groups) noexcept;
    ~CallerCredentials();
    CallerCredentials(const CallerCredentials&) = delete;
    CallerCredentials& operator=(const CallerCredentials&) = delete;

    /// True when every id was switched (verified by reading it back); false when a step failed
    /// (what had been switched is already restored then).
    bool ok() const noexcept { return ok_; }

private:
    void restore() noexcept;
    bool ok_ = false;
    bool groups_set_ = false, gid_set_ = false, uid_set_ = false;
};

/// 0 when user `uid` with group `gid` and supplementary `groups` may access every path in
/// `paths` with `mode` (R_OK, X_OK) the way open(2) would check it (faccessat with AT_EACCESS,
/// symlinks followed); otherwise the errno of the first refusal (EACCES, ENOENT, ...), or
/// EACCES when the credentials cannot be switched. uid 0 is answered 0 without a switch: with
/// fsuid 0 the thread keeps the daemon's capabilities, which pass every such check anyway.
/// The supplementary groups of the thread `tid` (the pid a FUSE request carries is the
/// calling thread's id), read from the "Groups:" line of /proc/TID/status into `*groups`.
/// Returns false when the file cannot be read or has no such line (the caller exited).
/// Used instead of libfuse 3.14's fuse_req_getgroups, which runs strstr over a read buffer it
/// never NUL-terminates (found by ASan: a heap read past the buffer on every call).
bool thread_groups(pid_t tid, std::vector<gid_t>* groups);

int access_as(uid_t uid, gid_t gid, const std::vector<gid_t>& groups, const std::vector<std::string>& paths,
              int mode) noexcept;

}  // namespace gguf_mount::fs
