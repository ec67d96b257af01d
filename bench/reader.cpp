// bench_reader: the access patterns of the benchmark (bench/run.sh), one run per invocation,
// one JSON object on stdout.
//
// A "logical file" is either one file (--file PATH) or the concatenation of byte ranges of
// several files (--seg LIST, lines "PATH<TAB>OFFSET<TAB>LENGTH"). The direct baseline uses a
// segment list that maps every byte of the merged file to the shard bytes it comes from
// (see `segments`), so mount and direct read the same number of bytes at the same logical
// offsets.
//
//   bench_reader segments FIRST_SHARD           print the shard byte ranges of the merged file
//   bench_reader info FIRST_SHARD               shard count, merged size and merged header size
//   bench_reader seq   SRC [--bs N]             sequential pread, N-byte blocks (default 1 MiB)
//   bench_reader rand  SRC [--count N] [--bs B] [--seed S]
//                                               N preads of B bytes at 4 KiB-aligned offsets
//   bench_reader conc  SRC [--threads N] [--bs B]
//                                               N threads, each reads its own 1/N of the file
//                                               sequentially through its own descriptors
//   bench_reader touch SRC [--populate] [--advise A[,A...]] [--folios]
//                                               mmap(MAP_SHARED) every file, read one byte per
//                                               4 KiB page in logical order (llama.cpp's load);
//                                               --populate adds MAP_POPULATE; advice: hugepage,
//                                               willneed, sequential, random, populate_read
//                                               (applied before touching); --folios reports the
//                                               page-cache folio sizes behind the mapping
//                                               (/proc/self/pagemap + /proc/kpageflags, root)
//   bench_reader startup --path P [--timeout-ms T] [--log F] -- CMD ARGS...
//                                               start CMD, report the time until one byte of P
//                                               can be read; CMD keeps running (its pid is printed)
// SRC is --file PATH or --seg LIST. Buffers are allocated and faulted in before the clock
// starts (a first touch of a page is expensive on VMs; bench/README.md). Times are wall-clock
// (steady_clock).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gguf/model/merge_plan.hpp"
#include "gguf/error.hpp"
#include "gguf/model/split_set.hpp"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kPage = 4096;

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "bench_reader: %s\n", msg.c_str());
    std::exit(1);
}

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// One byte range of one file, placed at `logical` in the logical file.
struct Segment {
    size_t file = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
    uint64_t logical = 0;
};

/// A logical file: segments over a set of files.
struct Logical {
    std::vector<std::string> paths;
    std::vector<Segment> segs;
    uint64_t size = 0;

    void add(const std::string& path, uint64_t offset, uint64_t length) {
        size_t idx = 0;
        while (idx < paths.size() && paths[idx] != path) ++idx;
        if (idx == paths.size()) paths.push_back(path);
        segs.push_back(Segment{idx, offset, length, size});
        size += length;
    }
};

uint64_t file_size(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) die(path + ": " + std::strerror(errno));
    return static_cast<uint64_t>(st.st_size);
}

Logical load_source(const std::string& file, const std::string& seg_list) {
    Logical l;
    if (!file.empty()) {
        l.add(file, 0, file_size(file));
        return l;
    }
    std::ifstream in(seg_list);
    if (!in) die(seg_list + ": cannot open");
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        std::istringstream ls(line);
        std::string path;
        uint64_t off = 0, len = 0;
        if (!std::getline(ls, path, '\t') || !(ls >> off >> len)) die(seg_list + ": bad line: " + line);
        l.add(path, off, len);
    }
    if (l.segs.empty()) die(seg_list + ": no segments");
    return l;
}

std::vector<int> open_all(const Logical& l) {
    std::vector<int> fds;
    for (const auto& p : l.paths) {
        int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) die(p + ": " + std::strerror(errno));
        fds.push_back(fd);
    }
    return fds;
}

void close_all(const std::vector<int>& fds) {
    for (int fd : fds) ::close(fd);
}

