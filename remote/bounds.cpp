#include "remote/bounds.hpp"

#include "gguf/error.hpp"

namespace gguf_mount::remote {

namespace {

using Json = nlohmann::json;

/// nlohmann-json's DOM builder behind a gate that counts depth and values: returning false
/// from a SAX event stops the parse at once, so nothing past a bound is ever allocated.
class BoundedSax final : public nlohmann::json_sax<Json> {
public:
    explicit BoundedSax(Json& root) : dom_(root, false) {}

    bool null() override { return take() && dom_.null(); }
    bool boolean(bool v) override { return take() && dom_.boolean(v); }
    bool number_integer(number_integer_t v) override { return take() && dom_.number_integer(v); }
    bool number_unsigned(number_unsigned_t v) override { return take() && dom_.number_unsigned(v); }
    bool number_float(number_float_t v, const string_t& s) override { return take() && dom_.number_float(v, s); }
    bool string(string_t& v) override { return take() && dom_.string(v); }
    bool binary(binary_t& v) override { return take() && dom_.binary(v); }
    bool start_object(std::size_t n) override { return enter() && dom_.start_object(n); }
    bool key(string_t& v) override { return dom_.key(v); }
    bool end_object() override {
        --depth_;
        return dom_.end_object();
    }
    bool start_array(std::size_t n) override { return enter() && dom_.start_array(n); }
    bool end_array() override {
        --depth_;
        return dom_.end_array();
    }
    bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
        why_ = "is not valid JSON (at byte " + std::to_string(position) + ")";
        return false;
    }

    /// Why the parse stopped ("" when it did not).
    const std::string& why() const { return why_; }

private:
    bool take() {
        if (++values_ <= kMaxJsonValues) return true;
        why_ = "holds more than " + std::to_string(kMaxJsonValues) + " JSON values";
        return false;
    }
    bool enter() {
        if (++depth_ > kMaxJsonDepth) {
            why_ = "is nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
            return false;
        }
        return take();
    }

    nlohmann::detail::json_sax_dom_parser<Json> dom_;
    unsigned depth_ = 0;
    size_t values_ = 0;
    std::string why_;
};

}  // namespace

nlohmann::json parse_json_bounded(std::string_view body, const std::string& where, const char* what) {
    Json root;
    BoundedSax sax(root);
    const bool ok = Json::sax_parse(body.begin(), body.end(), &sax, nlohmann::json::input_format_t::json, true);
    if (!ok || !sax.why().empty()) {
        const std::string why = sax.why().empty() ? std::string("is not valid JSON") : sax.why();
        throw gguf::Error(gguf::Code::BadValue, where + ": " + what + " " + why);
    }
    return root;
}

std::string name_for_message(const std::string& name) {
    constexpr size_t kHead = 80, kTail = 24;
    std::string shown = name.size() <= kHead + kTail + 16
                            ? name
                            : name.substr(0, kHead) + "...(" + std::to_string(name.size()) + " bytes)..." +
                                  name.substr(name.size() - kTail);
    std::string out;
    for (char c : shown) {
        if (c == '\0') {
            out += "\\0";
        } else {
            out += c;
        }
    }
    return out;
}

std::string name_problem(const std::string& name) {
    if (name.size() > kMaxNameBytes)
        return "name of " + std::to_string(name.size()) + " bytes is longer than " + std::to_string(kMaxNameBytes) +
               " bytes (NAME_MAX)";
    if (name.find('/') != std::string::npos) return "name holds a '/'";
    if (name.find('\0') != std::string::npos) return "name holds a NUL byte";
    return "";
}

std::string size_problem(uint64_t size) {
    if (size <= kMaxRemoteFileSize) return "";
    return "claimed size of " + std::to_string(size) + " bytes is above the limit of 1 PiB (" +
           std::to_string(kMaxRemoteFileSize) + " bytes)";
}

}  // namespace gguf_mount::remote
