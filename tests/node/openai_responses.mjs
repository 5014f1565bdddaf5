// openai_responses.mjs PORT — the official openai client's Responses API against `spex serve`
// on 127.0.0.1:PORT: client.responses.create for the first demo problem, greedy,
// max_output_tokens 64, once plain and once with stream: true; then client.models.retrieve of
// the id /v1/models lists. Prints one JSON object to stdout:
//   {prompt, text_plain (the client's output_text), text_stream (output_text.delta joined),
//    status_plain, status_stream, output_tokens, input_tokens, output_tokens_stream,
//    events_ok, first_event, last_event, n_events, id_plain, model_retrieved}
// reasoning_format "none" (a spex / llama-server body field the client sends as-is) keeps the
// <think> section in the message text, so the texts compare byte for byte with `spex run --chat`.
// What it is not: the judge — tests/test_server_node.c compares the texts with `spex run`.
import { client, portArg, problems } from './common.mjs';

const port = portArg();
const openai = client(port);
const prompt = problems()[0];
const req = {
  model: 'target',
  input: prompt,
  temperature: 0,
  max_output_tokens: 64,
  reasoning_format: 'none',
};

const plain = await openai.responses.create(req);

let textStream = '';
let final = null;
let eventsOk = true;
let lastSeq = -1;
const types = [];
const stream = await openai.responses.create({ ...req, stream: true });
for await (const ev of stream) {
  types.push(ev.type);
  if (typeof ev.sequence_number !== 'number' || ev.sequence_number !== lastSeq + 1) eventsOk = false;
  lastSeq = ev.sequence_number;
  if (ev.type === 'response.output_text.delta') textStream += ev.delta;
  if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
}

const list = await openai.models.list();
const id = list.data[0].id;
const one = await openai.models.retrieve(id);

console.log(JSON.stringify({
  prompt,
  text_plain: plain.output_text,
  text_stream: textStream,
  status_plain: plain.status,
  status_stream: final ? final.status : null,
  output_tokens: plain.usage ? plain.usage.output_tokens : -1,
  input_tokens: plain.usage ? plain.usage.input_tokens : -1,
  output_tokens_stream: final && final.usage ? final.usage.output_tokens : -1,
  events_ok: eventsOk,
  first_event: types[0] || null,
  last_event: types[types.length - 1] || null,
  n_events: types.length,
  id_plain: plain.id,
  model_retrieved: one.id === id && one.object === 'model',
}));