/// Reads [off, off+len) of the logical file into dst through `fds`. Dies on errors and short reads.
void lpread(const Logical& l, const std::vector<int>& fds, char* dst, uint64_t len, uint64_t off) {
    auto it = std::upper_bound(l.segs.begin(), l.segs.end(), off,
                               [](uint64_t o, const Segment& s) { return o < s.logical; });
    --it;
    while (len > 0 && it != l.segs.end()) {
        uint64_t skip = off - it->logical;
        uint64_t n = std::min(len, it->length - skip);
        uint64_t done = 0;
        while (done < n) {
            ssize_t r = ::pread(fds[it->file], dst + done, n - done, static_cast<off_t>(it->offset + skip + done));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) die(l.paths[it->file] + ": pread failed or short at " + std::to_string(it->offset + skip + done) +
                            ": " + (r < 0 ? std::strerror(errno) : "end of file"));
            done += static_cast<uint64_t>(r);
        }
        dst += n;
        off += n;
        len -= n;
        ++it;
    }
    if (len > 0) die("read past the end of the logical file");
}

/// A buffer of `n` bytes, faulted in before use.
std::unique_ptr<char[]> make_buffer(size_t n) {
    std::unique_ptr<char[]> b(new char[n]);
    std::memset(b.get(), 1, n);
    return b;
}

struct Faults {
    long minflt = 0, majflt = 0;
};
Faults faults_now() {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    return Faults{ru.ru_minflt, ru.ru_majflt};
}

void print_result(const char* pattern, uint64_t bytes, double secs, Faults f0, Faults f1, const std::string& extra = "") {
    std::printf("{\"pattern\":\"%s\",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"gib_s\":%.4f,\"minflt\":%ld,\"majflt\":%ld%s}\n",
                pattern, bytes, secs, static_cast<double>(bytes) / secs / (1u << 30), f1.minflt - f0.minflt,
                f1.majflt - f0.majflt, extra.c_str());
}

// ---- patterns ----------------------------------------------------------------------------

void run_seq(const Logical& l, uint64_t bs) {
    auto buf = make_buffer(bs);
    std::vector<int> fds = open_all(l);
    Faults f0 = faults_now();
    auto t0 = Clock::now();
    for (uint64_t off = 0; off < l.size; off += bs) lpread(l, fds, buf.get(), std::min(bs, l.size - off), off);
    double s = seconds_since(t0);
    print_result("seq", l.size, s, f0, faults_now());
    close_all(fds);
}

uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void run_rand(const Logical& l, uint64_t count, uint64_t bs, uint64_t seed) {
    if (l.size < bs + kPage) die("file too small for the random pattern");
    auto buf = make_buffer(bs);
    std::vector<uint64_t> offs(count);
    const uint64_t slots = (l.size - bs) / kPage;
    for (auto& o : offs) o = (splitmix(seed) % slots) * kPage;
    std::vector<int> fds = open_all(l);
    Faults f0 = faults_now();
    auto t0 = Clock::now();
    for (uint64_t o : offs) lpread(l, fds, buf.get(), bs, o);
    double s = seconds_since(t0);
    print_result("rand", count * bs, s, f0, faults_now());
    close_all(fds);
}

void run_conc(const Logical& l, unsigned threads, uint64_t bs) {
    std::vector<std::unique_ptr<char[]>> bufs;
    std::vector<std::vector<int>> fds;
    for (unsigned i = 0; i < threads; ++i) {
        bufs.push_back(make_buffer(bs));
        fds.push_back(open_all(l));  // own descriptors: own readahead state, like separate readers
    }
    std::vector<uint64_t> bounds;
    for (unsigned i = 0; i <= threads; ++i) bounds.push_back(i == threads ? l.size : l.size / threads * i / kPage * kPage);
    std::atomic<bool> go{false};
    std::vector<std::thread> ts;
    for (unsigned i = 0; i < threads; ++i) {
        ts.emplace_back([&, i] {
            while (!go.load(std::memory_order_acquire)) {
            }
            for (uint64_t off = bounds[i]; off < bounds[i + 1]; off += bs) {
                lpread(l, fds[i], bufs[i].get(), std::min(bs, bounds[i + 1] - off), off);
            }
        });
    }
    Faults f0 = faults_now();
    auto t0 = Clock::now();
    go.store(true, std::memory_order_release);
    for (auto& t : ts) t.join();
    double s = seconds_since(t0);
    print_result("conc", l.size, s, f0, faults_now(), ",\"threads\":" + std::to_string(threads));
    for (auto& f : fds) close_all(f);
}

