#include "remote/s3/credential_process.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "gguf/error.hpp"
#include "remote/helper_process.hpp"
#include "remote/s3/aws_files.hpp"

namespace gguf_mount::remote::s3 {
namespace {

using gguf::Code;
using gguf::Error;

}  // namespace

std::vector<std::string> split_command(const std::string& command) {
    std::vector<std::string> words;
    std::string word;
    bool in_word = false;
    for (size_t i = 0; i < command.size(); ++i) {
        char c = command[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            if (in_word) words.push_back(std::move(word));
            word.clear();
            in_word = false;
        } else if (c == '\'') {
            size_t close = command.find('\'', i + 1);
            if (close == std::string::npos) throw Error(Code::BadValue, "credential_process: an unclosed ' quote");
            word += command.substr(i + 1, close - i - 1);
            i = close;
            in_word = true;
        } else if (c == '"') {
            size_t j = i + 1;
            for (; j < command.size() && command[j] != '"'; ++j) {
                if (command[j] == '\\' && j + 1 < command.size() && (command[j + 1] == '"' || command[j + 1] == '\\'))
                    ++j;
                word += command[j];
            }
            if (j >= command.size()) throw Error(Code::BadValue, "credential_process: an unclosed \" quote");
            i = j;
            in_word = true;
        } else if (c == '\\') {
            if (i + 1 >= command.size()) throw Error(Code::BadValue, "credential_process: a trailing backslash");
            word += command[++i];
            in_word = true;
        } else {
            word += c;
            in_word = true;
        }
    }
    if (in_word) words.push_back(std::move(word));
    return words;
}

std::optional<std::time_t> parse_iso8601(const std::string& text) {
    std::tm tm{};
    int consumed = 0;
    if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                    &tm.tm_min, &tm.tm_sec, &consumed) != 6 ||
        consumed != 19)
        return std::nullopt;
    if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
        tm.tm_sec > 60)
        return std::nullopt;
    size_t i = 19;
    if (i < text.size() && text[i] == '.') {
        ++i;
        size_t digits = 0;
        while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++digits;
        if (digits == 0) return std::nullopt;
    }
    long offset = 0;
    std::string zone = text.substr(i);
    if (zone == "Z" || zone == "z") {
        offset = 0;
    } else if (zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':' &&
               std::isdigit(static_cast<unsigned char>(zone[1])) && std::isdigit(static_cast<unsigned char>(zone[2])) &&
               std::isdigit(static_cast<unsigned char>(zone[4])) && std::isdigit(static_cast<unsigned char>(zone[5]))) {
        offset = (std::stol(zone.substr(1, 2)) * 60 + std::stol(zone.substr(4, 2))) * 60;
        if (zone[0] == '-') offset = -offset;
    } else {
        return std::nullopt;
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return timegm(&tm) - offset;
}

Credentials parse_process_output(const std::string& output, const std::string& what) {
    nlohmann::json j = nlohmann::json::parse(output, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) throw Error(Code::BadValue, what + ": the output is not a JSON object");
    auto version = j.find("Version");
    if (version == j.end() || !version->is_number_integer() || version->get<long long>() != 1)
        throw Error(Code::BadValue, what + ": \"Version\" is not 1");
    auto text = [&](const char* name) -> std::string {
        auto it = j.find(name);
        if (it == j.end() || it->is_null()) return "";
        if (!it->is_string()) throw Error(Code::BadValue, what + ": \"" + name + "\" is not a string");
        return it->get<std::string>();
    };
    Credentials c;
    c.access_key_id = text("AccessKeyId");
    c.secret_access_key = text("SecretAccessKey");
    c.session_token = text("SessionToken");
    if (c.access_key_id.empty()) throw Error(Code::BadValue, what + ": no \"AccessKeyId\"");
    if (c.secret_access_key.empty()) throw Error(Code::BadValue, what + ": no \"SecretAccessKey\"");
    std::string expiration = text("Expiration");
    if (!expiration.empty()) {
        std::optional<std::time_t> t = parse_iso8601(expiration);
        if (!t) throw Error(Code::BadValue, what + ": \"Expiration\" \"" + first_line_of(expiration) + "\" is not an ISO 8601 time");
        c.expiration = std::chrono::system_clock::from_time_t(*t);
    }
    return c;
}

Credentials run_credential_process(const std::string& command, const std::string& what,
                                   std::chrono::milliseconds timeout) {
    std::vector<std::string> words = split_command(command);
    if (words.empty()) throw Error(Code::BadValue, what + ": the command is empty");
    std::string program = find_on_path(words[0]);
    if (program.empty()) throw Error(Code::Io, what + ": " + words[0] + ": command not found on $PATH");
    if (std::string why = untrusted_aws_path(program, "the credential_process program"); !why.empty())
        throw Error(Code::BadArgument, what + ": " + why, EPERM);
    const std::string shown = what + ": " + words[0];
    words[0] = program;
    HelperRun run = run_helper(words, "", shown, timeout);
    if (run.exit_status != 0) {
        wipe(run.out);
        std::string line = first_line_of(run.err);
        throw Error(Code::Io, shown + " exited with status " +
                                  std::to_string(run.exit_status) +
                                  (run.exit_status == 127 && line.empty() ? " (cannot be run)" : "") +
                                  (line.empty() ? "" : ": " + line));
    }
    try {
        Credentials c = parse_process_output(run.out, what);
        wipe(run.out);
        return c;
    } catch (...) {
        wipe(run.out);
        throw;
    }
}

}  // namespace gguf_mount::remote::s3
