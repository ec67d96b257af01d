// Local OCI sources as the real tools leave them: OCI image layouts written by Debian's skopeo
// (`skopeo copy docker://REGISTRY/REPO:TAG oci:DIR:TAG` from the test registry), an Ollama store
// laid out as Ollama writes one (manifests/HOST/NAMESPACE/MODEL/TAG, blobs/sha256-HEX, partial
// downloads beside them), and their blobs as content addresses: a blob whose bytes do not hash to
// its digest is EIO past the bad bytes for a reader, and check and merge refuse it.
#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <iostream>

#include "mount/mount_fixture.hpp"
#include "remote/oci_registry.hpp"
#include "support/support.hpp"

namespace {

namespace fs = std::filesystem;
using remote_test::OciRegistry;

using remote_test::kvzoo_t7;
const std::string kTinyLlama = remote_test::tiny_llama();

std::vector<std::string> plus(const std::vector<std::string>& a, const std::vector<std::string>& b) {
    return remote_test::concat(a, b);
}

/// The names in folder `dir` of a mount, sorted.
std::vector<std::string> names_in(const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

class OciLocal : public remote_test::OciMountFixture {
protected:
    std::vector<std::string> kvzoo_t15() { return remote_test::kvzoo_t15(root_); }
    /// The 3 dense shards (their merge's sha256 in *want) pushed as Ollama would into the store
    /// ROOT/store (library/dense:v1, shown as dense-v1.gguf) and as a ModelPack artifact with
    /// layer names, layers out of order, into the layout ROOT/layout (tag v1: layout-v1.gguf).
    std::vector<std::string> dense_store_and_layout(std::string* want) {
        const auto shards = remote_test::dense_shards(root_, want);
        EXPECT_EQ(shards.size(), 3u);
        EXPECT_FALSE(remote_test::oci_push(plus({"--flavour", "ollama", "--store", store(), "--name", "library/dense",
                                                 "--tag", "v1"},
                                                shards))
                         .empty());
        EXPECT_FALSE(remote_test::oci_push(plus({"--flavour", "modelpack", "--names", "--order", "2,3,1", "--layout",
                                                 layout(), "--tag", "v1"},
                                                shards))
                         .empty());
        return shards;
    }
    std::string store() const { return root_ + "/store"; }
    std::string layout() const { return root_ + "/layout"; }
};

TEST_F(OciLocal, SkopeoCopiesOfEveryFlavourSingleAndShardedIntoOneLayoutAreByteExact) {
    const std::string skopeo = remote_test::find_program("skopeo");
    if (skopeo.empty()) {
        std::cout << "skipped: skopeo not found (apt-get install skopeo)\n";
        GTEST_SKIP() << "skopeo not found (apt-get install skopeo)";
    }
    std::string error;
    ASSERT_TRUE(registry_.start(root_ + "/registry", &error)) << error;
    const std::string tmpl = root_ + "/template.txt";
    gguf_test::write_file(tmpl, "{{ .Prompt }}\n");
    const std::string tiny_sha = gguf_test::sha256_file(kTinyLlama);
    const std::string kv = mount_test::kKvzooMergedSha256;
    struct Set {
        std::vector<std::string> push;  // oci_push.py arguments
        std::string tag, sha256;
        bool all = false;  // an index: skopeo copy --all (else it picks the image for this platform)
    };
    // The fixture sets the OciMount tests push: single and sharded (3 and 7 layers), layers out
    // of shard order; Ollama's own manifests (Docker v2 schema 2) as well as OCI ones.
    const std::vector<Set> sets = {
        {{"--flavour", "ollama", "--oci-manifest", "--repo", "library/kvzoo", "--tag", "t7", "--companion",
          "application/vnd.ollama.image.template=" + tmpl},
         "ollama-kvzoo", kv},
        {{"--flavour", "ollama", "--oci-manifest", "--repo", "library/tiny", "--tag", "q8"}, "ollama-tiny", tiny_sha},
        {{"--flavour", "docker", "--names", "--order", "3,1,2", "--repo", "ai/kv3", "--tag", "latest"}, "docker-kv3", kv},
        {{"--flavour", "docker", "--names", "--index", "--order", "2,1,3,4,5,6,7", "--repo", "ai/kv7", "--tag", "latest"},
         "docker-kv7",
         kv,
         true},
        {{"--flavour", "modelpack", "--names", "--order", "7,3,1,2,6,5,4", "--repo", "pack/kv7", "--tag", "v1"},
         "pack-kv7",
         kv},
        {{"--flavour", "modelpack", "--names", "--repo", "pack/tiny", "--tag", "v1"}, "pack-tiny", tiny_sha},
    };
    const std::vector<std::string> t15 = kvzoo_t15();
    const std::string layout = root_ + "/models";
    auto copy = [&](const std::string& repo_tag, const std::string& tag, bool all) {
        std::vector<std::string> argv = {skopeo, "--insecure-policy", "copy", "--src-tls-verify=false"};
        if (all) argv.push_back("--all");
        argv.push_back("docker://" + registry_.host() + "/" + repo_tag);
        argv.push_back("oci:" + layout + ":" + tag);
        return gguf_test::run(argv);
    };
    for (const Set& s : sets) {
        std::vector<std::string> weights = s.sha256 == tiny_sha ? std::vector<std::string>{kTinyLlama}
                                           : s.tag == "docker-kv3" ? t15
                                                                   : kvzoo_t7();
        ASSERT_FALSE(registry_.push(plus(s.push, weights)).empty());
        const auto repo = std::find(s.push.begin(), s.push.end(), "--repo");
        const auto tag = std::find(s.push.begin(), s.push.end(), "--tag");
        auto r = copy(*(repo + 1) + ":" + *(tag + 1), s.tag, s.all);
        ASSERT_EQ(r.exit_code, 0) << s.tag << ": " << r.out << r.err;
    }
    // Ollama's registry sends Docker v2 schema 2 manifests; skopeo 1.9 refuses their layer types
    // (it copies them once it knows them: then the copy must be served like the others).
    ASSERT_FALSE(registry_.push(plus({"--flavour", "ollama", "--repo", "library/kvzoo2", "--tag", "t7"}, kvzoo_t7())).empty());
    auto v2 = copy("library/kvzoo2:t7", "ollama-v2s2", false);
    const bool v2_copied = v2.exit_code == 0;
    if (!v2_copied) {
        EXPECT_NE(v2.err.find("application/vnd.ollama.image.model"), std::string::npos) << v2.err;
        std::cout << "skopeo refuses Ollama's Docker v2 schema 2 manifests: " << v2.err;
    }
    ASSERT_TRUE(fs::exists(layout + "/oci-layout"));

    ASSERT_TRUE(mount({}, layout)) << log();
    std::vector<std::string> want_names;
    for (const Set& s : sets) {
        SCOPED_TRACE(s.tag);
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/models-" + s.tag + ".gguf"), s.sha256) << log();
        want_names.push_back("models-" + s.tag + ".gguf");
    }
    want_names.push_back("models-ollama-kvzoo.template");
    if (v2_copied) {
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/models-ollama-v2s2.gguf"), kv) << log();
        want_names.push_back("models-ollama-v2s2.gguf");
    }
    std::sort(want_names.begin(), want_names.end());
    EXPECT_EQ(names_in(mnt_), want_names);
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/models-ollama-kvzoo.template"), "{{ .Prompt }}\n");
    EXPECT_EQ(unmount_and_wait(), 0) << log();

    // check reads every blob (all match); merge writes one model of the layout, byte-exact.
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", layout});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("models-pack-kv7.gguf: merged-set of 7 shards"), std::string::npos) << r.out;
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", layout + "/models-docker-kv3.gguf",
                        root_ + "/kv3.gguf"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(root_ + "/kv3.gguf"), kv);
}

TEST_F(OciLocal, AnOllamaStoreAsOllamaWritesItShowsEveryHostNamespaceAndTag) {
    // What `ollama pull` leaves: manifests/HOST/NAMESPACE/MODEL/TAG (Ollama's server/modelpath.go)
    // for its own registry (library/ and a user's namespace), for hf.co/ORG/REPO:QUANT, and for
    // another registry with a port; blobs/sha256-HEX, with a download in progress beside them.
    const std::string store = root_ + "/ollama/models";
    const std::string tmpl = root_ + "/template.txt";
    gguf_test::write_file(tmpl, "{{ .System }}\n");
    struct Pull {
        std::string host, name, tag;
        std::vector<std::string> weights;
        std::string shown, sha256;
    };
    const std::string tiny_sha = gguf_test::sha256_file(kTinyLlama);
    const std::string kv = mount_test::kKvzooMergedSha256;
    const std::vector<Pull> pulls = {
        {"registry.ollama.ai", "library/kvzoo", "t7", kvzoo_t7(), "kvzoo-t7.gguf", kv},
        {"registry.ollama.ai", "library/kvzoo", "latest", kvzoo_t7(), "kvzoo-latest.gguf", kv},
        {"registry.ollama.ai", "someone/tiny", "q8", {kTinyLlama}, "someone/tiny-q8.gguf", tiny_sha},
        {"hf.co", "bartowski/Tiny-GGUF", "Q8_0", {kTinyLlama}, "hf.co/bartowski/Tiny-GGUF-Q8_0.gguf", tiny_sha},
        {"127.0.0.1:5000", "team/kvzoo", "v1", kvzoo_t15(), "127.0.0.1:5000/team/kvzoo-v1.gguf", kv},
    };
    for (const Pull& p : pulls) {
        std::vector<std::string> args = {"--flavour", "ollama", "--store", store, "--store-registry", p.host, "--name",
                                         p.name, "--tag", p.tag};
        if (p.tag == "t7") args = plus(args, {"--companion", "application/vnd.ollama.image.template=" + tmpl});
        ASSERT_FALSE(remote_test::oci_push(plus(args, p.weights)).empty());
    }
    // A blob being downloaded: Ollama writes sha256-HEX-partial and its -partial-N parts.
    gguf_test::write_file(store + "/blobs/sha256-" + std::string(64, 'a') + "-partial", "{}");
    gguf_test::write_file(store + "/blobs/sha256-" + std::string(64, 'a') + "-partial-0", "half a blob");

    // The store under a folder only its owner may enter: its models are served to the owner
    // class only (rule 8 over every blob's path, as a plain folder's files are).
    fs::permissions(root_ + "/ollama", fs::perms::owner_all);
    ASSERT_TRUE(mount({}, store)) << log();
    for (const Pull& p : pulls) {
        SCOPED_TRACE(p.shown);
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + p.shown), p.sha256) << log();
        struct stat st {};
        ASSERT_EQ(::stat((mnt_ + "/" + p.shown).c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 07777, 0400u) << "narrowed by " << root_ << "/ollama (0700)";
    }
    EXPECT_EQ(names_in(mnt_), (std::vector<std::string>{"127.0.0.1:5000", "hf.co", "kvzoo-latest.gguf", "kvzoo-t7.gguf",
                                                        "kvzoo-t7.template", "someone"}));
    EXPECT_EQ(names_in(mnt_ + "/hf.co/bartowski"), std::vector<std::string>{"Tiny-GGUF-Q8_0.gguf"});
    EXPECT_EQ(gguf_test::read_file(mnt_ + "/kvzoo-t7.template"), "{{ .System }}\n");
    EXPECT_EQ(unmount_and_wait(), 0) << log();
    auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", store});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    // A model of one GGUF blob is named a model, not a companion (a template is one).
    EXPECT_NE(r.out.find("someone/tiny-q8.gguf: single-file model, "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("kvzoo-t7.template: companion, "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("summary: 2 single-file model(s), 3 merged set(s), 0 byte-split file(s), 1 companion file(s)"),
              std::string::npos)
        << r.out;
    // ~/.ollama given for ~/.ollama/models: served as a plain folder, saying which to give.
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", root_ + "/ollama"});
    EXPECT_NE(r.err.find(root_ + "/ollama/models is an Ollama store: give it as SOURCE to see its models by name"),
              std::string::npos)
        << r.err;
    // merge takes a model as STORE/PATH, the path a mount of STORE shows.
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", store + "/127.0.0.1:5000/team/kvzoo-v1.gguf",
                        root_ + "/kv.gguf"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(gguf_test::sha256_file(root_ + "/kv.gguf"), kv);
    // STORE alone names several models: merge says which to give.
    r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", store, root_ + "/any.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(store + ": holds 5 models ("), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("give one as " + store + "/NAME.gguf"), std::string::npos) << r.err;
}

TEST_F(OciLocal, ALocalBlobThatDoesNotHashToItsDigestIsEioPastTheBadBytesAndCheckAndMergeRefuseIt) {
    std::string want;
    const auto shards = dense_store_and_layout(&want);
    ASSERT_EQ(shards.size(), 3u);
    const std::string store = this->store();
    const std::string layout = this->layout();
    const std::string expected = gguf_test::sha256_file(shards[1]);
    const std::vector<std::pair<std::string, std::string>> sources = {
        {store, store + "/blobs/sha256-" + expected},
        {layout, layout + "/blobs/sha256/" + expected},
    };
    for (const auto& [source, blob] : sources) {
        SCOPED_TRACE(source);
        const std::string file = source == store ? "dense-v1.gguf" : "layout-v1.gguf";
        // As stored: byte-exact, and check finds nothing wrong.
        ASSERT_TRUE(mount({}, source)) << log();
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + file), want) << log();
        EXPECT_EQ(unmount_and_wait(), 0) << log();
        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", source});
        EXPECT_EQ(r.exit_code, 0) << r.out << r.err;

