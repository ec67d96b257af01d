#include "fs/mount_point.hpp"

#include <dirent.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "gguf/bytes/file_io.hpp"

extern char** environ;

namespace gguf_mount::fs {

namespace {

/// Undoes mountinfo's octal escapes of space, tab, newline and backslash ("\040" -> ' ').
std::string decode_field(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])) &&
            std::isdigit(static_cast<unsigned char>(s[i + 2])) && std::isdigit(static_cast<unsigned char>(s[i + 3]))) {
            out += static_cast<char>(std::strtol(s.substr(i + 1, 3).c_str(), nullptr, 8));
            i += 3;
        } else {
            out += s[i];
        }
    }
    return out;
}

/// Sub-folders of a non-empty mount point looked into for models (the swap check).
constexpr size_t kSwapCheckFolders = 64;

/// True when `name` ends in ".gguf".
bool is_gguf_name(const std::string& name) {
    return name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0;
}

/// The first "FOLDER/NAME.gguf" in the given sub-folders of `dir`, or "". Folders that are
/// mount points (/proc/self/mountinfo) are skipped, never listed.
std::string model_in_folders(const std::string& dir, const std::vector<std::string>& folders);

/// True when `path` is a directory that can be listed and holds no entry.
bool directory_is_empty(const std::string& path) {
    DIR* d = ::opendir(path.c_str());
    if (!d) return false;
    bool empty = true;
    while (dirent* ent = ::readdir(d)) {
        if (std::strcmp(ent->d_name, ".") != 0 && std::strcmp(ent->d_name, "..") != 0) {
            empty = false;
            break;
        }
    }
    ::closedir(d);
    return empty;
}

/// `s` quoted for a shell command line when it holds anything but [A-Za-z0-9/._+-].
std::string shell_quote(const std::string& s) {
    bool plain = !s.empty();
    for (char c : s) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && std::strchr("/._+-", c) == nullptr) plain = false;
    }
    if (plain) return s;
    std::string out = "'";
    for (char c : s) {
        if (c == '\'') {
            out += "'\\''";
        } else {
            out += c;
        }
    }
    return out + "'";
}

std::string real_path_of(const std::string& p) {
    std::unique_ptr<char, decltype(&std::free)> r(::realpath(p.c_str(), nullptr), &std::free);
    return r ? std::string(r.get()) : std::string();
}

/// Runs `fusermount3 -uz PATH` and waits for it. Returns "" on success, else why not.
std::string lazy_fusermount(const std::string& path) {
    const char* argv[] = {"fusermount3", "-uz", path.c_str(), nullptr};
    pid_t pid = -1;
    int rc = ::posix_spawnp(&pid, "fusermount3", nullptr, nullptr, const_cast<char* const*>(argv), environ);
    if (rc != 0) return std::string("cannot run fusermount3: ") + std::strerror(rc);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return std::string("waitpid: ") + std::strerror(errno);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
    return "fusermount3 -uz failed";
}

/// Detaches the dead mount on `path`: umount2(MNT_DETACH) as root, else fusermount3 -uz.
/// Returns "" on success, else why not.
std::string clear_dead_mount(const std::string& path) {
    if (::geteuid() == 0 && ::umount2(path.c_str(), MNT_DETACH) == 0) return "";
    return lazy_fusermount(path);
}

/// The command that unmounts a mount of type `fstype` on `path` (`lazy`: for a dead one).
std::string unmount_command(const std::string& fstype, const std::string& path, bool lazy) {
    if (fstype.rfind("fuse", 0) == 0) return std::string("fusermount3 ") + (lazy ? "-uz " : "-u ") + shell_quote(path);
    return std::string(lazy ? "umount -l " : "umount ") + shell_quote(path);
}

bool is_inside(const std::string& path, const std::string& dir) {
    if (path == dir) return true;
    if (dir == "/") return true;
    return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

}  // namespace

