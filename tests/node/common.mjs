// common.mjs — shared by openai_chat.mjs and load.mjs: the problems they ask (the user
// messages of models/demo.jsonl, then tests/data/default/heldout.jsonl) and the client.
// Not a test by itself; tests/test_server_node.c runs the two scripts and checks their output.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const root = fileURLToPath(new URL('../../', import.meta.url));

export function problems() {
  const out = [];
  for (const f of ['models/demo.jsonl', 'tests/data/default/heldout.jsonl']) {
    for (const line of readFileSync(root + f, 'utf8').split('\n')) {
      if (line.trim()) out.push(JSON.parse(line).user);
    }
  }
  return out;
}

export function client(port) {
  // maxRetries 0: a failed request must show up as a failure, not be silently retried.
  return new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'x', maxRetries: 0, timeout: 120000 });
}

export function portArg() {
  const port = Number(process.argv[2]);
  if (!Number.isInteger(port) || port <= 0) {
    console.error(`usage: node ${process.argv[1]} PORT`);
    process.exit(2);
  }
  return port;
}
