// VirtualFile::serve (the mount's read path: O_DIRECT for uncached random reads, buffered for
// streams and cached bytes) and the page-cache helpers it decides with. No mount: the shards
// live in a temporary directory on the disk file system, where their pages can be evicted.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <utility>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/model/merge_plan.hpp"
#include "gguf/bytes/byte_source.hpp"
#include "gguf/bytes/client_direct.hpp"
#include "gguf/bytes/logical_file.hpp"
#include "gguf/bytes/page_cache.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "support/support.hpp"

namespace {

using gguf::Residency;
using gguf::VirtualFile;
using gguf_test::fixture;

/// Writes back and evicts every cached page of `path` (fdatasync + POSIX_FADV_DONTNEED).
void evict(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << path;
    ::fdatasync(fd);
    ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0) << path;
    ::close(fd);
}

/// Source `index` of `vf`, a local file (every source of these tests is one).
const gguf::LocalFileSource& local(const VirtualFile& vf, size_t index) {
    return dynamic_cast<const gguf::LocalFileSource&>(*vf.sources().at(index));
}

/// The longest Source extent of `vf` (null if it has none).
const gguf::Extent* largest_source_extent(const VirtualFile& vf) {
    const gguf::Extent* big = nullptr;
    for (const auto& e : vf.layout().extents()) {
        if (e.kind == gguf::Extent::Kind::Source && (!big || e.length > big->length)) big = &e;
    }
    return big;
}

/// A serve() buffer: kServeAlign-aligned, `len` + kServeSlack bytes.
struct ServeBuffer {
    explicit ServeBuffer(size_t len) {
        void* p = nullptr;
        if (::posix_memalign(&p, VirtualFile::kServeAlign, len + VirtualFile::kServeSlack) != 0) std::abort();
        mem.reset(static_cast<char*>(p));
    }
    struct Free {
        void operator()(char* p) const { std::free(p); }
    };
    std::unique_ptr<char, Free> mem;
};

/// A manifest case's shards copied into a temporary directory, with the merged bytes they
/// must produce (the reference merge made by llama.cpp's gguf-split).
class ServeTest : public ::testing::TestWithParam<gguf_test::ManifestCase> {
protected:
    void SetUp() override {
        const auto& c = GetParam();
        for (const auto& s : c.shards) {
            shards_.push_back(dir_ / gguf::base_name(s));
            gguf_test::copy_file(fixture(s), shards_.back());
        }
        reference_ = read_file(fixture(gguf::dir_name(c.shards.front()) + "/../merged-reference.gguf"));
        ASSERT_EQ(reference_.size(), c.merged_size);
        ASSERT_EQ(gguf_test::sha256_hex(reference_), c.merged_sha256);
    }

    static std::string read_file(const std::string& path) {
        std::string out;
        int fd = ::open(path.c_str(), O_RDONLY);
        if (fd < 0) return out;
        char b[65536];
        ssize_t n;
        while ((n = ::read(fd, b, sizeof b)) > 0) out.append(b, static_cast<size_t>(n));
        ::close(fd);
        return out;
    }

    void evict_all() {
        for (const auto& s : shards_) evict(s);
    }

    /// True when this kernel and file system let serve() take its O_DIRECT path.
    bool direct_path_available(const VirtualFile& vf) {
        const auto& src = local(vf, 0);
        evict(src.display_name());
        return gguf::page_cache_residency(src.fd(), 0, 4096) == Residency::None && src.direct_available();
    }

    gguf_test::TempDir dir_;
    std::vector<std::string> shards_;
    std::string reference_;
};

