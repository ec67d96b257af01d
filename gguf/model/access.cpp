#include "gguf/model/access.hpp"

#include <sys/xattr.h>
#include <unistd.h>

#include <cstdio>
#include <set>

namespace gguf {

namespace {

bool later(const timespec& a, const timespec& b) {
    return a.tv_sec != b.tv_sec ? a.tv_sec > b.tv_sec : a.tv_nsec > b.tv_nsec;
}

/// classes_passing() of one check.
mode_t classes_passing_one(uid_t uid, gid_t gid, const AccessCheck& c) noexcept {
        const bool ow = (c.mode >> 6) & c.need, gr = (c.mode >> 3) & c.need, ot = c.mode & c.need;
        const bool mine = c.uid == uid, our_group = c.gid == gid;
        mode_t pass = 0;
        if (c.acl) {
            pass = mine && ow ? 0400 : 0;
        } else {
            if (mine ? ow : (gr && ot)) pass |= 0400;
            if ((our_group ? gr : (gr && ot)) && (mine || ow)) pass |= 0040;
            if (ot && (mine || ow) && (our_group || gr)) pass |= 0004;
        }
        return pass;
}

}  // namespace

mode_t classes_passing(uid_t uid, gid_t gid, const std::vector<AccessCheck>& checks) noexcept {
    mode_t out = 0444;
    for (const AccessCheck& c : checks) out &= classes_passing_one(uid, gid, c);
    return out;
}

EntryAttributes file_attributes(const std::vector<FilePart>& parts) noexcept {
    EntryAttributes a;
    a.mode = 0444;
    if (parts.empty()) return a;
    a.uid = parts.front().st.st_uid;
    a.gid = parts.front().st.st_gid;
    a.mtime = parts.front().st.st_mtim;
    a.ctime = parts.front().st.st_ctim;
    mode_t passing = 0444;
    for (const FilePart& p : parts) {
        if (later(p.st.st_mtim, a.mtime)) a.mtime = p.st.st_mtim;
        if (later(p.st.st_ctim, a.ctime)) a.ctime = p.st.st_ctim;
        passing &= classes_passing_one(a.uid, a.gid, AccessCheck{p.st.st_uid, p.st.st_gid, p.st.st_mode & 07777, false, 4});
    }
    a.mode = passing;
    return a;
}

std::string AccessJudge::narrow_file(const std::vector<FilePart>& parts, EntryAttributes* attr) {
    std::vector<AccessCheck> checks;
    std::string why;
    for (const FilePart& p : parts) add_path(p.path, 4, &checks, &why);
    std::string note = finish(classes_passing(attr->uid, attr->gid, checks), attr, why);
    attr->mode &= 0444;
    return note;
}

std::string AccessJudge::narrow_directory(const std::string& abs, EntryAttributes* attr) {
    std::vector<AccessCheck> read, search;
    std::string why;
    add_path(abs, 4, &read, &why);
    add_path(abs, 1, &search, &why);
    const mode_t r = classes_passing(attr->uid, attr->gid, read);
    const mode_t x = classes_passing(attr->uid, attr->gid, search);
    std::string note = finish(r | (x >> 2), attr, why);
    attr->mode &= 0555;
    return note;
}

/// Appends the checks of opening `path`: search on every directory walked, `need` on the
/// object reached. Records in `*why` what makes the result not a plain mode-bit judgement.
void AccessJudge::add_path(const std::string& path, unsigned need, std::vector<AccessCheck>* checks, std::string* why) {
    std::vector<std::string> searched;
    std::string target;
    if (!walk(path, &searched, &target)) {
        if (why->empty()) *why = path + ": its path cannot be walked (vanished or too many symlinks)";
        checks->push_back(AccessCheck{0, 0, 0, false, need});  // nobody passes
        return;
    }
    std::set<std::string> seen;
    for (const std::string& d : searched) {
        if (seen.insert(d).second) add_object(d, 1, checks, why);
    }
    add_object(target, need, checks, why);
}

void AccessJudge::add_object(const std::string& canonical, unsigned need, std::vector<AccessCheck>* checks,
                             std::string* why) {
    auto it = objects_.find(canonical);
    if (it == objects_.end()) {
        Object o;
        o.ok = ::stat(canonical.c_str(), &o.st) == 0;
        if (o.ok) o.acl = ::getxattr(canonical.c_str(), "system.posix_acl_access", nullptr, 0) > 0;
        it = objects_.emplace(canonical, o).first;
    }
    const Object& o = it->second;
    if (!o.ok) {
        if (why->empty()) *why = canonical + ": cannot be stat()ed";
        checks->push_back(AccessCheck{0, 0, 0, false, need});
        return;
    }
    if (o.acl && why->empty()) {
        *why = canonical + " has a POSIX ACL (system.posix_acl_access), which mode bits cannot judge";
    }
    checks->push_back(AccessCheck{o.st.st_uid, o.st.st_gid, o.st.st_mode & 07777, o.acl, need});
}

std::string AccessJudge::finish(mode_t passing, EntryAttributes* attr, const std::string& why) {
    // passing holds read-position bits (0444) for files; for directories r | x>>2 (0555).
    attr->mode &= passing;
    if (why.empty()) return {};
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(attr->mode));
    return why + "; served with mode " + mode;
}

