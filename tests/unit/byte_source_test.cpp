// The byte-source seam (gguf/bytes/byte_source.hpp): split sets and virtual files read parts that are
// not local files through a ByteSource, with the same bytes and change checks as local files.
#include <sys/stat.h>
#include <utime.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "gguf/model/merge_plan.hpp"
#include "gguf/bytes/byte_source.hpp"
#include "gguf/model/catalog.hpp"
#include "gguf/error.hpp"
#include "gguf/model/split_set.hpp"
#include "gguf/bytes/virtual_file.hpp"
#include "support/gguf_rewrite.hpp"
#include "support/support.hpp"

namespace {

/// Bytes held in memory; counts reads; can be told it changed.
class MemorySource final : public gguf::ByteSource {
public:
    MemorySource(std::string name, std::string bytes) : name_(std::move(name)), bytes_(std::move(bytes)) {}
    ssize_t pread(void* dst, size_t len, uint64_t offset) const noexcept override {
        ++reads;
        if (offset >= bytes_.size()) return 0;
        size_t n = std::min<size_t>(len, bytes_.size() - offset);
        std::memcpy(dst, bytes_.data() + offset, n);
        return static_cast<ssize_t>(n);
    }
    uint64_t size() const noexcept override { return bytes_.size(); }
    bool changed() const noexcept override { return gone.load(); }
    std::string display_name() const override { return name_; }
    std::string validator() const override { return "\"v1\""; }