TEST_P(ServeTest, RandomRequestsFromColdShardsAreByteExactAndReadDirect) {
    const auto set = gguf::SplitSet::open(shards_.front());
    auto vf = gguf::open_merged(set);
    ASSERT_EQ(vf.size(), reference_.size());
    if (!direct_path_available(vf)) GTEST_SKIP() << "no cachestat(2) or no O_DIRECT on " << dir_.path();

    std::mt19937_64 rng(99);
    ServeBuffer buf(1 << 20);
    int direct = 0, buffered = 0;
    const auto& ext = vf.layout().extents();
    for (int i = 0; i < 600; ++i) {
        evict_all();  // (buffered requests and their readahead cache the small shards whole)
        uint64_t off;
        if (i % 3 == 0) {  // straddle an extent boundary: header/tensor/padding/shard transitions
            const auto& e = ext[rng() % ext.size()];
            uint64_t back = rng() % 64;
            off = e.start > back ? e.start - back : 0;
        } else {
            off = rng() % (reference_.size() + 100);
        }
        const size_t len = 1 + static_cast<size_t>(rng() % (i % 2 ? 4096 : 200000));
        // Every few requests a fresh VirtualFile (no request history): in a file this small
        // every request lies within StreamTracker::kWindow of the previous one.
        if (i % 2 == 0) vf = gguf::open_merged(set);
        gguf::Served s = vf.serve(off, len, buf.mem.get());
        const size_t expect = off >= reference_.size() ? 0 : std::min<size_t>(len, reference_.size() - off);
        ASSERT_EQ(s.result, static_cast<ssize_t>(expect)) << "offset " << off << " len " << len;
        ASSERT_EQ(std::string(s.data, expect), reference_.substr(std::min<size_t>(off, reference_.size()), expect))
            << "offset " << off << " len " << len << (s.direct ? " (O_DIRECT)" : " (buffered)");
        if (s.direct) {
            ++direct;
            ASSERT_GE(s.data, buf.mem.get());
            ASSERT_LT(s.data, buf.mem.get() + VirtualFile::kServeAlign);
        } else {
            ++buffered;
        }
    }
    // Both paths were exercised: uncached single-shard requests go direct, requests that span
    // extents, hit cached pages or continue a recent request stay buffered.
    RecordProperty("direct", direct);
    RecordProperty("buffered", buffered);
    EXPECT_GT(direct, 50);
    EXPECT_GT(buffered, 100);
}

TEST_P(ServeTest, SequentialStreamStaysBufferedAndCachedBytesAreNotReadDirect) {
    auto vf = gguf::open_merged(gguf::SplitSet::open(shards_.front()));
    if (!direct_path_available(vf)) GTEST_SKIP() << "no cachestat(2) or no O_DIRECT on " << dir_.path();
    // The largest Source extent, read from its start in 4 KiB steps.
    const gguf::Extent* big = largest_source_extent(vf);
    ASSERT_NE(big, nullptr);
    ASSERT_GE(big->length, 3 * 4096u);
    evict_all();
    ServeBuffer buf(4096);
    gguf::Served first = vf.serve(big->start, 4096, buf.mem.get());
    ASSERT_EQ(first.result, 4096);
    EXPECT_TRUE(first.direct) << "a lone read of uncached bytes";
    gguf::Served second = vf.serve(big->start + 4096, 4096, buf.mem.get());
    ASSERT_EQ(second.result, 4096);
    EXPECT_FALSE(second.direct) << "continues the stream the first read started";
    EXPECT_EQ(std::string(second.data, 4096), reference_.substr(big->start + 4096, 4096));

    // Fully cached bytes are copied from the page cache, even for a fresh (random) reader.
    auto fresh = gguf::open_merged(gguf::SplitSet::open(shards_.front()));
    const auto& src = local(fresh, big->source);
    std::string warm(4096, '\0');
    ASSERT_EQ(::pread(src.fd(), warm.data(), warm.size(), static_cast<off_t>(big->source_offset)), 4096);
    ASSERT_EQ(gguf::page_cache_residency(src.fd(), big->source_offset, 4096), Residency::All);
    gguf::Served cached = fresh.serve(big->start, 4096, buf.mem.get());
    ASSERT_EQ(cached.result, 4096);
    EXPECT_FALSE(cached.direct);
    EXPECT_EQ(std::string(cached.data, 4096), reference_.substr(big->start, 4096));
}