        // Shard 2's blob: one byte of its tensor data flipped in place (same size, same name).
        std::string bytes = gguf_test::read_file(blob);
        ASSERT_EQ(bytes.size(), fs::file_size(shards[1]));
        bytes[bytes.size() - 100] ^= 0x5a;
        gguf_test::write_file(blob, bytes);
        const std::string wrong = gguf_test::sha256_hex(bytes);

        // A reader in order: shard 1 and most of shard 2 are served, then EIO, both digests logged.
        ASSERT_TRUE(mount({}, source)) << log();
        uint64_t good = 0;
        EXPECT_EQ(remote_test::read_until_error(mnt_ + "/" + file, &good), EIO) << log();
        EXPECT_GT(good, fs::file_size(shards[0]));
        EXPECT_LT(good, fs::file_size(shards[0]) + fs::file_size(shards[1]));
        EXPECT_EQ(unmount_and_wait(), 0) << log();
        const std::string line = blob + ": sha256 mismatch: expected " + expected + " (the blob's digest), the " +
                                 std::to_string(bytes.size()) + " bytes on disk hash to " + wrong;
        EXPECT_NE(log().find(line), std::string::npos) << log();

        // check reads every blob: one problem line, exit 1.
        r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", source});
        EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
        EXPECT_EQ(mount_test::lines_with(r.out + r.err, wrong).size(), 1u) << r.out << r.err;
        EXPECT_NE((r.out + r.err).find(line), std::string::npos) << r.out << r.err;
        // merge checks every blob it reads: refused, nothing written.
        const std::string out = root_ + "/merged.gguf";
        r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", source + "/" + file, out});
        EXPECT_NE(r.exit_code, 0);
        EXPECT_NE(r.err.find(line), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(out));
        // prefetch has no cache to fill for a local source: it says so and names check.
        r = gguf_test::run({gguf_test::gguf_mount_binary(), "prefetch", source});
        EXPECT_NE(r.exit_code, 0);
        EXPECT_NE(r.err.find("'gguf-mount check " + source + "' checks every blob's digest"), std::string::npos)
            << r.err;
        gguf_test::write_file(blob, gguf_test::read_file(shards[1]));  // repaired for the layout's turn
    }
}

