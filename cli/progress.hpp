// A minimal terminal progress bar for the offline commands (split, merge).
//
// Debian 12 packages no maintained C++ progress-bar library (no indicators, no tqdm-cpp; only
// Python, Perl, Go, Rust and Haskell ones), so this small implementation lives here.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace gguf_mount::cli {

/// True when a progress bar should be drawn: not `quiet` and stderr is a terminal.
bool progress_wanted(bool quiet);

/// One line on stderr, redrawn in place with '\r' at most every 100 ms:
///   "merging     [=========>          ]  45%   1.21 GiB /   2.70 GiB   850.30 MiB/s   ETA 0:02"
/// Bytes are shown in binary units (KiB, MiB, GiB), the rate is the average since start of
/// the bytes done by this run (skip() bytes excluded), and the ETA is (total - done) / rate.
/// Every field has a fixed width, so the line keeps its length from the first draw to the last
/// (the bar's width is chosen once, from the terminal width, TIOCGWINSZ). A disabled bar does
/// nothing at all. Not thread-safe.
class ProgressBar {
public:
    /// `label` prefixes the line; `total` is the number of bytes the operation will produce.
    ProgressBar(std::string label, uint64_t total, bool enabled);
    ~ProgressBar();
    ProgressBar(const ProgressBar&) = delete;
    ProgressBar& operator=(const ProgressBar&) = delete;

    /// Adds `bytes` to the done count; redraws if the last draw is older than 100 ms.
    void add(uint64_t bytes);
    /// Adds `bytes` done by an earlier run (a continued download): counted as done, not in the
    /// rate or the ETA.
    void skip(uint64_t bytes);
    /// Replaces the label (e.g. "syncing") and redraws.
    void set_label(std::string label);
    /// Draws the final state (with the total elapsed time instead of the ETA) and ends the
    /// line. Idempotent; the destructor calls it (so an error message starts on a fresh line).
    void finish();

private:
    void draw(bool final);
    std::string label_;
    uint64_t total_;
    uint64_t done_ = 0;
    uint64_t skipped_ = 0;  // of done_, done by an earlier run
    int bar_ = -1;          // bar width, chosen at the first draw
    bool enabled_;
    bool finished_ = false;
    std::chrono::steady_clock::time_point start_;
    std::chrono::steady_clock::time_point last_draw_;
};

/// "1.21 GiB", "850.0 MiB", "12 B": `bytes` in binary units with up to 2 decimals.
std::string human_bytes(double bytes);

/// A size for info lines: "1.20 GiB (1288490188 bytes)", exact below 1 KiB ("512 bytes").
std::string size_for_humans(uint64_t bytes);

}  // namespace gguf_mount::cli