// An O_DIRECT client's requests (CopyKept::None inside a ClientDirectScope, as fs/ops.cpp
// serves them): uncached bytes are read with O_DIRECT even when they continue a stream, cached
// ones from the cache, and nothing is dropped. Outside the scope CopyKept::None stays a plain
// buffered read (a merge).
TEST_P(ServeTest, ODirectClientReadsUncachedStreamsDirectAndCachedBytesFromTheCache) {
    auto vf = gguf::open_merged(gguf::SplitSet::open(shards_.front()));
    if (!direct_path_available(vf)) GTEST_SKIP() << "no cachestat(2) or no O_DIRECT on " << dir_.path();
    const gguf::Extent* big = largest_source_extent(vf);
    ASSERT_NE(big, nullptr);
    ASSERT_GE(big->length, 3 * 4096u);
    const auto& src = local(vf, big->source);
    ServeBuffer buf(4096);
    {
        gguf::ClientDirectScope direct;
        // The first O_DIRECT read of a shard opens its O_DIRECT descriptor after probing byte 0
        // buffered (DirectDescriptor::get), which caches the start of a small shard: done
        // before the stream starts.
        evict_all();
        ASSERT_EQ(vf.serve(big->start, 4096, buf.mem.get(), gguf::CopyKept::None).result, 4096);
        evict_all();
        for (uint64_t i = 0; i < 3; ++i) {  // a stream: each request continues the previous one
            gguf::Served s = vf.serve(big->start + i * 4096, 4096, buf.mem.get(), gguf::CopyKept::None);
            ASSERT_EQ(s.result, 4096);
            EXPECT_TRUE(s.direct) << "request " << i << " of an O_DIRECT client's stream";
            EXPECT_EQ(std::string(s.data, 4096), reference_.substr(big->start + i * 4096, 4096));
        }
        EXPECT_EQ(gguf::page_cache_residency(src.fd(), big->source_offset, 3 * 4096), Residency::None)
            << "an O_DIRECT client's reads cached shard pages";
        // Cached bytes come from the cache and stay there.
        std::string warm(4096, '\0');
        ASSERT_EQ(::pread(src.fd(), warm.data(), warm.size(), static_cast<off_t>(big->source_offset)), 4096);
        gguf::Served cached = vf.serve(big->start, 4096, buf.mem.get(), gguf::CopyKept::None);
        ASSERT_EQ(cached.result, 4096);
        EXPECT_FALSE(cached.direct);
        EXPECT_EQ(std::string(cached.data, 4096), reference_.substr(big->start, 4096));
        EXPECT_EQ(gguf::page_cache_residency(src.fd(), big->source_offset, 4096), Residency::All);
    }
    evict_all();
    gguf::Served plain = vf.serve(big->start, 4096, buf.mem.get(), gguf::CopyKept::None);
    ASSERT_EQ(plain.result, 4096);
    EXPECT_FALSE(plain.direct) << "CopyKept::None outside the scope (a merge) read O_DIRECT";
    EXPECT_EQ(std::string(plain.data, 4096), reference_.substr(big->start, 4096));
}

// The last tensor bytes of a shard whose size is not a multiple of the O_DIRECT alignment: the
// widened read ends short at end of file, which must be served, and must not switch O_DIRECT
// off for that shard.
TEST_P(ServeTest, ShardTailIsServedDirectAndKeepsDirectOn) {
    const auto set = gguf::SplitSet::open(shards_.front());
    auto vf = gguf::open_merged(set);
    if (!direct_path_available(vf)) GTEST_SKIP() << "no cachestat(2) or no O_DIRECT on " << dir_.path();
    int tails = 0;
    for (const auto& e : vf.layout().extents()) {
        if (e.kind != gguf::Extent::Kind::Source || e.length < 100) continue;
        const auto& src = local(vf, e.source);
        const std::string path = src.display_name();
        // The read widened to 4 KiB boundaries must run past the end of the file.
        const uint64_t widened_end = (e.source_offset + e.length + 4095) / 4096 * 4096;
        if (widened_end <= static_cast<uint64_t>(src.opened_stat().st_size)) continue;
        ++tails;
        evict_all();
        auto fresh = gguf::open_merged(set);
        ServeBuffer buf(100);
        gguf::Served s = fresh.serve(e.start + e.length - 100, 100, buf.mem.get());
        ASSERT_EQ(s.result, 100) << path;
        EXPECT_TRUE(s.direct) << path;
        EXPECT_EQ(std::string(s.data, 100), reference_.substr(e.start + e.length - 100, 100)) << path;
        EXPECT_TRUE(local(fresh, e.source).direct_available()) << path << ": O_DIRECT was switched off";
    }
    EXPECT_GT(tails, 0) << "no shard ends within 4 KiB of tensor data off a 4 KiB boundary in this case";
}

