// Helpers shared by the offline subcommands `split` and `merge`: cancellation on signals,
// error reporting, and the test checkpoints used by the crash-safety tests.
#pragma once

#include <csignal>
#include <functional>
#include <string>

#include "gguf/bytes/output.hpp"

namespace gguf_mount::cli {

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that only record the signal (without
/// SA_RESTART, so blocking copies return early). The copy loop polls cancel_flag() and unwinds,
/// which removes every temporary file; the command then calls exit_for_signal().
void install_cancel_handlers();

/// The flag set by those handlers; pass it as gguf::WriteOptions::cancel.
const volatile std::sig_atomic_t* cancel_flag();

/// True once a handled signal arrived.
bool cancelled();

/// Restores the default action of the received signal and raises it again, so the parent sees
/// "killed by SIGINT" (shell status 130) as with any well-behaved tool. Returns 1 if no signal
/// was received (callers return that as their exit status).
int exit_for_signal();

/// Test hook for the crash-safety tests: when the environment variable
/// GGUF_MOUNT_TEST_STOP_AT equals `name`, prints "gguf-mount: checkpoint NAME" on stderr and
/// stops the process with SIGSTOP, so a test can inspect the files and kill -9 it at exactly
/// this point. No effect otherwise.
void checkpoint(const char* name);

/// Write options from the environment (diagnostics and tests): GGUF_MOUNT_COPY is a comma list
/// of "buffered" (never use copy_file_range) and "dense" (write zeros for source holes).
gguf::WriteOptions write_options_from_env();

/// gguf::probe_publish_method for `final_path`, run before anything is written; logs (info) when
/// the output's file system lacks renameat2(RENAME_NOREPLACE) and hard links, so that the
/// output will be published with O_EXCL + rename (see gguf::PublishMethod for the race left).
/// Throws gguf::Error(Io) when outputs cannot be published there at all.
gguf::PublishMethod publish_method_for(const std::string& final_path);

/// gguf::remove_stale_temporaries for `final_path` (keeping the file named `keep`, "" none),
/// each removal logged (info). Call it before publish_method_for: the probe files are of the
/// same ".NAME.tmp-XXXXXX" pattern, and a kill after this run's first one must not leave an
/// earlier run's behind (tests/cli/crash_test.cpp checks exactly that). Never throws.
void remove_stale_outputs(const std::string& final_path, const std::string& keep = {});

/// Raises the soft limit on open files (RLIMIT_NOFILE) to the hard limit: a merge keeps every
/// shard open, a split keeps every shard's (locked) temporary file open until it publishes them,
/// and sets of more than 1,000 shards exist while the usual soft limit is 1024.
/// Failures are ignored (opening then fails with a clear "Too many open files" naming a shard).
void raise_open_file_limit();

/// Runs an offline command's body with the shared set-up and error edge: logging at "info"
/// (or "warn" when `quiet`), cancellation handlers, a raised open-file limit (a merge keeps
/// every shard open; a split keeps every shard's locked temporary file open until publishing).
/// A gguf::Error after a handled signal prints "<interrupted>" and re-raises the signal (see
/// exit_for_signal); any other error prints its one-line message and returns 1.
int run_offline(bool quiet, const std::string& interrupted, const std::function<int()>& body);

/// Prints "gguf-mount: error: <message>" on stderr (the prefix of the mount's errors), the message
/// escaped (gguf::escape): one line.
void print_error(const std::string& message);

/// Prints "gguf-mount COMMAND: <message>; see 'gguf-mount COMMAND --help'" (message escaped as
/// print_error does) and returns 2.
int usage_error(const std::string& command, const std::string& message);

}  // namespace gguf_mount::cli
