#include "fs/watcher.hpp"
#include "common/threads.hpp"
#include "common/text.hpp"
#include "gguf/bytes/file_io.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <system_error>

#include <spdlog/spdlog.h>

namespace gguf_mount::fs {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kInotifyMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ATTRIB |
                                  IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

/// Drains a non-blocking descriptor; returns the bytes read (pipe) or whether anything was read.
std::string drain(int fd) {
    std::string out;
    char buf[4096];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n > 0) {
            out.append(buf, static_cast<size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return out;
    }
}

}  // namespace

void log_problem(const gguf::Problem& p) {
    if (p.incomplete) {
        spdlog::info("{} yet (shown once every shard is there)", p.reason);
    } else {
        spdlog::error("{}", p.reason);
    }
}

void log_rescan(const RescanResult& r, const std::string& source) {
    for (const auto& p : r.changes.added) {
        spdlog::info("{}: now serving {}", gguf::quote_name(source), gguf::quote_name(p));
    }
    for (const auto& p : r.changes.replaced) {
        spdlog::info("{}: {} changed; serving its new content", gguf::quote_name(source), gguf::quote_name(p));
    }
    for (const auto& p : r.changes.removed) {
        spdlog::info("{}: no longer serving {}", gguf::quote_name(source), gguf::quote_name(p));
    }
    for (const auto& p : r.new_problems) log_problem(p);
    for (const auto& n : r.new_notes) spdlog::warn("{}", n.reason);
    for (const auto& e : r.errors) spdlog::warn("{}: not served for now: {}", gguf::quote_name(source), e);
    if (r.unpinned) {
        spdlog::debug("{}: {} set(s) past the descriptor budget: their shards are opened on demand",
                      gguf::quote_name(source), r.unpinned);
    }
}

Watcher::Watcher(LiveFilesystem& live, Notifier notifier, Options options)
    : live_(live), notifier_(std::move(notifier)), options_(options) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        throw std::system_error(errno, std::generic_category(), "cannot create the watcher's wake pipe");
    }
    wake_read_ = fds[0];
    wake_write_ = fds[1];
}

Watcher::~Watcher() {
    stop(std::chrono::seconds(5));
    if (wake_read_ >= 0) ::close(wake_read_);
    if (wake_write_ >= 0) ::close(wake_write_);
    if (inotify_fd_ >= 0) ::close(inotify_fd_);
}

void Watcher::request_rescan() noexcept {
    int saved = errno;
    char c = 'R';
    ssize_t n = ::write(wake_write_, &c, 1);  // a full pipe already holds a request
    (void)n;
    errno = saved;
}

void Watcher::start() {
    if (thread_.joinable()) return;
    thread_ = gguf::start_thread_without_termination_signals([this] {
        try {
            run();
        } catch (const std::exception& e) {
            spdlog::error("{}: live updates stopped: {}", gguf::quote_name(live_.source()), e.what());
        }
        std::lock_guard<std::mutex> lock(done_mutex_);
        done_ = true;
        done_cv_.notify_all();
    }, "gm-watch");
}

bool Watcher::stop(std::chrono::milliseconds timeout) {
    stopping_ = true;
    if (!thread_.joinable()) return true;
    char c = 'Q';
    ssize_t n = ::write(wake_write_, &c, 1);
    (void)n;
    std::unique_lock<std::mutex> lock(done_mutex_);
    if (!done_cv_.wait_for(lock, timeout, [this] { return done_; })) {
        lock.unlock();
        thread_.detach();
        return false;
    }
    lock.unlock();
    thread_.join();
    return true;
}

void Watcher::drop_watch(int wd, bool remove_from_kernel) {
    if (remove_from_kernel) ::inotify_rm_watch(inotify_fd_, wd);
    watches_.erase(wd);
    for (auto it = watch_by_path_.begin(); it != watch_by_path_.end();) {
        it = it->second.wd == wd ? watch_by_path_.erase(it) : std::next(it);
    }
}