TEST_P(ServeTest, ShardRewrittenInPlaceGivesEioOnTheDirectPathToo) {
    const auto set = gguf::SplitSet::open(shards_.front());
    auto probe = gguf::open_merged(set);  // shows this request takes the O_DIRECT path
    auto vf = gguf::open_merged(set);     // opened before the rewrite, read after it
    if (!direct_path_available(vf)) GTEST_SKIP() << "no cachestat(2) or no O_DIRECT on " << dir_.path();
    const gguf::Extent* last = nullptr;
    for (const auto& e : vf.layout().extents()) {
        if (e.kind == gguf::Extent::Kind::Source && e.length >= 64) last = &e;
    }
    ASSERT_NE(last, nullptr);
    ServeBuffer buf(64);
    evict_all();
    gguf::Served before = probe.serve(last->start, 64, buf.mem.get());
    ASSERT_EQ(before.result, 64);
    ASSERT_TRUE(before.direct) << "the request must go O_DIRECT for this test to mean anything";
    // Same size, new mtime: a rewrite in place.
    const std::string path = vf.sources()[last->source]->display_name();
    timeval times[2] = {{1000000000, 0}, {1000000000, 0}};
    ASSERT_EQ(::utimes(path.c_str(), times), 0);
    evict_all();
    gguf::Served s = vf.serve(last->start, 64, buf.mem.get());
    EXPECT_EQ(s.result, -EIO);
    EXPECT_EQ(s.failed_source, last->source);
}

/// The cases with tensor data (the notensors cases are all header: nothing to read direct).
std::vector<gguf_test::ManifestCase> cases_with_tensors() {
    std::vector<gguf_test::ManifestCase> out;
    for (auto& c : gguf_test::manifest_cases()) {
        if (c.id.rfind("notensors", 0) != 0) out.push_back(c);
    }
    return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ServeTest, ::testing::ValuesIn(cases_with_tensors()),
                         [](const auto& info) {
                             std::string n = info.param.id;
                             for (auto& ch : n) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return n;
                         });

TEST(PageCacheResidency, FollowsReadsAndEviction) {
    gguf_test::TempDir dir;
    const std::string path = dir / "data";
    {
        std::string bytes(8 * 4096, 'x');
        int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
        ::close(fd);
    }
    evict(path);
    int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    if (gguf::page_cache_residency(fd, 0, 4096) == Residency::Unknown) {
        ::close(fd);
        GTEST_SKIP() << "cachestat(2) is not available on this kernel";
    }
    EXPECT_EQ(gguf::page_cache_residency(fd, 0, 8 * 4096), Residency::None);
    char b[4096];
    ASSERT_EQ(::pread(fd, b, sizeof b, 2 * 4096), 4096);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);  // (no readahead was asked for the next checks)
    EXPECT_EQ(gguf::page_cache_residency(fd, 2 * 4096, 4096), Residency::All);
    EXPECT_EQ(gguf::page_cache_residency(fd, 2 * 4096 + 100, 50), Residency::All);
    EXPECT_EQ(gguf::page_cache_residency(fd, 0, 0), Residency::All);
    ::close(fd);
    evict(path);
    fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);
    ASSERT_EQ(::pread(fd, b, sizeof b, 0), 4096);
    EXPECT_EQ(gguf::page_cache_residency(fd, 0, 4096), Residency::All);
    EXPECT_EQ(gguf::page_cache_residency(fd, 0, 8 * 4096), Residency::Partial);
    ::close(fd);
}

