#include "remote/s3/list_objects.hpp"

#include <charconv>
#include <memory>
#include <set>

#include "gguf/error.hpp"
#include "remote/xml.hpp"

namespace gguf_mount::remote::s3 {
namespace {

using gguf::Code;
using gguf::Error;

/// Parses `body` as XML without network access, DTD loading or entity substitution; a document
/// with a DTD is refused (S3 never sends one, and it is the way to entity expansion). On failure
/// returns null with *why set.
OwnedXmlDoc read_xml(std::string_view body, std::string* why) {
    OwnedXmlParser ctxt(xmlNewParserCtxt());
    if (!ctxt) {
        *why = "out of memory";
        return nullptr;
    }
    const int options = XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NOCDATA;
    OwnedXmlDoc doc(
        xmlCtxtReadMemory(ctxt.get(), body.data(), static_cast<int>(body.size()), "s3.xml", nullptr, options));
    if (!doc) {
        const xmlError* e = xmlCtxtGetLastError(ctxt.get());
        std::string m = e && e->message ? e->message : "not well-formed";
        while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
        *why = "not well-formed XML (" + m + (e ? ", line " + std::to_string(e->line) : std::string()) + ")";
        return nullptr;
    }
    if (doc->intSubset != nullptr || doc->extSubset != nullptr) {
        *why = "the XML has a DTD (an S3 answer has none)";
        return nullptr;
    }
    if (xmlDocGetRootElement(doc.get()) == nullptr) {
        *why = "the XML has no root element";
        return nullptr;
    }
    return doc;
}

bool is(const xmlNode* n, const char* name) {
    return n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, reinterpret_cast<const xmlChar*>(name)) == 0;
}

/// The text directly inside element `n` (text and CDATA children; entity references are not
/// followed).
std::string text_of(const xmlNode* n) {
    std::string out;
    for (const xmlNode* c = n->children; c; c = c->next)
        if ((c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE) && c->content)
            out += reinterpret_cast<const char*>(c->content);
    return out;
}

const xmlNode* child(const xmlNode* n, const char* name) {
    for (const xmlNode* c = n->children; c; c = c->next)
        if (is(c, name)) return c;
    return nullptr;
}

std::string child_text(const xmlNode* n, const char* name) {
    const xmlNode* c = child(n, name);
    return c ? text_of(c) : std::string();
}

std::optional<uint64_t> decimal(const std::string& s) {
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
    return v;
}

/// Whitespace runs (CR and LF included) as one space, trimmed, cut to `max` bytes: one line.
std::string one_line(std::string_view s, size_t max) {
    std::string out;
    bool space = false;
    for (char c : s) {
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            space = !out.empty();
            continue;
        }
        if (space) out += ' ';
        space = false;
        out += c;
    }
    if (out.size() > max) {
        size_t cut = max;
        while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8 characters
        out = out.substr(0, cut) + "...";
    }
    return out;
}

std::string cut_key(const std::string& key) { return key.size() > 200 ? one_line(key, 200) : key; }

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

std::optional<std::string> decode_url_encoded(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '+') {
            out += ' ';
        } else if (c == '%') {
            const int hi = i + 1 < text.size() ? hex_digit(text[i + 1]) : -1;
            const int lo = i + 2 < text.size() ? hex_digit(text[i + 2]) : -1;
            if (hi < 0 || lo < 0) return std::nullopt;
            out += static_cast<char>(hi * 16 + lo);
            i += 2;
        } else {
            out += c;
        }
    }
    return out;
}

std::string s3_location(const std::string& bucket, const std::string& key) {
    if (bucket.empty()) return "s3://";
    return "s3://" + bucket + "/" + key;
}