void Watcher::sync_inotify_watches() {
    if (inotify_fd_ < 0) return;
    std::unordered_map<std::string, const struct stat*> want;
    for (const auto& w : watched_) {
        if (w.directory && w.exists) want.emplace(w.path, &w.st);
    }
    for (auto it = watch_by_path_.begin(); it != watch_by_path_.end();) {
        auto wanted = want.find(it->first);
        // Kept while the path still names the directory the watch was added for.
        if (wanted != want.end() && wanted->second->st_dev == it->second.dev &&
            wanted->second->st_ino == it->second.ino) {
            ++it;
            continue;
        }
        // Another path may share this watch descriptor (the same directory through a link).
        const int wd = it->second.wd;
        it = watch_by_path_.erase(it);
        bool shared = false;
        for (const auto& [p, w] : watch_by_path_) shared = shared || w.wd == wd;
        if (!shared) {
            ::inotify_rm_watch(inotify_fd_, wd);
            watches_.erase(wd);
        }
    }
    for (const auto& [path, st] : want) {
        if (watch_by_path_.count(path)) continue;
        int wd = ::inotify_add_watch(inotify_fd_, path.c_str(), kInotifyMask);
        if (wd < 0) {
            if (!inotify_full_logged_) {
                spdlog::warn("{}: cannot watch with inotify ({}); changes are found by polling every {} ms",
                             gguf::quote_name(path), std::strerror(errno), options_.poll_interval.count());
                inotify_full_logged_ = true;
            }
            continue;
        }
        watches_[wd] = path;
        watch_by_path_[path] = Watch{wd, st->st_dev, st->st_ino};
    }
}