/// A file system mounted by the test below a temporary directory, unmounted (lazily) at the end.
class TestMount {
public:
    TestMount(const std::string& target, const char* type, const std::string& options) : target_(target) {
        ok_ = ::mount(type, target.c_str(), type, 0, options.c_str()) == 0;
        error_ = ok_ ? 0 : errno;
    }
    ~TestMount() {
        if (ok_) ::umount2(target_.c_str(), MNT_DETACH);
    }
    bool ok() const { return ok_; }
    int error() const { return error_; }

private:
    std::string target_;
    bool ok_ = false;
    int error_ = 0;
};

/// Issue 14.6: on overlayfs cachestat(2) of the overlay descriptor reports nothing cached
/// (the pages belong to the lower or upper file), so fully cached bytes were read from disk
/// with O_DIRECT. A file whose every page is cached must be served buffered: on overlayfs (the
/// file in the lower layer, as in a container image) and on tmpfs.
TEST(PageCacheProbe, FullyCachedBytesAreNeverReadDirectOnOverlayfsOrTmpfs) {
    gguf_test::TempDir root;
    for (const char* d : {"lower", "upper", "work", "overlay", "tmpfs"}) {
        ASSERT_EQ(::mkdir((root / d).c_str(), 0755), 0) << d;
    }
    std::string bytes(4 << 20, '\0');
    std::mt19937_64 rng(14);
    for (char& c : bytes) c = static_cast<char>(rng());
    gguf_test::write_file(root / "lower/model.bin", bytes);
    TestMount overlay(root / "overlay", "overlay",
                      "lowerdir=" + root / "lower" + ",upperdir=" + root / "upper" + ",workdir=" + root / "work");
    TestMount tmpfs(root / "tmpfs", "tmpfs", "size=16m");
    if (!overlay.ok() && !tmpfs.ok()) {
        GTEST_SKIP() << "the kernel refused both test mounts (overlay: " << std::strerror(overlay.error())
                     << ", tmpfs: " << std::strerror(tmpfs.error()) << "); needs root";
    }
    if (tmpfs.ok()) gguf_test::write_file(root / "tmpfs/model.bin", bytes);
    for (const auto& [name, ok] : {std::pair<std::string, bool>{"overlay", overlay.ok()}, {"tmpfs", tmpfs.ok()}}) {
        if (!ok) {
            std::cout << "[ skipped  ] " << name << ": the kernel refused the mount\n";
            continue;
        }
        const std::string path = root / (name + "/model.bin");
        EXPECT_EQ(gguf_test::read_file(path), bytes) << name;  // every page cached now
        gguf::LogicalFile lf;
        lf.path = path;
        gguf::FilePart part;
        part.path = path;
        part.size = bytes.size();
        lf.parts.push_back(part);
        ServeBuffer buf(1 << 20);
        int direct = 0;
        for (int i = 0; i < 16; ++i) {
            auto vf = VirtualFile::concatenation(lf);  // no stream history: every request is random
            const uint64_t off = rng() % (bytes.size() - 65536) / 4096 * 4096;
            gguf::Served s = vf.serve(off, 65536, buf.mem.get());
            ASSERT_EQ(s.result, 65536) << name;
            ASSERT_EQ(std::string(s.data, 65536), bytes.substr(off, 65536)) << name << " offset " << off;
            direct += s.direct;
        }
        EXPECT_EQ(direct, 0) << name << ": fully cached bytes were read with O_DIRECT";
    }
}

