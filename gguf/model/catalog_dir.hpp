// Reading one directory for the catalog (gguf/model/catalog.cpp walks the tree and applies the
// model rules to what this reads): a local directory through POSIX (readdir, lstat, stat) or one
// directory of a DirectoryListing, as its regular files, subdirectories and taken names. The
// rule numbers are those of gguf/model/catalog.hpp. Internal to the catalog.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "gguf/model/catalog.hpp"

namespace gguf::catalog_dir {

/// A regular file of one directory.
struct Listed {
    std::string name;
    FilePart part;  // path = absolute path through the link name, st through the link
};

/// A subdirectory to walk.
struct Subdir {
    std::string name;
    std::string full;
    struct stat st {};
};

/// What one directory holds for the catalog, in name order.
struct DirectoryNames {
    std::vector<Listed> files;         ///< regular files (through links)
    std::vector<Subdir> subdirs;       ///< directories to walk (through links)
    std::set<std::string> real_names;  ///< every name taken (rule 6: no served name may clash)
};

/// Rule 7 over one walk: the names listed so far against CatalogOptions::max_entries.
struct NameBudget {
    size_t used = 0;
    bool cut = false;  ///< the limit was reached (reported once, where it happened)
};

/// `path` itself when at most 200 bytes, else its first 100 and last 80 bytes around
/// "...(N bytes)...", so a Problem about a path too long to use stays readable.
std::string cut_path(const std::string& path);

/// `dir`/`name`, or `name` when `dir` is "" (the root).
std::string join(const std::string& dir, const std::string& name);

/// Lists local directory `abs`, shown at `rel` ("" = the root), into `names`: names starting
/// with '.' are skipped (rule 1), CatalogOptions::skip and skip_paths are left out but their
/// names stay taken, dangling links, link loops, names that cannot be looked at (rule 10) and
/// other file types are Problems in `out`, every file and link looked at is added to
/// out.watched. Returns false (and records a Problem) when the directory cannot be read.
bool list_local(const std::string& abs, const std::string& rel, const CatalogOptions& options, NameBudget& budget,
                DirectoryNames* names, Catalog& out);

/// The same for directory `rel` of `listing` (shown under `abs`): every item is a real name,
/// files carry their source, an item with an error is a Problem, and each subdirectory gets a
/// distinct made-up inode (++*last_inode: a listing has no loops). Returns false (a Problem in
/// `out`) when the listing throws.
bool list_listed(DirectoryListing& listing, const std::string& abs, const std::string& rel,
                 const CatalogOptions& options, NameBudget& budget, ino_t* last_inode, DirectoryNames* names,
                 Catalog& out);

}  // namespace gguf::catalog_dir