std::vector<MountInfo> parse_mountinfo(const std::string& text) {
    std::vector<MountInfo> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        // id parent major:minor root mount_point mount_options [optional fields...] - fstype source super_options
        std::istringstream ls(line);
        std::vector<std::string> f;
        std::string w;
        while (ls >> w) f.push_back(w);
        if (f.size() < 10) continue;
        size_t sep = 6;
        while (sep < f.size() && f[sep] != "-") ++sep;
        if (sep + 3 >= f.size()) continue;
        MountInfo m;
        m.mount_point = decode_field(f[4]);
        m.mount_options = f[5];
        m.fstype = f[sep + 1];
        m.source = decode_field(f[sep + 2]);
        m.super_options = f[sep + 3];
        if (std::sscanf(f[2].c_str(), "%u:%u", &m.major, &m.minor) != 2) continue;
        out.push_back(std::move(m));
    }
    return out;
}

namespace {

/// The mounts of /proc/self/mountinfo, or nullopt when it cannot be read.
std::optional<std::vector<MountInfo>> read_mountinfo() {
    std::ifstream in("/proc/self/mountinfo");
    if (!in) return std::nullopt;
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_mountinfo(ss.str());
}

}  // namespace

std::optional<MountInfo> topmost_mount(const std::string& mount_point) {
    std::optional<std::vector<MountInfo>> mounts = read_mountinfo();
    if (!mounts) return std::nullopt;
    std::optional<MountInfo> found;
    for (MountInfo& m : *mounts) {
        if (m.mount_point == mount_point) found = std::move(m);  // later lines are mounted on top
    }
    return found;
}

namespace {

std::string model_in_folders(const std::string& dir, const std::vector<std::string>& folders) {
    const std::optional<std::vector<MountInfo>> mounts = read_mountinfo();
    if (!mounts) return "";  // cannot tell what is mounted: list nothing
    for (const std::string& folder : folders) {
        const std::string path = dir + "/" + folder;
        bool mounted = false;
        for (const MountInfo& m : *mounts) mounted = mounted || is_inside(m.mount_point, path);
        if (mounted) continue;  // a mount on or below the folder: never listed
        DIR* d = ::opendir(path.c_str());
        if (!d) continue;
        std::string model;
        while (dirent* ent = ::readdir(d)) {
            if (is_gguf_name(ent->d_name)) {
                model = folder + "/" + ent->d_name;
                break;
            }
        }
        ::closedir(d);
        if (!model.empty()) return model;
    }
    return "";
}

}  // namespace

std::string absolute_mount_path(const std::string& path) {
    std::string p = path;
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    std::string whole = real_path_of(p);
    if (!whole.empty()) return whole;
    std::string parent = real_path_of(gguf::dir_name(p));
    if (parent.empty()) return path;
    return (parent == "/" ? "" : parent) + "/" + gguf::base_name(p);
}