bool Watcher::read_inotify_events() {
    bool rescan = false;
    alignas(inotify_event) char buf[16384];
    for (;;) {
        ssize_t n = ::read(inotify_fd_, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return rescan;
        for (ssize_t off = 0; off < n;) {
            const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
            off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
            if (ev->mask & IN_Q_OVERFLOW) {
                rescan = true;
                continue;
            }
            if (!watches_.count(ev->wd)) continue;  // a watch already dropped: not in SOURCE any more
            if (ev->mask & IN_IGNORED) {            // the kernel removed it (directory deleted)
                drop_watch(ev->wd, false);
                rescan = true;
                continue;
            }
            if (ev->mask & (IN_MOVE_SELF | IN_DELETE_SELF)) {
                // The directory left its path: whatever happens in it now is not SOURCE.
                // The rescan watches its path again, where another directory may be now.
                drop_watch(ev->wd, true);
            }
            rescan = true;
        }
    }
}

bool Watcher::any_watched_path_changed() const {
    for (const auto& w : watched_) {
        struct stat st {};
        bool exists = ::stat(w.path.c_str(), &st) == 0;
        if (exists != w.exists) return true;
        if (!exists) continue;
        const struct stat& o = w.st;
        if (st.st_dev != o.st_dev || st.st_ino != o.st_ino || st.st_mode != o.st_mode || st.st_uid != o.st_uid ||
            st.st_gid != o.st_gid || !gguf::same_time(st.st_mtim, o.st_mtim) || !gguf::same_time(st.st_ctim, o.st_ctim) ||
            (!w.directory && st.st_size != o.st_size)) {
            return true;
        }
    }
    return false;
}

void Watcher::rescan_and_notify(const char* why) {
    auto t0 = Clock::now();
    RescanResult r;
    try {
        r = live_.rescan();
    } catch (const std::exception& e) {
        // A failed rescan (out of memory, say) keeps the last version served and live updates
        // going: the paths still differ from what was watched, so the next change or poll
        // tries again. Logged once per distinct failure.
        const std::string what = e.what();
        if (what != last_rescan_failure_) {
            spdlog::error("{}: rescan failed: {}; still serving the last version found, trying again on the next "
                          "change", live_.source(), what);
            last_rescan_failure_ = what;
        }
        return;
    }
    if (!last_rescan_failure_.empty()) {
        spdlog::info("{}: rescan succeeded again", live_.source());
        last_rescan_failure_.clear();
    }
    ++rescans_;
    watched_ = live_.watched();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    spdlog::debug("{}: rescanned ({}) in {} ms: {} name change(s), {} attribute change(s)",
                  gguf::quote_name(live_.source()), why, ms, r.changes.entries.size(), r.changes.attributes.size());
    log_rescan(r, live_.source());
    for (const auto& e : r.changes.entries) {
        if (stopping_) return;
        if (notifier_.inval_entry) notifier_.inval_entry(e.parent, e.name);
    }
    for (uint64_t ino : r.changes.attributes) {
        if (stopping_) return;
        if (notifier_.inval_inode) notifier_.inval_inode(ino);
    }
    if (notifier_.served && !r.changes.empty()) notifier_.served(live_.current()->file_count());
    sync_inotify_watches();
}

void Watcher::run() {
    inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_fd_ < 0) {
        spdlog::warn("{}: inotify unavailable ({}); changes are found by polling every {} ms",
                     gguf::quote_name(live_.source()), std::strerror(errno), options_.poll_interval.count());
    }
    watched_ = live_.watched();
    sync_inotify_watches();
    // A change between the first scan and the first watch would go unseen until the next poll;
    // look once right away.
    if (any_watched_path_changed()) rescan_and_notify("changed while starting");

    auto next_poll = Clock::now() + options_.poll_interval;
    const bool revalidating = options_.revalidate.count() > 0;
    auto next_revalidate = Clock::now() + options_.revalidate;
    bool dirty = false;
    Clock::time_point first_event{}, last_event{};
    while (!stopping_) {
        auto now = Clock::now();
        Clock::duration wait = next_poll > now ? next_poll - now : Clock::duration::zero();
        if (dirty) {
            auto settle_at = std::min(last_event + options_.settle, first_event + options_.max_settle);
            wait = settle_at > now ? settle_at - now : Clock::duration::zero();
        }
        if (revalidating) wait = std::min<Clock::duration>(wait, next_revalidate > now ? next_revalidate - now
                                                                                       : Clock::duration::zero());
        pollfd fds[2] = {{wake_read_, POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
        int timeout_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()) + 1;
        int rc = ::poll(fds, inotify_fd_ >= 0 ? 2 : 1, timeout_ms);
        if (rc < 0 && errno != EINTR) throw std::system_error(errno, std::generic_category(), "poll");
        now = Clock::now();

        bool requested = false;
        if (rc > 0 && (fds[0].revents & POLLIN)) {
            std::string bytes = drain(wake_read_);
            if (bytes.find('Q') != std::string::npos) return;
            requested = bytes.find('R') != std::string::npos;
        }
        if (rc > 0 && inotify_fd_ >= 0 && (fds[1].revents & POLLIN)) {
            if (read_inotify_events()) {
                if (!dirty) first_event = now;
                dirty = true;
                last_event = now;
            }
        }
        if (stopping_) return;
        if (requested) {
            spdlog::info("{}: rescan requested (SIGHUP)", gguf::quote_name(live_.source()));
            rescan_and_notify("requested");
        } else if (revalidating && now >= next_revalidate) {
            rescan_and_notify("revalidate");
        } else if (dirty && (now >= last_event + options_.settle || now >= first_event + options_.max_settle)) {
            rescan_and_notify("inotify");
        } else if (!dirty && now >= next_poll) {
            if (any_watched_path_changed()) rescan_and_notify("poll");
            next_poll = Clock::now() + options_.poll_interval;
            continue;
        } else {
            continue;
        }
        dirty = false;
        next_poll = Clock::now() + options_.poll_interval;
        if (revalidating) next_revalidate = Clock::now() + options_.revalidate;  // every rescan revalidates
    }
}

}  // namespace gguf_mount::fs
