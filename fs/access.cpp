#include "fs/access.hpp"

#include <fcntl.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <cstdlib>

#include <spdlog/spdlog.h>

namespace gguf_mount::fs {

namespace {

/// The process's own credentials, read once (the daemon never changes them).
struct DaemonIds {
    uid_t uid;
    gid_t gid;
    std::vector<gid_t> groups;
};

const DaemonIds& daemon_ids() {
    static const DaemonIds ids = [] {
        DaemonIds d{::geteuid(), ::getegid(), {}};
        int n = ::getgroups(0, nullptr);
        if (n > 0) {
            d.groups.resize(static_cast<size_t>(n));
            n = ::getgroups(n, d.groups.data());
            d.groups.resize(n > 0 ? static_cast<size_t>(n) : 0);
        }
        return d;
    }();
    return ids;
}

/// Per-thread setgroups (the raw system call; glibc's wrapper changes every thread).
bool thread_setgroups(const std::vector<gid_t>& groups) noexcept {
    return ::syscall(SYS_setgroups, groups.size(), groups.empty() ? nullptr : groups.data()) == 0;
}

/// setfsuid/setfsgid report the previous id, never an error: read the id back to verify.
bool set_fsuid(uid_t uid) noexcept {
    ::setfsuid(uid);
    return static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) == uid;
}
bool set_fsgid(gid_t gid) noexcept {
    ::setfsgid(gid);
    return static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))) == gid;
}

}  // namespace

CallerCredentials::CallerCredentials(uid_t uid, gid_t gid, const std::vector<gid_t>& groups) noexcept {
    try {
        daemon_ids();
    } catch (...) {
        return;
    }
    groups_set_ = thread_setgroups(groups);
    gid_set_ = groups_set_ && set_fsgid(gid);
    uid_set_ = gid_set_ && set_fsuid(uid);
    ok_ = uid_set_;
    if (!ok_) restore();
}

CallerCredentials::~CallerCredentials() { restore(); }

void CallerCredentials::restore() noexcept {
    const DaemonIds& d = daemon_ids();
    // fsuid first: back to 0 the thread regains its file capabilities.
    if (uid_set_ && !set_fsuid(d.uid)) {
        spdlog::critical("cannot restore the file-system uid {} of a worker thread; aborting", d.uid);
        std::abort();
    }
    if (gid_set_ && !set_fsgid(d.gid)) {
        spdlog::critical("cannot restore the file-system gid {} of a worker thread; aborting", d.gid);
        std::abort();
    }
    if (groups_set_ && !thread_setgroups(d.groups)) {
        spdlog::critical("cannot restore the supplementary groups of a worker thread; aborting");
        std::abort();
    }
    uid_set_ = gid_set_ = groups_set_ = false;
}

bool can_switch_credentials() noexcept {
    static const bool can = [] {
        CallerCredentials probe(65534, 65534, {});
        return probe.ok();
    }();
    return can;
}

int access_as(uid_t uid, gid_t gid, const std::vector<gid_t>& groups, const std::vector<std::string>& paths,
              int mode) noexcept {
    if (uid == 0) return 0;
    CallerCredentials as(uid, gid, groups);
    if (!as.ok()) return EACCES;
    for (const std::string& p : paths) {
        if (::faccessat(AT_FDCWD, p.c_str(), mode, AT_EACCESS) != 0) return errno;
    }
    return 0;
}

bool thread_groups(pid_t tid, std::vector<gid_t>* groups) {
    std::ifstream in("/proc/" + std::to_string(tid) + "/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.compare(0, 7, "Groups:") != 0) continue;
        std::istringstream fields(line.substr(7));
        groups->clear();
        unsigned long gid = 0;
        while (fields >> gid) groups->push_back(static_cast<gid_t>(gid));
        return fields.eof();
    }
    return false;
}

}  // namespace gguf_mount::fs
