#include "cli/kv_options.hpp"

#include <string>

namespace gguf_mount::cli {

const char* const kKvOverrideHelp =
    "\n"
    "Changing metadata (only the header is new; every tensor byte stays as it is):\n"
    "  --override-kv KEY=TYPE:VALUE  TYPE int, float, bool, str (as llama.cpp spells them) for a key\n"
    "        the file has: it keeps its place and its type (int into a u32 key stays u32 and must\n"
    "        fit); a new key is appended and needs bool, str or an exact type (u8 i8 u16 i16 u32 i32\n"
    "        u64 i64 f32 f64). str:@FILE takes the string from FILE.\n"
    "  --remove-kv KEY  removes KEY (it must be there).\n"
    "  --chat-template-file FILE  sets tokenizer.chat_template to FILE's content.\n"
    "  general.alignment and split.* cannot be changed.\n";

void add_kv_override_options(cxxopts::Options& options) {
    // Plain string options, read through arguments(): every occurrence in order, and no
    // splitting at commas (a vector option would cut "str:a, b" in two).
    options.add_options("metadata")
        ("override-kv", "set KEY to VALUE (repeatable)", cxxopts::value<std::string>(), "KEY=TYPE:VALUE")
        ("remove-kv", "remove KEY (repeatable)", cxxopts::value<std::string>(), "KEY")
        ("chat-template-file", "set tokenizer.chat_template from FILE", cxxopts::value<std::string>(), "FILE");
}

gguf::KvOverrides read_kv_override_options(const cxxopts::ParseResult& parsed) {
    gguf::KvOverrides out;
    for (const auto& a : parsed.arguments()) {
        if (a.key() == "override-kv") {
            out.edits.push_back(gguf::parse_kv_override(a.value(), "--override-kv"));
        } else if (a.key() == "remove-kv") {
            out.edits.push_back(gguf::parse_kv_removal(a.value(), "--remove-kv"));
        } else if (a.key() == "chat-template-file") {
            out.edits.push_back(gguf::chat_template_edit(a.value()));
        }
    }
    return out;
}

}  // namespace gguf_mount::cli
