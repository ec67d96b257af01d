// credential_process: credentials from an external helper program, as the AWS CLI and SDKs run it
// ("Sourcing credentials with an external process", AWS CLI User Guide): the command is split like
// a POSIX shell word list (no shell runs it), its standard output is JSON
// {"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken"?, "Expiration"? (ISO 8601)}.
#pragma once

#include <chrono>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "remote/s3/sigv4.hpp"

namespace gguf_mount::remote::s3 {

/// Splits `command` into words the way a POSIX shell (and Python's shlex.split, which the AWS CLI
/// uses) does without expansions: blanks separate words; '...' keeps everything literally; "..."
/// keeps everything but a backslash before '"' or '\\'; outside quotes a backslash keeps the next
/// character. Throws gguf::Error(BadValue) for an unclosed quote or a trailing backslash.
/// "/opt/h --profile 'a b' x\\ y" -> {"/opt/h", "--profile", "a b", "x y"}.
std::vector<std::string> split_command(const std::string& command);

/// Parses an ISO 8601 UTC time as credential helpers write it: "2024-01-02T03:04:05Z", with
/// optional fractional seconds, "+00:00"/"-05:00" offsets, or a lowercase 'z'. nullopt otherwise.
std::optional<std::time_t> parse_iso8601(const std::string& text);

/// Parses the helper's standard output. `what` names the helper in messages ("credential_process
/// of profile dev"). Throws gguf::Error(BadValue) for output that is not a JSON object, a Version
/// other than 1, a missing or empty AccessKeyId or SecretAccessKey, or an Expiration that is not
/// ISO 8601. Messages never include the output itself.
Credentials parse_process_output(const std::string& output, const std::string& what);

/// Runs the helper: fork + exec of split_command(command)[0] (looked up on $PATH when it has no
/// '/'), stdin /dev/null, stdout captured (at most 64 KiB), stderr captured for the message (its
/// first line, at most 200 bytes; the helper's stdout, which holds the secret, is never quoted).
/// The child gets an empty signal mask and no other open file descriptor. After `timeout` the
/// child is killed (SIGKILL, by its PID) and reaped. Throws gguf::Error(Io) when it cannot be
/// started, exits non-zero, is killed or times out; BadValue for bad output (parse_process_output);
/// BadArgument (EPERM) when the program fails the ownership rule of untrusted_aws_path (it is not
/// run).
Credentials run_credential_process(const std::string& command, const std::string& what,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace gguf_mount::remote::s3
