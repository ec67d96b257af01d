// systemd readiness protocol: with NOTIFY_SOCKET set (as systemd does for Type=notify units),
// the daemon sends READY=1 only once the merged files are readable through the mount, and
// STOPPING=1 when it shuts down (sd_notify(3)).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "mount/mount_fixture.hpp"
#include "support/support.hpp"

namespace {

/// A bound AF_UNIX datagram socket, like the one systemd listens on.
class NotifySocket {
public:
    explicit NotifySocket(const std::string& path) : path_(path) {
        fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
        ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    }
    ~NotifySocket() {
        if (fd_ >= 0) ::close(fd_);
        ::unlink(path_.c_str());
    }
    bool ok() const { return ok_; }

    /// Next datagram, or "" after `ms` milliseconds.
    std::string receive(int ms) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, ms) != 1) return "";
        char buf[4096];
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    }

private:
    std::string path_;
    int fd_ = -1;
    bool ok_ = false;
};

class Notify : public mount_test::MountFixture {};

TEST_F(Notify, ReadyOnlyWhenTheMergedFileIsReadableThenStopping) {
    mount_test::copy_kvzoo(src_);

    NotifySocket sock(root_ + "/notify.sock");
    ASSERT_TRUE(sock.ok()) << std::strerror(errno);
    ::setenv("NOTIFY_SOCKET", (root_ + "/notify.sock").c_str(), 1);
    bool started = start();
    ::unsetenv("NOTIFY_SOCKET");
    ASSERT_TRUE(started);

    std::string msg;
    for (int i = 0; i < 20 && msg.find("READY=1") == std::string::npos; ++i) msg = sock.receive(500);
    bool ready = msg.find("READY=1") != std::string::npos;
    // Read immediately, with no wait: READY=1 promises the file is readable now.
    std::string sum = ready ? gguf_test::sha256_file(mnt_ + "/kvzoo.gguf") : "";
    auto code = daemon_.stop(mnt_);
    ASSERT_TRUE(ready) << "no READY=1 within 10 s; last message: '" << msg << "'";
    EXPECT_NE(msg.find("STATUS=serving 1 file(s)"), std::string::npos) << msg;
    EXPECT_EQ(sum, mount_test::kKvzooMergedSha256);

    std::string stopping = sock.receive(2000);
    EXPECT_NE(stopping.find("STOPPING=1"), std::string::npos) << "'" << stopping << "'";
    ASSERT_TRUE(code);
    EXPECT_EQ(*code, 0);
    EXPECT_FALSE(mount_test::find_mount(mnt_));
}

}  // namespace
