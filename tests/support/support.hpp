// Helpers shared by the unit, CLI and mount tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace gguf_test {

/// Absolute path of a file under tests/fixtures ("kvzoo/t7/kvzoo-00001-of-00007.gguf").
std::string fixture(const std::string& relative);

/// The whole content of a file; fails the current test (and returns "") if unreadable.
std::string read_file(const std::string& path);

/// Writes `bytes` to `path`, replacing it.
void write_file(const std::string& path, const std::string& bytes);

/// Lowercase hex sha256 of `bytes` (OpenSSL EVP).
std::string sha256_hex(const std::string& bytes);

/// Runs `f` in a forked child process whose address space may grow by at most `extra` bytes
/// past the parent's (RLIMIT_AS); returns the child's exit code: 0 when `f` returned true, 1
/// when false, 3 for std::bad_alloc, 4 for another exception, 128 + signal when it died. The
/// child has only the calling thread and ends with _exit (no destructors).
int in_bounded_child(const std::function<bool()>& f, size_t extra);

/// Lowercase hex sha256 of a file's content, streamed in 1 MiB chunks.
std::string sha256_file(const std::string& path);

/// A fresh directory under $TMPDIR (or /tmp), mode 0755, removed recursively on destruction.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    std::string operator/(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

/// The files created and deleted in one directory from construction on, in the kernel's order
/// (inotify IN_CREATE / IN_DELETE on the directory itself). Fails the current test when inotify
/// cannot be set up or its queue overflowed.
class DirectoryEvents {
public:
    struct Event {
        bool created;      // IN_CREATE; else IN_DELETE
        std::string name;  // the entry's name in the directory
    };
    explicit DirectoryEvents(const std::string& dir);
    ~DirectoryEvents();
    DirectoryEvents(const DirectoryEvents&) = delete;
    DirectoryEvents& operator=(const DirectoryEvents&) = delete;
    /// Every event queued so far (not waiting for more), oldest first; each one returned once.
    std::vector<Event> take();

private:
    int fd_ = -1;
};

/// Copies a file (used to make writable variants of fixtures).
void copy_file(const std::string& from, const std::string& to);

/// Cuts the file `from` into outputs.size() plain byte pieces (like split(1) -n), written to
/// `outputs` in order: each piece has size / n bytes, the last one also gets the remainder.
/// Concatenating the outputs gives back `from`. Fails the test on I/O errors.
void cut_file(const std::string& from, const std::vector<std::string>& outputs);

/// One merge case of tests/fixtures/MANIFEST.json.
struct ManifestCase {
    std::string id;                    // "kvzoo/t7"
    std::string original;              // fixture-relative path of the unsplit input
    std::string split_options;         // "--split-max-tensors 7 --no-tensor-first-split"
    std::vector<std::string> shards;   // fixture-relative shard paths, in order
    std::vector<std::string> shard_sha256;
    std::string merged_sha256;
    uint64_t merged_size = 0;
};

/// GoogleTest prints a parameterized case by its id ("kvzoo/t7") rather than its bytes.
inline void PrintTo(const ManifestCase& c, std::ostream* os) { *os << c.id; }

/// Every case of tests/fixtures/MANIFEST.json, in file order.
std::vector<ManifestCase> manifest_cases();

/// Result of running a command.
struct RunResult {
    int exit_code = -1;   // exit status, or 128+signal
    std::string out;      // stdout
    std::string err;      // stderr
};

/// Runs `argv` (argv[0] is a path) with stdin from /dev/null, capturing stdout and stderr.
RunResult run(const std::vector<std::string>& argv);

/// Path of the gguf-mount binary under test.
std::string gguf_mount_binary();

/// `text` (a foreground mount's stderr) with the timestamp that starts each line removed
/// ("2026-12-01 11:40:00.123 gguf-mount: info: ..." -> "gguf-mount: info: ...").
std::string without_timestamps(const std::string& text);

/// The symlink fan-out of issue 14.3 below the existing directory `root`: real directories
/// ROOT/lv0 ... ROOT/lv`levels`, where lv`i` holds two links "a" and "b" to lv`i+1` and the
/// last one holds "leaf.txt". Followed naively, lv0 expands to 2^levels paths. Returns lv0
/// (the SOURCE to scan). Fails the current test on I/O errors.
std::string make_link_fan_out(const std::string& root, int levels);

}  // namespace gguf_test