// A layout or store speaks for whoever can write it: a blob or a manifest that is a symbolic link
// is not followed, even to a file with the right bytes outside the folder. The model is not
// served; check names the file and why; a real file put back serves it again.
TEST_F(OciLocal, ABlobOrManifestThatIsALinkIsNotFollowedEvenToTheRightBytes) {
    std::string want;
    const auto shards = dense_store_and_layout(&want);
    ASSERT_EQ(shards.size(), 3u);
    const std::string store = this->store();
    const std::string layout = this->layout();
    const std::string blob_hex = gguf_test::sha256_file(shards[1]);
    const std::string outside = root_ + "/outside";
    fs::create_directories(outside);
    struct Plant {
        std::string source, file, planted, named, why;  // named: what check's problem line names
    };
    const std::string model_dir = store + "/manifests/registry.ollama.ai/library/dense";
    const std::string store_manifest = model_dir + "/v1";
    ASSERT_TRUE(fs::is_regular_file(store_manifest)) << store_manifest;
    const std::string passes = "symbolic link (not followed)";  // "is a" or "is or passes through a"
    const std::string store_blob = store + "/blobs/sha256-" + blob_hex;
    const std::string layout_blob = layout + "/blobs/sha256/" + blob_hex;
    const std::vector<Plant> plants = {
        {store, "dense-v1.gguf", store_blob, store_blob + ": ", passes},
        {layout, "layout-v1.gguf", layout_blob, layout_blob + ": ", passes},
        {store, "dense-v1.gguf", store_manifest, store_manifest + ": ", passes},
        // A folder on the way: a link to a copy of it outside (the blobs, the tag's folder).
        {store, "dense-v1.gguf", store + "/blobs", store + "/blobs/sha256-", passes},
        {store, "dense-v1.gguf", model_dir, store_manifest + ": ", passes},
    };
    for (const Plant& p : plants) {
        SCOPED_TRACE(p.planted);
        const std::string copy = outside + "/" + fs::path(p.planted).filename().string();
        fs::remove_all(copy);
        fs::copy(p.planted, copy, fs::copy_options::recursive);
        fs::remove_all(p.planted);
        fs::create_symlink(copy, p.planted);

        auto r = gguf_test::run({gguf_test::gguf_mount_binary(), "check", p.source});
        EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
        EXPECT_NE((r.out + r.err).find(p.named), std::string::npos) << r.out << r.err;
        EXPECT_NE((r.out + r.err).find(p.why), std::string::npos) << r.out << r.err;
        if (mount({}, p.source)) {
            EXPECT_FALSE(fs::exists(mnt_ + "/" + p.file)) << "served through a link: " << log();
            EXPECT_EQ(unmount_and_wait(), 0) << log();
        }
        r = gguf_test::run({gguf_test::gguf_mount_binary(), "merge", "-q", p.source + "/" + p.file, root_ + "/m.gguf"});
        EXPECT_NE(r.exit_code, 0) << r.err;
        EXPECT_FALSE(fs::exists(root_ + "/m.gguf"));

        // The real file back: served byte-exact again.
        fs::remove(p.planted);
        fs::copy(copy, p.planted, fs::copy_options::recursive);
        fs::remove_all(copy);
        ASSERT_TRUE(mount({}, p.source)) << log();
        EXPECT_EQ(gguf_test::sha256_file(mnt_ + "/" + p.file), want) << log();
        EXPECT_EQ(unmount_and_wait(), 0) << log();
    }
}

}  // namespace

namespace {

// A store and a layout mounted as users mount them (no -f: planning, then the daemonizing fork)
// are read to their ends: a local blob's check has no context, and its hashing thread, started
// while planning read the headers, hung the daemon after the fork (the old build: 60 s timeouts
// on a 1.15 GiB layout written by skopeo). The process-wide gate of common/threads.hpp holds it.
TEST_F(OciLocal, ADaemonizedMountOfAStoreOrALayoutReadsItsModelToTheEnd) {
    std::string want;
    const auto shards = dense_store_and_layout(&want);
    ASSERT_EQ(shards.size(), 3u);
    for (const auto& [dir, file] : {std::pair<std::string, std::string>{store(), "dense-v1.gguf"},
                                   std::pair<std::string, std::string>{layout(), "layout-v1.gguf"}}) {
        SCOPED_TRACE(dir);
        const std::string log = root_ + "/daemonized.log";
        std::string why;
        EXPECT_EQ(remote_test::daemonized_sha256({gguf_test::gguf_mount_binary(), dir, mnt_, "--log-file", log}, mnt_,
                                                 file, log, &why),
                  want)
            << why;
    }
}

}  // namespace
