// libFuzzer target: the GGUF header reader.
//
// Each input is a whole file. It is parsed twice, from memory (parse_header) and through a
// descriptor (read_header on a memfd, the chunked path the daemon uses), and both must agree
// exactly: same result, same error code and message. An error must be a one-line message of
// bounded length without control characters. An accepted header is re-rendered with
// render_header and re-parsed, and must survive that round trip unchanged.
// Any violated invariant calls __builtin_trap(), which libFuzzer reports as a crash.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gguf/error.hpp"
#include "gguf/format/reader.hpp"
#include "common/text.hpp"
#include "gguf/format/writer.hpp"

namespace {

void check(bool ok) {
    if (!ok) __builtin_trap();
}

/// Errors are printed by a daemon into syslog: one line, printable, short.
void check_message(const gguf::Error& e) {
    const std::string m = gguf::escape(e.what());  // as every front end prints it
    check(!m.empty() && m.size() <= 2048);
    for (char ch : m) {
        auto u = static_cast<unsigned char>(ch);
        check(u >= 0x20 && u != 0x7f);
    }
}

/// The outcome of one parse, reduced to what must be equal between the two read paths.
struct Outcome {
    bool ok = false;
    gguf::Code code = gguf::Code::Io;
    std::string message;
    gguf::Header header;
};

Outcome parse_memory(std::string_view bytes) {
    Outcome o;
    try {
        o.header = gguf::parse_header(bytes, bytes.size(), "fuzz.gguf");
        o.ok = true;
    } catch (const gguf::Error& e) {
        check_message(e);
        o.code = e.code();
        o.message = e.what();
    }
    return o;
}

/// One memfd for the whole run, rewritten for every input.
int memfd() {
    static int fd = ::memfd_create("fuzz.gguf", MFD_CLOEXEC);
    return fd;
}

Outcome parse_descriptor(std::string_view bytes) {
    Outcome o;
    int fd = memfd();
    check(fd >= 0);
    check(::ftruncate(fd, 0) == 0);
    size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
        check(n > 0);
        done += static_cast<size_t>(n);
    }
    try {
        o.header = gguf::read_header(fd, "fuzz.gguf");
        o.ok = true;
    } catch (const gguf::Error& e) {
        check_message(e);
        o.code = e.code();
        o.message = e.what();
    }
    return o;
}

bool same_tensor(const gguf::TensorInfo& a, const gguf::TensorInfo& b) {
    return a.name == b.name && a.ne == b.ne && a.type == b.type && a.offset == b.offset && a.nbytes == b.nbytes &&
           a.effective_dims() == b.effective_dims();
}

bool same_header(const gguf::Header& a, const gguf::Header& b) {
    if (a.kvs.size() != b.kvs.size() || a.tensors.size() != b.tensors.size()) return false;
    for (size_t i = 0; i < a.kvs.size(); ++i) {
        if (a.kvs[i].key != b.kvs[i].key || a.kvs[i].value.type != b.kvs[i].value.type ||
            a.kvs[i].value.raw != b.kvs[i].value.raw) {
            return false;
        }
    }
    for (size_t i = 0; i < a.tensors.size(); ++i) {
        if (!same_tensor(a.tensors[i], b.tensors[i])) return false;
    }
    return a.alignment == b.alignment;
}

/// Invariants of an accepted header.
void check_header(const gguf::Header& h, uint64_t file_size) {
    check(h.version == 2 || h.version == 3);
    check(gguf::is_power_of_two(h.alignment));
    check(h.header_size <= file_size);
    check(h.data_offset >= h.header_size && h.data_offset % h.alignment == 0);
    check(h.data_offset - h.header_size < h.alignment);
    uint64_t expected = 0;
    for (const auto& t : h.tensors) {
        check(t.offset == expected);
        check(!t.name.empty() && t.name.size() < gguf::kMaxTensorName);
        expected += gguf::align_up(t.nbytes, h.alignment);
    }
    if (!h.tensors.empty()) {
        const auto& last = h.tensors.back();
        check(h.data_offset <= file_size && last.offset + last.nbytes <= file_size - h.data_offset);
    }
}

/// Renders the header again and parses the result: the same KVs and tensors must come back,
/// and rendering that is byte-identical (the writer is a fixed point after one round).
void check_round_trip(const gguf::Header& h) {
    // A huge alignment (up to 2^31) would make the renderer pad in memory: render unpadded
    // then, and declare the padded size as the file size (padding is never read).
    uint64_t pad_to = h.alignment <= (uint64_t{1} << 20) ? h.alignment : 1;
    std::string r = gguf::render_header(h.kvs, h.tensors, pad_to);
    uint64_t data = 0;
    if (!h.tensors.empty()) data = h.tensors.back().offset + h.tensors.back().nbytes;
    uint64_t size = gguf::align_up(r.size(), h.alignment) + data;
    gguf::Header again;
    try {
        again = gguf::parse_header(r, size, "rendered.gguf");
    } catch (const gguf::Error&) {
        __builtin_trap();  // the writer produced a header the reader refuses
    }
    check(again.version == gguf::kWriteVersion);
    check(same_header(h, again));
    check(again.data_offset == gguf::align_up(r.size(), h.alignment));
    if (pad_to == h.alignment) check(again.data_offset == r.size());
    check(gguf::render_header(again.kvs, again.tensors, pad_to) == r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view bytes(reinterpret_cast<const char*>(data), size);
    Outcome mem = parse_memory(bytes);
    Outcome fd = parse_descriptor(bytes);
    check(mem.ok == fd.ok);
    if (!mem.ok) {
        check(mem.code == fd.code && mem.message == fd.message);
        return 0;
    }
    check(same_header(mem.header, fd.header));
    check(mem.header.data_offset == fd.header.data_offset && mem.header.file_size == size);
    check_header(mem.header, size);
    check_round_trip(mem.header);
    return 0;
}
