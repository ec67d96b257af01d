#include "support/scan_directory.hpp"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

#include "gguf/error.hpp"
#include "gguf/format/format.hpp"

namespace gguf {

std::vector<SetScan> scan_directory(const std::string& dir) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) {
        int e = errno;
        throw Error(Code::Io, dir + ": cannot list directory: " + std::strerror(e), e);
    }
    // (prefix, count) -> whether the first shard is present
    std::map<std::pair<std::string, uint32_t>, bool> groups;
    while (dirent* ent = ::readdir(d)) {
        std::string n = ent->d_name;
        auto sn = parse_shard_name(n);
        if (!sn) continue;
        bool& has_first = groups[{sn->prefix, sn->count}];
        has_first = has_first || sn->index == 1;
    }
    ::closedir(d);

    std::string base = dir;
    if (!base.empty() && base.back() != '/') base += '/';
    std::vector<SetScan> out;
    for (const auto& [key, has_first] : groups) {
        SetScan scan;
        scan.name = key.first + ".gguf";
        scan.first_shard = shard_path(base + key.first, 1, key.second);
        if (!has_first) {
            scan.error = scan.first_shard + ": missing shard 1 of " + std::to_string(key.second);
        } else {
            try {
                scan.set = SplitSet::open(scan.first_shard);
            } catch (const Error& e) {
                scan.error = e.what();
            }
        }
        out.push_back(std::move(scan));
    }
    std::stable_sort(out.begin(), out.end(), [](const SetScan& a, const SetScan& b) { return a.name < b.name; });
    return out;
}

}  // namespace gguf
