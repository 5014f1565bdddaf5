// anthropic_messages.mjs PORT — the official @anthropic-ai/sdk client against `spex serve` on
// 127.0.0.1:PORT (its Anthropic Messages API): messages.create of the first demo problem,
// greedy, max_tokens 64; the same through messages.stream (the SDK's own event accumulator);
// messages.countTokens of the same conversation. Prints one JSON object to stdout:
//   {prompt, text_plain, text_stream, text_stream_final, stop_plain, stop_stream,
//    input_tokens, cache_read_input_tokens, count_tokens, output_tokens, output_tokens_stream,
//    id_ok, timings_present, draft_n}
// reasoning_format "none" (a spex / llama-server body field, sent as-is by the client) keeps
// the <think> section in the text block, so the texts compare byte for byte with `spex run --chat`.
// What it is not: the judge — tests/test_server_node.c compares the texts with `spex run`.
import Anthropic from '@anthropic-ai/sdk';
import { portArg, problems } from './common.mjs';

const port = portArg();
// maxRetries 0: a failed request must show up as a failure, not be silently retried.
const client = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: 'x', maxRetries: 0, timeout: 120000 });
const prompt = problems()[0];
const req = {
  model: 'target',
  max_tokens: 64,
  temperature: 0,
  messages: [{ role: 'user', content: prompt }],
  reasoning_format: 'none',
};

const textOf = (msg) => msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

const plain = await client.messages.create(req);

let textStream = '';
const stream = client.messages.stream(req);
stream.on('text', (t) => { textStream += t; });
const final = await stream.finalMessage();

const counted = await client.messages.countTokens({ model: req.model, messages: req.messages });

console.log(JSON.stringify({
  prompt,
  text_plain: textOf(plain),
  text_stream: textStream,
  text_stream_final: textOf(final),
  stop_plain: plain.stop_reason,
  stop_stream: final.stop_reason,
  input_tokens: plain.usage.input_tokens,
  cache_read_input_tokens: plain.usage.cache_read_input_tokens ?? 0,
  count_tokens: counted.input_tokens,
  output_tokens: plain.usage.output_tokens,
  output_tokens_stream: final.usage.output_tokens,
  id_ok: typeof plain.id === 'string' && plain.id.startsWith('msg_') && plain.type === 'message',
  timings_present: !!plain.timings && typeof plain.timings.predicted_n === 'number',
  draft_n: plain.timings && typeof plain.timings.draft_n === 'number' ? plain.timings.draft_n : -1,
}));
