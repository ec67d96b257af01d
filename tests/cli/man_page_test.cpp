// The man page (packaging/man: help2man over every command's --help): every help line reaches
// the page (a line starting with ' or . was taken by roff as a request and dropped: PREFETCH
// lost one), and the sections a user looks for are there.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "support/support.hpp"

namespace {

std::string man_page_source() {
    const std::string bin = gguf_test::gguf_mount_binary();
    return gguf_test::read_file(bin.substr(0, bin.rfind('/')) + "/packaging/gguf-mount.1");
}

TEST(ManPage, HelpLinesStartingWithAQuoteOrADotAreGuarded) {
    const std::string page = man_page_source();
    ASSERT_FALSE(page.empty()) << "build/packaging/gguf-mount.1 was not generated (help2man)";
    size_t guarded = 0;
    for (const char* cmd : {"split", "merge", "mount", "check", "prefetch", "cache", "umount"}) {
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), cmd, "--help"});
        std::istringstream lines(r.out);
        for (std::string line; std::getline(lines, line);) {
            if (line.empty() || (line[0] != '\'' && line[0] != '.')) continue;
            EXPECT_NE(page.find("\n\\&" + line.substr(0, 40)), std::string::npos) << cmd << ": " << line;
            ++guarded;
        }
    }
    EXPECT_GE(guarded, 1u);  // prefetch --help has one ('gguf-mount SOURCE MOUNTPOINT --offline ...')
}

TEST(ManPage, HasTheSectionsUsersLookFor) {
    const std::string page = man_page_source();
    for (const char* section : {".SH ENVIRONMENT", ".SH \"EXIT STATUS\"", ".SH FILES", ".SH \"SEE ALSO\"", ".SH UMOUNT", ".SH CACHE"}) {
        EXPECT_NE(page.find(section), std::string::npos) << section;
    }
    for (const char* name : {"HF_TOKEN_PATH", "HF_ENDPOINT", "XDG_CACHE_HOME", "CACHE_DIRECTORY", "fusermount3",
                             "mount.fuse.gguf-mount"}) {
        EXPECT_NE(page.find(name), std::string::npos) << name;
    }
}

}  // namespace
