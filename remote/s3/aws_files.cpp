#include "remote/s3/aws_files.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "common/text.hpp"
#include "gguf/error.hpp"
#include "remote/helper_process.hpp"

namespace gguf_mount::remote::s3 {
namespace {

using gguf::Code;
using gguf::Error;

constexpr size_t kMaxFileBytes = 1u << 20;

std::string_view trim(std::string_view s) {
    size_t a = 0, b = s.size();
    while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
    while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
    return s.substr(a, b - a);
}

/// The profile a section header names, or nullopt for a section that is not a profile.
std::optional<std::string> profile_of_section(std::string_view name, AwsFileKind kind) {
    name = trim(name);
    if (kind == AwsFileKind::Credentials) return std::string(name);
    if (name == "default") return std::string("default");
    if (name.size() > 8 && name.substr(0, 7) == "profile" && std::isspace(static_cast<unsigned char>(name[7])))
        return std::string(trim(name.substr(8)));
    return std::nullopt;
}

}  // namespace

std::optional<std::string> ProfileSection::get(const std::string& name) const {
    auto it = values.find(name);
    if (it == values.end() || it->second.empty()) return std::nullopt;
    return it->second;
}

std::optional<std::string> ProfileSection::get_nested(const std::string& service, const std::string& name) const {
    auto s = nested.find(service);
    if (s == nested.end()) return std::nullopt;
    auto it = s->second.find(name);
    if (it == s->second.end() || it->second.empty()) return std::nullopt;
    return it->second;
}

AwsFile parse_aws_file(const std::string& text, AwsFileKind kind, const std::string& path) {
    AwsFile file;
    ProfileSection* current = nullptr;  // null: before any section, or in a non-profile section
    bool in_section = false;
    std::string open_key;                // the last setting with an empty value: nested lines follow
    size_t line_no = 0;
    std::istringstream in(text);
    std::string raw;
    while (std::getline(in, raw)) {
        ++line_no;
        if (!raw.empty() && raw.back() == '\r') raw.pop_back();
        std::string_view line = trim(raw);
        if (line.empty() || line[0] == '#' || line[0] == ';') continue;
        const bool indented = std::isspace(static_cast<unsigned char>(raw[0]));
        if (!indented && line.front() == '[') {
            if (line.back() != ']')
                throw Error(Code::BadValue, path + ": line " + std::to_string(line_no) + ": a section header without ']'");
            std::optional<std::string> profile = profile_of_section(line.substr(1, line.size() - 2), kind);
            current = profile && !profile->empty() ? &file[*profile] : nullptr;
            in_section = true;
            open_key.clear();
            continue;
        }
        size_t eq = line.find_first_of("=:");
        if (eq == std::string_view::npos) {
            if (indented) continue;  // a continuation line of a value: not used by any setting read here
            throw Error(Code::BadValue, path + ": line " + std::to_string(line_no) +
                                            ": neither a [section], a name = value setting nor a comment");
        }
        if (!in_section)
            throw Error(Code::BadValue, path + ": line " + std::to_string(line_no) + ": a setting before any [section]");
        std::string name = gguf::ascii_lower(trim(line.substr(0, eq)));
        std::string value(trim(line.substr(eq + 1)));
        if (name.empty())
            throw Error(Code::BadValue, path + ": line " + std::to_string(line_no) + ": a setting without a name");
        if (current == nullptr) continue;
        if (indented && !open_key.empty()) {
            current->nested[open_key][name] = value;
            continue;
        }
        if (indented) continue;  // a continuation of a value that is not nested
        current->values[name] = value;
        open_key = value.empty() ? name : std::string();
    }
    return file;
}

std::string untrusted_aws_path(const std::string& path, const std::string& what) {
    const std::string why = ownership_problem(path, what);
    if (why.empty()) return "";
    return why + ": " + path + " is not used (an AWS configuration or credentials file, the folders above it and "
                                "a credential_process program must belong to this process's uid or root and not be "
                                "writable by group or others, as ssh requires of its files)";
}

std::optional<AwsFile> read_aws_file(const std::string& path, AwsFileKind kind) {
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
        throw Error(Code::Io, path + ": " + std::strerror(errno), errno);
    }
    if (std::string why = untrusted_aws_path(path, "the AWS file"); !why.empty())
        throw Error(Code::BadArgument, why, EPERM);
    if (!S_ISREG(st.st_mode)) throw Error(Code::Io, path + ": not a regular file");
    if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes)
        throw Error(Code::Io, path + ": " + std::to_string(st.st_size) + " bytes, larger than the 1 MiB an AWS "
                                         "configuration file may have here");
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error(Code::Io, path + ": cannot be opened: " + std::strerror(errno), errno);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (f.bad()) throw Error(Code::Io, path + ": read failed");
    return parse_aws_file(text, kind, path);
}

}  // namespace gguf_mount::remote::s3
