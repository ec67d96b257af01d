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

namespace {

// Issue 30, item 11: three usage lines ran together (one space before their description: help2man
// took them for one paragraph), two help paragraphs were single unwrapped lines, HTTP_PROXY was
// listed though libcurl ignores it, and the mount helper was said to be in /sbin.
TEST(ManPage, UsageLinesAreSeparateAndTextIsWrapped) {
    const std::string page = man_page_source();
    ASSERT_FALSE(page.empty()) << "build/packaging/gguf-mount.1 was not generated (help2man)";
    for (const char* usage : {"gguf\\-mount SOURCE MOUNTPOINT [options]", "gguf\\-mount check [options] SOURCE",
                              "gguf\\-mount prefetch [options] URL", "gguf\\-mount cache list|trim|clear [options]",
                              "gguf\\-mount umount [\\-\\-lazy] MOUNTPOINT"}) {
        EXPECT_NE(page.find(std::string(".TP\n") + usage + "\n"), std::string::npos) << usage;
    }
    // Text lines as shown (font changes and escapes take no room): none is a whole paragraph.
    std::istringstream lines(page);
    for (std::string line; std::getline(lines, line);) {
        if (!line.empty() && line[0] == '.') continue;  // a request, not text
        std::string shown;
        for (size_t i = 0; i < line.size(); ++i) {
            if (line[i] == '\\' && i + 2 < line.size() && line[i + 1] == 'f') {
                i += 2;  // \fB, \fR, \fI
            } else if (line[i] == '\\' && i + 1 < line.size() && (line[i + 1] == '&' || line[i + 1] == '-')) {
                if (line[++i] == '-') shown += '-';
            } else {
                shown += line[i];
            }
        }
        EXPECT_LE(shown.size(), 110u) << shown.substr(0, 100);
    }
}

TEST(ManPage, NamesTheProxyVariablesLibcurlReadsAndTheHelperWhereItIsInstalled) {
    const std::string page = man_page_source();
    EXPECT_NE(page.find(".BR http_proxy \", \" HTTPS_PROXY \", \" ALL_PROXY \", \" NO_PROXY"), std::string::npos);
    EXPECT_NE(page.find("libcurl ignores\nHTTP_PROXY"), std::string::npos);
    EXPECT_NE(page.find(".I /usr/sbin/mount.fuse.gguf-mount"), std::string::npos);
    EXPECT_EQ(page.find(".I /sbin/"), std::string::npos);
}

}  // namespace
