#include "remote/s3_fixture.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "gguf/bytes/file_io.hpp"

namespace s3_test {
namespace {

/// Every variable the AWS configuration reads (remote/s3/config.hpp): cleared for each test.
const char* const kAwsVariables[] = {"AWS_ACCESS_KEY_ID",  "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                     "AWS_PROFILE",        "AWS_DEFAULT_PROFILE",   "AWS_REGION",
                                     "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",      "AWS_ENDPOINT_URL_S3",
                                     "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                                     "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "CREDENTIALS_DIRECTORY"};

}  // namespace

void S3Fixture::SetUp() {
    MountFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    std::string why;
    if (!remote_test::S3Server::available(&why)) GTEST_SKIP() << why;
    seed_ = root_ + "/seed";
    cache_ = root_ + "/cache";
    aws_ = root_ + "/aws";
    std::filesystem::create_directories(seed_ + "/models");
    std::filesystem::create_directories(aws_);
    for (const char* name : kAwsVariables) set_env(name, std::nullopt);
    set_env("AWS_SHARED_CREDENTIALS_FILE", aws_ + "/credentials");
    set_env("AWS_CONFIG_FILE", aws_ + "/config");
}

void S3Fixture::TearDown() {
    MountFixture::TearDown();
    if (server_) server_->stop();
    for (const auto& [name, value] : saved_env_) {
        if (value) ::setenv(name.c_str(), value->c_str(), 1);
        else ::unsetenv(name.c_str());
    }
}

void S3Fixture::set_env(const std::string& name, const std::optional<std::string>& value) {
    if (!saved_env_.count(name)) {
        const char* old = std::getenv(name.c_str());
        saved_env_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) ::setenv(name.c_str(), value->c_str(), 1);
    else ::unsetenv(name.c_str());
}

void S3Fixture::put(const std::string& key, const std::string& bytes, const std::string& bucket) {
    const std::filesystem::path path = std::filesystem::path(seed_) / bucket / key;
    std::filesystem::create_directories(path.parent_path());
    gguf_test::write_file(path.string(), bytes);
}

void S3Fixture::put_case(const gguf_test::ManifestCase& c, const std::string& prefix) {
    for (const auto& shard : c.shards) put(prefix + gguf::base_name(shard), gguf_test::read_file(gguf_test::fixture(shard)));
}

void S3Fixture::start_server(int list_max_keys, const std::vector<std::string>& more_buckets) {
    remote_test::S3ServerOptions o;
    o.seed = seed_;
    o.buckets = {"models"};
    for (const auto& b : more_buckets) {
        o.buckets.push_back(b);
        std::filesystem::create_directories(seed_ + "/" + b);
    }
    o.list_max_keys = list_max_keys;
    o.credentials = {{"S3RVER", {{"secret", "S3RVER"}}},
                     {kKeyId, {{"secret", kSecret}}},
                     {kTempKeyId, {{"secret", kTempSecret}, {"session_token", kToken}, {"expired_tokens", {kExpiredToken}}}}};
    server_ = std::make_unique<remote_test::S3Server>(o);
    std::string error;
    ASSERT_TRUE(server_->start(&error)) << error;
}

void S3Fixture::use_keys(const std::string& id, const std::string& secret, const std::string& token) {
    set_env("AWS_ACCESS_KEY_ID", id);
    set_env("AWS_SECRET_ACCESS_KEY", secret);
    set_env("AWS_SESSION_TOKEN", token.empty() ? std::nullopt : std::optional<std::string>(token));
}

void S3Fixture::write_credentials(const std::string& text) { gguf_test::write_file(aws_ + "/credentials", text); }
void S3Fixture::write_config(const std::string& text) { gguf_test::write_file(aws_ + "/config", text); }

std::string S3Fixture::credential_process(const std::vector<std::string>& tokens) {
    const std::string script = aws_ + "/credential-helper.sh";
    const std::string counter = aws_ + "/runs";
    std::ostringstream s;
    s << "#!/bin/sh\nn=$(cat '" << counter << "' 2>/dev/null || echo 0)\necho $((n + 1)) > '" << counter << "'\n";
    s << "case $n in\n";
    for (size_t i = 0; i + 1 < tokens.size(); ++i) s << "  " << i << ") t='" << tokens[i] << "' ;;\n";
    s << "  *) t='" << tokens.back() << "' ;;\nesac\n";
    s << "exp=$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)\n";
    s << "printf '{\"Version\": 1, \"AccessKeyId\": \"" << kTempKeyId << "\", \"SecretAccessKey\": \"" << kTempSecret
      << "\", \"SessionToken\": \"%s\", \"Expiration\": \"%s\"}\\n' \"$t\" \"$exp\"\n";
    gguf_test::write_file(script, s.str());
    ::chmod(script.c_str(), 0700);
    return script;
}

std::vector<std::string> S3Fixture::s3_args(const std::vector<std::string>& more) const {
    std::vector<std::string> a = {"--cache-dir", cache_, "--endpoint-url", server_->endpoint_url(), "--region",
                                  "us-east-1"};
    if (std::find(more.begin(), more.end(), "--net-timeout") == more.end()) a.insert(a.end(), {"--net-timeout", "3"});
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

gguf_test::RunResult S3Fixture::gm(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {gguf_test::gguf_mount_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return gguf_test::run(argv);
}

std::vector<std::string> S3Fixture::verdicts() const {
    std::vector<std::string> v;
    for (const auto& e : server_->access_log()) v.push_back(e.verdict);
    return v;
}

::testing::AssertionResult S3Fixture::every_request(const std::string& verdict) const {
    const auto log = server_->access_log();
    if (log.empty()) return ::testing::AssertionFailure() << "no request was logged";
    for (const auto& e : log)
        if (e.verdict != verdict)
            return ::testing::AssertionFailure() << e.entry.request_line << ": verdict " << e.verdict << ", not " << verdict;
    return ::testing::AssertionSuccess() << log.size() << " requests";
}

std::vector<std::string> lines_holding(const std::string& text, const std::string& needle) {
    std::vector<std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (line.find(needle) != std::string::npos) out.push_back(line);
    return out;
}

}  // namespace s3_test
