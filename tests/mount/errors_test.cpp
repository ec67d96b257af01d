// The errno map of the FUSE adapter (fs/errors.hpp): what a request whose handler threw is
// answered with. No mount needed.
#include <gtest/gtest.h>

#include <cerrno>
#include <new>
#include <stdexcept>
#include <future>
#include <system_error>

#include "fs/errors.hpp"
#include "gguf/error.hpp"

namespace {

using gguf_mount::fs::reply_errno;

template <typename E>
std::exception_ptr thrown(E e) {
    return std::make_exception_ptr(std::move(e));
}

TEST(ReplyErrno, CoreErrorsAreEioOrTheCallersErrnoExceptDescriptorExhaustion) {
    EXPECT_EQ(reply_errno(thrown(gguf::Error(gguf::Code::Io, "x: cannot open", ENOENT))), EIO);
    EXPECT_EQ(reply_errno(thrown(gguf::Error(gguf::Code::BadSplit, "x: changed while it was being read"))), EIO);
    EXPECT_EQ(reply_errno(thrown(gguf::Error(gguf::Code::BadSplit, "x: changed")), ESTALE), ESTALE);
    EXPECT_EQ(reply_errno(thrown(gguf::Error(gguf::Code::Io, "x: cannot open", EMFILE)), ESTALE), EMFILE);
    EXPECT_EQ(reply_errno(thrown(gguf::Error(gguf::Code::Io, "x: cannot open", ENFILE))), ENFILE);
}

TEST(ReplyErrno, AllocationAndSystemErrorsKeepTheirErrno) {
    EXPECT_EQ(reply_errno(thrown(std::bad_alloc())), ENOMEM);
    EXPECT_EQ(reply_errno(thrown(std::system_error(EAGAIN, std::generic_category(), "thread"))), EAGAIN);
    EXPECT_EQ(reply_errno(thrown(std::system_error(ENOSPC, std::system_category(), "write"))), ENOSPC);
    EXPECT_EQ(reply_errno(thrown(std::system_error(std::make_error_code(std::future_errc::no_state)))), EIO);
}

TEST(ReplyErrno, AnythingElseIsEio) {
    EXPECT_EQ(reply_errno(thrown(std::runtime_error("?"))), EIO);
    EXPECT_EQ(reply_errno(thrown(42)), EIO);
    EXPECT_EQ(reply_errno(nullptr), EIO);
}

}  // namespace