/// Drop-behind is the local source's policy (it was the FUSE read handler's): bytes served to a
/// reader that keeps its own copy (CopyKept::ByReader) leave no second copy in the file's page
/// cache behind the stream, except its last kDropLag bytes or so; a plain read
/// (CopyKept::None: the file's cache is the only copy) drops nothing.
TEST(LocalFileSource, ServedStreamDropsThePagesBehindItPlainReadsKeepThem) {
    gguf_test::TempDir dir;
    const std::string path = dir / "big.bin";
    constexpr size_t kSize = 40u << 20;
    std::string bytes(kSize, '\0');
    std::mt19937_64 rng(7);
    for (size_t i = 0; i < kSize; i += 8) bytes[i] = static_cast<char>(rng());
    gguf_test::write_file(path, bytes);
    gguf::LogicalFile lf = gguf::LogicalFile::single(path);
    for (gguf::CopyKept kept : {gguf::CopyKept::ByReader, gguf::CopyKept::None}) {
        evict(path);
        auto vf = VirtualFile::concatenation(lf);
        const auto& src = local(vf, 0);
        if (gguf::page_cache_residency(src.fd(), 0, 4096) == Residency::Unknown) {
            GTEST_SKIP() << "no cachestat(2) on this kernel";
        }
        ServeBuffer buf(1 << 20);
        for (uint64_t off = 0; off < kSize; off += 1 << 20) {
            gguf::Served s = vf.serve(off, 1 << 20, buf.mem.get(), kept);
            ASSERT_EQ(s.result, 1 << 20);
            ASSERT_EQ(std::memcmp(s.data, bytes.data() + off, 1 << 20), 0) << "offset " << off;
        }
        // The last request dropped up to its end rounded down to kDropBlock, minus kDropLag.
        const uint64_t dropped_to = kSize / gguf::LocalFileSource::kDropBlock * gguf::LocalFileSource::kDropBlock -
                                    gguf::LocalFileSource::kDropLag;
        const Residency head = gguf::page_cache_residency(src.fd(), 0, dropped_to);
        const Residency tail = gguf::page_cache_residency(src.fd(), dropped_to, kSize - dropped_to);
        if (kept == gguf::CopyKept::ByReader) {
            EXPECT_EQ(head, Residency::None) << "pages behind the served stream stayed cached";
            EXPECT_EQ(tail, Residency::All) << "the last bytes of the stream were dropped too early";
        } else {
            EXPECT_EQ(head, Residency::All) << "a plain read dropped pages";
        }
    }
}

/// A request continues a stream when it follows one of the last StreamTracker::kSlots requests
/// of the served file, whichever source they read. Tracked per source instead (every shard
/// remembering its own last 16 requests), random requests over a set of 8 shards were taken for
/// streams several times as often and read buffered instead of O_DIRECT (random cold preads
/// 0.91x the build before; bench/README.md). Requests below VirtualFile::kDirectStreamMin: only
/// those are read buffered when they continue a stream.
TEST(VirtualFileServe, StreamsAreTheRequestsOfTheServedFileNotOfEachSource) {
    gguf_test::TempDir dir;
    constexpr uint64_t kMiB = uint64_t{1} << 20;
    constexpr uint64_t kReq = 64 << 10;
    static_assert(kReq < VirtualFile::kDirectStreamMin, "small requests: the stream rule applies to them");
    const std::string a = dir / "a.bin", b = dir / "b.bin";
    for (const auto& [path, size] : {std::pair<std::string, uint64_t>{a, 8 * kMiB}, {b, 400 * kMiB}}) {
        int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ASSERT_GE(fd, 0) << path;
        ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);  // holes: no disk space, never cached
        ::close(fd);
    }
    gguf::VirtualLayout layout;
    layout.append_source(0, 0, 8 * kMiB);
    layout.append_source(1, 0, 400 * kMiB);
    VirtualFile vf(std::move(layout), {std::make_shared<const gguf::LocalFileSource>(a),
                                       std::make_shared<const gguf::LocalFileSource>(b)});
    if (gguf::page_cache_residency(local(vf, 0).fd(), 0, 4096) != Residency::None ||
        !local(vf, 0).direct_available()) {
        GTEST_SKIP() << "no cachestat(2) or no O_DIRECT on " << dir.path();
    }
    ServeBuffer buf(kReq);
    ASSERT_TRUE(vf.serve(0, kReq, buf.mem.get()).direct) << "a lone uncached request";
    // 16 requests elsewhere in the file (source b), each far from every earlier one.
    for (uint64_t k = 0; k < gguf::StreamTracker::kSlots; ++k) {
        ASSERT_EQ(vf.serve(8 * kMiB + 20 * kMiB * (k + 1), kReq, buf.mem.get()).result, static_cast<ssize_t>(kReq));
    }
    // 1 MiB past the first request: none of the file's last 16 requests ended near it.
    EXPECT_TRUE(vf.serve(2 * kMiB, kReq, buf.mem.get()).direct)
        << "taken for a stream of source a's own earlier request";
    EXPECT_FALSE(vf.serve(2 * kMiB + kReq, kReq, buf.mem.get()).direct) << "continues the request just served";
}

