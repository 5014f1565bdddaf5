// load.mjs PORT — 16 concurrent streaming clients × 3 requests each (the official openai
// client) against `spex serve` on 127.0.0.1:PORT (started with -np 4): every request asks a
// different-in-turn demo / held-out problem, greedy, max_tokens 48, reasoning_format none.
// Prints one JSON object to stdout:
//   {results: [{client, request, prompt, text, finish, completion_tokens, prompt_n}],
//    metrics_before, metrics_after}
// (prompt_n: the prompt tokens the server processed, from the usage chunk's timings; the
// metrics: the counters and gauges of METRICS read from /metrics around the load). Exits
// non-zero on any error. What it is not: the judge — tests/test_server_node.c compares every
// text with a serial `spex run` and the metric deltas with the results' sums.
import { client, portArg, problems } from './common.mjs';

const CLIENTS = 16;
const REQUESTS = 3;
const port = portArg();
const all = problems();

const METRICS = [
  'llamacpp:prompt_tokens_total', 'llamacpp:tokens_predicted_total', 'llamacpp:requests_processing',
  'llamacpp:requests_deferred', 'llamacpp:spec_decode_num_draft_tokens_total',
  'llamacpp:spec_decode_num_accepted_tokens_total', 'spex:requests_total', 'spex:requests_cancelled_total',
];

async function metrics() {
  const r = await fetch(`http://127.0.0.1:${port}/metrics`);
  if (!r.ok) throw new Error(`/metrics: HTTP ${r.status}`);
  const text = await r.text();
  const out = {};
  for (const name of METRICS) {
    const m = new RegExp(`^${name}\\s+([0-9.e+-]+)\\s*$`, 'm').exec(text);
    if (!m) throw new Error(`/metrics: no ${name}`);
    out[name] = Number(m[1]);
  }
  return out;
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
  let promptN = -1;
  for await (const chunk of stream) {
    const ch = chunk.choices && chunk.choices[0];
    if (ch && ch.delta && typeof ch.delta.content === 'string') text += ch.delta.content;
    if (ch && ch.finish_reason) finish = ch.finish_reason;
    if (chunk.usage) tokens = chunk.usage.completion_tokens;
    if (chunk.usage && chunk.timings) promptN = chunk.timings.prompt_n;   // llama.cpp's field, kept by the client
  }
  if (!finish) throw new Error(`client ${c} request ${k}: no finish_reason`);
  if (tokens < 0) throw new Error(`client ${c} request ${k}: no usage chunk`);
  if (!(promptN >= 0)) throw new Error(`client ${c} request ${k}: no timings.prompt_n in the usage chunk`);
  return { client: c, request: k, prompt, text, finish, completion_tokens: tokens, prompt_n: promptN };
}

async function worker(c) {
  const openai = client(port);   // one client (one connection pool) per simulated user
  const out = [];
  for (let k = 0; k < REQUESTS; k++) out.push(await one(openai, c, k));
  return out;
}

try {
  const before = await metrics();
  const per = await Promise.all(Array.from({ length: CLIENTS }, (_, c) => worker(c)));
  const after = await metrics();
  console.log(JSON.stringify({ results: per.flat(), metrics_before: before, metrics_after: after }));
} catch (e) {
  console.error(`load.mjs: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
}
