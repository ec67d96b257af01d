#!/usr/bin/env bash
# Real clients against gguf-mount, end to end (ctest label "clients"; tests/CMakeLists.txt).
#
# Usage: tests/clients/run-clients.sh GGUF_MOUNT MMAP_PAGES PART
#   GGUF_MOUNT  the gguf-mount binary under test
#   MMAP_PAGES  the helper built from tests/clients/mmap_pages.c
#   PART        npm      check that scripts/install-deps.sh installed the npm packages of tests/clients
#               llama    node-llama-cpp (llama.cpp) loads tiny-llama three ways: the original file,
#                        its first shard (split with our own `gguf-mount split`), and the merged
#                        file on the mount, then the first shard of a shard view (--split-max-tensors 7);
#                        greedy token ids must equal tiny-llama-expected.json's
#                        (tiny-llama/README.md; remote mounts: clients/remote_llama_test.cpp)
#               hf-gguf  @huggingface/gguf reads the mounted merged files: every KV and tensor
#                        info equals the original's, apart from the documented split.* keys
#               tools    mmap(MAP_PRIVATE) of every page, cp, cat, dd with odd block sizes and
#                        sha256sum agree with the planner's bytes (`gguf-mount merge`)
#               overrides  KV overrides on the mount (a tiny-llama.gguf.kv sidecar with a new chat
#                        template and name, plus --override-kv on every model): node-llama-cpp
#                        loads the edited set with the same token ids and reads the new template
#                        (readGgufFileInfo), @huggingface/gguf reads the new values, and the bytes
#                        equal `gguf-mount merge` with the same edits
#
# Each part that mounts uses its own temporary folder and always unmounts (trap). Exit status:
# 0 pass, 1 fail, 77 skip (node/npm missing for the node parts; FUSE unusable for the mounts).
# Network: only `npm install` from the npm registry (NODE_LLAMA_CPP_SKIP_DOWNLOAD=true and
# --ignore-scripts: node-llama-cpp downloads and builds nothing; its linux-x64 package ships the
# prebuilt llama.cpp).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: run-clients.sh GGUF_MOUNT MMAP_PAGES PART}
mmap_pages=${2:?usage: run-clients.sh GGUF_MOUNT MMAP_PAGES PART}
part=${3:?usage: run-clients.sh GGUF_MOUNT MMAP_PAGES PART}
fixtures=$(cd "$here/../fixtures" && pwd)
tiny=$fixtures/tiny-llama/tiny-llama.gguf

# tiny-llama's expected shards, merged file and token ids (from tests/fixtures/tiny-llama/README.md),
# shared with clients_remote_tests; kvzoo's from tests/fixtures/MANIFEST.json.
expected_value() {  # KEY: a string as is, a list of strings space-separated, other lists as compact JSON
  python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))[sys.argv[2]]