int advice_flag(const std::string& a) {
    if (a == "hugepage") return MADV_HUGEPAGE;
    if (a == "willneed") return MADV_WILLNEED;
    if (a == "sequential") return MADV_SEQUENTIAL;
    if (a == "random") return MADV_RANDOM;
    if (a == "populate_read") return MADV_POPULATE_READ;
    die("unknown advice " + a);
}

/// Histogram of the folio sizes (bytes) backing the resident pages of [addr, addr+len):
/// pagemap gives each page's PFN, kpageflags tells heads (bit 15) and tails (bit 16) of
/// compound pages; a folio's size is its head plus the tails that follow it.
void folio_histogram(const char* addr, uint64_t len, std::map<uint64_t, uint64_t>& hist) {
    int pm = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    int kf = ::open("/proc/kpageflags", O_RDONLY | O_CLOEXEC);
    if (pm < 0 || kf < 0) die("folio histogram needs /proc/self/pagemap and /proc/kpageflags (root)");
    const uint64_t pages = len / kPage;
    std::vector<uint64_t> ent(512);
    std::vector<uint64_t> flags(1024);
    auto flags_of = [&](uint64_t pfn, uint64_t n) {
        ssize_t r = ::pread(kf, flags.data(), n * 8, static_cast<off_t>(pfn * 8));
        return r < 0 ? 0 : static_cast<uint64_t>(r) / 8;
    };
    uint64_t i = 0;
    while (i < pages) {
        uint64_t n = std::min<uint64_t>(512, pages - i);
        uint64_t vpn = (reinterpret_cast<uintptr_t>(addr) / kPage) + i;
        if (::pread(pm, ent.data(), n * 8, static_cast<off_t>(vpn * 8)) != static_cast<ssize_t>(n * 8)) die("pagemap read failed");
        uint64_t j = 0;
        while (j < n) {
            uint64_t e = ent[j];
            if (!(e >> 63)) {  // not present
                hist[0] += kPage;
                ++j;
                continue;
            }
            uint64_t pfn = e & ((uint64_t{1} << 55) - 1);
            if (pfn == 0) die("pagemap shows PFN 0: run as root for folio sizes");
            uint64_t got = flags_of(pfn, 1);
            uint64_t f = got ? flags[0] : 0;
            bool head = f & (uint64_t{1} << 15), tail = f & (uint64_t{1} << 16);
            uint64_t size = kPage;
            uint64_t span = 1;  // pages of this virtual range covered by the folio
            if (head || tail) {
                // Walk back to the head, then forward over the tails.
                uint64_t h = pfn;
                while (tail && h > 0) {
                    --h;
                    if (!flags_of(h, 1)) break;
                    tail = flags[0] & (uint64_t{1} << 16);
                }
                uint64_t count = 1;
                for (;;) {
                    uint64_t m = flags_of(h + count, 1024);
                    uint64_t k = 0;
                    while (k < m && (flags[k] & (uint64_t{1} << 16))) ++k;
                    count += k;
                    if (k < m || m == 0) break;
                }
                size = count * kPage;
                // Count the virtually consecutive pages backed by the same folio once.
                uint64_t first_v = pfn - h;
                span = std::min<uint64_t>(count - first_v, n - j);
                for (uint64_t k = 1; k < span; ++k) {
                    uint64_t ek = ent[j + k];
                    if (!(ek >> 63) || (ek & ((uint64_t{1} << 55) - 1)) != pfn + k) {
                        span = k;
                        break;
                    }
                }
            }
            hist[size] += span * kPage;
            j += span;
        }
        i += n;
    }
    ::close(pm);
    ::close(kf);
}

