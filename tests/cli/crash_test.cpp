// Offline crash safety: `split`, `merge` and `merge --delete-splits` are killed with SIGKILL at
// seeded random moments and at every named checkpoint (GGUF_MOUNT_TEST_STOP_AT), and after every
// kill the directory is checked:
//  - every input byte still exists: each input file is present with its original sha256, or
//    (merge --delete-splits only) the merged file is present, byte-exact, and the missing shards
//    are a prefix of the set (they are deleted in order, after the merged file was verified);
//  - a file at a final name is byte-exact (never a partial or unsynced output under a final name);
//  - split: shard 1 exists only if every shard exists (shards are published last to first);
//  - anything else is a temporary file of exactly our pattern ".FINAL.tmp-XXXXXX" for one of the
//    command's outputs. kill -9 may leave those; the next run of the command removes them (checked
//    after every run, and by a final uninterrupted run that must leave none behind).
// The model is dense pseudo-random data (a zero-filled or truncated copy never matches) and the
// copies run with GGUF_MOUNT_COPY=dense or buffered,dense so that kills land mid-copy.
// GGUF_CRASH_SEED=N replays a run; the seed is printed.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "support/dense_model.hpp"
#include "support/support.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using gguf_test::TempDir;

std::vector<std::string> names_in(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

bool exists(const std::string& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0;
}

uint64_t size_of(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

/// True when `name` is exactly ".FINAL.tmp-XXXXXX" (six letters or digits) for `final_name`.
bool is_temp_of(const std::string& name, const std::string& final_name) {
    const std::string prefix = "." + final_name + ".tmp-";
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) return false;
    return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(),
                       [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
}

/// Starts gguf-mount with `args` and the extra environment `env`; stdio on /dev/null except
/// stderr, which goes to `err_path`.
pid_t spawn(const std::vector<std::string>& args, const std::vector<std::string>& env, const std::string& err_path) {
    std::vector<std::string> argv = {gguf_test::gguf_mount_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) {
        const std::string kv = *e;
        if (kv.rfind("GGUF_MOUNT_COPY=", 0) == 0 || kv.rfind("GGUF_MOUNT_TEST_STOP_AT=", 0) == 0) continue;
        envs.push_back(kv);
    }
    envs.insert(envs.end(), env.begin(), env.end());
    std::vector<char*> cenv;
    for (auto& e : envs) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    int rc = ::posix_spawn(&pid, cargv[0], &fa, nullptr, cargv.data(), cenv.data());
    posix_spawn_file_actions_destroy(&fa);
    EXPECT_EQ(rc, 0) << std::strerror(rc);
    return rc == 0 ? pid : -1;
}

int wait_exit(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

/// Waits until the child stops at its checkpoint (true) or exits (false; `*status` is set).
bool wait_stopped(pid_t pid, int* status) {
    while (::waitpid(pid, status, WUNTRACED) < 0 && errno == EINTR) {
    }
    return WIFSTOPPED(*status);
}

enum class Command { Split, Merge, MergeDeleteSplits };

const char* command_name(Command c) {
    switch (c) {
        case Command::Split: return "split";
        case Command::Merge: return "merge";
        case Command::MergeDeleteSplits: return "merge --delete-splits";
    }
    return "?";
}

/// The pristine model, its shards and the merged file, with their sha256, made by
/// uninterrupted runs. Inputs of every killed run are hard links to these files, so a run
/// starts from the original bytes in no time; deleting a link loses nothing of the originals,
/// while any change of the bytes would show in the sha256 of the link.
struct Reference {
    TempDir dir;
    std::string model, model_sha;
    std::vector<std::string> shard_names, shard_sha;
    std::vector<uint64_t> shard_size;
    std::string merged_sha;
    uint64_t merged_size = 0;
    std::map<Command, double> seconds;  // duration of an uninterrupted run
};

constexpr const char* kPrefix = "s";
constexpr const char* kMerged = "merged.gguf";

/// Arguments of a run of `c` in `dir`.
std::vector<std::string> args_for(Command c, const std::string& dir, const Reference& ref) {
    switch (c) {
        case Command::Split:
            return {"split", "-q", "--split-max-tensors", "1", dir + "/model.gguf", dir + "/" + kPrefix};
        case Command::Merge:
            return {"merge", "-q", dir + "/" + ref.shard_names.front(), dir + "/" + kMerged};
        case Command::MergeDeleteSplits:
            return {"merge", "-q", "--delete-splits", dir + "/" + ref.shard_names.front(), dir + "/" + kMerged};
    }
    return {};
}

/// Puts the inputs of `c` into `dir` (hard links to the pristine files) and removes the outputs
/// of the previous run (already verified). Temporary files of killed runs are left in place:
/// the next run must remove them itself.
void prepare(Command c, const std::string& dir, const Reference& ref) {
    auto link_in = [&](const std::string& name) {
        const std::string to = dir + "/" + name;
        if (!exists(to)) ASSERT_EQ(::link((ref.dir / name).c_str(), to.c_str()), 0) << name << ": " << std::strerror(errno);
    };
    if (c == Command::Split) {
        link_in("model.gguf");
        for (const auto& n : ref.shard_names) ::unlink((dir + "/" + n).c_str());
    } else {
        for (const auto& n : ref.shard_names) link_in(n);
        ::unlink((dir + "/" + kMerged).c_str());
    }
}

/// What a kill left in `dir`, checked against every guarantee; `stale` are the temporary files
/// that earlier killed runs had left before this run started. Returns a label for where the run
/// was when it died (for the summary) and adds the temporary files left to `*temps_left`.
std::string check_after_kill(Command c, const std::string& dir, const Reference& ref, const std::string& context,
                             const std::vector<std::string>& stale, size_t* temps_left) {
    std::vector<std::string> finals;  // the command's output names
    std::vector<std::string> inputs;  // the command's input names
    if (c == Command::Split) {
        finals = ref.shard_names;
        inputs = {"model.gguf"};
    } else {
        finals = {kMerged};
        inputs = ref.shard_names;
    }
    // Outputs at final names are byte-exact.
    size_t finals_present = 0;
    for (size_t i = 0; i < finals.size(); ++i) {
        const std::string p = dir + "/" + finals[i];
        if (!exists(p)) continue;
        ++finals_present;
        const std::string want = c == Command::Split ? ref.shard_sha[i] : ref.merged_sha;
        EXPECT_EQ(gguf_test::sha256_file(p), want) << context << ": " << finals[i] << " is not byte-exact";
    }
    // Inputs are intact, or (merge --delete-splits) deleted in order once the output was there.
    size_t inputs_missing = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        const std::string p = dir + "/" + inputs[i];
        if (!exists(p)) {
            ++inputs_missing;
            EXPECT_EQ(c, Command::MergeDeleteSplits) << context << ": input " << inputs[i] << " is gone";
            EXPECT_EQ(finals_present, 1u) << context << ": " << inputs[i] << " deleted without a complete output";
            EXPECT_EQ(inputs_missing, i + 1) << context << ": shards not deleted in order";
            continue;
        }
        const std::string want = c == Command::Split ? ref.model_sha : ref.shard_sha[i];
        EXPECT_EQ(gguf_test::sha256_file(p), want) << context << ": input " << inputs[i] << " changed";
    }
    // Split: shard 1 is published last, so it is there only if all are.
    if (c == Command::Split && exists(dir + "/" + finals.front())) {
        EXPECT_EQ(finals_present, finals.size()) << context << ": shard 1 published before the others";
    }
    // Nothing else but our temporary files.
    size_t temps = 0, new_temps = 0, stale_left = 0;
    bool temp_complete = true;
    for (const auto& n : names_in(dir)) {
        if (std::find(finals.begin(), finals.end(), n) != finals.end()) continue;
        if (std::find(inputs.begin(), inputs.end(), n) != inputs.end()) continue;
        bool ours = false;
        for (size_t i = 0; i < finals.size(); ++i) {
            if (!is_temp_of(n, finals[i])) continue;
            ours = true;
            if (std::find(stale.begin(), stale.end(), n) != stale.end()) {
                ++stale_left;
                continue;
            }
            ++new_temps;
            const uint64_t full = c == Command::Split ? ref.shard_size[i] : ref.merged_size;
            if (size_of(dir + "/" + n) != full) temp_complete = false;
        }
        EXPECT_TRUE(ours) << context << ": unexpected file " << n;
        if (ours) ++temps;
    }
    *temps_left += temps;
    // The run removes stale temporary files before it creates its own: once it has created one
    // (or published, or deleted), none of the stale ones may remain.
    if (new_temps > 0 || finals_present > 0 || inputs_missing > 0) {
        EXPECT_EQ(stale_left, 0u) << context << ": temporary files of earlier killed runs were not removed";
    }

    // Where did it die?
    if (inputs_missing == inputs.size()) return "all shards deleted";
    if (inputs_missing > 0) return "deleting shards";
    if (finals_present == finals.size()) return "published";
    if (finals_present > 0) return "publishing (shard 1 not yet)";
    if (new_temps == 0) return "before the first temporary file";
    return temp_complete ? "temporary files written, not published" : "copying into temporary files";
}

/// Uninterrupted run of `c` in a fresh directory prepared from `ref`; returns seconds.
double timed_run(Command c, const Reference& ref, const std::string& copy_mode) {
    TempDir d;
    prepare(c, d.path(), ref);
    const auto t0 = Clock::now();
    pid_t pid = spawn(args_for(c, d.path(), ref), {"GGUF_MOUNT_COPY=" + copy_mode}, d / "err");
    int status = wait_exit(pid);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << command_name(c) << ": " << gguf_test::read_file(d / "err");
    return s;
}

TEST(CrashSafety, KillNineAtRandomMomentsAndEveryCheckpointLosesNothing) {
    const auto t_start = Clock::now();
    uint64_t seed = std::random_device{}();
    if (const char* s = std::getenv("GGUF_CRASH_SEED")) seed = std::strtoull(s, nullptr, 10);
    std::cout << "[ seed     ] GGUF_CRASH_SEED=" << seed << "\n";
    RecordProperty("seed", std::to_string(seed));
    std::mt19937_64 rng(seed);

    // A 128 MiB model in three tensors (the middle one 128 MiB minus a little), split one tensor
    // per shard: three shards, the middle one large.
    Reference ref;
    ref.model = ref.dir / "model.gguf";
    gguf_test::write_dense_model(ref.model, {{"head", 3000}, {"body", (int64_t{32} << 20) - 5000}, {"tail", 777}}, seed);
    ref.model_sha = gguf_test::sha256_file(ref.model);
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "split", "-q", "--split-max-tensors", "1", ref.model,
                             ref.dir / kPrefix});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (int k = 1; k <= 3; ++k) {
        ref.shard_names.push_back(std::string(kPrefix) + "-0000" + std::to_string(k) + "-of-00003.gguf");
        ref.shard_sha.push_back(gguf_test::sha256_file(ref.dir / ref.shard_names.back()));
        ref.shard_size.push_back(size_of(ref.dir / ref.shard_names.back()));
    }
    {
        TempDir m;
        r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", ref.dir / ref.shard_names[0], m / kMerged});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        ref.merged_sha = gguf_test::sha256_file(m / kMerged);
        ref.merged_size = size_of(m / kMerged);
    }
    const std::vector<Command> commands = {Command::Split, Command::Merge, Command::MergeDeleteSplits};
    const std::vector<std::string> copy_modes = {"dense", "buffered,dense"};
    for (Command c : commands) ref.seconds[c] = timed_run(c, ref, "dense");

    const std::map<Command, std::vector<std::string>> checkpoints = {
        {Command::Split, {"temp-created", "mid-copy", "before-publish", "mid-publish"}},
        {Command::Merge, {"temp-created", "mid-copy", "before-publish", "published"}},
        {Command::MergeDeleteSplits,
         {"temp-created", "mid-copy", "before-publish", "published", "verified", "delete-first", "delete-next"}},
    };
    // Random kills per command (runs that finish before their kill do not count; at most
    // kMaxRandomRuns tries).
    constexpr int kRandomKillsPerCommand = 16;
    constexpr int kMaxRandomRuns = 40;

    int kill_points = 0, checkpoint_kills = 0, random_kills = 0, finished_before_kill = 0;
    size_t temps_left = 0;
    std::map<std::string, int> landed;  // where the random kills landed
    for (Command c : commands) {
        TempDir work;  // one directory per command: stale temporary files carry over between runs
        TempDir logs;
        const std::string dir = work.path();
        int run_no = 0, killed_here = 0;
        double expected_s = ref.seconds[c];  // how long an uninterrupted run takes now
        auto one_run = [&](const std::string& stop_at, double delay_s) {
            ++run_no;
            prepare(c, dir, ref);
            const std::string copy_mode = copy_modes[static_cast<size_t>(run_no) % copy_modes.size()];
            std::vector<std::string> env = {"GGUF_MOUNT_COPY=" + copy_mode};
            if (!stop_at.empty()) env.push_back("GGUF_MOUNT_TEST_STOP_AT=" + stop_at);
            const std::string context = std::string(command_name(c)) + " run " + std::to_string(run_no) + " (" +
                                        (stop_at.empty() ? "after " + std::to_string(delay_s) + " s" : "at " + stop_at) +
                                        ", " + copy_mode + ")";
            // Temporary files from the previous killed runs: this run must remove them.
            std::vector<std::string> stale;
            for (const auto& n : names_in(dir)) {
                if (!n.empty() && n[0] == '.') stale.push_back(n);
            }
            const auto started = Clock::now();
            pid_t pid = spawn(args_for(c, dir, ref), env, logs / "err");
            ASSERT_GT(pid, 0);
            int status = 0;
            if (!stop_at.empty()) {
                ASSERT_TRUE(wait_stopped(pid, &status))
                    << context << ": never reached the checkpoint: " << gguf_test::read_file(logs / "err");
                ::kill(pid, SIGKILL);
                status = wait_exit(pid);
            } else {
                std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
                ::kill(pid, SIGKILL);  // our child (not yet reaped): a no-op if it already exited
                status = wait_exit(pid);
            }
            if (WIFEXITED(status)) {
                EXPECT_EQ(WEXITSTATUS(status), 0) << context << ": " << gguf_test::read_file(logs / "err");
                ++finished_before_kill;
                // The machine is faster now than during calibration: aim the next kills better.
                expected_s = std::min(expected_s, std::chrono::duration<double>(Clock::now() - started).count());
            } else {
                ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << context << ": status " << status;
                ++kill_points;
                stop_at.empty() ? (++random_kills, ++killed_here) : ++checkpoint_kills;
            }
            const std::string where = check_after_kill(c, dir, ref, context, stale, &temps_left);
            if (stop_at.empty() && WIFSIGNALED(status)) ++landed[std::string(command_name(c)) + ": " + where];
        };
        for (const auto& point : checkpoints.at(c)) {
            one_run(point, 0);
            if (HasFatalFailure()) return;
        }
        for (int i = 0; killed_here < kRandomKillsPerCommand && i < kMaxRandomRuns; ++i) {
            // Uniform over an uninterrupted run plus 10 %, so every phase is hit in proportion
            // to its duration (exec and parsing, copying, fsync, rename, verification, deletes).
            std::uniform_real_distribution<double> delay(0.0, expected_s * 1.1);
            one_run("", delay(rng));
            if (HasFatalFailure()) return;
        }
        // A last, uninterrupted run removes whatever the killed ones left.
        prepare(c, dir, ref);
        pid_t pid = spawn(args_for(c, dir, ref), {"GGUF_MOUNT_COPY=dense"}, logs / "err");
        int status = wait_exit(pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << gguf_test::read_file(logs / "err");
        size_t none = 0;
        check_after_kill(c, dir, ref, std::string(command_name(c)) + " final run", {}, &none);
        EXPECT_EQ(none, 0u) << command_name(c) << ": temporary files left after a complete run";
    }

    const double secs = std::chrono::duration<double>(Clock::now() - t_start).count();
    std::cout << "[ kills    ] " << kill_points << " kill -9 points exercised (" << checkpoint_kills
              << " at named checkpoints, " << random_kills << " at random moments; " << finished_before_kill
              << " random runs finished before the kill); " << temps_left
              << " temporary files were left by kills, each removed by the next run; " << secs << " s\n";
    std::cout << "[ runs     ] uninterrupted: split " << ref.seconds[Command::Split] << " s, merge "
              << ref.seconds[Command::Merge] << " s, merge --delete-splits " << ref.seconds[Command::MergeDeleteSplits]
              << " s\n";
    for (const auto& [where, n] : landed) std::cout << "[ landed   ] " << n << " x " << where << "\n";
    RecordProperty("kill_points", kill_points);
    RecordProperty("seconds", std::to_string(secs));
    EXPECT_EQ(random_kills, 3 * kRandomKillsPerCommand) << "too many runs finished before their kill";
    EXPECT_GE(kill_points, 50);
}

// CI's run of the test above once failed (GGUF_CRASH_SEED=1668201458: split run 7, killed after
// 14 ms, left two earlier runs' temporary files beside one of its own). split probed how to
// publish, with two short-lived files of the ".NAME.tmp-XXXXXX" pattern, before it removed the
// earlier runs' files: a kill in those microseconds left both. inotify shows the order on every
// run, not only when a kill lands in the window: every earlier run's file is deleted before this
// run creates its first one.
TEST(CrashSafety, EarlierRunsTemporaryFilesAreRemovedBeforeThisRunCreatesOne) {
    Reference ref;
    ref.model = ref.dir / "model.gguf";
    gguf_test::write_dense_model(ref.model, {{"head", 3000}, {"body", 200000}, {"tail", 777}}, 7);
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "split", "-q", "--split-max-tensors", "1", ref.model,
                             ref.dir / kPrefix});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (int k = 1; k <= 3; ++k) ref.shard_names.push_back(std::string(kPrefix) + "-0000" + std::to_string(k) + "-of-00003.gguf");

    for (Command c : {Command::Split, Command::Merge, Command::MergeDeleteSplits}) {
        SCOPED_TRACE(command_name(c));
        TempDir work;
        const std::string dir = work.path();
        prepare(c, dir, ref);
        const std::vector<std::string> finals =
            c == Command::Split ? ref.shard_names : std::vector<std::string>{kMerged};
        std::set<std::string> stale;
        for (const auto& f : finals) {
            for (const char* suffix : {"old001", "old002"}) {
                const std::string name = "." + f + ".tmp-" + suffix;
                ASSERT_TRUE(is_temp_of(name, f));
                gguf_test::write_file(dir + "/" + name, "left by a killed run");
                stale.insert(name);
            }
        }
        gguf_test::DirectoryEvents watch(dir);
        std::vector<std::string> argv = {gguf_test::gguf_mount_binary()};
        for (auto& a : args_for(c, dir, ref)) argv.push_back(a);
        r = gguf_test::run(argv);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const std::vector<gguf_test::DirectoryEvents::Event> events = watch.take();
        size_t last_stale_delete = 0, first_own_temp = events.size(), deleted = 0;
        for (size_t i = 0; i < events.size(); ++i) {
            const bool created = events[i].created;
            const std::string& name = events[i].name;
            if (!created && stale.count(name)) {
                ++deleted;
                last_stale_delete = i;
            }
            const bool temp = std::any_of(finals.begin(), finals.end(), [&](const std::string& f) {
                return is_temp_of(name, f);
            });
            if (created && temp && !stale.count(name)) first_own_temp = std::min(first_own_temp, i);
        }
        std::string order;
        for (const auto& [created, name] : events) order += (created ? "\n  create " : "\n  delete ") + name;
        EXPECT_EQ(deleted, stale.size()) << "not every earlier run's temporary file was removed:" << order;
        ASSERT_LT(first_own_temp, events.size()) << "the run created no temporary file at all:" << order;
        EXPECT_LT(last_stale_delete, first_own_temp)
            << "a temporary file of this run existed before the earlier runs' were removed:" << order;
    }
}

}  // namespace
