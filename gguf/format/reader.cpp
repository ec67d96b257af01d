#include "gguf/format/reader.hpp"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <limits>
#include <unordered_set>

#include "gguf/error.hpp"
#include "gguf/bytes/file_io.hpp"

namespace gguf {

namespace {

/// Header bytes are pulled in growing steps: the first read is kFirstChunk, then each step
/// doubles the buffer, by at most kMaxStep. A shard of a large set has a header of a few hundred
/// bytes followed by tensor data: reading a fixed 1 MiB per file made mounting 1,200 shards read
/// 1.2 GB and depend on the tensor sizes (bench/run.sh, mount-to-readable).
constexpr uint64_t kFirstChunk = uint64_t{4} << 10;
constexpr uint64_t kMaxStep = uint64_t{1} << 20;
/// Longest key or tensor name quoted in an error message; the rest is elided.
constexpr size_t kMaxQuoted = 64;

/// A key or tensor name from the file, quoted for an error message: at most kMaxQuoted bytes,
/// then "...". The bytes stay raw; whoever prints the message escapes it (gguf::escape), so a
/// hostile name can neither break the one-line message nor drive the terminal.
/// Example: "a\nb" -> 'a\nb' (printed as 'a\x0ab').
/// Names are kept raw (escaped where printed, common/text.hpp), except a NUL byte: a message
/// travels as a C string (std::exception::what), which would end at it. A NUL (only ever in a
/// name that is refused for it) is shown as U+2400 SYMBOL FOR NULL.
std::string q(std::string_view s) {
    std::string out = "'";
    for (char ch : s.substr(0, kMaxQuoted)) {
        if (ch == '\0') {
            out += "\u2400";
        } else {
            out += ch;
        }
    }
    if (s.size() > kMaxQuoted) out += "...";
    return out + "'";
}

/// "string value" + " of 'KEY'" (when a key is given).
std::string describe(const char* what, std::string_view key) {
    return key.empty() ? std::string(what) : std::string(what) + " of " + q(key);
}

/// The header bytes read from a descriptor, in one contiguous block. Below kMapFrom bytes it is
/// a malloc'd block; from there on an anonymous mapping grown with mremap, which moves pages
/// instead of copying them: a std::string would hold the old and the new copy of a 20 MB header
/// at once on every growth.
class HeaderBuffer {
public:
    static constexpr size_t kMapFrom = size_t{1} << 20;
    HeaderBuffer() = default;
    HeaderBuffer(const HeaderBuffer&) = delete;
    HeaderBuffer& operator=(const HeaderBuffer&) = delete;
    ~HeaderBuffer() {
        if (mapped_) ::munmap(p_, cap_);
        else std::free(p_);
    }
    char* data() const { return p_; }
    size_t size() const { return size_; }

    /// Sets the size to `n` bytes (the first min(n, size()) are kept). False when the memory
    /// cannot be had.
    bool resize(size_t n) {
        if (n > cap_) {
            constexpr size_t kPage = 4096;
            size_t want = (std::max(n, cap_ * 2) + kPage - 1) / kPage * kPage;
            if (want >= kMapFrom) {
                void* q = mapped_ ? ::mremap(p_, cap_, want, MREMAP_MAYMOVE)
                                  : ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (q == MAP_FAILED) return false;
                if (!mapped_) {
                    if (size_) std::memcpy(q, p_, size_);
                    std::free(p_);
                }
                p_ = static_cast<char*>(q);
                mapped_ = true;
            } else {
                void* q = std::realloc(p_, want);
                if (!q) return false;
                p_ = static_cast<char*>(q);
            }
            cap_ = want;
        }
        size_ = n;
        return true;
    }

