// server_concurrency.mjs PORT CLIENTS REQUESTS [OFFSET] — aggregate decode throughput of `spex serve`
// under CLIENTS concurrent streaming chat clients (the official openai client), each sending
// REQUESTS greedy requests (max_tokens 128) over the demo and held-out problems, starting at
// problem OFFSET (default 0; the interleaved bench moves it each round). Prints one
// JSON line: {clients, requests, completion_tokens, seconds, tokens_per_second,
// per_request_tps_mean}. Run by bench/server_concurrency.sh; needs tests/node's node_modules.
import { client, problems } from '../tests/node/common.mjs';

const port = Number(process.argv[2]);
const CLIENTS = Number(process.argv[3] || 4);
const REQUESTS = Number(process.argv[4] || 2);
const OFFSET = Number(process.argv[5] || 0);
const all = problems();
const openai = client(port);

async function one(c, k) {
  const t0 = performance.now();
  const stream = await openai.chat.completions.create({
    model: 'target',
    messages: [{ role: 'user', content: all[(OFFSET + c * REQUESTS + k) % all.length] }],
    temperature: 0,
    max_tokens: 128,
    stream: true,
    stream_options: { include_usage: true },
  });
  let tokens = 0;
  for await (const chunk of stream) if (chunk.usage) tokens = chunk.usage.completion_tokens;
  return { tokens, seconds: (performance.now() - t0) / 1000 };
}

const t0 = performance.now();
const per = await Promise.all(
  Array.from({ length: CLIENTS }, async (_, c) => {
    const out = [];
    for (let k = 0; k < REQUESTS; k++) out.push(await one(c, k));
    return out;
  }),
);
const seconds = (performance.now() - t0) / 1000;
const flat = per.flat();
const tokens = flat.reduce((a, r) => a + r.tokens, 0);
const perReq = flat.reduce((a, r) => a + r.tokens / r.seconds, 0) / flat.length;
console.log(JSON.stringify({ clients: CLIENTS, requests: flat.length, completion_tokens: tokens, seconds,
  tokens_per_second: tokens / seconds, per_request_tps_mean: perReq }));
