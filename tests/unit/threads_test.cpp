// gguf::start_thread_without_termination_signals (common/threads.hpp): the name a helper thread
// shows to top -H / ps -L, and the signals it leaves to the session loop.
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/threads.hpp"

namespace {

/// /proc/self/task/TID/comm of the calling thread, without its newline.
std::string own_comm() {
    std::ifstream in("/proc/self/task/" + std::to_string(::syscall(SYS_gettid)) + "/comm");
    std::string name;
    std::getline(in, name);
    return name;
}

/// The comm of a thread started with `name`, read on that thread once it has been named (the
/// name is set by the starting thread right after creation).
std::string comm_of_thread_named(const char* name) {
    const std::string process = own_comm();
    std::string seen;
    std::thread t = gguf::start_thread_without_termination_signals(
        [&seen, &process] {
            for (int i = 0; i < 1000; ++i) {
                seen = own_comm();
                char now[16] = {};
                pthread_getname_np(pthread_self(), now, sizeof now);
                if (seen == now && seen != process) break;
                ::usleep(1000);
            }
        },
        name);
    t.join();
    return seen;
}

TEST(HelperThreads, ANamedThreadShowsItsNameAndALongNameIsCutToFifteenCharacters) {
    EXPECT_EQ(comm_of_thread_named("gm-fetch"), "gm-fetch");
    EXPECT_EQ(comm_of_thread_named("gm-a-name-longer-than-15"), "gm-a-name-longe");
}

TEST(HelperThreads, AnUnnamedThreadKeepsTheProcesssNameAndEveryThreadBlocksTheStopSignals) {
    const std::string process = own_comm();
    std::string seen;
    bool blocked = false;
    std::thread t = gguf::start_thread_without_termination_signals([&] {
        seen = own_comm();
        sigset_t mask;
        pthread_sigmask(SIG_SETMASK, nullptr, &mask);
        blocked = sigismember(&mask, SIGINT) == 1 && sigismember(&mask, SIGTERM) == 1 && sigismember(&mask, SIGHUP) == 1;
    });
    t.join();
    EXPECT_EQ(seen, process);
    EXPECT_TRUE(blocked);
    sigset_t mine;
    pthread_sigmask(SIG_SETMASK, nullptr, &mine);
    EXPECT_EQ(sigismember(&mine, SIGTERM), 0) << "the caller's mask is restored";
}

}  // namespace