    /// Returns the mapped pages past size() (bytes read ahead of the header) to the system.
    void shrink_to_fit() {
        constexpr size_t kPage = 4096;
        const size_t keep = (size_ + kPage - 1) / kPage * kPage;
        if (mapped_ && keep > 0 && keep < cap_ && ::munmap(p_ + keep, cap_ - keep) == 0) cap_ = keep;
    }

private:
    char* p_ = nullptr;
    size_t size_ = 0;
    size_t cap_ = 0;
    bool mapped_ = false;
};

/// Sequential cursor over the header bytes of one file. Bytes come either from memory or
/// are pulled from a descriptor on demand; every request is checked against the file size
/// before anything is allocated.
class Cursor {
public:
    /// Bytes come from `pread` when it is non-null, else from `mem`.
    Cursor(const PreadFn* pread, std::string_view mem, uint64_t file_size, const std::string& name)
        : pread_(pread), mem_(mem), file_size_(file_size), name_(name) {}

    uint64_t pos() const { return pos_; }
    uint64_t left() const { return file_size_ - pos_; }

    [[noreturn]] void fail(Code code, const std::string& what, uint64_t at) const {
        throw Error(code, name_ + ": offset " + std::to_string(at) + ": " + what);
    }
    [[noreturn]] void fail(Code code, const std::string& what) const { fail(code, what, pos_); }

    /// Makes `n` bytes at the cursor available and returns a pointer to them.
    const char* need(uint64_t n, const char* what) {
        if (n > left()) {
            fail(Code::Truncated, std::string(what) + " needs " + std::to_string(n) +
                                      " bytes but only " + std::to_string(left()) +
                                      " are left in the file (size " + std::to_string(file_size_) + ")");
        }
        uint64_t end = pos_ + n;
        if (!pread_) {
            if (end > mem_.size()) fail(Code::Truncated, std::string(what) + " runs past the bytes given");
            return mem_.data() + pos_;
        }
        HeaderBuffer& buf = *buf_;
        if (end > buf.size()) {
            if (end > kMaxHeaderBytes) {
                fail(Code::TooLarge, "header larger than " + std::to_string(kMaxHeaderBytes) + " bytes");
            }
            const uint64_t step = std::min<uint64_t>(std::max<uint64_t>(buf.size(), kFirstChunk), kMaxStep);
            uint64_t want = std::min<uint64_t>(std::max<uint64_t>(end, buf.size() + step),
                                               std::min(file_size_, kMaxHeaderBytes));
            size_t old = buf.size();
            if (!buf.resize(want)) {
                fail(Code::TooLarge, "cannot allocate " + std::to_string(want) + " bytes for the header");
            }
            ssize_t got = (*pread_)(buf.data() + old, want - old, old);
            if (got < 0) {
                throw Error(Code::Io, name_ + ": read failed at offset " + std::to_string(old) + ": " +
                                          std::strerror(static_cast<int>(-got)),
                            static_cast<int>(-got));
            }
            buf.resize(old + static_cast<size_t>(got));
            if (end > buf.size()) fail(Code::Truncated, std::string(what) + ": file shrank while reading");
        }
        return buf.data() + pos_;
    }

    /// Byte `offset` of the file, which the cursor has already passed (offset < pos()).
    const char* bytes_at(uint64_t offset) const { return (pread_ ? buf_->data() : mem_.data()) + offset; }

    /// The bytes [0, end) read so far, as an owner the parsed values can point into (see
    /// SharedBytes): a small header is copied to an exact-size string (so that many small
    /// headers do not each keep a read-ahead buffer), a large one keeps its buffer.
    std::pair<std::shared_ptr<const void>, const char*> take_bytes(uint64_t end) {
        if (!pread_ || end < HeaderBuffer::kMapFrom) {
            const char* base = pread_ ? buf_->data() : mem_.data();
            auto copy = std::make_shared<const std::string>(base, end);
            const char* p = copy->data();
            return {std::move(copy), p};
        }
        buf_->resize(static_cast<size_t>(end));
        buf_->shrink_to_fit();
        std::shared_ptr<const HeaderBuffer> owner = std::move(buf_);
        return {owner, owner->data()};
    }

