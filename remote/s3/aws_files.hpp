// The AWS shared configuration files (~/.aws/credentials and ~/.aws/config) as the AWS CLI and
// SDKs read them ("Configuration and credential file settings", AWS CLI User Guide; the AWS SDKs
// and Tools Reference Guide, "Shared config and credentials files"): INI sections, `name = value`
// lines, full-line comments starting with '#' or ';', and nested settings for a service (`s3 =`
// followed by indented `name = value` lines).
#pragma once

#include <map>
#include <optional>
#include <string>

namespace gguf_mount::remote::s3 {

/// The settings of one profile: top-level ones, and nested ones by service ("s3" ->
/// {"addressing_style" -> "path"}). Names are lowercase; values are trimmed.
struct ProfileSection {
    std::map<std::string, std::string> values;
    std::map<std::string, std::map<std::string, std::string>> nested;

    /// values[name] when present and not empty.
    std::optional<std::string> get(const std::string& name) const;
    /// nested[service][name] when present and not empty.
    std::optional<std::string> get_nested(const std::string& service, const std::string& name) const;
};

/// Which of the two files: they name profile sections differently.
enum class AwsFileKind {
    Credentials,  // "[NAME]" is profile NAME
    Config,       // "[default]" and "[profile NAME]" are profiles; other sections are not
};

/// Profiles of one file by name. A profile named in two sections gets both (later values win).
using AwsFile = std::map<std::string, ProfileSection>;

/// Parses the text of one file (`path` only names it in messages). Sections that are not profiles
/// ("[sso-session x]", "[services x]", "[x]" in the config file) are skipped. Throws
/// gguf::Error(BadValue) naming the path and line number, never the line's text (it may hold a
/// secret), for a line that is neither a section, a setting, a comment, a blank nor a nested line,
/// and for a setting before any section.
AwsFile parse_aws_file(const std::string& text, AwsFileKind kind, const std::string& path);

/// Why `path` may not be used by this process, "" when it may (or does not exist): the file and
/// every folder above it (links resolved, realpath) must be owned by the effective uid or root
/// and not be writable by group or others, a root-owned sticky folder such as /tmp excepted;
/// the rule ssh applies to its files (sshd StrictModes). A root daemon started with a user's
/// $HOME (sudo -E) would otherwise take that user's word for its credentials and run their
/// program. `what` names the path in the line ("the AWS file", "the credential_process
/// program"). One line: what fails, that `path` is not used, and the rule.
std::string untrusted_aws_path(const std::string& path, const std::string& what);

/// Reads and parses `path`. nullopt when the file does not exist; gguf::Error(Io) when it exists
/// but cannot be read, or is larger than 1 MiB; gguf::Error(BadArgument, EPERM) with the line of
/// untrusted_aws_path when it fails the ownership rule.
std::optional<AwsFile> read_aws_file(const std::string& path, AwsFileKind kind);

}  // namespace gguf_mount::remote::s3
