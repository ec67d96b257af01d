// Time to first token of llama.cpp (node-llama-cpp 3.22.1, prebuilt, CPU, mmap on), for the
// real-client rows of the benchmark (bench/llama_rows.py).
//
// Usage: node bench/first-token.mjs CLIENTS_DIR [mmap|no-mmap|direct-io] [load-only]
//   CLIENTS_DIR  tests/clients, whose node_modules hold node-llama-cpp (tests/clients/run-clients.sh
//                GGUF_MOUNT MMAP_PAGES npm installs them)
//   no-mmap      loadModel with useMmap false (llama.cpp --no-mmap: reads the file into memory)
//   direct-io    loadModel with useDirectIo true (llama.cpp --direct-io: reads the file opened with
//                O_DIRECT into memory, mmap off; llama.cpp falls back to buffered reads where
//                O_DIRECT is refused)
//   load-only    stop after loadModel (eval_ms and token are then null)
// Protocol (one JSON object per line on stdout): after getLlama() it prints {"ready":true}, so the
// caller can start its clock without node's start-up in it; it then reads ONE model path from
// stdin, loads it (llama.loadModel), creates a context and evaluates the prompt [BOS] until the
// first generated token, and prints {"model", "load_ms", "eval_ms", "token", "n_tensors"?}: load_ms
// from the loadModel call to its return, eval_ms from the context creation to the first token.
// Exits non-zero with the error on stderr if the model cannot be loaded.
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { createInterface } from "node:readline";

const clients = process.argv[2];
if (!clients) {
  console.error("usage: node first-token.mjs CLIENTS_DIR");
  process.exit(2);
}
const { getLlama } = await import(pathToFileURL(join(clients, "node_modules/node-llama-cpp/dist/index.js")).href);
const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true });
console.log(JSON.stringify({ ready: true }));

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const { value: modelPath, done } = await lines.next();
if (done || !modelPath) {
  console.error("first-token.mjs: no model path on stdin");
  process.exit(2);
}
const t0 = performance.now();
const mode = process.argv[3] || "mmap";
const useMmap = mode === "mmap";
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap, useDirectIo: mode === "direct-io" });
const t1 = performance.now();
if (process.argv[4] === "load-only") {
  console.log(JSON.stringify({ model: modelPath, load_ms: t1 - t0, eval_ms: null, token: null }));
  await model.dispose();
  await llama.dispose();
  process.exit(0);
}
const context = await model.createContext({ contextSize: 256, threads: 1 });
let token = null;
for await (const t of context.getSequence().evaluate([model.tokens.bos], { temperature: 0 })) {
  token = t;
  break;
}
const t2 = performance.now();
console.log(JSON.stringify({ model: modelPath, load_ms: t1 - t0, eval_ms: t2 - t1, token }));
await context.dispose();
await model.dispose();
await llama.dispose();
process.exit(0);