    template <typename T>
    T read(const char* what) {
        const char* p = need(sizeof(T), what);
        T v;
        std::memcpy(&v, p, sizeof v);
        pos_ += sizeof v;
        return v;
    }


    void skip(uint64_t n, const char* what) {
        need(n, what);
        pos_ += n;
    }

    /// Reads a GGUF string (u64 length + bytes), checking the length first. `what` names it in
    /// errors, followed by " of 'KEY'" when `key` is given; the message is only built on failure
    /// (a string array may have 2^27 elements).
    std::string_view string(const char* what, std::string_view key = {}) {
        uint64_t at = pos_;
        uint64_t len = read<uint64_t>(what);
        if (len > kMaxStringLength) {
            fail(Code::TooLarge, describe(what, key) + " length " + std::to_string(len) + " exceeds the limit of 2^30",
                 at);
        }
        if (len > left()) {
            fail(Code::Truncated, describe(what, key) + " length " + std::to_string(len) + " exceeds the " +
                                      std::to_string(left()) + " bytes left in the file", at);
        }
        const char* p = need(len, what);
        pos_ += len;
        return std::string_view(p, len);
    }

private:
    const PreadFn* pread_;
    std::string_view mem_;
    uint64_t file_size_;
    const std::string& name_;
    std::unique_ptr<HeaderBuffer> buf_ = std::make_unique<HeaderBuffer>();
    uint64_t pos_ = 0;
};

bool is_known_type(uint32_t t) { return t < kValueTypeCount; }

/// Skips over one value of type `t` (not Array) and validates it. A bool may hold any byte:
/// ggml's reader accepts 2..255 (it reads the byte into a C++ bool slot), and the raw byte is
/// copied through unchanged, so a merge stays byte-identical to gguf-split's.
void skip_scalar_or_string(Cursor& c, ValueType t, const std::string& key) {
    if (t == ValueType::String) {
        c.string("string value", key);
        return;
    }
    c.skip(scalar_size(t), "scalar value");
}

/// Reads and validates one value; returns where its bytes are: [first, second) of the header.
/// The caller makes the Value point there once all header bytes are read (parse()).
std::pair<uint64_t, uint64_t> read_value(Cursor& c, ValueType t, const std::string& key) {
    uint64_t start = c.pos();
    if (t == ValueType::Array) {
        uint64_t at = c.pos();
        auto et_raw = c.read<uint32_t>("array element type");
        if (!is_known_type(et_raw)) {
            c.fail(Code::BadValue, "key " + q(key) + ": unknown array element type " + std::to_string(et_raw), at);
        }
        auto et = static_cast<ValueType>(et_raw);
        if (et == ValueType::Array) c.fail(Code::BadValue, "key " + q(key) + ": arrays of arrays are not allowed", at);
        uint64_t count_at = c.pos();
        auto count = c.read<uint64_t>("array element count");
        if (count > kMaxArrayCount) {
            c.fail(Code::TooLarge, "key " + q(key) + ": array count " + std::to_string(count) +
                                       " exceeds the limit of 2^30", count_at);
        }
        uint64_t min_elem = et == ValueType::String ? 8 : scalar_size(et);
        if (count > c.left() / min_elem) {
            c.fail(Code::Truncated, "key " + q(key) + ": array of " + std::to_string(count) + " " +
                                        std::string(value_type_name(et)) + " exceeds the " +
                                        std::to_string(c.left()) + " bytes left in the file", count_at);
        }
        if (et == ValueType::String) {
            for (uint64_t i = 0; i < count; ++i) c.string("array element", key);
        } else {
            c.skip(count * min_elem, "array elements");
        }
    } else {
        skip_scalar_or_string(c, t, key);
    }
    return {start, c.pos()};
}

bool mul_overflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

namespace {

Header parse(Cursor& c, const std::string& name) {
    Header h;
    h.file_size = c.left();

    // Magic, with a friendlier message for the usual impostors.
    {
        if (c.left() < 4) c.fail(Code::BadMagic, "not a GGUF file (only " + std::to_string(c.left()) + " bytes)", 0);
        std::string_view head(c.need(std::min<uint64_t>(c.left(), 24), "magic"), std::min<uint64_t>(c.left(), 24));
        if (head.substr(0, 4) != "GGUF") {
            if (head.rfind("version https://git-lfs", 0) == 0) {
                c.fail(Code::BadMagic, "is a git-lfs pointer file, not model data (run 'git lfs pull')", 0);
            }
            c.fail(Code::BadMagic, "not a GGUF file (bad magic)", 0);
        }
        c.skip(4, "magic");
    }

    uint64_t at = c.pos();
    uint32_t version = c.read<uint32_t>("version");
    if ((version & 0xFFFFu) == 0 && version != 0) {
        c.fail(Code::BigEndian, "big-endian GGUF file (version field " + std::to_string(version) +
                                    "); only little-endian files are supported", at);
    }
    if (version == 1) c.fail(Code::BadVersion, "GGUF version 1 is obsolete and not supported", at);
    if (version != 2 && version != 3) {
        c.fail(Code::BadVersion, "unsupported GGUF version " + std::to_string(version), at);
    }
    h.version = version;

    at = c.pos();
    auto n_tensors = c.read<int64_t>("tensor count");
    auto n_kv = c.read<int64_t>("KV count");
    // Minimal encodings: KV = key len (8) + 1 key byte + type (4) + 1 value byte;
    // tensor info = name len (8) + 1 byte + n_dims (4) + no dim (n_dims 0 is legal) + type (4)
    // + offset (8).
    if (n_tensors < 0 || static_cast<uint64_t>(n_tensors) > c.left() / 25) {
        c.fail(Code::Truncated, "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                                    std::to_string(c.left()) + " bytes left in the file", at);
    }
    if (n_kv < 0 || static_cast<uint64_t>(n_kv) > c.left() / 14) {
        c.fail(Code::Truncated, "KV count " + std::to_string(n_kv) + " cannot fit in the " +
                                    std::to_string(c.left()) + " bytes left in the file", at + 8);
    }

    // Counts are only plausible, not proven: reserve a bounded amount and let real bytes grow it.
    h.kvs.reserve(static_cast<size_t>(std::min<int64_t>(n_kv, 4096)));
    std::vector<std::pair<uint64_t, uint64_t>> value_at;  // where each KV's value bytes are
    value_at.reserve(h.kvs.capacity());
    std::unordered_set<std::string> keys;
    for (int64_t i = 0; i < n_kv; ++i) {
        uint64_t kv_at = c.pos();
        std::string key(c.string("key"));
        if (key.empty()) c.fail(Code::BadValue, "KV pair " + std::to_string(i) + " has an empty key", kv_at);
        if (key.find('\0') != std::string::npos) {
            c.fail(Code::BadValue, "key " + q(key) + " contains a NUL byte (ggml's consumers would read it as " +
                                       q(key.substr(0, key.find('\0'))) + ")", kv_at);
        }
        uint64_t type_at = c.pos();
        auto t = c.read<uint32_t>("value type");
        if (!is_known_type(t)) {
            c.fail(Code::BadValue, "key " + q(key) + ": unknown value type " + std::to_string(t), type_at);
        }
        const auto type = static_cast<ValueType>(t);
        value_at.push_back(read_value(c, type, key));
        if (key == kKeyAlignment) {
            if (type != ValueType::U32) {
                c.fail(Code::BadAlignment, "key 'general.alignment' has type " +
                                               std::string(value_type_name(type)) + ", expected u32", kv_at);
            }
            uint32_t a32 = 0;
            std::memcpy(&a32, c.bytes_at(value_at.back().first), sizeof a32);
            uint64_t a = a32;
            if (!is_power_of_two(a)) {
                c.fail(Code::BadAlignment, "key 'general.alignment' = " + std::to_string(a) +
                                               " is not a non-zero power of two", kv_at);
            }
            h.alignment = a;
        }
        if (!keys.insert(key).second) c.fail(Code::BadValue, "duplicate key " + q(key), kv_at);
        Value v;
        v.type = type;
        h.kvs.push_back(KeyValue{std::move(key), std::move(v)});
    }

    h.tensors.reserve(static_cast<size_t>(std::min<int64_t>(n_tensors, 4096)));
    std::unordered_set<std::string> names;
    for (int64_t i = 0; i < n_tensors; ++i) {
        uint64_t t_at = c.pos();
        TensorInfo ti;
        ti.name = std::string(c.string("tensor name"));
        if (ti.name.empty()) c.fail(Code::BadTensor, "tensor " + std::to_string(i) + " has an empty name", t_at);
        if (ti.name.find('\0') != std::string::npos) {
            c.fail(Code::BadTensor, "tensor name " + q(ti.name) + " contains a NUL byte (ggml's consumers would read it as " +
                                        q(ti.name.substr(0, ti.name.find('\0'))) + ")", t_at);
        }
        if (ti.name.size() >= kMaxTensorName) {
            c.fail(Code::BadTensor, "tensor name " + q(ti.name) + " is " + std::to_string(ti.name.size()) +
                                        " bytes, the limit is 63", t_at);
        }
        if (!names.insert(ti.name).second) c.fail(Code::BadTensor, "duplicate tensor name " + q(ti.name), t_at);
        uint64_t d_at = c.pos();
        ti.n_dims = c.read<uint32_t>("n_dims");
        if (ti.n_dims > kMaxDims) {
            c.fail(Code::BadTensor, "tensor " + q(ti.name) + ": n_dims " + std::to_string(ti.n_dims) + " exceeds 4", d_at);
        }
        int64_t elements = 1;
        for (uint32_t d = 0; d < ti.n_dims; ++d) {
            uint64_t ne_at = c.pos();
            ti.ne[d] = c.read<int64_t>("dimension");
            if (ti.ne[d] < 0) {
                c.fail(Code::BadTensor, "tensor " + q(ti.name) + ": dimension " + std::to_string(d) + " is negative (" +
                                            std::to_string(ti.ne[d]) + ")", ne_at);
            }
            if (mul_overflows(elements, ti.ne[d], &elements)) {
                c.fail(Code::BadTensor, "tensor " + q(ti.name) + ": element count overflows int64", ne_at);
            }
        }
        // ggml's writer (and so gguf-split) keeps the dimensions up to the last one > 1
        // (ggml_n_dims): a 0 after that one, as in [8, 0], is dropped and the written shape [8]
        // no longer matches the (empty) data. Such a tensor cannot be passed on faithfully.
        for (uint32_t d = ti.n_dims; d-- > 1 && ti.ne[d] <= 1;) {
            if (ti.ne[d] == 0) {
                c.fail(Code::BadTensor, "tensor " + q(ti.name) + ": dimension " + std::to_string(d) +
                                            " is 0 after the last dimension > 1; ggml's writer would drop it and "
                                            "write a shape that disagrees with the data",
                       d_at);
            }
        }
        uint64_t type_at = c.pos();
        ti.type = c.read<uint32_t>("tensor type");
        auto tt = ggml_type(ti.type);
        if (!tt) {
            c.fail(Code::BadTensor, "tensor " + q(ti.name) + ": unknown or removed ggml type " + std::to_string(ti.type),
                   type_at);
        }
        if (ti.ne[0] % static_cast<int64_t>(tt->block_size) != 0) {
            c.fail(Code::BadTensor, "tensor " + q(ti.name) + ": ne0 = " + std::to_string(ti.ne[0]) +
                                        " is not a multiple of the " + std::string(tt->name) + " block size " +
                                        std::to_string(tt->block_size), t_at);
        }
        int64_t nbytes = 0;
        if (mul_overflows(elements / static_cast<int64_t>(tt->block_size), static_cast<int64_t>(tt->type_size),
                          &nbytes) ||
            static_cast<uint64_t>(nbytes) > std::numeric_limits<uint64_t>::max() - h.alignment) {
            c.fail(Code::BadTensor, "tensor " + q(ti.name) + ": byte size overflows", t_at);
        }
        ti.nbytes = static_cast<uint64_t>(nbytes);
        ti.offset = c.read<uint64_t>("tensor offset");
        h.tensors.push_back(std::move(ti));
    }
    h.header_size = c.pos();
    h.data_offset = align_up(h.header_size, h.alignment);
    if (!h.kvs.empty()) {
        // Every value points into one copy of the header bytes (no copy per value).
        auto [owner, base] = c.take_bytes(value_at.back().second);
        for (size_t i = 0; i < h.kvs.size(); ++i) {
            const auto [from, to] = value_at[i];
            h.kvs[i].value.raw = SharedBytes(owner, base + from, static_cast<size_t>(to - from));
        }
    }

    // Offsets must be exactly consecutive (ggml's strict reader), and all data inside the file.
    uint64_t expected = 0;
    for (const auto& ti : h.tensors) {
        if (ti.offset != expected) {
            c.fail(Code::BadTensor, "tensor " + q(ti.name) + " has offset " + std::to_string(ti.offset) + ", expected " +
                                        std::to_string(expected), h.header_size);
        }
        uint64_t padded = align_up(ti.nbytes, h.alignment);
        if (padded > std::numeric_limits<uint64_t>::max() - expected) {
            c.fail(Code::BadTensor, "tensor " + q(ti.name) + ": data section size overflows", h.header_size);
        }
        expected += padded;
    }
    if (!h.tensors.empty()) {
        const TensorInfo& last = h.tensors.back();
        uint64_t end = last.offset + last.nbytes;
        if (h.data_offset > h.file_size || end > h.file_size - h.data_offset) {
            throw Error(Code::Truncated,
                        name + ": truncated: tensor " + q(last.name) + " data ends at offset " +
                            std::to_string(h.data_offset + end) + " but the file has " +
                            std::to_string(h.file_size) + " bytes");
        }
    }
    return h;
}

}  // namespace

Header parse_header(std::string_view bytes, uint64_t file_size, const std::string& name) {
    if (bytes.size() > file_size) file_size = bytes.size();
    Cursor c(nullptr, bytes, file_size, name);
    return parse(c, name);
}

Header read_header(int fd, const std::string& name) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        throw Error(Code::Io, name + ": cannot stat: " + std::strerror(e), e);
    }
    if (!S_ISREG(st.st_mode)) throw Error(Code::Io, name + ": not a regular file");
    PreadFn fn = [fd](void* dst, size_t len, uint64_t offset) { return pread_full(fd, dst, len, offset); };
    return read_header(fn, static_cast<uint64_t>(st.st_size), name);
}

Header read_header(const PreadFn& pread, uint64_t file_size, const std::string& name) {
    Cursor c(&pread, {}, file_size, name);
    return parse(c, name);
}

Header read_header(const OpenLogicalFile& file) {
    PreadFn fn = [&file](void* dst, size_t len, uint64_t offset) { return file.pread(dst, len, offset); };
    try {
        return read_header(fn, file.size(), file.file().path);
    } catch (const Error& e) {
        // Why the read failed, when a part's source knows (ByteSource::failure_reason: e.g. its
        // bytes do not match their digest): said in the same line.
        std::string why;
        for (const FilePart& p : file.file().parts) {
            if (e.code() == Code::Io && p.source && why.empty()) why = p.source->failure_reason();
        }
        if (why.empty()) throw;
        throw Error(e.code(), std::string(e.what()) + " (" + why + ")", e.sys_errno());
    }
}

Header read_header(const std::string& path) {
    UniqueFd fd = open_read_only(path);
    return read_header(fd.get(), path);
}

}  // namespace gguf
