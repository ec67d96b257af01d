// The S3 configuration and credential chain (remote/s3/config, aws_files, credential_process),
// each rule with its own temp files and environment (no process environment is read or changed).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gguf/error.hpp"
#include "remote/expect_error.hpp"
#include "remote/s3/aws_files.hpp"
#include "remote/s3/config.hpp"
#include "remote/s3/credential_process.hpp"
#include "support/support.hpp"

namespace s3 = gguf_mount::remote::s3;
using gguf_test::TempDir;
using gguf_test::write_file;
using remote_test::code_of;

namespace {

s3::EnvLookup env_of(std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

/// An environment whose HOME is `dir` (no ~/.aws files unless the test writes them).
std::map<std::string, std::string> home(const TempDir& dir) { return {{"HOME", dir.path()}, {"PATH", "/usr/bin:/bin"}}; }

void write_aws(const TempDir& dir, const std::string& name, const std::string& text) {
    ::mkdir((dir / ".aws").c_str(), 0700);
    write_file(dir / (".aws/" + name), text);
}

/// A credential_process helper: a shell script that appends a line to COUNT each run and prints
/// `json`.
std::string helper(const TempDir& dir, const std::string& name, const std::string& json, int status = 0) {
    std::string path = dir / name;
    write_file(path, "#!/bin/sh\necho run >> '" + dir.path() + "/" + name + ".count'\ncat <<'EOF'\n" + json +
                         "\nEOF\necho 'helper says hi' >&2\nexit " + std::to_string(status) + "\n");
    ::chmod(path.c_str(), 0755);
    return path;
}

size_t runs(const TempDir& dir, const std::string& name) {
    std::string text;
    struct stat st{};
    if (::stat((dir / (name + ".count")).c_str(), &st) != 0) return 0;
    text = gguf_test::read_file(dir / (name + ".count"));
    return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST(S3Uri, RawKeysAsTheAwsCliTakesThem) {
    s3::S3Uri u = s3::parse_s3_uri("s3://models/team a/\xCE\xB1+\xCE\xB2/m=1%20x-00001-of-00002.gguf");
    EXPECT_EQ(u.bucket, "models");
    EXPECT_EQ(u.key, "team a/\xCE\xB1+\xCE\xB2/m=1%20x-00001-of-00002.gguf");  // %20 stays: keys are raw
    EXPECT_FALSE(u.is_prefix());
    EXPECT_TRUE(s3::parse_s3_uri("s3://models/team a/").is_prefix());
    s3::S3Uri bucket = s3::parse_s3_uri("s3://my.bucket-1");
    EXPECT_EQ(bucket.bucket, "my.bucket-1");
    EXPECT_EQ(bucket.key, "");
    EXPECT_TRUE(bucket.is_prefix());
    std::string message;
    for (const char* bad : {"http://b/k", "s3://", "s3:///k", "s3://ab/k", "s3://-ab/k", "s3://a b/k", "s3://a/b"}) {
        EXPECT_EQ(code_of([&] { s3::parse_s3_uri(bad); }, &message), gguf::Code::BadArgument) << bad;
        EXPECT_NE(message.find(bad), std::string::npos) << message;
    }
    EXPECT_EQ(code_of([&] { s3::parse_s3_uri(std::string("s3://bkt/a\nb")); }), gguf::Code::BadArgument);
}

TEST(S3AwsFiles, ProfilesNestedSettingsAndComments) {
    s3::AwsFile conf = s3::parse_aws_file(
        "# comment\n; another\n[default]\nregion = eu-west-1\n\n[profile dev]\nregion=us-west-2\r\n"
        "s3 =\n  addressing_style = virtual\n  endpoint_url = http://127.0.0.1:9000\nendpoint_url = http://x\n"
        "[profile   spaced ]\nRegion : ap-south-1\n[sso-session corp]\nsso_region = us-east-1\n[bare]\nregion = x\n",
        s3::AwsFileKind::Config, "/c");
    ASSERT_EQ(conf.size(), 3u);
    EXPECT_EQ(conf["default"].get("region"), "eu-west-1");
    EXPECT_EQ(conf["dev"].get("region"), "us-west-2");
    EXPECT_EQ(conf["dev"].get_nested("s3", "addressing_style"), "virtual");
    EXPECT_EQ(conf["dev"].get_nested("s3", "endpoint_url"), "http://127.0.0.1:9000");
    EXPECT_EQ(conf["dev"].get("endpoint_url"), "http://x");
    EXPECT_EQ(conf["spaced"].get("region"), "ap-south-1");
    EXPECT_EQ(conf.count("bare"), 0u);  // config file: only [default] and [profile NAME]
    EXPECT_EQ(conf.count("corp"), 0u);

    s3::AwsFile creds = s3::parse_aws_file("[default]\naws_secret_access_key = a=b:c\n[profile x]\nk = v\n",
                                           s3::AwsFileKind::Credentials, "/k");
    EXPECT_EQ(creds["default"].get("aws_secret_access_key"), "a=b:c");
    EXPECT_EQ(creds["profile x"].get("k"), "v");  // the credentials file names profiles bare

    std::string message;
    EXPECT_EQ(code_of([&] { s3::parse_aws_file("[default]\nAKIASECRETLINE\n", s3::AwsFileKind::Credentials, "/k"); },
                      &message),
              gguf::Code::BadValue);
    EXPECT_EQ(message, "/k: line 2: neither a [section], a name = value setting nor a comment");
    EXPECT_EQ(code_of([&] { s3::parse_aws_file("a = b\n", s3::AwsFileKind::Config, "/c"); }, &message),
              gguf::Code::BadValue);
    EXPECT_EQ(message, "/c: line 1: a setting before any [section]");
    EXPECT_FALSE(s3::read_aws_file("/nonexistent/aws/config", s3::AwsFileKind::Config).has_value());
}

TEST(S3Config, RegionOrder) {
    TempDir dir;
    write_aws(dir, "config", "[default]\nregion = eu-central-1\n[profile dev]\nregion = ap-south-1\n");
    auto e = home(dir);
    EXPECT_EQ(s3::resolve_config({}, env_of(e)).region, "eu-central-1");
    EXPECT_EQ(s3::resolve_config({}, env_of(e)).region_from, "profile default in " + dir.path() + "/.aws/config");
    e["AWS_PROFILE"] = "dev";
    EXPECT_EQ(s3::resolve_config({}, env_of(e)).region, "ap-south-1");
    e["AWS_DEFAULT_REGION"] = "us-west-1";
    EXPECT_EQ(s3::resolve_config({}, env_of(e)).region, "us-west-1");
    e["AWS_REGION"] = "us-west-2";
    EXPECT_EQ(s3::resolve_config({}, env_of(e)).region, "us-west-2");
    s3::S3CommandOptions o;
    o.region = "sa-east-1";
    s3::S3Config c = s3::resolve_config(o, env_of(e));
    EXPECT_EQ(c.region, "sa-east-1");
    EXPECT_EQ(c.region_from, "--region");
    TempDir empty;
    EXPECT_EQ(s3::resolve_config({}, env_of(home(empty))).region, "us-east-1");
    o.region = "evil.com/x";
    EXPECT_EQ(code_of([&] { s3::resolve_config(o, env_of(e)); }), gguf::Code::BadArgument);
}

TEST(S3Config, EndpointOrderAndAddressing) {
    TempDir dir;
    write_aws(dir, "config",
              "[default]\nendpoint_url = http://127.0.0.1:1001\n"
              "[profile nested]\nendpoint_url = http://127.0.0.1:1001\ns3 =\n  endpoint_url = http://127.0.0.1:1002/base/\n"
              "  addressing_style = virtual\n[profile badstyle]\ns3 =\n  addressing_style = sideways\n");
    auto e = home(dir);
    EXPECT_EQ(s3::resolve_config({}, env_of(e)).endpoint_url, "http://127.0.0.1:1001");
    e["AWS_PROFILE"] = "nested";
    s3::S3Config nested = s3::resolve_config({}, env_of(e));
    EXPECT_EQ(nested.endpoint_url, "http://127.0.0.1:1002/base");
    EXPECT_EQ(nested.addressing, s3::AddressingStyle::Virtual);
    e["AWS_ENDPOINT_URL"] = "http://127.0.0.1:1003";
    EXPECT_EQ(s3::resolve_config({}, env_of(e)).endpoint_url, "http://127.0.0.1:1003");
    e["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:1004/";
    EXPECT_EQ(s3::resolve_config({}, env_of(e)).endpoint_url, "http://127.0.0.1:1004");
    s3::S3CommandOptions o;
    o.endpoint_url = "https://127.0.0.1:443";
    EXPECT_EQ(s3::resolve_config(o, env_of(e)).endpoint_url, "https://127.0.0.1");  // default port dropped
    e["AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"] = "true";
    s3::S3Config aws = s3::resolve_config({}, env_of(e));
    EXPECT_EQ(aws.endpoint_url, "");
    EXPECT_EQ(aws.endpoint_from, "AWS");
    EXPECT_EQ(s3::resolve_config(o, env_of(e)).endpoint_url, "https://127.0.0.1");  // the option still counts

    o.endpoint_url = "ftp://127.0.0.1/";
    std::string message;
    EXPECT_EQ(code_of([&] { s3::resolve_config(o, env_of(e)); }, &message), gguf::Code::BadArgument);
    EXPECT_EQ(message.rfind("--endpoint-url: ", 0), 0u) << message;
    e["AWS_PROFILE"] = "badstyle";
    EXPECT_EQ(code_of([&] { s3::resolve_config({}, env_of(e)); }, &message), gguf::Code::BadArgument);
    EXPECT_NE(message.find("addressing_style \"sideways\""), std::string::npos) << message;
}

TEST(S3Config, RequestTargets) {
    s3::S3Config aws;
    aws.region = "eu-west-1";
    s3::RequestTarget t = s3::target_for(aws, "models", "team a/k.gguf");
    EXPECT_EQ(t.scheme, "https");
    EXPECT_EQ(t.host, "models.s3.eu-west-1.amazonaws.com");  // virtual-hosted for AWS
    EXPECT_EQ(t.path, "/team a/k.gguf");
    EXPECT_EQ(s3::target_for(aws, "models", "").path, "/");
    // bucket names that are not one DNS label: path-style
    s3::RequestTarget dotted = s3::target_for(aws, "my.models", "k");
    EXPECT_EQ(dotted.host, "s3.eu-west-1.amazonaws.com");
    EXPECT_EQ(dotted.path, "/my.models/k");
    aws.addressing = s3::AddressingStyle::Path;
    EXPECT_EQ(s3::target_for(aws, "models", "k").host, "s3.eu-west-1.amazonaws.com");

    s3::S3Config local;
    local.region = "us-east-1";
    local.endpoint_url = "http://127.0.0.1:4568";
    s3::RequestTarget p = s3::target_for(local, "models", "a/b");
    EXPECT_EQ(p.scheme, "http");
    EXPECT_EQ(p.host, "127.0.0.1:4568");  // path-style for a custom endpoint
    EXPECT_EQ(p.path, "/models/a/b");
    EXPECT_EQ(s3::target_for(local, "models", "").path, "/models");
    local.addressing = s3::AddressingStyle::Virtual;
    EXPECT_EQ(s3::target_for(local, "models", "a").host, "models.127.0.0.1:4568");
    local.addressing = s3::AddressingStyle::Auto;
    local.endpoint_url = "https://store.example/base";
    EXPECT_EQ(s3::target_for(local, "models", "a").path, "/base/models/a");
}

TEST(S3Credentials, EnvironmentKeysAndSessionToken) {
    TempDir dir;
    auto e = home(dir);
    e["AWS_ACCESS_KEY_ID"] = "AKIAENVENVENVENV1234";
    e["AWS_SECRET_ACCESS_KEY"] = "envsecret";
    e["AWS_SESSION_TOKEN"] = "envtoken";
    s3::CredentialSource source({}, env_of(e));
    auto c = source.get();
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->access_key_id, "AKIAENVENVENVENV1234");
    EXPECT_EQ(c->secret_access_key, "envsecret");
    EXPECT_EQ(c->session_token, "envtoken");
    EXPECT_EQ(source.origin(), "environment (AWS_ACCESS_KEY_ID)");

    e.erase("AWS_SECRET_ACCESS_KEY");
    std::string message;
    s3::CredentialSource half({}, env_of(e));
    EXPECT_EQ(code_of([&] { half.get(); }, &message), gguf::Code::BadArgument);
    EXPECT_EQ(message, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
}

TEST(S3Credentials, ASystemdCredentialIsTheDefaultCredentialsFile) {
    // gguf-mount-remote@.service: LoadCredential=aws-credentials:FILE shows FILE as
    // $CREDENTIALS_DIRECTORY/aws-credentials; AWS_SHARED_CREDENTIALS_FILE still wins.
    TempDir dir;
    write_aws(dir, "credentials", "[default]\naws_access_key_id = AKIAHOME000000000000\naws_secret_access_key = h\n");
    ::mkdir((dir / "creds").c_str(), 0700);
    write_file(dir / "creds/aws-credentials",
               "[default]\naws_access_key_id = AKIAUNIT000000000000\naws_secret_access_key = u\n");
    auto e = home(dir);
    e["CREDENTIALS_DIRECTORY"] = dir / "creds";
    s3::CredentialSource unit({}, env_of(e));
    ASSERT_TRUE(unit.get().has_value());
    EXPECT_EQ(unit.get()->access_key_id, "AKIAUNIT000000000000");
    EXPECT_EQ(unit.origin(), "profile default in " + (dir / "creds/aws-credentials"));
    e["AWS_SHARED_CREDENTIALS_FILE"] = dir / ".aws/credentials";
    s3::CredentialSource file({}, env_of(e));
    EXPECT_EQ(file.get()->access_key_id, "AKIAHOME000000000000");
    // A credentials directory without that credential (a unit without the drop-in): ~/.aws.
    e.erase("AWS_SHARED_CREDENTIALS_FILE");
    e["CREDENTIALS_DIRECTORY"] = dir / "nothing";
    s3::CredentialSource none({}, env_of(e));
    EXPECT_EQ(none.get()->access_key_id, "AKIAHOME000000000000");
}

TEST(S3Credentials, NoSignRequestNeedsNothing) {
    TempDir dir;
    s3::S3CommandOptions o;
    o.no_sign_request = true;
    s3::CredentialSource source(o, env_of(home(dir)));
    EXPECT_FALSE(source.get().has_value());
    EXPECT_FALSE(s3::resolve_config(o, env_of(home(dir))).sign);
}

TEST(S3Credentials, NoneAnywhereIsOneClearError) {
    TempDir dir;
    s3::CredentialSource source({}, env_of(home(dir)));
    std::string message;
    EXPECT_EQ(code_of([&] { source.get(); }, &message), gguf::Code::BadArgument);
    EXPECT_EQ(message.rfind("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", 0), 0u) << message;
    EXPECT_NE(message.find("--no-sign-request"), std::string::npos);
}

TEST(S3Credentials, ProfilesFromBothFilesAndTheirOrder) {
    TempDir dir;
    write_aws(dir, "credentials",
              "[default]\naws_access_key_id = AKIADEFAULT00000000\naws_secret_access_key = defsecret\n"
              "[dev]\naws_access_key_id = AKIADEV0000000000000\naws_secret_access_key = devsecret\n"
              "aws_session_token = devtoken\n[half]\naws_access_key_id = AKIAHALF\n");
    write_aws(dir, "config", "[profile confonly]\naws_access_key_id = AKIACONF\naws_secret_access_key = confsecret\n");
    auto e = home(dir);
    EXPECT_EQ(s3::CredentialSource({}, env_of(e)).get()->secret_access_key, "defsecret");

    e["AWS_PROFILE"] = "dev";
    s3::CredentialSource dev({}, env_of(e));
    EXPECT_EQ(dev.get()->session_token, "devtoken");
    EXPECT_EQ(dev.origin(), "profile dev in " + dir.path() + "/.aws/credentials");

    e["AWS_PROFILE"] = "confonly";
    EXPECT_EQ(s3::CredentialSource({}, env_of(e)).get()->secret_access_key, "confsecret");

    // environment keys win over AWS_PROFILE, but not over --profile (as the AWS CLI does)
    e["AWS_ACCESS_KEY_ID"] = "AKIAENV";
    e["AWS_SECRET_ACCESS_KEY"] = "envsecret";
    EXPECT_EQ(s3::CredentialSource({}, env_of(e)).get()->secret_access_key, "envsecret");
    s3::S3CommandOptions o;
    o.profile = "dev";
    EXPECT_EQ(s3::CredentialSource(o, env_of(e)).get()->secret_access_key, "devsecret");

    // the files are found through AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE too
    TempDir other;
    write_file(other / "c", "[dev]\naws_access_key_id = AKIAOTHER\naws_secret_access_key = othersecret\n");
    auto f = home(dir);
    f["AWS_SHARED_CREDENTIALS_FILE"] = other / "c";
    f["AWS_CONFIG_FILE"] = other / "none";
    EXPECT_EQ(s3::CredentialSource(o, env_of(f)).get()->secret_access_key, "othersecret");

    std::string message;
    o.profile = "half";
    EXPECT_EQ(code_of([&] { s3::CredentialSource(o, env_of(home(dir))).get(); }, &message), gguf::Code::BadArgument);
    EXPECT_EQ(message, "profile half in " + dir.path() + "/.aws/credentials has aws_access_key_id but no "
                                                          "aws_secret_access_key");
    o.profile = "missing";
    EXPECT_EQ(code_of([&] { s3::CredentialSource(o, env_of(home(dir))).get(); }, &message), gguf::Code::BadArgument);
    EXPECT_EQ(message.rfind("AWS profile \"missing\" is not in ", 0), 0u) << message;
    EXPECT_EQ(code_of([&] { s3::resolve_config(o, env_of(home(dir))); }), gguf::Code::BadArgument);
}

TEST(S3Credentials, UnsupportedProfileKindsPointToCredentialProcess) {
    TempDir dir;
    write_aws(dir, "config", "[profile sso]\nsso_session = corp\n");
    s3::S3CommandOptions o;
    o.profile = "sso";
    std::string message;
    EXPECT_EQ(code_of([&] { s3::CredentialSource(o, env_of(home(dir))).get(); }, &message), gguf::Code::BadArgument);
    EXPECT_NE(message.find("uses sso_session"), std::string::npos) << message;
    EXPECT_NE(message.find("aws configure export-credentials --profile sso --format process"), std::string::npos);
}

TEST(S3CredentialProcess, SplitLikeAShell) {
    EXPECT_EQ(s3::split_command("/opt/h --profile 'a b' x\\ y \"q \\\"z\\\" \\n\"  "),
              (std::vector<std::string>{"/opt/h", "--profile", "a b", "x y", "q \"z\" \\n"}));
    EXPECT_EQ(s3::split_command("a''b \"\""), (std::vector<std::string>{"ab", ""}));
    EXPECT_TRUE(s3::split_command("   ").empty());
    EXPECT_EQ(code_of([] { s3::split_command("a 'b"); }), gguf::Code::BadValue);
    EXPECT_EQ(code_of([] { s3::split_command("a \"b"); }), gguf::Code::BadValue);
    EXPECT_EQ(code_of([] { s3::split_command("a\\"); }), gguf::Code::BadValue);
}

TEST(S3CredentialProcess, Iso8601) {
    EXPECT_EQ(s3::parse_iso8601("2013-05-24T00:00:00Z"), std::optional<std::time_t>(1369353600));
    EXPECT_EQ(s3::parse_iso8601("2013-05-24T00:00:00.123456Z"), std::optional<std::time_t>(1369353600));
    EXPECT_EQ(s3::parse_iso8601("2013-05-24T02:00:00+02:00"), std::optional<std::time_t>(1369353600));
    EXPECT_EQ(s3::parse_iso8601("2013-05-23T19:00:00-05:00"), std::optional<std::time_t>(1369353600));
    for (const char* bad : {"", "2013-05-24", "2013-05-24T00:00:00", "2013-13-24T00:00:00Z", "tomorrow",
                            "2013-05-24T00:00:00ZZ", "2013-05-24T00:00:00."})
        EXPECT_FALSE(s3::parse_iso8601(bad).has_value()) << bad;
}

TEST(S3CredentialProcess, OutputRules) {
    s3::Credentials c = s3::parse_process_output(
        R"({"Version": 1, "AccessKeyId": "AKIAPROC", "SecretAccessKey": "procsecret", "SessionToken": "t",
            "Expiration": "2030-01-01T00:00:00Z"})",
        "p");
    EXPECT_EQ(c.access_key_id, "AKIAPROC");
    EXPECT_EQ(c.session_token, "t");
    ASSERT_TRUE(c.expiration.has_value());
    EXPECT_EQ(std::chrono::system_clock::to_time_t(*c.expiration), 1893456000);
    std::string message;
    EXPECT_EQ(code_of([&] { s3::parse_process_output(R"({"Version": 2, "AccessKeyId": "a", "SecretAccessKey": "s"})", "p"); },
                      &message),
              gguf::Code::BadValue);
    EXPECT_EQ(message, "p: \"Version\" is not 1");
    EXPECT_EQ(code_of([&] { s3::parse_process_output(R"({"Version": 1, "AccessKeyId": "a"})", "p"); }, &message),
              gguf::Code::BadValue);
    EXPECT_EQ(message, "p: no \"SecretAccessKey\"");
    EXPECT_EQ(code_of([&] { s3::parse_process_output("SECRETSECRET", "p"); }, &message), gguf::Code::BadValue);
    EXPECT_EQ(message.find("SECRETSECRET"), std::string::npos);
    EXPECT_EQ(code_of([&] {
                  s3::parse_process_output(R"({"Version":1,"AccessKeyId":"a","SecretAccessKey":"s","Expiration":"soon"})",
                                           "p");
              }),
              gguf::Code::BadValue);
}

TEST(S3CredentialProcess, RunsTheHelperAndRefreshesBeforeExpiration) {
    TempDir dir;
    std::string h = helper(dir, "helper",
                           R"({"Version": 1, "AccessKeyId": "AKIAPROC", "SecretAccessKey": "procsecret",
                               "SessionToken": "proctoken", "Expiration": "2030-01-01T00:00:00Z"})");
    write_aws(dir, "config", "[profile proc]\nregion = us-east-1\ncredential_process = '" + h + "' --flag 'a b'\n");
    s3::S3CommandOptions o;
    o.profile = "proc";
    s3::CredentialSource source(o, env_of(home(dir)), std::chrono::minutes(5));
    const auto expiry = std::chrono::system_clock::from_time_t(1893456000);  // 2030-01-01
    auto c = source.get(expiry - std::chrono::hours(1));
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->secret_access_key, "procsecret");
    EXPECT_EQ(c->session_token, "proctoken");
    EXPECT_EQ(source.origin(), "credential_process of profile proc");
    EXPECT_EQ(runs(dir, "helper"), 1u);
    // cached while more than the margin is left
    source.get(expiry - std::chrono::minutes(6));
    EXPECT_EQ(runs(dir, "helper"), 1u);
    // within 5 minutes of Expiration: run again
    source.get(expiry - std::chrono::minutes(4));
    EXPECT_EQ(runs(dir, "helper"), 2u);
    EXPECT_EQ(source.resolutions(), 2u);
    // an ExpiredToken answer: invalidate, and the next get runs it again
    source.invalidate();
    source.get(expiry - std::chrono::hours(1));
    EXPECT_EQ(runs(dir, "helper"), 3u);
    // credentials that a helper gives already expired are an error, not a request bound to fail
    std::string message;
    source.invalidate();
    EXPECT_EQ(code_of([&] { source.get(expiry + std::chrono::seconds(1)); }, &message), gguf::Code::BadArgument);
    EXPECT_NE(message.find("have already expired (access key ******** (with a session token))"), std::string::npos) << message;
    EXPECT_EQ(message.find("procsecret"), std::string::npos);
}