ListPage parse_list_page(std::string_view body, const std::string& where, const ListLimits& limits) {
    if (body.size() > limits.max_body_bytes)
        throw Error(Code::TooLarge, where + ": ListObjectsV2 page of " + std::to_string(body.size()) +
                                        " bytes is larger than the " + std::to_string(limits.max_body_bytes) +
                                        " bytes allowed");
    std::string why;
    auto doc = read_xml(body, &why);
    if (!doc) throw Error(Code::BadValue, where + ": ListObjectsV2 answer: " + why);
    const xmlNode* root = xmlDocGetRootElement(doc.get());
    if (is(root, "Error")) {
        std::optional<ErrorDocument> e = parse_error_document(body);
        throw Error(Code::BadValue, where + ": ListObjectsV2 answered an S3 error: " + (e ? e->code : "") +
                                        (e && !e->message.empty() ? ": " + e->message : ""));
    }
    if (!is(root, "ListBucketResult"))
        throw Error(Code::BadValue, where + ": ListObjectsV2 answer has root <" +
                                        one_line(reinterpret_cast<const char*>(root->name), 80) +
                                        ">, not <ListBucketResult>");

    // With EncodingType url (asked for with encoding-type=url) Key, Prefix, Delimiter and
    // StartAfter are URL-encoded (AWS, ListObjectsV2 "EncodingType"); the element may come
    // after the entries, so it is read first.
    bool url_encoded = false;
    for (const xmlNode* n = root->children; n; n = n->next) {
        if (!is(n, "EncodingType")) continue;
        const std::string t = text_of(n);
        if (t == "url") {
            url_encoded = true;
        } else if (!t.empty()) {
            throw Error(Code::BadValue, where + ": ListObjectsV2 answer has EncodingType \"" + one_line(t, 40) +
                                            "\", not url");
        }
    }
    // A field's text decoded when the page is URL-encoded; nullopt for a malformed %-escape.
    auto field = [url_encoded](const xmlNode* n) -> std::optional<std::string> {
        std::string t = text_of(n);
        if (!url_encoded) return t;
        return decode_url_encoded(t);
    };

    ListPage page;
    std::set<std::string> seen;
    size_t entries = 0;
    auto count_entry = [&] {
        if (++entries > limits.max_entries)
            throw Error(Code::TooLarge, where + ": ListObjectsV2 page holds more than " +
                                            std::to_string(limits.max_entries) + " entries");
    };
    for (const xmlNode* n = root->children; n; n = n->next) {
        if (n->type != XML_ELEMENT_NODE) continue;
        if (is(n, "Name")) {
            page.bucket = text_of(n);
        } else if (is(n, "Prefix")) {
            std::optional<std::string> p = field(n);
            if (!p)
                throw Error(Code::BadValue, where + ": ListObjectsV2 <Prefix> \"" + one_line(text_of(n), 200) +
                                                "\" is not URL-encoded text (EncodingType url)");
            page.prefix = std::move(*p);
        } else if (is(n, "IsTruncated")) {
            std::string t = text_of(n);
            if (t != "true" && t != "false")
                throw Error(Code::BadValue, where + ": ListObjectsV2 <IsTruncated> is \"" + one_line(t, 40) +
                                                "\", not true or false");
            page.is_truncated = t == "true";
        } else if (is(n, "NextContinuationToken")) {
            page.next_continuation_token = text_of(n);
        } else if (is(n, "KeyCount")) {
            page.key_count = decimal(text_of(n));
            if (!page.key_count)
                throw Error(Code::BadValue, where + ": ListObjectsV2 <KeyCount> \"" + one_line(text_of(n), 40) +
                                                "\" is not a number");
        } else if (is(n, "CommonPrefixes")) {
            count_entry();
            const xmlNode* p = child(n, "Prefix");
            std::optional<std::string> decoded = p ? field(p) : std::optional<std::string>(std::string());
            std::string prefix = decoded.value_or(std::string());
            if (!decoded) {
                page.problems.push_back({cut_key(text_of(p)), "the prefix is not URL-encoded text (EncodingType url)"});
            } else if (prefix.empty()) {
                page.problems.push_back({"", "a <CommonPrefixes> entry without a <Prefix>"});
            } else if (prefix.size() > limits.max_key_bytes) {
                page.problems.push_back({cut_key(prefix), "prefix is " + std::to_string(prefix.size()) +
                                                              " bytes, longer than S3's " +
                                                              std::to_string(limits.max_key_bytes)});
            } else {
                page.common_prefixes.push_back(std::move(prefix));
            }
        } else if (is(n, "Contents")) {
            count_entry();
            const xmlNode* k = child(n, "Key");
            ObjectEntry e;
            std::optional<std::string> key = k ? field(k) : std::optional<std::string>(std::string());
            if (!key) {
                page.problems.push_back({cut_key(text_of(k)), "the key is not URL-encoded text (EncodingType url)"});
                continue;
            }
            e.key = std::move(*key);
            if (e.key.empty()) {
                page.problems.push_back({"", "a <Contents> entry without a <Key>"});
                continue;
            }
            if (e.key.size() > limits.max_key_bytes) {
                page.problems.push_back({cut_key(e.key), "key is " + std::to_string(e.key.size()) +
                                                             " bytes, longer than S3's " +
                                                             std::to_string(limits.max_key_bytes)});
                continue;
            }
            std::string size_text = child_text(n, "Size");
            std::optional<uint64_t> size = decimal(size_text);
            if (!size) {
                page.problems.push_back({cut_key(e.key), "<Size> \"" + one_line(size_text, 40) +
                                                             "\" is not a number of bytes"});
                continue;
            }
            if (!seen.insert(e.key).second) {
                page.problems.push_back({cut_key(e.key), "the key is listed twice"});
                continue;
            }
            e.size = *size;
            e.etag = child_text(n, "ETag");
            e.last_modified = child_text(n, "LastModified");
            page.contents.push_back(std::move(e));
        }
    }
    if (page.is_truncated && page.next_continuation_token.empty())
        throw Error(Code::BadValue,
                    where + ": ListObjectsV2 page says IsTruncated but gives no NextContinuationToken");
    return page;
}