print(" ".join(v) if isinstance(v, list) and all(isinstance(x, str) for x in v) else
      json.dumps(v, separators=(",", ":")) if isinstance(v, list) else v)' "$here/tiny-llama-expected.json" "$1"
}
tiny_sha=$(expected_value original_sha256)
read -r -a shard_sha <<<"$(expected_value shard_sha256)"
[ ${#shard_sha[@]} -eq 3 ] || { echo "run-clients.sh: tiny-llama-expected.json: shard_sha256 must list 3 shards" >&2; exit 1; }
tiny_merged_sha=$(expected_value merged_sha256)
split_max_tensors=$(expected_value split_max_tensors)
kvzoo_merged_sha=188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f
prompt_ids=$(expected_value prompt_ids)
generated_ids=$(expected_value generated_ids)

say() { echo "clients/$part: $*"; }
skip() { say "SKIP: $*"; exit 77; }
die() { echo "clients/$part: FAIL: $*" >&2; exit 1; }

need_node() {
  command -v node >/dev/null && command -v npm >/dev/null ||
    skip "node >= 20 and npm are needed and missing: run scripts/install-deps.sh (Debian's nodejs and npm; on Debian 12, whose node is 18, install node 20 or newer from nodejs.org or NodeSource instead), then rerun"
  local major
  major=$(node --version | sed 's/^v\([0-9]*\).*/\1/')
  [ "$major" -ge 20 ] || skip "node $(node --version) is too old: node-llama-cpp 3.22.1 and @huggingface/gguf need node >= 20 (install node 20 or newer from nodejs.org or NodeSource, which bundles npm, then rerun)"
  say "node $(node --version), npm $(npm --version)"
}

need_packages() {
  [ -d "$here/node_modules/node-llama-cpp" ] && [ -d "$here/node_modules/@node-llama-cpp/linux-x64" ] &&
    [ -d "$here/node_modules/@huggingface/gguf" ] || die "npm packages missing: run the npm part first"
}

need_fuse() {
  [ -r /dev/fuse ] && [ -w /dev/fuse ] || skip "/dev/fuse is not usable here"
  command -v fusermount3 >/dev/null || skip "fusermount3 is not installed (package fuse3)"
}

sha() { sha256sum "$1" | cut -d' ' -f1; }

# --- a mount of a model directory: tiny-llama split by us, and kvzoo's reference shards --------
work=""
daemon=""
cleanup() {
  local rc=$?
  if [ -n "$work" ]; then
    if grep -qs " $work/mnt " /proc/mounts; then
      fusermount3 -u "$work/mnt" 2>/dev/null || fusermount3 -uz "$work/mnt" 2>/dev/null || true
    fi
    if [ -n "$daemon" ]; then
      for _ in $(seq 50); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$daemon" 2>/dev/null; then kill -9 "$daemon" 2>/dev/null || true; fi
      wait "$daemon" 2>/dev/null || true
    fi
    if [ $rc -ne 0 ] && [ -f "$work/daemon.log" ]; then
      echo "--- daemon log ---" >&2
      cat "$work/daemon.log" >&2
    fi
    rm -rf "$work"
  fi
  exit $rc
}

setup_mount() {
  need_fuse
  work=$(mktemp -d "${TMPDIR:-/tmp}/gguf-mount-clients.XXXXXX")
  trap cleanup EXIT
  mkdir -p "$work/src/kvzoo" "$work/mnt"
  # Our own split must reproduce llama.cpp's shards byte for byte (README table).
  "$bin" split --split-max-tensors "$split_max_tensors" -q "$tiny" "$work/src/tiny-llama"
  for i in 1 2 3; do
    f=$work/src/tiny-llama-0000$i-of-00003.gguf
    [ "$(sha "$f")" = "${shard_sha[$((i - 1))]}" ] || die "$f: sha256 differs from tiny-llama-expected.json (tiny-llama/README.md)"
  done
  say "gguf-mount split --split-max-tensors $split_max_tensors reproduced the 3 reference shards"
  cp "$fixtures"/kvzoo/t7/kvzoo-0000?-of-00007.gguf "$work/src/kvzoo/"
  if [ "$(type -t prepare_source)" = function ]; then prepare_source; fi
  # The planner's bytes, written offline by the same code the mount serves from.
  "$bin" merge -q "$work/src/tiny-llama-00001-of-00003.gguf" "$work/planned-tiny-llama.gguf"
  "$bin" merge -q "$work/src/kvzoo/kvzoo-00001-of-00007.gguf" "$work/planned-kvzoo.gguf"

  "$bin" "$work/src" "$work/mnt" -f "${mount_args[@]}" >"$work/daemon.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do
    if grep -qs " $work/mnt " /proc/mounts && [ -e "$work/mnt/tiny-llama.gguf" ]; then
      say "mounted $work/src on $work/mnt: $(cd "$work/mnt" && find . -type f | sort | tr '\n' ' ')"
      return 0
    fi
    kill -0 "$daemon" 2>/dev/null || die "gguf-mount exited before mounting"
    sleep 0.1
  done
  die "not mounted within 10 s"
}

unmount() {
  fusermount3 -u "$work/mnt" || die "fusermount3 -u $work/mnt failed"
  local rc=0
  wait "$daemon" || rc=$?
  daemon=""
  [ $rc -eq 0 ] || die "gguf-mount exited with status $rc after unmounting"
  say "unmounted; daemon exited 0"
}

mount_args=()  # extra options of the mount (the overrides part)

# --- parts ---------------------------------------------------------------------------------------
part_npm() {
  # The packages are installed by scripts/install-deps.sh (npm ci from package-lock.json): the
  # test run itself sends no request to the npm registry.
  need_node
  if [ -d "$here/node_modules/node-llama-cpp" ] && [ -d "$here/node_modules/@node-llama-cpp/linux-x64" ] &&
     [ -d "$here/node_modules/@huggingface/gguf" ]; then
    say "npm packages installed"
    return 0
  fi
  skip "the npm packages of tests/clients are missing: run scripts/install-deps.sh (it installs them with npm ci), then rerun"
}

part_llama() {
  need_node
  need_packages
  setup_mount
  local expected="\"prompt\":$prompt_ids,\"generated\":$generated_ids"
  for model in "$tiny" "$work/src/tiny-llama-00001-of-00003.gguf" "$work/mnt/tiny-llama.gguf"; do
    out=$(cd "$here" && node llama-tokens.mjs "$model")
    say "$out"
    case "$out" in
      *"$expected"*) ;;
      *) die "$model: token ids differ from tiny-llama-expected.json (prompt $prompt_ids, generated $generated_ids)" ;;
    esac
  done
  say "node-llama-cpp: original, first shard and mounted merged file give the README's token ids"
  unmount
  # A shard view of the original file (4 shards of at most 7 tensors, never written): llama.cpp
  # opens the first shard and finds the siblings itself.
  "$bin" "$tiny" "$work/mnt" -f --split-max-tensors 7 >"$work/daemon.log" 2>&1 &
  daemon=$!
  local first=$work/mnt/tiny-llama-00001-of-00004.gguf
  for _ in $(seq 100); do
    [ -e "$first" ] && break
    kill -0 "$daemon" 2>/dev/null || die "gguf-mount --split-max-tensors 7 exited before mounting"
    sleep 0.1
  done
  [ -e "$first" ] || die "shard view not mounted within 10 s"
  out=$(cd "$here" && node llama-tokens.mjs "$first")
  say "$out"
  case "$out" in
    *"$expected"*) ;;
    *) die "$first: token ids differ from tiny-llama-expected.json (prompt $prompt_ids, generated $generated_ids)" ;;
  esac
  say "node-llama-cpp: the first shard of a shard view gives the README's token ids"
  unmount
}

