#include "cli/completion.hpp"

#include <cstdio>
#include <set>

namespace gguf_mount::cli {

namespace {
bool g_completion_words = false;
}  // namespace

void request_completion_words() noexcept { g_completion_words = true; }

bool completion_words_requested() noexcept { return g_completion_words; }

int print_completion_words(const cxxopts::Options& options, const std::vector<std::string>& positional) {
    const std::set<std::string> skip(positional.begin(), positional.end());
    std::set<std::string> words;
    for (const std::string& group : options.groups()) {
        for (const auto& o : options.group_help(group).options) {
            if (!o.l.empty() && skip.count(o.l.front())) continue;
            if (!o.s.empty()) words.insert("-" + o.s);
            for (const std::string& name : o.l) words.insert("--" + name);
        }
    }
    for (const std::string& w : words) std::printf("%s\n", w.c_str());
    return 0;
}

}  // namespace gguf_mount::cli