TEST(S3CredentialProcess, ArgumentsReachTheHelper) {
    TempDir dir;
    std::string h = dir / "args";
    write_file(h, "#!/bin/sh\nprintf '{\"Version\":1,\"AccessKeyId\":\"%s\",\"SecretAccessKey\":\"%s\"}' \"$1\" \"$2\"\n");
    ::chmod(h.c_str(), 0755);
    s3::Credentials c = s3::run_credential_process("'" + h + "' 'id with space' s\\=cret", "p");
    EXPECT_EQ(c.access_key_id, "id with space");
    EXPECT_EQ(c.secret_access_key, "s=cret");
    EXPECT_FALSE(c.expiration.has_value());
    // found on $PATH by name
    EXPECT_EQ(s3::run_credential_process(R"(sh -c "echo '{\"Version\":1,\"AccessKeyId\":\"x\",\"SecretAccessKey\":\"y\"}'")", "p")
                  .access_key_id,
              "x");
}

TEST(S3CredentialProcess, FailuresNameTheHelperNotTheSecret) {
    TempDir dir;
    std::string bad = helper(dir, "bad", R"({"Version": 1, "AccessKeyId": "AKIA", "SecretAccessKey": "SEKRIT"})", 3);
    std::string message;
    EXPECT_EQ(code_of([&] { s3::run_credential_process(bad, "credential_process of profile p"); }, &message),
              gguf::Code::Io);
    EXPECT_EQ(message, "credential_process of profile p: " + bad + " exited with status 3: helper says hi");
    EXPECT_EQ(code_of([&] { s3::run_credential_process("no-such-helper-here", "p"); }, &message), gguf::Code::Io);
    EXPECT_EQ(message, "p: no-such-helper-here: command not found on $PATH");
    EXPECT_EQ(code_of([&] { s3::run_credential_process("sh -c 'echo SEKRIT'", "p"); }, &message), gguf::Code::BadValue);
    EXPECT_EQ(message.find("SEKRIT"), std::string::npos) << message;

    std::string slow = dir / "slow";
    write_file(slow, "#!/bin/sh\nexec sleep 30\n");
    ::chmod(slow.c_str(), 0755);
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(code_of([&] { s3::run_credential_process(slow, "p", std::chrono::milliseconds(300)); }, &message),
              gguf::Code::Io);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_NE(message.find("did not finish within"), std::string::npos) << message;

    std::string chatty = dir / "chatty";
    write_file(chatty, "#!/bin/sh\nexec yes\n");
    ::chmod(chatty.c_str(), 0755);
    EXPECT_EQ(code_of([&] { s3::run_credential_process(chatty, "p"); }, &message), gguf::Code::Io);
    EXPECT_NE(message.find("more than 64 KiB"), std::string::npos) << message;
}

