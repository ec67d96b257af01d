#include "support/support.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>

extern char** environ;

namespace gguf_test {

std::string fixture(const std::string& relative) { return std::string(GGUF_TEST_FIXTURES) + "/" + relative; }

std::string gguf_mount_binary() { return GGUF_MOUNT_BINARY; }

std::string without_timestamps(const std::string& text) {
    static const std::regex stamp(R"(^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} )");
    std::string out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) out += std::regex_replace(line, stamp, "", std::regex_constants::format_first_only) + "\n";
    if (!text.empty() && text.back() != '\n' && !out.empty()) out.pop_back();
    return out;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        ADD_FAILURE() << "cannot read " << path;
        return {};
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << "cannot write " << path;
}

namespace {
struct MdCtx {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    MdCtx() { EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr); }
    ~MdCtx() { EVP_MD_CTX_free(ctx); }
    void update(const void* p, size_t n) { EVP_DigestUpdate(ctx, p, n); }
    std::string hex() {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        EVP_DigestFinal_ex(ctx, md, &len);
        static const char* digits = "0123456789abcdef";
        std::string out;
        for (unsigned int i = 0; i < len; ++i) {
            out += digits[md[i] >> 4];
            out += digits[md[i] & 15];
        }
        return out;
    }
};
}  // namespace

std::string sha256_hex(const std::string& bytes) {
    MdCtx md;
    md.update(bytes.data(), bytes.size());
    return md.hex();
}

int in_bounded_child(const std::function<bool()>& f, size_t extra) {
    size_t vm_pages = 0;
    if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(statm, "%zu", &vm_pages) != 1) vm_pages = 0;
        std::fclose(statm);
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
        const rlim_t limit = vm_pages * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + extra;
        struct rlimit rl {limit, limit};
        ::setrlimit(RLIMIT_AS, &rl);
        int code = 4;
        try {
            code = f() ? 0 : 1;
        } catch (const std::bad_alloc&) {
            code = 3;
        } catch (...) {
            code = 4;
        }
        ::_exit(code);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string sha256_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        ADD_FAILURE() << "cannot read " << path;
        return {};
    }
    MdCtx md;
    std::vector<char> buf(1 << 20);
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        md.update(buf.data(), static_cast<size_t>(in.gcount()));
    }
    return md.hex();
}

TempDir::TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/gguf-mount-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) {
        ADD_FAILURE() << "mkdtemp failed: " << std::strerror(errno);
        return;
    }
    path_ = buf.data();
    // mkdtemp makes it 0700; served modes are narrowed by every directory on the way (catalog
    // rule 8), so a test about a source's own bits needs a tree everyone may search.
    if (::chmod(path_.c_str(), 0755) != 0) ADD_FAILURE() << path_ << ": chmod 0755 failed: " << std::strerror(errno);
}

TempDir::~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

DirectoryEvents::DirectoryEvents(const std::string& dir) {
    fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd_ < 0) {
        ADD_FAILURE() << "inotify_init1: " << std::strerror(errno);
        return;
    }
    if (::inotify_add_watch(fd_, dir.c_str(), IN_CREATE | IN_DELETE) < 0) {
        ADD_FAILURE() << dir << ": inotify_add_watch: " << std::strerror(errno);
    }
}

DirectoryEvents::~DirectoryEvents() {
    if (fd_ >= 0) ::close(fd_);
}

std::vector<DirectoryEvents::Event> DirectoryEvents::take() {
    std::vector<Event> out;
    if (fd_ < 0) return out;
    alignas(inotify_event) char buf[64 * 1024];
    for (ssize_t n; (n = ::read(fd_, buf, sizeof buf)) > 0;) {
        for (ssize_t at = 0; at + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
            inotify_event e;
            std::memcpy(&e, buf + at, sizeof e);
            if (e.mask & IN_Q_OVERFLOW) ADD_FAILURE() << "inotify: the event queue overflowed";
            if (e.len > 0 && (e.mask & (IN_CREATE | IN_DELETE))) {
                out.push_back({(e.mask & IN_CREATE) != 0, std::string(buf + at + sizeof e)});
            }
            at += static_cast<ssize_t>(sizeof e + e.len);
        }
    }
    return out;
}

void copy_file(const std::string& from, const std::string& to) {
    std::error_code ec;
    std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
    ASSERT_FALSE(ec) << "copy " << from << " -> " << to << ": " << ec.message();
    std::filesystem::permissions(to, std::filesystem::perms::owner_write, std::filesystem::perm_options::add, ec);
}

std::vector<ManifestCase> manifest_cases() {
    std::vector<ManifestCase> out;
    auto j = nlohmann::json::parse(read_file(fixture("MANIFEST.json")));
    for (const auto& c : j.at("cases")) {
        ManifestCase mc;
        mc.id = c.at("id").get<std::string>();
        mc.original = c.at("input").at("path").get<std::string>();
        mc.split_options = c.at("split_options").get<std::string>();
        for (const auto& s : c.at("shards")) {
            mc.shards.push_back(s.at("path").get<std::string>());
            mc.shard_sha256.push_back(s.at("sha256").get<std::string>());
        }
        mc.merged_sha256 = c.at("merged").at("sha256").get<std::string>();
        mc.merged_size = c.at("merged").at("size").get<uint64_t>();
        out.push_back(std::move(mc));
    }
    return out;
}

RunResult run(const std::vector<std::string>& argv) {
    RunResult r;
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
        ADD_FAILURE() << "pipe failed";
        return r;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    int rc = ::posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    if (rc != 0) {
        ::close(out_pipe[0]);
        ::close(err_pipe[0]);
        ADD_FAILURE() << "cannot run " << argv[0] << ": " << std::strerror(rc);
        return r;
    }
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    std::string* sinks[2] = {&r.out, &r.err};
    int open_fds = 2;
    char buf[65536];
    while (open_fds > 0) {
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
            if (n > 0) {
                sinks[i]->append(buf, static_cast<size_t>(n));
            } else {
                ::close(fds[i].fd);
                fds[i].fd = -1;
                --open_fds;
            }
        }
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

void cut_file(const std::string& from, const std::vector<std::string>& outputs) {
    const std::string bytes = read_file(from);
    const size_t n = outputs.size();
    ASSERT_GT(n, 0u);
    const size_t each = bytes.size() / n;
    for (size_t i = 0; i < n; ++i) {
        size_t len = i + 1 == n ? bytes.size() - each * i : each;
        write_file(outputs[i], bytes.substr(each * i, len));
    }
}

std::string make_link_fan_out(const std::string& root, int levels) {
    for (int i = 0; i <= levels; ++i) {
        const std::string dir = root + "/lv" + std::to_string(i);
        EXPECT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
        if (i == levels) {
            write_file(dir + "/leaf.txt", "leaf");
            break;
        }
        const std::string next = "../lv" + std::to_string(i + 1);
        EXPECT_EQ(::symlink(next.c_str(), (dir + "/a").c_str()), 0) << dir;
        EXPECT_EQ(::symlink(next.c_str(), (dir + "/b").c_str()), 0) << dir;
    }
    return root + "/lv0";
}

}  // namespace gguf_test