    mutable std::atomic<uint64_t> reads{0};
    std::atomic<bool> gone{false};

private:
    std::string name_;
    std::string bytes_;
};

/// The kvzoo t7 set as MemorySources named "mem://kvzoo-0000K-of-00007.gguf".
struct MemorySet {
    std::map<std::string, std::shared_ptr<MemorySource>> sources;
    gguf::ShardResolver resolver() {
        return [this](const std::string& path) -> std::optional<gguf::LogicalFile> {
            auto it = sources.find(path);
            if (it == sources.end()) return std::nullopt;
            gguf::FilePart part;
            part.path = path;
            part.size = it->second->size();
            part.st.st_mode = S_IFREG | 0444;
            part.st.st_size = static_cast<off_t>(part.size);
            part.source = it->second;
            part.validator = it->second->validator();
            gguf::LogicalFile f;
            f.path = path;
            f.parts.push_back(part);
            return f;
        };
    }
};

MemorySet kvzoo_in_memory(const gguf_test::ManifestCase& c) {
    MemorySet m;
    for (const auto& s : c.shards) {
        const std::string name = "mem://" + gguf::base_name(s);
        m.sources[name] = std::make_shared<MemorySource>(name, gguf_test::read_file(gguf_test::fixture(s)));
    }
    return m;
}

gguf_test::ManifestCase kvzoo_case() {
    for (auto& c : gguf_test::manifest_cases()) {
        if (c.id == "kvzoo/t7") return c;
    }
    ADD_FAILURE() << "no kvzoo/t7 in MANIFEST.json";
    return {};
}

TEST(ByteSourceSeam, SplitSetAndVirtualFileReadThroughTheSourceByteExact) {
    const auto c = kvzoo_case();
    MemorySet m = kvzoo_in_memory(c);
    gguf::SplitSet set = gguf::SplitSet::open("mem://" + gguf::base_name(c.shards.front()), m.resolver());
    EXPECT_EQ(set.merged_name(), "kvzoo.gguf");
    gguf::VirtualFile vf = gguf::open_merged(set);
    ASSERT_EQ(vf.size(), c.merged_size);
    std::string out(vf.size(), '\0');
    ASSERT_EQ(vf.read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    EXPECT_EQ(gguf_test::sha256_hex(out), c.merged_sha256);
    for (const auto& s : vf.sources()) {
        // The part's own source: no local file was opened for it.
        EXPECT_NE(std::dynamic_pointer_cast<const MemorySource>(s), nullptr);
    }

    // serve() gives the same bytes, never through O_DIRECT.
    alignas(gguf::VirtualFile::kServeAlign) static char buf[65536 + gguf::VirtualFile::kServeSlack];
    const uint64_t at = vf.size() / 2;
    gguf::Served sv = vf.serve(at, 4096, buf);
    ASSERT_EQ(sv.result, 4096);
    EXPECT_FALSE(sv.direct);
    EXPECT_EQ(std::string(sv.data, 4096), out.substr(at, 4096));
}

TEST(ByteSourceSeam, ChangedSourceFailsReadsWithEioAndNamesIt) {
    const auto c = kvzoo_case();
    MemorySet m = kvzoo_in_memory(c);
    gguf::VirtualFile vf =
        gguf::open_merged(gguf::SplitSet::open("mem://" + gguf::base_name(c.shards.front()), m.resolver()));
    // The last source extent's shard "changes on the server".
    const gguf::Extent* last = nullptr;
    for (const auto& e : vf.layout().extents()) {
        if (e.kind == gguf::Extent::Kind::Source) last = &e;
    }
    ASSERT_TRUE(last);
    auto& src = m.sources[vf.sources()[last->source]->display_name()];
    src->gone = true;
    EXPECT_TRUE(vf.source_changed(last->source));
    std::string out(last->length, '\0');
    uint32_t failed = 99;
    EXPECT_EQ(vf.read(last->start, out.size(), out.data(), &failed), -EIO);
    EXPECT_EQ(failed, last->source);
}

TEST(ByteSourceSeam, LocalFileSourceReadsAndSeesARewrite) {
    gguf_test::TempDir tmp;
    const std::string path = tmp / "f.bin";
    gguf_test::write_file(path, "0123456789");
    gguf::LocalFileSource src(path);
    EXPECT_EQ(src.size(), 10u);
    EXPECT_EQ(src.display_name(), path);
    char b[4];
    EXPECT_EQ(src.pread(b, 4, 3), 4);
    EXPECT_EQ(std::string(b, 4), "3456");
    EXPECT_EQ(src.pread(b, 4, 8), 2);
    EXPECT_FALSE(src.changed());
    struct utimbuf t {1000, 1000};
    ASSERT_EQ(::utime(path.c_str(), &t), 0);
    EXPECT_TRUE(src.changed());
    EXPECT_THROW({ gguf::LocalFileSource missing(tmp / "missing"); }, gguf::Error);
}

/// A tree held in memory: directory path -> items; "broken" cannot be listed.
class MemoryListing final : public gguf::DirectoryListing {
public:
    std::vector<Item> list(const std::string& path) override {
        if (path == "broken") throw gguf::Error(gguf::Code::Io, "mem://root/broken/: server error (HTTP 503)");
        return tree[path];
    }
    std::string root() const override { return "mem://root"; }

    void add_file(const std::string& dir, const std::string& name, std::string bytes) {
        Item item;
        item.name = name;
        const std::string path = root() + "/" + (dir.empty() ? name : dir + "/" + name);
        auto src = std::make_shared<MemorySource>(path, std::move(bytes));
        item.part.path = path;
        item.part.size = src->size();
        item.part.st.st_mode = S_IFREG | 0444;
        item.part.st.st_size = static_cast<off_t>(src->size());
        item.part.source = src;
        tree[dir].push_back(item);
    }
    void add_dir(const std::string& dir, const std::string& name) {
        Item item;
        item.name = name;
        item.directory = true;
        tree[dir].push_back(item);
    }
    std::map<std::string, std::vector<Item>> tree;
};

TEST(ByteSourceSeam, CatalogOfADirectoryListingFollowsTheLocalRules) {
    const auto c = kvzoo_case();
    MemoryListing listing;
    const std::string tiny = gguf_test::read_file(gguf_test::fixture("tiny-llama/tiny-llama.gguf"));
    listing.add_file("", "m.gguf.part2of2", tiny.substr(tiny.size() / 2));
    listing.add_file("", "m.gguf.part1of2", tiny.substr(0, tiny.size() / 2));
    listing.add_file("", "notes.txt", "hello");
    listing.add_file("", ".hidden", "x");
    listing.add_dir("", "sub");
    listing.add_dir("", "broken");
    for (const auto& shard : c.shards) {
        listing.add_file("sub", gguf::base_name(shard), gguf_test::read_file(gguf_test::fixture(shard)));
    }
    gguf::Catalog cat = gguf::build_catalog(listing);
    EXPECT_EQ(cat.source, "mem://root");
    ASSERT_EQ(cat.entries.size(), 3u);
    EXPECT_EQ(cat.entries[0].path, "m.gguf");
    EXPECT_EQ(cat.entries[0].kind, gguf::EntryKind::ByteSplit);
    EXPECT_EQ(cat.entries[0].size(), tiny.size());
    EXPECT_EQ(cat.entries[1].path, "notes.txt");
    EXPECT_EQ(cat.entries[1].kind, gguf::EntryKind::Companion);
    EXPECT_EQ(cat.entries[2].path, "sub/kvzoo.gguf");
    EXPECT_EQ(cat.entries[2].kind, gguf::EntryKind::MergedSet);
    EXPECT_EQ(cat.entries[2].size(), c.merged_size);
    EXPECT_EQ(cat.entries[2].attr.mode, 0444u);
    ASSERT_EQ(cat.directories.size(), 3u);  // "", "broken" (not listable: empty), "sub"
    EXPECT_EQ(cat.directories[2].path, "sub");
    ASSERT_EQ(cat.problems.size(), 1u);
    EXPECT_EQ(cat.problems[0].path, "broken");
    EXPECT_EQ(cat.problems[0].reason, "mem://root/broken/: server error (HTTP 503); not shown");
    EXPECT_TRUE(cat.watched.empty());

    gguf::VirtualFile vf = gguf::VirtualFile::open(cat.entries[0].layout, cat.entries[0].parts());
    std::string out(vf.size(), '\0');
    ASSERT_EQ(vf.read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    EXPECT_TRUE(out == tiny);
}

// Issue 22: a sidecar in a remote listing is read through its ByteSource and applies to its
// model (bytes against the independent writer); it is not served; str:@FILE in it is refused
// (it would publish a file of this machine) and hides its model, naming the sidecar and line.
TEST(ByteSourceSeam, SidecarOfAListedDirectoryAppliesAndRefusesLocalFiles) {
    const auto c = kvzoo_case();
    MemoryListing listing;
    const std::string tiny = gguf_test::read_file(gguf_test::fixture("tiny-llama/tiny-llama.gguf"));
    listing.add_file("", "m.gguf", tiny);
    listing.add_file("", "m.gguf.kv", "general.name=str:ok\ntokenizer.chat_template=str:@/etc/hostname\n");
    listing.add_dir("", "sub");
    for (const auto& shard : c.shards) {
        listing.add_file("sub", gguf::base_name(shard), gguf_test::read_file(gguf_test::fixture(shard)));
    }
    listing.add_file("sub", "kvzoo.gguf.kv", "general.name=str:from a listing\n");
    gguf::Catalog cat = gguf::build_catalog(listing);
    ASSERT_EQ(cat.entries.size(), 1u);
    EXPECT_EQ(cat.entries[0].path, "sub/kvzoo.gguf");
    EXPECT_EQ(cat.entries[0].kv_edits, std::vector<std::string>{"general.name=str:from a listing"});
    ASSERT_EQ(cat.problems.size(), 1u);
    EXPECT_EQ(cat.problems[0].path, "m.gguf");
    EXPECT_EQ(cat.problems[0].reason, "mem://root/m.gguf.kv:2: tokenizer.chat_template: str:@FILE is not allowed in a "
                                      "remote sidecar (write the value itself, a multi-line one as KEY=str:<<TAG ... TAG); not shown");

    gguf_test::RawGguf want = gguf_test::cut_gguf(gguf_test::read_file(gguf_test::fixture("kvzoo/merged-reference.gguf")));
    want.kvs[gguf_test::kv_index(want, "general.name")] = gguf_test::raw_string("general.name", "from a listing");
    gguf::VirtualFile vf = gguf::VirtualFile::open(cat.entries[0].layout, cat.entries[0].parts());
    std::string out(vf.size(), '\0');
    ASSERT_EQ(vf.read(0, out.size(), out.data()), static_cast<ssize_t>(out.size()));
    EXPECT_EQ(gguf_test::sha256_hex(out), gguf_test::sha256_hex(gguf_test::join_gguf(want)));
}

}  // namespace