void run_touch(const Logical& l, bool populate, const std::vector<std::string>& advice, bool folios) {
    std::vector<int> fds = open_all(l);
    std::vector<uint64_t> sizes;
    for (int fd : fds) {
        struct stat st {};
        ::fstat(fd, &st);
        sizes.push_back(static_cast<uint64_t>(st.st_size));
    }
    Faults f0 = faults_now();
    auto t0 = Clock::now();
    std::vector<char*> maps;
    for (size_t i = 0; i < fds.size(); ++i) {
        void* p = ::mmap(nullptr, sizes[i], PROT_READ, MAP_SHARED | (populate ? MAP_POPULATE : 0), fds[i], 0);
        if (p == MAP_FAILED) die(l.paths[i] + ": mmap: " + std::strerror(errno));
        for (const auto& a : advice) {
            if (::madvise(p, sizes[i], advice_flag(a)) != 0) die(l.paths[i] + ": madvise " + a + ": " + std::strerror(errno));
        }
        maps.push_back(static_cast<char*>(p));
    }
    double t_map = seconds_since(t0);
    uint64_t sum = 0;
    for (const auto& s : l.segs) {
        const volatile char* base = maps[s.file];
        uint64_t p = s.offset;
        uint64_t end = s.offset + s.length;
        // First byte of the segment, then one byte at every page boundary inside it.
        if (p < end) sum += static_cast<unsigned char>(base[p]);
        for (p = (p / kPage + 1) * kPage; p < end; p += kPage) sum += static_cast<unsigned char>(base[p]);
    }
    double s = seconds_since(t0);
    Faults f1 = faults_now();
    std::string extra = ",\"map_seconds\":" + std::to_string(t_map) + ",\"checksum\":" + std::to_string(sum & 0xffff);
    if (folios) {
        std::map<uint64_t, uint64_t> hist;
        for (size_t i = 0; i < maps.size(); ++i) folio_histogram(maps[i], sizes[i] / kPage * kPage, hist);
        extra += ",\"folio_bytes\":{";
        bool first = true;
        for (const auto& [size, bytes] : hist) {
            extra += (first ? "\"" : ",\"") + std::to_string(size / 1024) + "K\":" + std::to_string(bytes);
            first = false;
        }
        extra += "}";
    }
    print_result(populate ? "populate" : "touch", l.size, s, f0, f1, extra);
    for (size_t i = 0; i < maps.size(); ++i) ::munmap(maps[i], sizes[i]);
    close_all(fds);
}

/// Starts argv[0..] with stdout/stderr to `log`, then polls `path` every 200 us until one byte
/// reads; prints the elapsed time and the child's pid. The child is left running.
void run_startup(const std::string& path, const std::string& log, long timeout_ms, char** cmd) {
    auto t0 = Clock::now();
    pid_t pid = ::fork();
    if (pid < 0) die(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        int fd = ::open(log.empty() ? "/dev/null" : log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            ::dup2(fd, 1);
            ::dup2(fd, 2);
        }
        ::execvp(cmd[0], cmd);
        _exit(127);
    }
    int attempts = 0;
    for (;;) {
        ++attempts;
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            char b;
            ssize_t r = ::pread(fd, &b, 1, 0);
            ::close(fd);
            if (r == 1) break;
        }
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) {
            die(std::string(cmd[0]) + " exited before " + path + " became readable (status " + std::to_string(status) + ")");
        }
        if (seconds_since(t0) * 1000 > static_cast<double>(timeout_ms)) die(path + ": not readable within the timeout");
        ::usleep(200);
    }
    double s = seconds_since(t0);
    std::printf("{\"pattern\":\"startup\",\"seconds\":%.6f,\"ms\":%.3f,\"pid\":%d,\"attempts\":%d}\n", s, s * 1000, pid,
                attempts);
}

/// Prints "PATH\tOFFSET\tLENGTH" lines mapping the merged file of the set to shard bytes:
/// Source extents exactly; the header (and its padding) to the same number of bytes at the
/// start of shard 1; each tensor's zero padding to the padding that follows it in its shard.
void run_segments(const std::string& first) {
    gguf::SplitSet set = gguf::SplitSet::open(first);
    gguf::VirtualLayout layout = gguf::plan_merge(set);
    const std::vector<gguf::FilePart> parts = gguf::set_parts(set);  // what Source extents index
    struct Out {
        uint32_t src;
        uint64_t off, len;
    };
    std::vector<Out> out;
    uint32_t src = 0;
    uint64_t next = 0;
    for (const auto& e : layout.extents()) {
        if (e.kind == gguf::Extent::Kind::Source) {
            src = e.source;
            next = e.source_offset;
        }
        uint64_t size = static_cast<uint64_t>(parts[src].st.st_size);
        if (next + e.length > size) die("segment runs past the end of " + parts[src].path);
        if (!out.empty() && out.back().src == src && out.back().off + out.back().len == next) {
            out.back().len += e.length;
        } else {
            out.push_back(Out{src, next, e.length});
        }
        next += e.length;
    }
    for (const auto& o : out) {
        std::printf("%s\t%" PRIu64 "\t%" PRIu64 "\n", parts[o.src].path.c_str(), o.off, o.len);
    }
}