/// A stream of large requests (the kernel's 1 MiB readahead requests of a FUSE file) is read
/// with O_DIRECT where its source bytes are not cached, byte-exact from an unaligned source
/// offset, and leaves no page of the source in the page cache; a small request continuing the
/// same stream is read buffered (VirtualFile::kDirectStreamMin).
TEST(VirtualFileServe, LargeStreamRequestsOfUncachedBytesAreReadDirectAndCacheNothing) {
    gguf_test::TempDir dir;
    constexpr uint64_t kMiB = uint64_t{1} << 20;
    constexpr uint64_t kSkip = 4096 + 777;  // where the served bytes start in the source: unaligned
    const std::string path = dir / "data.bin";
    std::string bytes(24 * kMiB, '\0');
    std::mt19937_64 rng(11);
    for (size_t i = 0; i < bytes.size(); i += 8) {
        const uint64_t v = rng();
        std::memcpy(&bytes[i], &v, 8);
    }
    gguf_test::write_file(path, bytes);
    evict(path);
    gguf::VirtualLayout layout;
    layout.append_source(0, kSkip, 20 * kMiB);
    VirtualFile vf(std::move(layout), {std::make_shared<const gguf::LocalFileSource>(path)});
    const auto& src = local(vf, 0);
    if (gguf::page_cache_residency(src.fd(), 0, bytes.size()) != Residency::None || !src.direct_available()) {
        GTEST_SKIP() << "no cachestat(2) or no O_DIRECT on " << dir.path();
    }
    evict(path);  // the probe of direct_available() read the first byte buffered
    ServeBuffer buf(kMiB);
    constexpr uint64_t kStream = 16 * kMiB;
    for (uint64_t off = 0; off < kStream; off += kMiB) {
        gguf::Served s = vf.serve(off, kMiB, buf.mem.get());
        ASSERT_EQ(s.result, static_cast<ssize_t>(kMiB)) << "offset " << off;
        EXPECT_TRUE(s.direct) << "offset " << off << ": a 1 MiB request of uncached bytes was read buffered"
                              << (off ? " because it continues a stream" : "");
        ASSERT_EQ(std::memcmp(s.data, bytes.data() + kSkip + off, kMiB), 0) << "offset " << off;
    }
    EXPECT_EQ(gguf::page_cache_residency(src.fd(), 0, kSkip + kStream), Residency::None)
        << "the stream left pages of its source in the page cache";
    gguf::Served small = vf.serve(kStream, 64 << 10, buf.mem.get());
    ASSERT_EQ(small.result, 64 << 10);
    EXPECT_FALSE(small.direct) << "a small request continuing the stream";
    EXPECT_EQ(std::memcmp(small.data, bytes.data() + kSkip + kStream, 64 << 10), 0);
}

TEST(StreamTracker, WindowAroundRecentEndsAndOldestSlotIsReplaced) {
    gguf::StreamTracker t;
    const uint64_t w = gguf::StreamTracker::kWindow;
    EXPECT_FALSE(t.continues_stream(0)) << "nothing recorded yet";
    t.record(100u << 20);
    EXPECT_TRUE(t.continues_stream(100u << 20));
    EXPECT_TRUE(t.continues_stream((100u << 20) + w));
    EXPECT_TRUE(t.continues_stream((100u << 20) - w)) << "out-of-order request of the same stream";
    EXPECT_FALSE(t.continues_stream((100u << 20) + w + 1));
    EXPECT_FALSE(t.continues_stream((100u << 20) - w - 1));
    // kSlots later records push the first one out.
    for (size_t i = 0; i < gguf::StreamTracker::kSlots; ++i) t.record(uint64_t{1} << 40);
    EXPECT_FALSE(t.continues_stream(100u << 20));
    EXPECT_TRUE(t.continues_stream(uint64_t{1} << 40));
    gguf::StreamTracker copy(t);
    EXPECT_FALSE(copy.continues_stream(uint64_t{1} << 40)) << "a copy starts empty";
}

}  // namespace
