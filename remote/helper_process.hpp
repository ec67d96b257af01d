// Running a credential helper program, shared by the S3 credential_process (remote/s3/) and the
// Docker credential helpers of registries (remote/oci/credentials.*): no shell, the program and
// the folders above it checked against the ownership rule ssh applies to its files, a timeout,
// bounded output, and nothing of its standard output (which holds the secret) in any message.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gguf_mount::remote {

/// Why `path` may not be used by this process, "" when it may (or does not exist): the file and
/// every folder above it (links resolved, realpath) must be owned by the effective uid or root
/// and not be writable by group or others, a root-owned sticky folder such as /tmp excepted;
/// the rule ssh applies to its files (sshd StrictModes). A root daemon started with a user's
/// $HOME (sudo -E) would otherwise take that user's word for its credentials and run their
/// program. `what` names the path in the line ("the AWS file", "the credential helper").
/// One line naming what fails ("the credential helper /x/h is writable by its group ...").
std::string ownership_problem(const std::string& path, const std::string& what);

/// `name` resolved as execvp would ($PATH, else /usr/local/bin:/usr/bin:/bin), "" when no
/// executable of that name is found; a name with '/' is returned as it is. Never throws but
/// std::bad_alloc.
std::string find_on_path(const std::string& name);

/// The first line of `text`, cut to 200 bytes ("..." added), for a message.
std::string first_line_of(const std::string& text);

/// What a helper printed and how it ended.
struct HelperRun {
    std::string out;      ///< its standard output (at most 64 KiB): the caller wipes it
    std::string err;      ///< its standard error (at most 4 KiB)
    int exit_status = 0;  ///< its exit status (it was not killed)
};

/// Runs argv[0] (a path: find_on_path first) with argv[1..]: fork + execv, `input` written to
/// its standard input (then closed; /dev/null when empty), standard output and error captured.
/// The child gets an empty signal mask and no other open file descriptor. After `timeout` the
/// child is killed (SIGKILL, by its PID) and reaped. `what` names it in messages, the program
/// last ("credential_process of profile p: /opt/helper"). Throws gguf::Error(Io) when it cannot be started,
/// is killed by a signal, times out or writes more than 64 KiB to its standard output (its
/// output wiped); a non-zero exit status is returned, not thrown.
HelperRun run_helper(const std::vector<std::string>& argv, const std::string& input, const std::string& what,
                     std::chrono::milliseconds timeout);

/// Overwrites `s` with zeros (OPENSSL_cleanse) and empties it: a helper's output, once parsed.
void wipe(std::string& s) noexcept;

}  // namespace gguf_mount::remote
