// Reading one directory for the catalog: a local directory through POSIX (readdir, lstat,
// stat) or one directory of a DirectoryListing (catalog_dir.hpp).
#include "gguf/model/catalog_dir.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "gguf/error.hpp"

namespace gguf::catalog_dir {

namespace {

void problem(Catalog& out, const std::string& path, const std::string& reason) {
    out.problems.push_back(Problem{path, reason});
}

}  // namespace

std::string cut_path(const std::string& path) {
    constexpr size_t kHead = 100, kTail = 80;
    if (path.size() <= kHead + kTail + 20) return path;
    return path.substr(0, kHead) + "...(" + std::to_string(path.size()) + " bytes)..." +
           path.substr(path.size() - kTail);
}

std::string join(const std::string& dir, const std::string& name) { return dir.empty() ? name : dir + "/" + name; }

bool list_local(const std::string& abs, const std::string& rel, const CatalogOptions& options, NameBudget& budget,
                DirectoryNames* names, Catalog& out) {
    DIR* d = ::opendir(abs.c_str());
    if (!d) {
        int e = errno;
        problem(out, rel.empty() ? "." : rel, abs + ": cannot list directory: " + std::strerror(e));
        return false;
    }
    std::vector<std::string> found;
    while (dirent* ent = ::readdir(d)) {
        if (ent->d_name[0] == '.') continue;  // ".", "..", and hidden names (rule 1)
        if (budget.used >= options.max_entries) {
            if (!budget.cut) {
                budget.cut = true;
                problem(out, rel.empty() ? "." : rel,
                        abs + ": more than " + std::to_string(options.max_entries) +
                            " entries under SOURCE (CatalogOptions::max_entries); the rest of this directory "
                            "and every directory not walked yet are not shown");
            }
            break;
        }
        ++budget.used;
        found.emplace_back(ent->d_name);
    }
    ::closedir(d);
    std::sort(found.begin(), found.end());

    for (const std::string& name : found) {
        const std::string full = abs + "/" + name;
        const std::string rp = join(rel, name);
        if (std::find(options.skip_paths.begin(), options.skip_paths.end(), full) != options.skip_paths.end()) {
            names->real_names.insert(name);  // taken: no virtual file gets the mount point's name
            continue;
        }
        struct stat lst {};
        if (::lstat(full.c_str(), &lst) != 0) {
            int e = errno;
            if (e == ENOENT) continue;  // vanished since readdir
            // Rule 10: e.g. ENAMETOOLONG (longer than PATH_MAX); never dropped silently.
            problem(out, cut_path(rp), cut_path(full) + ": cannot look at it (" + std::strerror(e) +
                                      (full.size() >= PATH_MAX ? ", the path is " + std::to_string(full.size()) +
                                                                     " bytes, the limit PATH_MAX is " +
                                                                     std::to_string(PATH_MAX)
                                                               : std::string()) +
                                      "); not shown");
            continue;
        }
        names->real_names.insert(name);
        struct stat st {};
        if (::stat(full.c_str(), &st) != 0) {
            int e = errno;
            if (S_ISLNK(lst.st_mode)) {
                char target[4096];
                ssize_t n = ::readlink(full.c_str(), target, sizeof target - 1);
                std::string t = n >= 0 ? std::string(target, static_cast<size_t>(n)) : std::string("?");
                if (e == ELOOP) {
                    problem(out, rp, full + ": symlink loop (the chain of links never ends); not followed");
                } else {
                    problem(out, rp, full + ": dangling symlink to '" + t + "' (" + std::strerror(e) + "); not shown");
                }
                out.watched.push_back(WatchedPath{full, false, false, {}});
            }
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
            if (std::find(options.skip.begin(), options.skip.end(), id) != options.skip.end()) continue;
            names->subdirs.push_back(Subdir{name, full, st});
        } else if (S_ISREG(st.st_mode)) {
            Listed l;
            l.name = name;
            l.part.path = full;
            l.part.st = st;
            l.part.size = static_cast<uint64_t>(st.st_size);
            out.watched.push_back(WatchedPath{full, false, true, st});
            names->files.push_back(std::move(l));
        } else {
            problem(out, rp, full + ": not a regular file or directory; not shown");
        }
    }
    return true;
}

bool list_listed(DirectoryListing& listing, const std::string& abs, const std::string& rel,
                 const CatalogOptions& options, NameBudget& budget, ino_t* last_inode, DirectoryNames* names,
                 Catalog& out) {
    std::vector<DirectoryListing::Item> items;
    try {
        items = listing.list(rel);
    } catch (const Error& e) {
        problem(out, rel.empty() ? "." : rel, std::string(e.what()) + "; not shown");
        return false;
    }
    std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    for (auto& item : items) {
        if (item.name.empty() || item.name[0] == '.') continue;
        if (budget.used >= options.max_entries) {  // rule 7, as for a local directory
            if (!budget.cut) {
                budget.cut = true;
                problem(out, rel.empty() ? "." : rel,
                        (rel.empty() ? listing.root() : listing.root() + "/" + rel) + ": more than " +
                            std::to_string(options.max_entries) +
                            " entries under SOURCE (the model-directory limit); the rest of this directory and "
                            "every directory not walked yet are not shown");
            }
            break;
        }
        ++budget.used;
        if (!names->real_names.insert(item.name).second) continue;
        if (!item.directory && !item.error.empty()) {
            problem(out, rel.empty() ? item.name : rel + "/" + item.name, item.error + "; not shown");
            continue;
        }
        if (item.directory) {
            struct stat st {};
            st.st_mode = S_IFDIR | 0555;
            st.st_uid = item.part.st.st_uid;
            st.st_gid = item.part.st.st_gid;
            st.st_ino = ++*last_inode;
            names->subdirs.push_back(Subdir{item.name, abs + "/" + item.name, st});
        } else {
            names->files.push_back(Listed{item.name, std::move(item.part)});
        }
    }
    return true;
}

}  // namespace gguf::catalog_dir
