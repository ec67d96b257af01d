// The one error type of the gguf/ core. The core never exits or logs; it throws gguf::Error and
// the front ends (cli/, fs/) decide what to print and which errno or exit status to use.
#pragma once

#include <stdexcept>
#include <string>

namespace gguf {

/// Why an operation failed. Tests assert on the code; users read the message.
enum class Code {
    Io,               // open/read/write/stat failed (errno in Error::sys_errno)
    Truncated,        // a length, count or extent runs past the end of the file
    BadMagic,         // not a GGUF file (includes git-lfs pointer files)
    BadVersion,       // version 1, 0, or newer than 3
    BigEndian,        // big-endian GGUF file
    BadValue,         // malformed KV pair: unknown type, nested array, bad bool, empty or duplicate key
    BadTensor,        // malformed tensor info: name, dims, type, size overflow, offset
    BadAlignment,     // general.alignment not a non-zero power-of-two u32
    TooLarge,         // a count or length beyond the reader's limits
    BadSplit,         // split set inconsistent: names, split.* keys, missing shard, tensor totals
    Exists,           // output file already exists
    BadArgument,      // invalid option value given by the user
    Untrusted,        // a file whose owner or mode does not let it speak for a model (a KV sidecar
                      // of another user, one writable by others): not applied
};

/// An error with a code and a message (one line once escaped) that names the file and, where known, the byte
/// offset or KV key, e.g. "m-00002-of-00003.gguf: offset 120: string length 9999999 exceeds the
/// 80 bytes left in the file".
class Error : public std::runtime_error {
public:
    /// `message` is kept as it is, names and keys from files included, byte for byte: it is
    /// escaped once, where it is printed or logged (gguf::escape, common/text.hpp), so a name can
    /// neither split the one-line message nor drive a terminal, and two names stay distinct.
    Error(Code code, const std::string& message, int sys_errno = 0)
        : std::runtime_error(message), code_(code), sys_errno_(sys_errno) {}
    Code code() const noexcept { return code_; }
    /// errno of the failed system call for Code::Io, else 0.
    int sys_errno() const noexcept { return sys_errno_; }

private:
    Code code_;
    int sys_errno_;
};

}  // namespace gguf