part_hf_gguf() {
  need_node
  need_packages
  setup_mount
  (cd "$here" && node gguf-compare.mjs "$tiny" "$work/mnt/tiny-llama.gguf") || die "tiny-llama.gguf differs"
  (cd "$here" && node gguf-compare.mjs "$fixtures/kvzoo/original.gguf" "$work/mnt/kvzoo/kvzoo.gguf") ||
    die "kvzoo/kvzoo.gguf differs"
  say "@huggingface/gguf: every KV and tensor info equal apart from split.*"
  unmount
}

part_tools() {
  setup_mount
  [ "$(sha "$tiny")" = "$tiny_sha" ] || die "$tiny: not the README's file"
  for name in tiny-llama kvzoo; do
    if [ $name = kvzoo ]; then m=$work/mnt/kvzoo/kvzoo.gguf; want=$kvzoo_merged_sha; else m=$work/mnt/tiny-llama.gguf; want=$tiny_merged_sha; fi
    p=$work/planned-$name.gguf
    [ "$(sha "$p")" = "$want" ] || die "$p: the planner's merge differs from llama.cpp's reference"
    [ "$(sha "$m")" = "$want" ] || die "$m: sha256sum differs from the planner"
    cp "$m" "$work/copy.gguf" && cmp "$work/copy.gguf" "$p" || die "$m: cp gives other bytes"
    rm -f "$work/copy.gguf"
    cat "$m" | cmp - "$p" || die "$m: cat gives other bytes"
    for spec in "bs=4097" "bs=1M skip=3" "bs=65537 skip=5" "bs=1 skip=12345 count=100" "bs=3000 skip=7 count=11" \
                "bs=1M count=1"; do
      # shellcheck disable=SC2086
      a=$(dd if="$m" $spec status=none | sha256sum)
      # shellcheck disable=SC2086
      b=$(dd if="$p" $spec status=none | sha256sum)
      [ "$a" = "$b" ] || die "$m: dd $spec gives other bytes"
    done
    # O_DIRECT reads go to the daemon every time (the planned file may be on tmpfs: no O_DIRECT).
    a=$(dd if="$m" bs=4096 iflag=direct status=none | sha256sum)
    [ "$a" = "$(sha256sum <"$p")" ] || die "$m: dd iflag=direct gives other bytes"
    "$mmap_pages" "$m" "$p" || die "$m: mmap(MAP_PRIVATE) gives other bytes"
    say "$m: sha256sum, cp, cat, dd (7 block sizes), mmap MAP_PRIVATE agree with the planner"
  done
  unmount
}