// Credentials inside the refresh margin (a helper whose sessions are shorter than the margin):
// used on, refreshed at most once a minute, the old ones kept while a refresh runs and when it
// fails; only within kExpiryGuard of Expiration does a caller wait for new ones. Before: the
// helper ran on every get() inside the margin (issue 30.7: 9 runs for 9 requests).
TEST(S3CredentialProcess, CredentialsInsideTheMarginAreRefreshedAtMostOncePerMinute) {
    TempDir dir;
    const std::string slow_flag = dir / "slow", fail_flag = dir / "fail";
    const std::string h = dir / "helper";
    write_file(h, "#!/bin/sh\necho run >> '" + dir.path() + "/helper.count'\n"
                  "[ -e '" + slow_flag + "' ] && sleep 2\n"
                  "[ -e '" + fail_flag + "' ] && { echo 'helper is down' >&2; exit 4; }\n"
                  "echo '{\"Version\": 1, \"AccessKeyId\": \"AKIASHORT\", \"SecretAccessKey\": \"s\", "
                  "\"Expiration\": \"2030-01-01T00:00:00Z\"}'\n");
    ::chmod(h.c_str(), 0755);
    write_aws(dir, "config", "[profile short]\ncredential_process = '" + h + "'\n");
    s3::S3CommandOptions o;
    o.profile = "short";
    s3::CredentialSource source(o, env_of(home(dir)), std::chrono::minutes(5));
    const auto expiry = std::chrono::system_clock::from_time_t(1893456000);  // 2030-01-01
    const auto t0 = expiry - std::chrono::minutes(4);                        // inside the margin
    for (int i = 0; i < 9; ++i) ASSERT_TRUE(source.get(t0 + std::chrono::seconds(i)));
    EXPECT_EQ(runs(dir, "helper"), 1u);  // 9 requests, one run
    source.get(t0 + std::chrono::seconds(61));
    EXPECT_EQ(runs(dir, "helper"), 2u);  // a minute later: one refresh
    source.get(t0 + std::chrono::seconds(62));
    EXPECT_EQ(runs(dir, "helper"), 2u);

    // While a slow refresh runs, others use the old credentials at once.
    write_file(slow_flag, "");
    std::thread refresher([&] { source.get(t0 + std::chrono::seconds(130)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const auto asked = std::chrono::steady_clock::now();
    auto during = source.get(t0 + std::chrono::seconds(131));
    EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::milliseconds(500));
    ASSERT_TRUE(during);
    EXPECT_EQ(during->access_key_id, "AKIASHORT");
    refresher.join();
    EXPECT_EQ(runs(dir, "helper"), 3u);
    ::unlink(slow_flag.c_str());

    // A refresh that fails keeps the old credentials (retried a minute later) ...
    write_file(fail_flag, "");
    auto kept = source.get(t0 + std::chrono::seconds(200));
    ASSERT_TRUE(kept);
    EXPECT_EQ(kept->access_key_id, "AKIASHORT");
    EXPECT_EQ(runs(dir, "helper"), 4u);
    source.get(t0 + std::chrono::seconds(220));  // 20 s before Expiration, 20 s after the failed try
    EXPECT_EQ(runs(dir, "helper"), 4u);
    // ... until they are about to expire: then its error is said.
    std::string message;
    EXPECT_EQ(code_of([&] { source.get(expiry - std::chrono::seconds(5)); }, &message), gguf::Code::Io);
    EXPECT_NE(message.find("exited with status 4: helper is down"), std::string::npos) << message;
    EXPECT_EQ(runs(dir, "helper"), 5u);
}

// ssh's rule for the AWS files, their folders and the credential_process program: owned by the
// euid or root, not writable by group or others; else one line naming the file and the rule.
TEST(S3Credentials, FilesFoldersAndHelpersAnotherUserCouldChangeAreRefused) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown to uid 65534)";
    TempDir dir;
    const std::string h = helper(dir, "helper", R"({"Version": 1, "AccessKeyId": "AKIAPROC", "SecretAccessKey": "p"})");
    write_aws(dir, "config", "[profile proc]\nregion = eu-west-1\ncredential_process = '" + h + "'\n");
    const std::string config = dir / ".aws/config";
    s3::S3CommandOptions o;
    o.profile = "proc";
    auto refused = [&](const std::vector<std::string>& words) {
        std::string message;
        EXPECT_EQ(code_of([&] { s3::CredentialSource(o, env_of(home(dir))).get(); }, &message), gguf::Code::BadArgument);
        for (const auto& w : words) EXPECT_NE(message.find(w), std::string::npos) << w << " not in: " << message;
        EXPECT_NE(message.find("as ssh requires"), std::string::npos) << message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    };
    EXPECT_EQ(s3::CredentialSource(o, env_of(home(dir))).get()->access_key_id, "AKIAPROC");
    EXPECT_EQ(runs(dir, "helper"), 1u);

    ASSERT_EQ(::chown(config.c_str(), 65534, 65534), 0);
    refused({config, "owned by uid 65534", "is not used"});
    EXPECT_EQ(code_of([&] { s3::resolve_config(o, env_of(home(dir))); }), gguf::Code::BadArgument);
    ASSERT_EQ(::chown(config.c_str(), 0, 0), 0);
    ASSERT_EQ(::chmod(config.c_str(), 0664), 0);
    refused({config, "writable by its group or others (mode 0664)"});
    ASSERT_EQ(::chmod(config.c_str(), 0600), 0);
    ASSERT_EQ(::chown((dir / ".aws").c_str(), 65534, 65534), 0);
    refused({"its folder " + (dir / ".aws") + " is owned by uid 65534", config});
    ASSERT_EQ(::chown((dir / ".aws").c_str(), 0, 0), 0);
    ASSERT_EQ(::chown(h.c_str(), 65534, 65534), 0);
    refused({"credential_process of profile proc", "the credential_process program " + h + " is owned by uid 65534"});
    EXPECT_EQ(runs(dir, "helper"), 1u);  // never run
    ASSERT_EQ(::chown(h.c_str(), 0, 0), 0);
    EXPECT_EQ(s3::CredentialSource(o, env_of(home(dir))).get()->access_key_id, "AKIAPROC");
}
