#include "gguf/model/split_plan.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <string_view>

#include "gguf/format/file_plan.hpp"
#include "gguf/error.hpp"

namespace gguf {

namespace {

bool is_split_key(const std::string& key) {
    return key == kKeySplitNo || key == kKeySplitCount || key == kKeySplitTensorsCount;
}

/// The split keys in the order the reference leaves them: split.no, split.tensors.count,
/// split.count (see the header comment of split_plan.hpp).
void append_split_keys(std::vector<KeyValue>& kvs, uint16_t no, uint16_t count, int32_t total) {
    kvs.push_back(KeyValue{std::string(kKeySplitNo), Value::u16(no)});
    kvs.push_back(KeyValue{std::string(kKeySplitTensorsCount), Value::i32(total)});
    kvs.push_back(KeyValue{std::string(kKeySplitCount), Value::u16(count)});
}

std::string describe_limit(const SplitOptions& o) {
    if (o.mode == SplitOptions::Mode::Tensors) return "--split-max-tensors " + std::to_string(o.max_tensors);
    return "--split-max-size of " + std::to_string(o.max_bytes) + " bytes";
}

}  // namespace

std::vector<ShardPlan> plan_split(const Header& input, const SplitOptions& options) {
    if (options.mode == SplitOptions::Mode::Tensors && options.max_tensors == 0) {
        throw Error(Code::BadArgument, "--split-max-tensors must be a positive number, not 0");
    }
    if (options.mode == SplitOptions::Mode::Size && options.max_bytes == 0) {
        throw Error(Code::BadArgument, "--split-max-size must be a positive size, not 0");
    }
    if (!is_power_of_two(input.alignment)) {
        throw Error(Code::BadArgument, "alignment " + std::to_string(input.alignment) + " is not a power of two");
    }
    if (const KeyValue* kv = input.find(kKeySplitCount)) {
        auto n = kv->value.as_int();
        if (n && *n >= 2) {
            throw Error(Code::BadSplit, "the input is one shard of a " + std::to_string(*n) +
                                            "-shard set (split.count = " + std::to_string(*n) +
                                            "); merge the set first, then split the merged file");
        }
    }
    const uint64_t n_tensors = input.tensors.size();
    if (n_tensors > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
        throw Error(Code::BadArgument, "the input has " + std::to_string(n_tensors) +
                                           " tensors, more than split.tensors.count (an i32) can hold");
    }

    // 1. Assign tensors to shards (indices only), exactly as split_strategy does.
    std::vector<std::vector<size_t>> groups(1);
    if (options.no_tensor_first_split) groups.emplace_back();  // the empty first shard is allowed
    uint64_t running = 0;  // padded tensor bytes of the current shard (size mode)
    for (size_t i = 0; i < n_tensors; ++i) {
        const TensorInfo& t = input.tensors[i];
        const uint64_t padded = align_up(t.nbytes, input.alignment);
        bool cut;
        if (options.mode == SplitOptions::Mode::Size) {
            cut = running + padded > options.max_bytes;
        } else {
            cut = i > 0 && i % options.max_tensors == 0;
        }
        if (cut) {
            if (groups.back().empty()) {
                throw Error(Code::BadArgument,
                            "one of the splits would have 0 tensors: tensor '" + t.name + "' (" +
                                std::to_string(padded) + " bytes padded) does not fit in shard " +
                                std::to_string(groups.size()) + " under " + describe_limit(options) +
                                "; the size or tensor limit is too small");
            }
            if (groups.size() >= kMaxShards) {
                throw Error(Code::BadArgument, "the split would need more than " + std::to_string(kMaxShards) +
                                                   " shards (split.count is a u16); raise " +
                                                   describe_limit(options));
            }
            groups.emplace_back();
            running = padded;
        } else {
            running += padded;
        }
        groups.back().push_back(i);
    }

    // 2. KV pairs and layouts.
    const auto count = static_cast<uint16_t>(groups.size());
    const auto total = static_cast<int32_t>(n_tensors);
    const KeyValue* alignment_kv = input.find(kKeyAlignment);
    const bool copy_alignment = alignment_kv != nullptr && input.alignment != kDefaultAlignment;

    std::vector<ShardPlan> shards(groups.size());
    for (size_t s = 0; s < groups.size(); ++s) {
        ShardPlan& plan = shards[s];
        if (s == 0) {
            plan.kvs.reserve(input.kvs.size() + 3);
            for (const auto& kv : input.kvs) {
                if (!is_split_key(kv.key)) plan.kvs.push_back(kv);
            }
        } else if (copy_alignment) {
            plan.kvs.push_back(*alignment_kv);
        }
        append_split_keys(plan.kvs, static_cast<uint16_t>(s), count, total);

        plan.tensors.reserve(groups[s].size());
        for (size_t i : groups[s]) {
            const TensorInfo& t = input.tensors[i];
            plan.tensors.push_back(PlacedTensor{t, 0, input.data_offset + t.offset});
            plan.tensor_bytes += t.nbytes;
        }
        uint64_t padded = 0;
        for (const auto& t : plan.tensors) padded += align_up(t.info.nbytes, input.alignment);
        plan.layout = plan_gguf_file(plan.kvs, plan.tensors, input.alignment);
        plan.header_bytes = plan.layout.size() - padded;
    }
    return shards;
}

namespace {

/// Parses the decimal digits of `digits`; false when empty, not all digits, or above `max`.
bool parse_digits(std::string_view digits, uint64_t max, uint64_t* out) {
    uint64_t v = 0;
    for (char ch : digits) {
        if (ch < '0' || ch > '9') return false;
        auto d = static_cast<uint64_t>(ch - '0');
        if (v > (max - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return !digits.empty();
}

bool all_digits(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

uint64_t parse_split_max_size(const std::string& value, const std::string& option) {
    const std::string q = option + " '" + value + "': ";
    if (value.empty()) throw Error(Code::BadArgument, q + "expected a whole number followed by M or G, e.g. 2G");
    const char unit = value.back();
    std::string_view number(value.data(), value.size() - 1);
    if (unit != 'M' && unit != 'G') {
        if (all_digits(value)) {
            throw Error(Code::BadArgument, q + "missing unit: give M (10^6 bytes) or G (10^9 bytes), e.g. " + value + "M");
        }
        throw Error(Code::BadArgument, q + "unknown unit '" + std::string(1, unit) +
                                           "': supported units are M (10^6 bytes) and G (10^9 bytes)");
    }
    if (number.find_first_of(".,") != std::string_view::npos && !number.empty()) {
        throw Error(Code::BadArgument, q + "fractions are not accepted (llama.cpp's gguf-split would silently "
                                           "truncate them); give a whole number, e.g. 1500M for 1.5G");
    }
    if (!number.empty() && (number[0] == '-' || number[0] == '+')) {
        throw Error(Code::BadArgument, q + "the size must be a positive whole number without a sign");
    }
    if (!all_digits(number)) {
        throw Error(Code::BadArgument, q + "expected a whole number followed by M or G, e.g. 2G");
    }
    const uint64_t scale = unit == 'M' ? 1000000ULL : 1000000000ULL;
    uint64_t n = 0;
    if (!parse_digits(number, (uint64_t{1} << 63) / scale, &n)) {
        throw Error(Code::BadArgument, q + "the size is too large");
    }
    if (n == 0) throw Error(Code::BadArgument, q + "the size must be positive");
    return n * scale;
}

uint64_t parse_split_max_tensors(const std::string& value) {
    const std::string q = "--split-max-tensors '" + value + "': ";
    if (!value.empty() && value[0] == '-') throw Error(Code::BadArgument, q + "must be a positive whole number");
    if (!all_digits(value)) throw Error(Code::BadArgument, q + "not a whole number");
    uint64_t n = 0;
    if (!parse_digits(value, static_cast<uint64_t>(std::numeric_limits<int32_t>::max()), &n)) {
        throw Error(Code::BadArgument, q + "too large (at most 2147483647)");
    }
    if (n == 0) throw Error(Code::BadArgument, q + "must be at least 1");
    return n;
}

std::string split_summary(const std::vector<ShardPlan>& shards) {
    std::string out = "n_split: " + std::to_string(shards.size()) + "\n";
    char line[128];
    for (size_t i = 0; i < shards.size(); ++i) {
        const ShardPlan& s = shards[i];
        const uint64_t megabytes = (s.header_bytes + s.tensor_bytes) / 1000 / 1000;
        std::snprintf(line, sizeof line, "split %05zu: n_tensors = %zu, total_size = %" PRIu64 "M\n", i + 1,
                      s.tensors.size(), megabytes);
        out += line;
    }
    return out;
}

}  // namespace gguf