part_overrides() {
  need_node
  need_packages
  template='{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %} fixed by a sidecar'
  prepare_source() {
    printf '%s' "$template" >"$work/src/fixed.jinja"
    printf '# a sidecar of the model served as tiny-llama.gguf\ntokenizer.chat_template=str:@fixed.jinja\ngeneral.name=str:tiny-llama-fixed\n' \
      >"$work/src/tiny-llama.gguf.kv"
  }
  mount_args=(--override-kv "general.url=str:https://example.invalid/fixed")
  setup_mount
  m=$work/mnt/tiny-llama.gguf
  [ ! -e "$work/mnt/tiny-llama.gguf.kv" ] || die "the sidecar is shown in the mount"
  "$bin" merge -q "$work/src/tiny-llama-00001-of-00003.gguf" "$work/edited.gguf" \
    --override-kv "tokenizer.chat_template=str:@$work/src/fixed.jinja" --override-kv general.name=str:tiny-llama-fixed \
    --override-kv "general.url=str:https://example.invalid/fixed"
  [ "$(sha "$m")" = "$(sha "$work/edited.gguf")" ] || die "$m: other bytes than gguf-mount merge with the same edits"
  [ "$(sha "$m")" != "$tiny_merged_sha" ] || die "$m: served without its edits"
  say "$m: the bytes of gguf-mount merge with the same edits"

  local expected="\"prompt\":$prompt_ids,\"generated\":$generated_ids"
  out=$(cd "$here" && node llama-tokens.mjs "$m")
  say "$out"
  case "$out" in
    *"$expected"*) ;;
    *) die "$m: token ids differ from tiny-llama-expected.json (prompt $prompt_ids, generated $generated_ids)" ;;
  esac
  say "node-llama-cpp: the edited set gives the README's token ids"

  out=$(cd "$here" && node gguf-kv.mjs "$m" tokenizer.chat_template general.name general.url)
  python3 -c 'import json, sys
got = json.loads(sys.argv[1])
want = {"tokenizer.chat_template": sys.argv[2], "general.name": "tiny-llama-fixed", "general.url": "https://example.invalid/fixed"}
for reader in ("llama", "hf"):
    if got[reader] != want:
        sys.exit(f"{reader}: read {got[reader]!r}, expected {want!r}")' "$out" "$template" ||
    die "$m: a parser read other metadata: $out"
  say "node-llama-cpp readGgufFileInfo and @huggingface/gguf read the new chat template, name and url"
  (cd "$here" && node gguf-kv.mjs "$work/mnt/kvzoo/kvzoo.gguf" general.url | grep -q '"hf":{"general.url":"https://example.invalid/fixed"}') ||
    die "kvzoo/kvzoo.gguf: --override-kv not applied to every model"
  unmount
}

case "$part" in
  npm) part_npm ;;
  llama) part_llama ;;
  hf-gguf) part_hf_gguf ;;
  tools) part_tools ;;
  overrides) part_overrides ;;
  *) echo "run-clients.sh: unknown part '$part' (npm, llama, hf-gguf, tools, overrides)" >&2; exit 2 ;;
esac
say "PASS"
