// Reads metadata keys of a GGUF file with two independent parsers and prints them as one JSON
// line: {"llama": {KEY: value}, "hf": {KEY: value}}. "llama" is node-llama-cpp's
// readGgufFileInfo (what node-llama-cpp itself reads before loading a model; nested metadata,
// "a.b.c" looked up as metadata.a.b.c), "hf" is @huggingface/gguf (flat keys). A missing key is
// null; numbers and BigInts are printed as strings.
// Usage: node gguf-kv.mjs MODEL.gguf KEY...
import { readGgufFileInfo } from "node-llama-cpp";
import { gguf } from "@huggingface/gguf";

const [path, ...keys] = process.argv.slice(2);
if (!path || keys.length === 0) {
  console.error("usage: node gguf-kv.mjs MODEL.gguf KEY...");
  process.exit(2);
}

const plain = (v) => (v === undefined || v === null ? null : typeof v === "string" || typeof v === "boolean" ? v : String(v));
const info = await readGgufFileInfo(path, { readTensorInfo: false, logWarnings: false });
const hf = await gguf(path, { allowLocalFile: true });
const out = { llama: {}, hf: {} };
for (const key of keys) {
  let v = info.metadata;
  for (const part of key.split(".")) v = v?.[part];
  out.llama[key] = plain(v);
  out.hf[key] = plain(hf.metadata[key]);
}
console.log(JSON.stringify(out));
