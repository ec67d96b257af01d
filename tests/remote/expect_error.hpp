// Runs code that must throw gguf::Error, for the remote parser tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "gguf/error.hpp"

namespace remote_test {

/// Runs `f`; returns the code of the gguf::Error it throws and stores its message in *message.
/// Fails the current test (and returns Code::Io) when `f` throws nothing.
inline gguf::Code code_of(const std::function<void()>& f, std::string* message = nullptr) {
    try {
        f();
    } catch (const gguf::Error& e) {
        if (message) *message = e.what();
        return e.code();
    }
    ADD_FAILURE() << "no gguf::Error thrown";
    return gguf::Code::Io;
}

}  // namespace remote_test
