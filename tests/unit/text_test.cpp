// gguf::escape (common/text.hpp): the one escaping rule for names in output.
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "common/text.hpp"
#include "support/support.hpp"

namespace {

/// Reverses escape(): "\\" -> backslash, "\xNN" -> byte NN, anything else as it is.
std::string unescape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '\\') {
            out += '\\';
            ++i;
        } else if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] == 'x') {
            out += static_cast<char>(std::stoi(s.substr(i + 2, 2), nullptr, 16));
            i += 3;
        } else {
            out += s[i];
        }
    }
    return out;
}

TEST(Escape, PrintableUtf8IsKeptEverythingElseIsHex) {
    EXPECT_EQ(gguf::escape("model-Q4_K_M.gguf"), "model-Q4_K_M.gguf");
    EXPECT_EQ(gguf::escape("caf\xc3\xa9 \xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\xa6\x99"), "caf\xc3\xa9 \xe6\xa8\xa1\xe5\x9e\x8b \xf0\x9f\xa6\x99");
    EXPECT_EQ(gguf::escape("a\nb"), "a\\x0ab");
    EXPECT_EQ(gguf::escape("\x1b[31m"), "\\x1b[31m");
    EXPECT_EQ(gguf::escape(std::string("a\0b", 3)), "a\\x00b");
    EXPECT_EQ(gguf::escape("\x7f"), "\\x7f");
    EXPECT_EQ(gguf::escape("a\\b"), "a\\\\b");
    EXPECT_EQ(gguf::escape("x\xff"), "x\\xff");
    EXPECT_EQ(gguf::escape("\xc2\x9b"), "\\xc2\\x9b");              // C1 CSI
    EXPECT_EQ(gguf::escape("\xe2\x80\xa8"), "\\xe2\\x80\\xa8");      // U+2028 line separator
    EXPECT_EQ(gguf::escape("\xe2\x80\xae"), "\\xe2\\x80\\xae");      // U+202E right-to-left override
    EXPECT_EQ(gguf::escape("\xc0\xaf"), "\\xc0\\xaf");              // overlong '/'
    EXPECT_EQ(gguf::escape("\xed\xa0\x80"), "\\xed\\xa0\\x80");      // surrogate
    EXPECT_EQ(gguf::escape("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
    EXPECT_EQ(gguf::escape("\xe6\xa8"), "\\xe6\\xa8");              // cut sequence
    EXPECT_EQ(gguf::escape("\xe6\xa8\xc3\xa9"), "\\xe6\\xa8\xc3\xa9");  // a valid one right after
}

TEST(Escape, IsInjectiveAndReversible) {
    // The pairs that a lossy rule merges: invalid bytes (U+FFFD), a literal "\xff" text, a backslash.
    const std::string names[] = {"m\xff", "m\xfe", "m\\xff", "m\\\\xff", "m\xc3\xbf", "m\\", "m\\\\", "m\n", "m\\x0a"};
    std::set<std::string> printed;
    for (const std::string& n : names) {
        const std::string e = gguf::escape(n);
        EXPECT_TRUE(printed.insert(e).second) << "two names print as " << e;
        EXPECT_EQ(unescape(e), n) << e;
        EXPECT_EQ(gguf::needs_no_escape(n), e == n) << e;
    }
    // Every single byte and every pair of bytes round-trips.
    for (int a = 0; a < 256; ++a) {
        for (int b = 0; b < 256; ++b) {
            const std::string n{static_cast<char>(a), static_cast<char>(b)};
            ASSERT_EQ(unescape(gguf::escape(n)), n) << a << " " << b;
        }
    }
}

TEST(Escape, HexBytes) { EXPECT_EQ(gguf::hex_bytes(std::string("a\n\xff\0", 4)), "610aff00"); }

/// Names in log lines (issue 30, item 5): one shell word that /bin/sh takes literally.
TEST(QuoteName, PlainNamesAsTheyAreOthersInSingleQuotesThatShRemovesExactly) {
    EXPECT_EQ(gguf::quote_name("Q4_K_M/kvzoo-00001-of-00007.gguf"), "Q4_K_M/kvzoo-00001-of-00007.gguf");
    EXPECT_EQ(gguf::quote_name("s3://b/k=1,v@2%+:x"), "s3://b/k=1,v@2%+:x");
    EXPECT_EQ(gguf::quote_name(""), "''");
    EXPECT_EQ(gguf::quote_name("$(touch x).gguf"), "'$(touch x).gguf'");
    EXPECT_EQ(gguf::quote_name("it's"), "'it'\"'\"'s'");
    EXPECT_EQ(gguf::quote_name("caf\xc3\xa9 model.gguf"), "'caf\xc3\xa9 model.gguf'");
    // What sh makes of the printed word (escaped once, as a log line has it): the escaped name,
    // and nothing run, for every shell-active byte.
    gguf_test::TempDir dir;
    const std::string name = "a b;c|d&e>f<g`h`$(i)${j}*k?[l]~m#n!o\"p'q\\r\ns\tt{u}";
    gguf_test::write_file(dir / "w.sh", "printf '%s' " + gguf::escape(gguf::quote_name(name)) + " > out\n");
    EXPECT_EQ(std::system(("cd " + dir.path() + " && /bin/sh ./w.sh").c_str()), 0);
    EXPECT_EQ(gguf_test::read_file(dir / "out"), gguf::escape(name));
    EXPECT_EQ(unescape(gguf_test::read_file(dir / "out")), name);
    EXPECT_FALSE(std::filesystem::exists(dir / "f")) << "a redirection ran";
}

}  // namespace
