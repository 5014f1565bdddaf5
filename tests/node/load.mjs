// load.mjs PORT — 16 concurrent streaming clients × 3 requests each (the official openai
// client) against `spex serve` on 127.0.0.1:PORT (started with -np 4): every request asks a
// different-in-turn demo / held-out problem, greedy, max_tokens 48, reasoning_format none.
// Prints one JSON object to stdout:
//   {results: [{client, request, prompt, text, finish, completion_tokens}],
//    tokens_predicted_before, tokens_predicted_after}
// (the last two: llamacpp:tokens_predicted_total from /metrics around the load). Exits
// non-zero on any error. What it is not: the judge — tests/test_server_node.c compares every
// text with a serial `spex run` and the metric delta with the sum of completion tokens.
import { client, portArg, problems } from './common.mjs';

const CLIENTS = 16;
const REQUESTS = 3;
const port = portArg();
const all = problems();

async function tokensPredicted() {
  const r = await fetch(`http://127.0.0.1:${port}/metrics`);
  if (!r.ok) throw new Error(`/metrics: HTTP ${r.status}`);
  const m = /^llamacpp:tokens_predicted_total\s+([0-9.e+]+)\s*$/m.exec(await r.text());
  if (!m) throw new Error('/metrics: no llamacpp:tokens_predicted_total');
  return Number(m[1]);
}

async function one(openai, c, k) {
  const prompt = all[(c * REQUESTS + k) % all.length];
  const stream = await openai.chat.completions.create({
    model: 'target',
    messages: [{ role: 'user', content: prompt }],
    temperature: 0,
    max_tokens: 48,
    stream: true,
    stream_options: { include_usage: true },
    reasoning_format: 'none',
  });
  let text = '';
  let finish = null;
  let tokens = -1;
  for await (const chunk of stream) {
    const ch = chunk.choices && chunk.choices[0];
    if (ch && ch.delta && typeof ch.delta.content === 'string') text += ch.delta.content;
    if (ch && ch.finish_reason) finish = ch.finish_reason;
    if (chunk.usage) tokens = chunk.usage.completion_tokens;
  }
  if (!finish) throw new Error(`client ${c} request ${k}: no finish_reason`);
  if (tokens < 0) throw new Error(`client ${c} request ${k}: no usage chunk`);
  return { client: c, request: k, prompt, text, finish, completion_tokens: tokens };
}

async function worker(c) {
  const openai = client(port);   // one client (one connection pool) per simulated user
  const out = [];
  for (let k = 0; k < REQUESTS; k++) out.push(await one(openai, c, k));
  return out;
}

try {
  const before = await tokensPredicted();
  const per = await Promise.all(Array.from({ length: CLIENTS }, (_, c) => worker(c)));
  const after = await tokensPredicted();
  console.log(JSON.stringify({ results: per.flat(), tokens_predicted_before: before, tokens_predicted_after: after }));
} catch (e) {
  console.error(`load.mjs: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
}
