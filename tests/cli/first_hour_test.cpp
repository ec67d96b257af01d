// Messages a new user reads in the first hour (issue 25): `check` of a single file, --help
// placeholders, the progress bar's width.
#include <sys/stat.h>

#include <cstring>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/support.hpp"

namespace {

using gguf_test::fixture;
using gguf_test::TempDir;

/// `check` of an unsplit GGUF file said it was a problem, naming the file twice; it is valid.
TEST(FirstHour, CheckOfASingleUnsplitFileSaysItIsValidWithNothingToMerge) {
    const std::string file = fixture("tiny-llama/tiny-llama.gguf");
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", file});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.out, file + ": a valid GGUF file, 27 tensors, 512.56 KiB (524864 bytes): a single file, nothing to "
                            "merge (a mount of its directory serves it as it is)\n");
    EXPECT_EQ(r.err, "");
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", "--json", file});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j["ok"].get<bool>());
    EXPECT_EQ(j["single_file"]["tensors"], 27);
    EXPECT_TRUE(j["problems"].empty());
}

/// Each command's --help names what a value is (DIR, URL, N, FILE, ...), never cxxopts'
/// generic "arg" (mount said "--cache-dir DIR", split "--split-max-size arg").
TEST(FirstHour, HelpPlaceholdersNameWhatTheValueIs) {
    const std::regex generic(R"(--[a-z0-9-]+ arg\b|, -[a-zA-Z] arg\b)");
    for (const char* cmd : {"mount", "split", "merge", "check", "prefetch", "umount"}) {
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), cmd, "--help"});
        EXPECT_EQ(r.exit_code, 0) << cmd;
        std::smatch m;
        EXPECT_FALSE(std::regex_search(r.out, m, generic)) << cmd << ": " << m.str(0);
        // One wording across the commands (mount said "[OPTION...]", "print this help", "L").
        EXPECT_NE(r.out.find(std::string("gguf-mount ") + (std::string(cmd) == "mount" ? "" : std::string(cmd) + " ")),
                  std::string::npos) << cmd;
        EXPECT_EQ(r.out.find("[OPTION...]"), std::string::npos) << cmd << ":\n" << r.out;
        EXPECT_TRUE(std::regex_search(r.out, std::regex("-h, --help +show this help"))) << cmd << ":\n" << r.out;
        // The placeholder of each option (the word after it in the option list) is the same
        // wherever the same kind of value is taken.
        const std::regex placeholder(R"(\n +(?:-[a-zA-Z], )?(--[a-z-]+) ([A-Z][^ \n]*))");
        for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), placeholder); it != std::sregex_iterator(); ++it) {
            const std::string option = (*it)[1], value = (*it)[2];
            if (option == "--split-max-size" || option == "--cache-max-size") EXPECT_EQ(value, "N(M|G)") << cmd << " " << option;
            if (option == "--log-level") EXPECT_EQ(value, "LEVEL") << cmd;
            if (option == "--cache-dir") EXPECT_EQ(value, "DIR") << cmd;
        }
    }
}

