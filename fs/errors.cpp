#include "fs/errors.hpp"

#include <new>
#include <system_error>

#include "gguf/error.hpp"

namespace gguf_mount::fs {

int reply_errno(std::exception_ptr error, int core_errno) noexcept {
    if (!error) return EIO;
    try {
        std::rethrow_exception(error);
    } catch (const gguf::Error& e) {
        const int sys = e.sys_errno();
        return sys == EMFILE || sys == ENFILE ? sys : core_errno;
    } catch (const std::bad_alloc&) {
        return ENOMEM;
    } catch (const std::system_error& e) {
        const std::error_category& cat = e.code().category();
        const int v = e.code().value();
        return (cat == std::generic_category() || cat == std::system_category()) && v > 0 ? v : EIO;
    } catch (...) {
        return EIO;
    }
}

}  // namespace gguf_mount::fs
