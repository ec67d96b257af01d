// Starting helper threads in a FUSE daemon (fs/ and remote/ both start them).
#pragma once

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace gguf {

/// Process-wide: whether a helper thread that outlives its call may start now. False from
/// hold_threads_until_fork() (a mount, before it plans) until release_threads_after_fork() (the
/// session, once it has daemonized): a thread does not survive fork(), and a lock or condition
/// variable it held or waited on then hangs the child. remote::SequentialCheck hashes on the
/// reading thread meanwhile. True in every other process (check, merge, prefetch, tests).
inline std::atomic<bool>& threads_may_start_flag() noexcept {
    static std::atomic<bool> flag{true};
    return flag;
}
inline bool threads_may_start() noexcept { return threads_may_start_flag().load(); }
inline void hold_threads_until_fork() noexcept { threads_may_start_flag() = false; }
inline void release_threads_after_fork() noexcept { threads_may_start_flag() = true; }

/// Starts `fn` on a new thread that has SIGINT, SIGTERM and SIGHUP blocked, so those signals
/// keep being delivered to the session loop threads, where libfuse's handlers (and our SIGHUP
/// rescan handler) must interrupt a blocking read of /dev/fuse. The caller's signal mask is
/// restored before returning, also when the thread cannot be created (std::system_error is
/// then rethrown). `name` (at most 15 characters, longer is cut; null: the process's name) is
/// what `top -H`, `ps -L` and /proc/PID/task/TID/comm show for it. Start threads only after
/// fuse_daemonize(): a fork would lose them.
template <typename Fn>
std::thread start_thread_without_termination_signals(Fn&& fn, const char* name = nullptr) {
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    try {
        std::thread t(std::forward<Fn>(fn));
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        if (name) {
            char cut[16] = {};
            std::strncpy(cut, name, sizeof cut - 1);
            pthread_setname_np(t.native_handle(), cut);  // best effort: a name only
        }
        return t;
    } catch (...) {
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        throw;
    }
}

/// Calls `fn(i)` for every i in [0, count) on at most `width` threads (each takes the next
/// index when it is done, so one slow call holds up only its own thread), started as
/// start_thread_without_termination_signals does; returns when all calls have returned. The
/// first exception a call throws is rethrown here after every thread has finished (the calls
/// already taken still run). `width` 0 is taken as 1; count <= 1 or width 1 runs on the caller.
template <typename Fn>
void for_each_parallel(size_t count, size_t width, Fn&& fn) {
    if (width == 0) width = 1;
    if (count <= 1 || width == 1) {
        for (size_t i = 0; i < count; ++i) fn(i);
        return;
    }
    std::atomic<size_t> next{0};
    std::exception_ptr first;
    std::mutex first_mutex;
    auto work = [&] {
        for (size_t i; (i = next.fetch_add(1)) < count;) {
            try {
                fn(i);
            } catch (...) {
                std::lock_guard<std::mutex> lock(first_mutex);
                if (!first) first = std::current_exception();
            }
        }
    };
    std::vector<std::thread> threads;
    try {
        for (size_t t = 0; t < width && t < count; ++t) threads.push_back(start_thread_without_termination_signals(work));
    } catch (...) {
        if (threads.empty()) throw;  // not even one thread: nothing ran
    }
    for (auto& t : threads) t.join();
    if (first) std::rethrow_exception(first);
}

}  // namespace gguf
