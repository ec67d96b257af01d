#include "remote/source.hpp"

#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/threads.hpp"
#include "gguf/error.hpp"
#include "remote/url_parts.hpp"

namespace gguf_mount::remote {

namespace {

BlockReading reading_of(const RemoteOptions& o) {
    return BlockReading{o.offline, o.store_blocks, o.readahead_blocks, o.drop_lag_blocks, o.run_blocks};
}

}  // namespace

RemoteSource::RemoteSource(std::shared_ptr<RemoteContext> context, const std::string& url, ObjectInfo info,
                           bool size_only, const std::string& key_name)
    : context_(std::move(context)), name_(context_->client().name_for_message(url)) {
    // Without a validator (neither ETag nor Last-Modified) a same-size replacement would keep
    // the key: such a file's blocks serve this open only.
    std::string key = BlockCache::validates(info.validator) ? BlockCache::object_key(key_name.empty() ? url : key_name, info.validator)
                                                            : context_->cache().open_once(url);
    context_->cache().use_object(key);
    blocks_ = std::make_shared<SourceBlocks>(context_->client(), context_->store(), context_->prefetcher(),
                                             reading_of(context_->options()), url, name_, std::move(key),
                                             std::move(info), size_only);
}

std::shared_ptr<RemoteSource> RemoteSource::open(std::shared_ptr<RemoteContext> context, const std::string& url) {
    const std::string name = context->client().name_for_message(url);
    BlockCache& cache = context->cache();
    std::optional<ObjectInfo> known = cache.load_meta(url);
    if (context->options().offline) {
        if (!known) {
            throw gguf::Error(gguf::Code::Io,
                              name + ": not in the cache (--offline): " + cache.dir() +
                                  " has no version of it; mount it once online with this --cache-dir, or run "
                                  "'gguf-mount prefetch' first",
                              ENOENT);
        }
        return std::shared_ptr<RemoteSource>(new RemoteSource(context, url, *known, false));
    }
    std::optional<ObjectInfo> now;  // the HEAD's answer
    try {
        if (known) {
            try {
                now = context->client().head(url);
            } catch (const HttpError& e) {
                // A server that refuses HEAD (405, or a signed URL valid for GET only) still
                // answers the ranged GET below; a server that is down fails there too.
                spdlog::debug("{} (HEAD); asking with a ranged GET", e.what());
            }
            if (now && now->size == known->size &&
                (now->validator == known->validator || context->head_names(url, now->validator, known->validator))) {
                return std::shared_ptr<RemoteSource>(new RemoteSource(context, url, *known, false));
            }
        }
        // The first ranged GET gives size and validator; its bytes are block 0.
        std::shared_ptr<char[]> buf = context->prefetcher().buffer();
        size_t got = 0;
        ObjectInfo info = context->client().get_range(url, 0, BlockCache::kBlockSize, buf.get(), &got);
        if (known && now && now->validator != info.validator && info.validator == known->validator &&
            info.size == known->size) {
            context->note_head_validator(url, now->validator, info.validator);  // HEAD and GET differ
        }
        auto src = std::shared_ptr<RemoteSource>(new RemoteSource(context, url, info, false));
        src->blocks_->add_fetched(got);
        if (!context->options().store_blocks) {
            // Kept in memory until read to its end (the header read, then the data copy).
            src->blocks_->hold(0, std::move(buf));
            return src;
        }
        cache.store(src->blocks_->key(), 0, buf.get(), got);
        cache.save_meta(url, info);
        return src;
    } catch (const HttpError& e) {
        // The server is unreachable but the cache knows the file: say how to use what it holds.
        const bool unreachable = e.status() == 0 || e.status() >= 500;  // transport error or a server error
        throw gguf::Error(gguf::Code::Io,
                          std::string(e.what()) +
                              (known && unreachable ? "; the cache holds a version of it: --offline serves what is cached"
                                                    : ""),
                          e.sys_errno());
    }
}

std::shared_ptr<RemoteSource> RemoteSource::open_known(std::shared_ptr<RemoteContext> context,
                                                      const std::string& url, ObjectInfo info, std::string sha256,
                                                      const std::string& key_name, std::string vouched_by) {
    auto src =
        std::shared_ptr<RemoteSource>(new RemoteSource(std::move(context), url, std::move(info), true, key_name));
    if (!vouched_by.empty()) src->vouched_by_ = std::move(vouched_by);
    src->expect_sha256(std::move(sha256));
    return src;
}

std::shared_ptr<RemoteSource> RemoteSource::open_listed(std::shared_ptr<RemoteContext> context,
                                                       const std::string& url, ObjectInfo info) {
    // Written only when it changed: a mount lists again at each revalidation.
    std::optional<ObjectInfo> known;
    try {
        known = context->cache().load_meta(url);
    } catch (const std::exception&) {
    }
    if (!known || known->size != info.size || known->validator != info.validator || known->mtime != info.mtime)
        context->cache().save_meta(url, info);
    return std::shared_ptr<RemoteSource>(new RemoteSource(std::move(context), url, std::move(info), false));
}

gguf::FilePart RemoteSource::part() const {
    gguf::FilePart p;
    p.path = name_;
    const ObjectInfo& info = blocks_->info();
    p.size = info.size;
    p.st.st_mode = S_IFREG | 0444;
    p.st.st_size = static_cast<off_t>(info.size);
    p.st.st_uid = ::getuid();
    p.st.st_gid = ::getgid();
    p.st.st_nlink = 1;
    p.st.st_mtim.tv_sec = info.mtime;
    p.st.st_ctim.tv_sec = info.mtime;
    p.source = shared_from_this();
    p.validator = info.validator;
    return p;
}

uint64_t RemoteSource::first_uncached_block() const noexcept {
    const uint64_t n = block_count();
    for (uint64_t b = 0; b < n; ++b) {
        if (!cached(b)) return b;
    }
    return n;
}

void RemoteSource::load_first_block() const noexcept {
    char byte;
    (void)blocks_->read(&byte, 1, 0);  // not hashed: the check hashes block 0 at the planning's read
}

ssize_t RemoteSource::pread(void* dst, size_t len, uint64_t offset) const noexcept {
    if (!digest_ || digest_->settled()) {
        if (digest_ && digest_->failed()) return -EIO;  // wrong bytes
        return blocks_->read(dst, len, offset);
    }
    // Checked: the bytes copied from blocks in memory are hashed from those blocks, not copied.
    SharedSpans shared;
    const ssize_t r = blocks_->read(dst, len, offset, SourceBlocks::Access::reader, &shared);
    return r > 0 ? digest_->after_read(dst, offset, static_cast<size_t>(r), &shared) : r;
}

gguf::Served RemoteSource::read_served(char* buf, size_t len, uint64_t offset, gguf::CopyKept,
                                       bool whole_request) const noexcept {
    gguf::Served s;
    std::shared_ptr<const char[]> bytes;
    const bool check = digest_ && !digest_->settled();
    if (whole_request && !(digest_ && digest_->failed())) {
        if (const size_t n = blocks_->view(len, offset, &bytes); n > 0) {
            SharedSpans shared;
            shared.add(offset, n, bytes, 0);
            s.result = check ? digest_->after_read(bytes.get(), offset, n, &shared) : static_cast<ssize_t>(n);
            s.data = bytes.get();
            s.hold = std::move(bytes);
            return s;
        }
    }
    s.result = pread(buf, len, offset);
    s.data = buf;
    return s;
}

std::map<std::string, Opened> open_sources(const std::shared_ptr<RemoteContext>& context,
                                           const std::vector<std::string>& urls) {
    std::vector<Opened> opened(urls.size());
    // Each thread takes the next URL when done with one (a slow answer holds up one thread, not
    // a batch).
    gguf::for_each_parallel(urls.size(), kParallelOpens, [&](size_t i) {
        Opened& o = opened[i];
        try {
            o.source = RemoteSource::open(context, urls[i]);
        } catch (const gguf::Error& e) {
            o.error = e.what();
            o.sys_errno = e.sys_errno();
        }
    });
    std::map<std::string, Opened> out;
    for (size_t i = 0; i < urls.size(); ++i) out[urls[i]] = std::move(opened[i]);
    return out;
}

}  // namespace gguf_mount::remote