/// The progress bar changed its width as it went ("0 B" then "3.36 MiB", "--:--" then "0.0s",
/// "merging" then "merged"); every redraw has one width now. Run under script(1) for a terminal.
TEST(FirstHour, TheProgressBarKeepsItsWidth) {
    if (gguf_test::run({"/usr/bin/script", "--version"}).exit_code != 0) GTEST_SKIP() << "script(1) not installed";
    TempDir tmp;
    const std::string cmd = gguf_test::gguf_mount_binary() + " merge " + fixture("kvzoo/t7/kvzoo-00001-of-00007.gguf") +
                            " " + tmp / "merged.gguf";
    auto r = gguf_test::run({"/usr/bin/script", "-qec", "stty cols 120; " + cmd, "/dev/null"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(gguf_test::sha256_file(tmp / "merged.gguf"),
              gguf_test::sha256_file(fixture("kvzoo/merged-reference.gguf")));
    // The frames: between '\r's, each ending with the erase-line sequence.
    std::vector<std::string> frames;
    size_t at = 0;
    while ((at = r.out.find('\r', at)) != std::string::npos) {
        const size_t end = r.out.find("\x1b[K", at);
        if (end == std::string::npos) break;
        frames.push_back(r.out.substr(at + 1, end - at - 1));
        at = end;
    }
    ASSERT_GE(frames.size(), 2u) << r.out;
    for (const auto& f : frames) EXPECT_EQ(f.size(), frames.front().size()) << "'" << f << "' vs '" << frames.front() << "'";
    EXPECT_NE(frames.back().find("100%"), std::string::npos) << frames.back();
}

}  // namespace

namespace {

/// A URL that is not a first shard gets a "did you mean" naming the URL to give (no request is
/// sent: the port is closed, and the check happens before any connection).
TEST(FirstHour, AShardTwoOrFolderUrlSaysWhichUrlWasMeant) {
    TempDir cache;
    struct Case {
        std::string url, meant;
    };
    for (const Case& c : {Case{"http://127.0.0.1:9/m/kvzoo-00002-of-00007.gguf", "did you mean http://127.0.0.1:9/m/kvzoo-00001-of-00007.gguf?"},
                          Case{"http://127.0.0.1:9/m/models", "did you mean http://127.0.0.1:9/m/models/?"},
                          Case{"http://127.0.0.1:9/m/tiny.gguf", "did you mean http://127.0.0.1:9/m/ (the folder"}}) {
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", "--cache-dir", cache.path(), c.url});
        EXPECT_EQ(r.exit_code, 1) << c.url;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n') + std::count(r.out.begin(), r.out.end(), '\n'), 1)
            << r.out << r.err;
        EXPECT_NE((r.out + r.err).find(c.meant), std::string::npos) << r.out << r.err;
    }
}

}  // namespace

namespace {

/// What the bash completion (packaging/completion/gguf-mount.bash) offers for the command line
/// `words` (the last word is the one being completed), run with the gguf-mount under test first
/// in PATH and bash-completion's two helpers stubbed (the package need not be installed here).
std::set<std::string> completions(const std::vector<std::string>& words) {
    const std::string bin = gguf_test::gguf_mount_binary();
    std::string line;
    for (const auto& w : words) line += " '" + w + "'";
    const std::string script =
        "PATH='" + bin.substr(0, bin.rfind('/')) + "':$PATH\n"
        "_init_completion() { words=(\"${COMP_WORDS[@]}\"); cword=$COMP_CWORD; cur=${COMP_WORDS[COMP_CWORD]};"
        " prev=${COMP_WORDS[COMP_CWORD-1]}; }\n"
        "_filedir() { :; }\n"
        "source '" + fixture("../../packaging/completion/gguf-mount.bash") + "'\n"
        "COMP_WORDS=(" + line + "); COMP_CWORD=" + std::to_string(words.size() - 1) + "\n"
        "_gguf_mount\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n";
    auto r = gguf_test::run({"/bin/bash", "-c", script});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::set<std::string> out;
    std::istringstream lines(r.out);
    for (std::string l; std::getline(lines, l);) {
        if (!l.empty()) out.insert(l);
    }
    return out;
}

}  // namespace

/// Issue 30, item 11: the completion scraped --help prose and offered `merge --merge`, `cache
/// --cache-max-size`, `prefetch --offline`, and not `unmount`: it now offers the options each
/// command declares (`gguf-mount --completion-words COMMAND`).
TEST(FirstHour, BashCompletionOffersTheDeclaredOptionsOnly) {
    auto merge = completions({"gguf-mount", "merge", "--"});
    EXPECT_TRUE(merge.count("--delete-splits") && merge.count("--override-kv") && merge.count("--cache-dir"))
        << ::testing::PrintToString(merge);
    EXPECT_EQ(merge.count("--merge"), 0u) << ::testing::PrintToString(merge);
    auto cache = completions({"gguf-mount", "cache", "--"});
    EXPECT_TRUE(cache.count("--max-size") && cache.count("--cache-dir")) << ::testing::PrintToString(cache);
    EXPECT_EQ(cache.count("--cache-max-size"), 0u) << ::testing::PrintToString(cache);
    auto prefetch = completions({"gguf-mount", "prefetch", "--"});
    EXPECT_TRUE(prefetch.count("--cache-max-size")) << ::testing::PrintToString(prefetch);
    EXPECT_EQ(prefetch.count("--offline"), 0u) << ::testing::PrintToString(prefetch);
    auto mount = completions({"gguf-mount", "/models", "/mnt/m", "--"});
    EXPECT_TRUE(mount.count("--offline") && mount.count("--allow-non-empty")) << ::testing::PrintToString(mount);
    EXPECT_EQ(completions({"gguf-mount", "un"}), (std::set<std::string>{"unmount"}));
    EXPECT_EQ(completions({"gguf-mount", "u"}), (std::set<std::string>{"umount", "unmount"}));
    // The words themselves: one per line, declared options only.
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "--completion-words", "umount"});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.out, "--help\n--lazy\n-h\n-z\n");
}
