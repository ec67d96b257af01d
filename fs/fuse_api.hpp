// The single entry point to libfuse for the whole project: every file that needs the libfuse
// API includes this header instead of <fuse_lowlevel.h>, so the API level is chosen once.
//
// API level 3.14 = Debian 12's libfuse3 3.14.0 (fuse_session_loop_mt with a fuse_loop_config
// built by fuse_loop_cfg_create(), see /usr/include/fuse3/fuse_lowlevel.h). Nothing newer
// (passthrough, io_uring, fuse_daemonize_early_start) may be used.
#pragma once

#ifdef FUSE_USE_VERSION
#error "FUSE_USE_VERSION must only be defined by fs/fuse_api.hpp"
#endif
// FUSE_MAKE_VERSION(3, 14) == 314; the macro itself lives in <fuse_common.h>, which is not
// included yet, so the number is spelled out.
#define FUSE_USE_VERSION 314

#include <fuse_lowlevel.h>

static_assert(FUSE_USE_VERSION == FUSE_MAKE_VERSION(3, 14), "gguf-mount targets the libfuse 3.14 API");
static_assert(sizeof(fuse_ino_t) >= sizeof(uint64_t), "fuse_ino_t must hold 64-bit inode numbers");
