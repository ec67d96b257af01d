// Starting helper threads in a FUSE daemon (fs/ and remote/ both start them).
#pragma once

#include <csignal>
#include <thread>
#include <utility>

namespace gguf {

/// Starts `fn` on a new thread that has SIGINT, SIGTERM and SIGHUP blocked, so those signals
/// keep being delivered to the session loop threads, where libfuse's handlers (and our SIGHUP
/// rescan handler) must interrupt a blocking read of /dev/fuse. The caller's signal mask is
/// restored before returning, also when the thread cannot be created (std::system_error is
/// then rethrown). Start threads only after fuse_daemonize(): a fork would lose them.
template <typename Fn>
std::thread start_thread_without_termination_signals(Fn&& fn) {
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    try {
        std::thread t(std::forward<Fn>(fn));
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        return t;
    } catch (...) {
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        throw;
    }
}

}  // namespace gguf