MountPointCheck prepare_mount_point(const std::string& mountpoint, const std::string& source, bool allow_non_empty) {
    MountPointCheck result;
    const std::string mp = shell_quote(mountpoint);
    if (is_inside(source, mountpoint)) {
        result.refusal = "SOURCE " + source +
                         (source == mountpoint ? " is the mount point" : " is inside the mount point " + mountpoint) +
                         ": the mount would hide it; choose a mount point outside SOURCE (e.g. a new empty "
                         "directory next to it)";
        return result;
    }

    // Never stack: clear dead mounts of ours, refuse everything else that is mounted there.
    for (int round = 0; round < 16; ++round) {
        std::optional<MountInfo> m = topmost_mount(mountpoint);
        if (!m) break;
        // statfs, not stat: a dead FUSE mount still answers stat() from the attribute cache,
        // while FUSE_STATFS always reaches the daemon (ENOTCONN once it is gone).
        struct statfs sfs {};
        int rc = ::statfs(mountpoint.c_str(), &sfs);
        // ECONNABORTED: the connection was aborted while our request waited (its last /dev/fuse
        // descriptor closed just then, e.g. a killed daemon's start-up reader closing its
        // inherited copy); asked again, a dead mount answers ENOTCONN.
        if (rc != 0 && errno == ECONNABORTED) rc = ::statfs(mountpoint.c_str(), &sfs);
        if (rc == 0) {
            result.refusal = mountpoint + ": already mounted (" + m->fstype + " from " + m->source +
                             "); unmount it first with '" +
                             // Our own live mount: the command README teaches.
                             (m->fstype == "fuse.gguf-mount" ? "gguf-mount umount " + shell_quote(mountpoint)
                                                            : unmount_command(m->fstype, mountpoint, false)) +
                             "', or choose another mount point";
            return result;
        }
        int e = errno;
        if (e != ENOTCONN) {
            result.refusal = mountpoint + ": the " + m->fstype + " mount there does not answer (" + std::strerror(e) +
                             "); unmount it with '" + unmount_command(m->fstype, mountpoint, true) + "'";
            return result;
        }
        if (m->fstype != "fuse.gguf-mount") {
            result.refusal = mountpoint + ": a dead " + m->fstype + " mount is there (" + std::strerror(e) +
                             ": its daemon is gone); clear it with '" + unmount_command(m->fstype, mountpoint, true) +
                             "', then mount again";
            return result;
        }
        std::string why = clear_dead_mount(mountpoint);
        if (!why.empty()) {
            result.refusal = mountpoint + ": a dead gguf-mount mount is there (its daemon is gone) and clearing it " +
                             "failed (" + why + "); run 'fusermount3 -uz " + mp + "', then mount again";
            return result;
        }
        result.cleared.push_back(mountpoint + ": cleared a dead gguf-mount mount of " + m->source +
                                 " (its daemon was gone: " + std::strerror(e) + ")");
    }

    struct stat st {};
    if (::stat(mountpoint.c_str(), &st) != 0) {
        int e = errno;
        result.refusal = mountpoint + ": mount point: " + std::strerror(e) +
                         (e == ENOENT ? "; create it first with 'mkdir -p " + mp + "'" : std::string());
        return result;
    }
    if (!S_ISDIR(st.st_mode)) {
        result.refusal = mountpoint + ": mount point is not a directory; give an empty directory";
        return result;
    }
    if (!allow_non_empty) {
        DIR* d = ::opendir(mountpoint.c_str());
        if (!d) {
            int e = errno;
            result.refusal = mountpoint + ": mount point cannot be listed: " + std::strerror(e);
            return result;
        }
        std::string first, model;  // the first name; the first GGUF file name, if any
        std::vector<std::string> folders;  // sub-folders, looked into below when no model is on top
        while (dirent* ent = ::readdir(d)) {
            if (std::strcmp(ent->d_name, ".") == 0 || std::strcmp(ent->d_name, "..") == 0) continue;
            const std::string name = ent->d_name;
            if (first.empty()) first = name;
            if (is_gguf_name(name)) {
                model = name;
                break;
            }
            if (ent->d_type == DT_DIR && name[0] != '.' && folders.size() < kSwapCheckFolders) folders.push_back(name);
        }
        ::closedir(d);
        // Model directories often hold one sub-folder per quantization: look one level down,
        // never into anything mounted there (a dead or hung mount would block the listing).
        if (model.empty() && !folders.empty()) model = model_in_folders(mountpoint, folders);
        if (!model.empty()) {
            // Most likely SOURCE and MOUNTPOINT were given the wrong way round: mounting over the
            // models would hide them, so --allow-non-empty is not offered as the fix.
            result.refusal = mountpoint + ": mount point holds models (e.g. '" + model +
                             "'); did you swap SOURCE and MOUNTPOINT? The order is 'gguf-mount SOURCE "
                             "MOUNTPOINT' (MOUNTPOINT an empty directory)";
            return result;
        }
        if (!first.empty() && directory_is_empty(source)) {
            // An empty SOURCE and a full mount point: the wrong way round as well.
            result.refusal = mountpoint + ": mount point is not empty (it holds '" + first + "') and SOURCE " + source +
                             " is an empty directory; did you swap SOURCE and MOUNTPOINT? The order is "
                             "'gguf-mount SOURCE MOUNTPOINT' (MOUNTPOINT an empty directory)";
            return result;
        }
        if (!first.empty()) {
            result.refusal = mountpoint + ": mount point is not empty (it holds '" + first +
                             "'), and the mount would hide its files; use an empty directory, or pass "
                             "--allow-non-empty (-o nonempty) to mount over them";
            return result;
        }
    }
    return result;
}

}  // namespace gguf_mount::fs
