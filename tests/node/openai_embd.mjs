// openai_embd.mjs PORT — the official openai client's embeddings.create against
// `spex serve --embedding` on 127.0.0.1:PORT. The client asks for base64 when the call names no
// encoding_format (and decodes it to floats); the second call asks for floats. Prints one JSON
// object to stdout:
//   {object, n, dims, index1, norm0, prompt_tokens, model, max_diff_base64_float}
// What it is not: the judge — tests/test_server_node.c checks the numbers.
import { client, portArg } from './common.mjs';

const port = portArg();
const openai = client(port);
const texts = ['The cat sat on the mat.', 'Embeddings through the official client.'];

const b64 = await openai.embeddings.create({ model: 'target', input: texts });
const flt = await openai.embeddings.create({ model: 'target', input: texts[0], encoding_format: 'float' });

const v0 = Array.from(b64.data[0].embedding);
const f0 = flt.data[0].embedding;
let diff = f0.length === v0.length ? 0 : Infinity;
for (let i = 0; i < Math.min(v0.length, f0.length); i++) diff = Math.max(diff, Math.abs(Math.fround(f0[i]) - v0[i]));

console.log(JSON.stringify({
  object: b64.object,
  n: b64.data.length,
  dims: v0.length,
  index1: b64.data.length > 1 ? b64.data[1].index : -1,
  norm0: Math.sqrt(v0.reduce((s, x) => s + x * x, 0)),
  prompt_tokens: b64.usage ? b64.usage.prompt_tokens : -1,
  model: b64.model,
  max_diff_base64_float: diff,
}));
