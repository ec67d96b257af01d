// Helpers of the fleet tests (tests/remote/fleet_test.cpp): the tier configurations of
// docs/fleet/ as shipped, with their @KEY@ placeholders filled in, the njs module the S3 tier
// needs, and the checks that a node's requests can be served from a shared cache.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "remote/servers.hpp"

namespace remote_test {

/// sha256 of the merged bytes of the local set whose first shard is `first` (the reference for
/// what a node must read).
std::string local_merge_sha256(const std::string& first);

/// Absolute path of docs/fleet in the source tree.
std::string fleet_dir();

/// The text of docs/fleet/`file` with each "@KEY@" replaced by values[KEY]. A placeholder left
/// without a value fails the current test (and stays in the text).
std::string fleet_config(const std::string& file, const std::map<std::string, std::string>& values);

/// True when nginx's njs module (Debian package libnginx-mod-http-js) is installed; else false
/// with *why naming the package.
bool njs_available(std::string* why);

/// Main-context directives for a tier that runs njs: load_module, and `env NAME;` for each of
/// `names` (njs reads process.env as nginx's own environment had it: NginxOptions::environment).
std::string njs_main_config(const std::vector<std::string>& names);

/// The Authorization value docs/fleet/s3_sigv4.js computes for AWS's published S3 example
/// (AKIAIOSFODNN7EXAMPLE, its example secret, examplebucket.s3.amazonaws.com,
/// 20130524T000000Z, us-east-1, GET with the empty-payload hash) of `target` (path and query),
/// run in a real nginx with njs. "" (and a test failure) when nginx cannot run it.
std::string njs_sign_example(const std::string& target);

/// Checks that `requests` (what nodes sent a tier) can be answered from a shared cache: no
/// Cache-Control or Pragma; every GET of a file named in `sizes` (file name -> size) carries a
/// Range "bytes=A-B" aligned to the 4 MiB block (A a multiple of it, B + 1 a multiple or the
/// file's size) and no query string. Failures are test failures naming the request.
void expect_cache_friendly(const std::vector<AccessEntry>& requests, const std::map<std::string, uint64_t>& sizes);

}  // namespace remote_test
