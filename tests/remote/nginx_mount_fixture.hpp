// The base fixture of the remote mount tests whose sources nginx serves on 127.0.0.1: a plain
// NginxServer over SOURCE, the Hub emulation (its API and CDN are nginx too) or both, with the
// fault server as an extra. One place for the skip, the cache directory and the teardown.
#pragma once

#include <memory>
#include <string>

#include "mount/mount_fixture.hpp"
#include "remote/hub_emulation.hpp"
#include "remote/servers.hpp"

namespace remote_test {

/// A real FUSE mount (mount_test::MountFixture) with the servers a remote test starts. SetUp
/// skips the test without nginx (NginxServer::available, which is also HubEmulation::available),
/// sets cache_ to ROOT/cache (not created) and, with Served::Kvzoo, copies the kvzoo set into
/// SOURCE (mount_test::copy_kvzoo) and serves it (serve()). TearDown unmounts first
/// (MountFixture::TearDown), then stops nginx_, hub_ and fault_ (whichever the test started) and,
/// after isolate_hub(), unsets the Hub variables again.
class NginxMountFixture : public mount_test::MountFixture {
protected:
    /// What SetUp serves: nothing (the test writes SOURCE and starts its servers) or the kvzoo set.
    enum class Served { Nothing, Kvzoo };
    explicit NginxMountFixture(Served served = Served::Nothing) : served_(served) {}

    void SetUp() override;
    void TearDown() override;

    /// What serve() starts nginx_ with: document root src_ and the NginxOptions defaults. A
    /// fixture overrides it for TLS, extra locations and the like.
    virtual NginxOptions nginx_options() const;
    /// Starts nginx_ with nginx_options(); a fatal test failure with nginx's error when it cannot
    /// start (wrap in ASSERT_NO_FATAL_FAILURE to stop there).
    void serve();
    /// Points the Hub variables into ROOT (isolate_hub_environment: no real token, HF_HOME and
    /// XDG_CACHE_HOME below ROOT); TearDown unsets them and HF_ENDPOINT.
    void isolate_hub();

    std::string cache_;
    std::unique_ptr<NginxServer> nginx_;
    std::unique_ptr<HubEmulation> hub_;
    std::unique_ptr<FaultServer> fault_;

private:
    Served served_;
    bool hub_isolated_ = false;
};

}  // namespace remote_test
