#include "cli/offline.hpp"

#include "cli/logging.hpp"
#include "gguf/error.hpp"
#include "common/text.hpp"

#include <spdlog/spdlog.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gguf_mount::cli {

namespace {
volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_cancel_signal(int sig) { g_signal = sig; }
}  // namespace

void install_cancel_handlers() {
    struct sigaction sa {};
    sa.sa_handler = on_cancel_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: interrupt blocking copies so the flag is seen soon
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

const volatile std::sig_atomic_t* cancel_flag() { return &g_signal; }

bool cancelled() { return g_signal != 0; }

int exit_for_signal() {
    int sig = g_signal;
    if (sig == 0) return 1;
    std::fflush(stdout);
    std::fflush(stderr);
    struct sigaction sa {};
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
    ::raise(sig);
    return 128 + sig;  // not reached for terminating signals
}

void checkpoint(const char* name) {
    const char* want = std::getenv("GGUF_MOUNT_TEST_STOP_AT");
    if (!want || std::strcmp(want, name) != 0) return;
    std::fprintf(stderr, "gguf-mount: checkpoint %s\n", name);
    std::fflush(stderr);
    ::raise(SIGSTOP);
}

gguf::WriteOptions write_options_from_env() {
    gguf::WriteOptions o;
    o.cancel = cancel_flag();
    if (const char* v = std::getenv("GGUF_MOUNT_COPY")) {
        std::string s = std::string(",") + v + ",";
        if (s.find(",buffered,") != std::string::npos) o.force_buffered = true;
        if (s.find(",dense,") != std::string::npos) o.preserve_holes = false;
    }
    return o;
}

gguf::PublishMethod publish_method_for(const std::string& final_path) {
    const gguf::PublishMethod m = gguf::probe_publish_method(final_path);
    if (m == gguf::PublishMethod::ExclusiveRename) {
        spdlog::info(
            "{}: the file system has neither no-replace rename nor hard links; publishing with an "
            "O_EXCL placeholder and rename",
            gguf::quote_name(gguf::dir_name(final_path)));
    }
    return m;
}

void remove_stale_outputs(const std::string& final_path, const std::string& keep) {
    for (const std::string& stale : gguf::remove_stale_temporaries(final_path, keep)) {
        spdlog::info("removed {}, left behind by an interrupted earlier run", gguf::quote_name(stale));
    }
}

void raise_open_file_limit() {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int run_offline(bool quiet, const std::string& interrupted, const std::function<int()>& body) {
    try {
        setup_logging(quiet ? "warn" : "info", false);
        install_cancel_handlers();
        raise_open_file_limit();
        return body();
    } catch (const gguf::Error& e) {
        if (cancelled()) {
            print_error(interrupted);
            return exit_for_signal();
        }
        print_error(e.what());
        return 1;
    } catch (const std::exception& e) {
        print_error(e.what());
        return 1;
    }
}

void print_error(const std::string& message) {
    std::fflush(stdout);
    std::fprintf(stderr, "gguf-mount: error: %s\n", gguf::escape(message).c_str());
}

int usage_error(const std::string& command, const std::string& message) {
    std::fflush(stdout);
    std::fprintf(stderr, "gguf-mount %s: %s; see 'gguf-mount %s --help'\n", command.c_str(), gguf::escape(message).c_str(),
                 command.c_str());
    return 2;
}

}  // namespace gguf_mount::cli
