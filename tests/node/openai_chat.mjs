// openai_chat.mjs PORT — the official openai client against `spex serve` on 127.0.0.1:PORT:
// one non-streaming and one streaming chat completion of the first demo problem, greedy,
// max_tokens 64. Prints one JSON object to stdout:
//   {prompt, text_plain, text_stream, finish_plain, finish_stream, completion_tokens,
//    timings_present, timings_stream_present, draft_n, draft_n_accepted}
// reasoning_format "none" (a spex / llama-server body field, sent as-is by the client) keeps
// the <think> section in `content`, so the texts compare byte for byte with `spex run --chat`.
// What it is not: the judge — tests/test_server_node.c compares the texts with `spex run`.
import { client, portArg, problems } from './common.mjs';

const port = portArg();
const openai = client(port);
const prompt = problems()[0];
const req = {
  model: 'target',
  messages: [{ role: 'user', content: prompt }],
  temperature: 0,
  max_tokens: 64,
  reasoning_format: 'none',
};

const plain = await openai.chat.completions.create(req);
const choice = plain.choices[0];

let textStream = '';
let finishStream = null;
let timingsStream = null;
const stream = await openai.chat.completions.create({ ...req, stream: true });
for await (const chunk of stream) {
  const c = chunk.choices && chunk.choices[0];
  if (c && c.delta && typeof c.delta.content === 'string') textStream += c.delta.content;
  if (c && c.finish_reason) finishStream = c.finish_reason;
  if (chunk.timings) timingsStream = chunk.timings;
}

const t = plain.timings;
console.log(JSON.stringify({
  prompt,
  text_plain: choice.message.content,
  text_stream: textStream,
  finish_plain: choice.finish_reason,
  finish_stream: finishStream,
  completion_tokens: plain.usage ? plain.usage.completion_tokens : -1,
  timings_present: !!t && typeof t.predicted_n === 'number' && typeof t.predicted_ms === 'number',
  timings_stream_present: !!timingsStream,
  draft_n: t && typeof t.draft_n === 'number' ? t.draft_n : -1,
  draft_n_accepted: t && typeof t.draft_n_accepted === 'number' ? t.draft_n_accepted : -1,
}));