/// Prints {"shards":N,"merged_bytes":...,"header_bytes":...} for the set: header_bytes is the
/// data-section start of the merged file (rendered header + padding).
void run_info(const std::string& first) {
    gguf::SplitSet set = gguf::SplitSet::open(first);
    gguf::VirtualLayout layout = gguf::plan_merge(set);
    uint64_t header = 0;
    for (const auto& e : layout.extents()) {
        if (e.kind == gguf::Extent::Kind::Source) break;
        header += e.length;
    }
    std::printf("{\"shards\":%zu,\"tensors\":%" PRIu64 ",\"merged_bytes\":%" PRIu64 ",\"header_bytes\":%" PRIu64 "}\n",
                set.shards().size(), set.tensor_count(), layout.size(), header);
}

uint64_t parse_u64(const std::string& s) {
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (errno || !end || *end) die("bad number: " + s);
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) die("usage: bench_reader segments|seq|rand|conc|touch|startup ... (see the source header)");
    const std::string cmd = argv[1];
    std::string file, seg, path, log;
    uint64_t bs = 1 << 20, count = 4096, seed = 42, threads = 8;
    long timeout_ms = 30000;
    bool populate = false, folios = false;
    std::vector<std::string> advice;
    char** rest = nullptr;
    std::string positional;
    for (int i = 2; i < argc; ++i) {
        std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) die("missing value for " + a);
            return argv[++i];
        };
        if (a == "--file") file = val();
        else if (a == "--seg") seg = val();
        else if (a == "--bs") bs = parse_u64(val());
        else if (a == "--count") count = parse_u64(val());
        else if (a == "--seed") seed = parse_u64(val());
        else if (a == "--threads") threads = parse_u64(val());
        else if (a == "--populate") populate = true;
        else if (a == "--folios") folios = true;
        else if (a == "--advise") {
            std::string v = val();
            std::istringstream ss(v);
            std::string item;
            while (std::getline(ss, item, ',')) {
                if (!item.empty() && item != "none") advice.push_back(item);
            }
        } else if (a == "--path") path = val();
        else if (a == "--log") log = val();
        else if (a == "--timeout-ms") timeout_ms = static_cast<long>(parse_u64(val()));
        else if (a == "--") {
            rest = argv + i + 1;
            break;
        } else if (a.rfind("--", 0) != 0 && positional.empty()) positional = a;
        else die("unknown argument " + a);
    }
    try {
        if (cmd == "info") {
            if (positional.empty()) die("info needs FIRST_SHARD");
            run_info(positional);
            return 0;
        }
        if (cmd == "segments") {
            if (positional.empty()) die("segments needs FIRST_SHARD");
            run_segments(positional);
            return 0;
        }
        if (cmd == "startup") {
            if (path.empty() || !rest || !*rest) die("startup needs --path P -- CMD ...");
            run_startup(path, log, timeout_ms, rest);
            return 0;
        }
        if (file.empty() == seg.empty()) die("give exactly one of --file and --seg");
        if (bs == 0 || bs > (uint64_t{1} << 30) || threads == 0 || threads > 256) die("bad --bs or --threads");
        Logical l = load_source(file, seg);
        if (cmd == "seq") run_seq(l, bs);
        else if (cmd == "rand") run_rand(l, count, bs, seed);
        else if (cmd == "conc") run_conc(l, static_cast<unsigned>(threads), bs);
        else if (cmd == "touch") run_touch(l, populate, advice, folios);
        else die("unknown command " + cmd);
    } catch (const gguf::Error& e) {
        die(e.what());
    }
    std::fflush(stdout);
    return 0;
}
