// Compares two GGUF files with an independent parser (@huggingface/gguf, reading local files):
// every metadata key/value (with its GGUF type) and every tensor info (name, dims, type, offset
// in the data section) must be equal, except the split.* keys and the KV count, which a merge
// adds as the reference `gguf-split --merge` does (split.no = 0, split.count = 0,
// split.tensors.count = number of tensors; llama.cpp tools/gguf-split/gguf-split.cpp).
// Usage: node gguf-compare.mjs ORIGINAL.gguf MERGED.gguf
// Prints one JSON line; exit status 0 when equal, 1 when not, 2 on usage errors.
import { gguf } from "@huggingface/gguf";

const [originalPath, mergedPath] = process.argv.slice(2);
if (!originalPath || !mergedPath) {
  console.error("usage: node gguf-compare.mjs ORIGINAL.gguf MERGED.gguf");
  process.exit(2);
}

const read = (path) => gguf(path, { allowLocalFile: true, typedMetadata: true });
const [original, merged] = await Promise.all([read(originalPath), read(mergedPath)]);

// JSON with BigInt and typed-array values, for deep equality and readable messages.
const canonical = (value) =>
  String(JSON.stringify(value, (_key, v) => {
    if (typeof v === "bigint") return `${v}n`;
    if (ArrayBuffer.isView(v)) return Array.from(v, (x) => (typeof x === "bigint" ? `${x}n` : x));
    return v;
  }));

const problems = [];
const splitKey = (k) => k.startsWith("split.");
const ignoredCounts = new Set(["kv_count"]);

const keysOf = (md) => Object.keys(md).filter((k) => !splitKey(k) && !ignoredCounts.has(k));
const origKeys = keysOf(original.typedMetadata);
const mergedKeys = keysOf(merged.typedMetadata);
if (canonical(origKeys) !== canonical(mergedKeys)) {
  problems.push(`metadata keys differ: ${canonical(origKeys)} vs ${canonical(mergedKeys)}`);
}
for (const key of origKeys) {
  const a = canonical(original.typedMetadata[key]);
  const b = canonical(merged.typedMetadata[key]);
  if (a !== b) problems.push(`metadata ${key}: ${a.slice(0, 200)} vs ${b.slice(0, 200)}`);
}

// The documented split.* keys of a merged file.
const tensorCount = original.tensorInfos.length;
const expectSplit = { "split.no": [0, 2], "split.count": [0, 2], "split.tensors.count": [tensorCount, 5] };
for (const [key, [value, type]] of Object.entries(expectSplit)) {
  const got = merged.typedMetadata[key];
  if (!got || Number(got.value) !== value || got.type !== type) {
    problems.push(`merged ${key}: expected ${value} (type ${type}), got ${canonical(got)}`);
  }
}
const kvDiff = Number(merged.metadata.kv_count) - Number(original.metadata.kv_count);
const addedSplit = Object.keys(merged.typedMetadata).filter(splitKey).length -
  Object.keys(original.typedMetadata).filter(splitKey).length;
if (kvDiff !== addedSplit) problems.push(`kv_count grew by ${kvDiff}, but ${addedSplit} split.* keys were added`);

if (original.tensorInfos.length !== merged.tensorInfos.length) {
  problems.push(`tensor count ${original.tensorInfos.length} vs ${merged.tensorInfos.length}`);
}
original.tensorInfos.forEach((t, i) => {
  const a = canonical(t);
  const b = canonical(merged.tensorInfos[i]);
  if (a !== b) problems.push(`tensor ${i}: ${a} vs ${b}`);
});

console.log(JSON.stringify({
  original: originalPath,
  merged: mergedPath,
  metadataKeysCompared: origKeys.length,
  tensorsCompared: original.tensorInfos.length,
  problems,
}));
process.exit(problems.length === 0 ? 0 : 1);
