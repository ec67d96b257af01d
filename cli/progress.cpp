#include "cli/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace gguf_mount::cli {

bool progress_wanted(bool quiet) { return !quiet && ::isatty(STDERR_FILENO) == 1; }

std::string human_bytes(double bytes) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 5) {
        bytes /= 1024.0;
        ++u;
    }
    char buf[32];
    if (u == 0) {
        std::snprintf(buf, sizeof buf, "%.0f %s", bytes, units[u]);
    } else {
        std::snprintf(buf, sizeof buf, "%.2f %s", bytes, units[u]);
    }
    return buf;
}

std::string size_for_humans(uint64_t bytes) {
    if (bytes < 1024) return std::to_string(bytes) + " bytes";
    return human_bytes(static_cast<double>(bytes)) + " (" + std::to_string(bytes) + " bytes)";
}

ProgressBar::ProgressBar(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled) {
    start_ = std::chrono::steady_clock::now();
    last_draw_ = start_;
    if (enabled_) draw(false);
}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::add(uint64_t bytes) {
    done_ += bytes;
    if (!enabled_) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ >= std::chrono::milliseconds(100)) draw(false);
}

void ProgressBar::skip(uint64_t bytes) {
    skipped_ += bytes;
    add(bytes);
}

void ProgressBar::set_label(std::string label) {
    label_ = std::move(label);
    if (enabled_ && !finished_) draw(false);
}

void ProgressBar::finish() {
    if (!enabled_ || finished_) return;
    draw(true);
    std::fputc('\n', stderr);
    std::fflush(stderr);
    finished_ = true;
}

void ProgressBar::draw(bool final) {
    auto now = std::chrono::steady_clock::now();
    last_draw_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double fresh = static_cast<double>(done_ - skipped_);
    const double rate = (secs > 0.05 || (final && secs > 0)) ? fresh / secs : 0.0;
    const double frac = total_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));

    std::string eta = "--:--";
    if (final) {
        char b[32];
        std::snprintf(b, sizeof b, "%.1fs", secs);
        eta = b;
    } else if (rate > 0 && done_ < total_) {
        auto left = static_cast<uint64_t>(static_cast<double>(total_ - done_) / rate);
        char b[32];
        std::snprintf(b, sizeof b, "ETA %llu:%02llu", static_cast<unsigned long long>(std::min<uint64_t>(left / 60, 9999)),
                      static_cast<unsigned long long>(left % 60));
        eta = b;
    }
    // Fixed widths: "100%", sizes up to "1023.99 GiB", a rate, "ETA 9999:59".
    char tail[160];
    std::snprintf(tail, sizeof tail, " %3d%%  %11s / %11s  %11s/s  %-11s", static_cast<int>(frac * 100.0),
                  human_bytes(static_cast<double>(done_)).c_str(), human_bytes(static_cast<double>(total_)).c_str(),
                  human_bytes(rate).c_str(), eta.c_str());
    char label[16];
    std::snprintf(label, sizeof label, "%-11.11s", label_.c_str());

    if (bar_ < 0) {
        int width = 80;
        winsize ws{};
        if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) width = ws.ws_col;
        const int fixed = static_cast<int>(std::string(label).size() + std::string(tail).size()) + 4;
        bar_ = std::clamp(width - fixed - 1, 0, 40);
        if (bar_ < 10) bar_ = 0;
    }
    std::string line = std::string("\r") + label;
    if (bar_ > 0) {
        const int filled = static_cast<int>(frac * bar_);
        line += " [";
        line.append(static_cast<size_t>(filled), '=');
        if (filled < bar_) {
            line += '>';
            line.append(static_cast<size_t>(bar_ - filled - 1), ' ');
        }
        line += "]";
    }
    line += tail;
    line += "\x1b[K";  // erase what a longer previous line left (a resized terminal)
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
}

}  // namespace gguf_mount::cli
