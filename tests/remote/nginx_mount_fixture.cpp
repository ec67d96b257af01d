#include "remote/nginx_mount_fixture.hpp"

#include <cstdlib>

#include <gtest/gtest.h>

namespace remote_test {

void NginxMountFixture::SetUp() {
    MountFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    std::string why;
    if (!NginxServer::available(&why)) GTEST_SKIP() << why;
    cache_ = root_ + "/cache";
    if (served_ == Served::Kvzoo) {
        mount_test::copy_kvzoo(src_);
        serve();
    }
}

void NginxMountFixture::TearDown() {
    MountFixture::TearDown();
    if (nginx_) nginx_->stop();
    if (hub_) hub_->stop();
    fault_.reset();
    if (hub_isolated_) {
        for (const char* v : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_ENDPOINT", "HF_HOME",
                              "XDG_CACHE_HOME"})
            ::unsetenv(v);
    }
}

NginxOptions NginxMountFixture::nginx_options() const {
    NginxOptions o;
    o.root = src_;
    return o;
}

void NginxMountFixture::serve() {
    nginx_ = std::make_unique<NginxServer>(nginx_options());
    std::string why;
    ASSERT_TRUE(nginx_->start(&why)) << why;
}

void NginxMountFixture::isolate_hub() {
    isolate_hub_environment(root_);
    hub_isolated_ = true;
}

}  // namespace remote_test