/// The kernel's walk of `path` (made absolute against the working directory), following
/// every symlink: appends each directory a name is looked up in (canonical, no links) to
/// `*searched` and sets `*target` to the canonical object reached. False when a component
/// is missing or more than 40 links are followed (ELOOP).
bool AccessJudge::walk(const std::string& path, std::vector<std::string>* searched, std::string* target) {
    std::deque<std::string> todo;
    std::string start = path;
    if (start.empty() || start[0] != '/') {
        char cwd[4096];
        if (!::getcwd(cwd, sizeof cwd)) return false;
        start = std::string(cwd) + "/" + start;
    }
    push_components(start, &todo);
    std::string cur = "/";
    unsigned links = 0;
    while (!todo.empty()) {
        std::string comp = std::move(todo.front());
        todo.pop_front();
        searched->push_back(cur);
        if (comp == ".") continue;
        if (comp == "..") {
            size_t slash = cur.rfind('/');
            cur = slash == 0 || slash == std::string::npos ? "/" : cur.substr(0, slash);
            continue;
        }
        std::string next = cur == "/" ? "/" + comp : cur + "/" + comp;
        const Name& name = name_at(next);
        if (!name.exists) return false;
        if (name.link) {
            if (++links > 40) return false;
            const std::string& t = name.target;
            if (t[0] == '/') cur = "/";
            std::deque<std::string> more;
            push_components(t, &more);
            todo.insert(todo.begin(), more.begin(), more.end());
            continue;
        }
        cur = std::move(next);
    }
    *target = cur;
    return true;
}

const AccessJudge::Name& AccessJudge::name_at(const std::string& path) {
    auto it = names_.find(path);
    if (it != names_.end()) return it->second;
    Name n;
    struct stat lst {};
    if (::lstat(path.c_str(), &lst) == 0) {
        n.exists = true;
        if (S_ISLNK(lst.st_mode)) {
            n.link = true;
            char buf[4096];
            ssize_t len = ::readlink(path.c_str(), buf, sizeof buf);
            if (len > 0 && static_cast<size_t>(len) < sizeof buf) {
                n.target.assign(buf, static_cast<size_t>(len));
            } else {
                n.exists = false;  // unreadable or too long a link: cannot be walked
            }
        }
    }
    return names_.emplace(path, std::move(n)).first->second;
}

void AccessJudge::push_components(const std::string& p, std::deque<std::string>* out) {
    size_t i = 0;
    while (i < p.size()) {
        size_t j = p.find('/', i);
        if (j == std::string::npos) j = p.size();
        if (j > i) out->push_back(p.substr(i, j - i));
        i = j + 1;
    }
}

}  // namespace gguf
