// Loads a GGUF model with node-llama-cpp (llama.cpp prebuilt, CPU only, mmap on) and prints, as one
// JSON line, the prompt token ids and the first 16 greedily generated token ids.
// Usage: node llama-tokens.mjs MODEL.gguf [PROMPT]
// The calls are the ones tests/fixtures/tiny-llama/README.md lists as working with 3.22.1.
import { getLlama } from "node-llama-cpp";

const modelPath = process.argv[2];
const text = process.argv[3] ?? "The quick brown fox jumps over the lazy dog.";
const maxTokens = 16;
if (!modelPath) {
  console.error("usage: node llama-tokens.mjs MODEL.gguf [PROMPT]");
  process.exit(2);
}

const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true });
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
const prompt = [model.tokens.bos, ...model.tokenize(text)];
const context = await model.createContext({ contextSize: 256, threads: 1 });
const generated = [];
for await (const token of context.getSequence().evaluate(prompt, { temperature: 0 })) {
  generated.push(token);
  if (generated.length >= maxTokens) break;
}
console.log(JSON.stringify({ model: modelPath, prompt, generated }));
await context.dispose();
await model.dispose();
await llama.dispose();