std::optional<ErrorDocument> parse_error_document(std::string_view body) {
    if (body.empty() || body.size() > ListLimits{}.max_body_bytes) return std::nullopt;
    std::string why;
    auto doc = read_xml(body, &why);
    if (!doc) return std::nullopt;
    const xmlNode* root = xmlDocGetRootElement(doc.get());
    if (!is(root, "Error")) return std::nullopt;
    ErrorDocument e;
    e.code = one_line(child_text(root, "Code"), 100);
    e.message = one_line(child_text(root, "Message"), 300);
    e.bucket_name = child_text(root, "BucketName");
    e.key = child_text(root, "Key");
    e.region = one_line(child_text(root, "Region"), 60);
    if (e.region.empty()) e.region = one_line(child_text(root, "BucketRegion"), 60);
    e.endpoint = one_line(child_text(root, "Endpoint"), 200);
    e.request_id = one_line(child_text(root, "RequestId"), 100);
    return e;
}

S3Failure explain_failure(std::string_view body, const ErrorContext& context) {
    std::optional<ErrorDocument> doc = parse_error_document(body);
    S3Failure f;
    const int status = context.http_status;
    if (doc && !doc->code.empty()) {
        f.code = doc->code;
    } else if (status == 301) {
        f.code = "PermanentRedirect";
    } else if (status == 403) {
        f.code = "AccessDenied";
    } else if (status == 404) {
        f.code = "NotFound";
    } else if (status == 503) {
        f.code = "SlowDown";
    } else {
        f.code = "HTTP " + std::to_string(status);
    }
    f.region = one_line(context.bucket_region, 60);
    if (f.region.empty() && doc) f.region = doc->region;
    if (!context.retry_after.empty()) {
        if (std::optional<uint64_t> s = decimal(context.retry_after); s && *s <= 86400)
            f.retry_after_seconds = static_cast<unsigned>(*s);
    }

    std::string advice;
    const std::string& c = f.code;
    if (c == "AccessDenied") {
        advice = "the credentials may not read it: check the IAM or bucket policy (a public bucket takes "
                 "--no-sign-request)";
    } else if (c == "NoSuchBucket") {
        advice = "no such bucket: check the bucket name, --endpoint-url and --region";
    } else if (c == "NoSuchKey" || c == "NotFound") {
        advice = "no such key: check the key (keys are case-sensitive and taken raw, as the AWS CLI takes them)";
    } else if (c == "InvalidAccessKeyId") {
        advice = "the access key id is not known to this endpoint: check AWS_ACCESS_KEY_ID or the profile, and "
                 "--endpoint-url";
    } else if (c == "SignatureDoesNotMatch") {
        advice = "check the secret access key, the region (--region) and this machine's clock";
    } else if (c == "ExpiredToken" || c == "TokenRefreshRequired" || c == "ExpiredTokenException") {
        f.credentials_expired = true;
        advice = "the session token has expired: refresh the credentials (re-run credential_process, or set a new "
                 "AWS_SESSION_TOKEN)";
    } else if (c == "InvalidToken") {
        advice = "the session token is not valid: check AWS_SESSION_TOKEN or the profile";
    } else if (c == "RequestTimeTooSkewed") {
        advice = "this machine's clock is more than 15 minutes off the server's: set the clock (NTP)";
    } else if (c == "PermanentRedirect" || c == "AuthorizationHeaderMalformed" || c == "IllegalLocationConstraintException" ||
               status == 301) {
        if (!f.region.empty()) {
            advice = "the bucket is in region " + f.region + ": use --region " + f.region;
        } else if (doc && !doc->endpoint.empty()) {
            advice = "the bucket must be addressed at " + doc->endpoint + ": set --region or --endpoint-url";
        } else {
            advice = "the bucket is in another region: set --region or --endpoint-url";
        }
    } else if (c == "SlowDown" || status == 503) {
        f.retryable = true;
        advice = "the server asks to slow down: retrying later" +
                 (f.retry_after_seconds ? " (after " + std::to_string(*f.retry_after_seconds) + " s)" : std::string());
    } else if (c == "InternalError" || status == 500) {
        f.retryable = true;
        advice = "the server had an internal error: retrying later";
    }

    const std::string bucket = !context.bucket.empty() ? context.bucket : (doc ? doc->bucket_name : "");
    const std::string key = !context.key.empty() ? context.key : (doc ? doc->key : "");
    f.message = s3_location(bucket, key) + ": " + c;
    if (c != "HTTP " + std::to_string(status)) f.message += " (HTTP " + std::to_string(status) + ")";
    if (doc && !doc->message.empty()) f.message += ": " + doc->message;
    if (!advice.empty()) f.message += ": " + advice;
    return f;
}

}  // namespace gguf_mount::remote::s3
