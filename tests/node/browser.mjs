// browser.mjs — drives headless Chromium for tests/test_server_web.c over the DevTools
// protocol on a pipe (--remote-debugging-pipe: JSON messages ending in NUL on fds 3 and 4), so
// it needs Node's built-in modules only: no WebSocket, no puppeteer, no test switch in the page.
//
//   node browser.mjs cors SERVER_PORT KEY PROMPT
//     serves a page from a second origin (http://127.0.0.1:<free port>, Node's http) whose own
//     script POSTs JSON with `Authorization: Bearer KEY` to http://127.0.0.1:SERVER_PORT/
//     v1/chat/completions (temperature 0, max_tokens 16) and writes the outcome into its DOM;
//     prints {"origin", "result": {"ok", "content" | "error"}} read from that DOM.
//   node browser.mjs chat SERVER_PORT KEY PROMPT SCREENSHOT.png
//     opens the server's own page at /, types the key, temperature 0, max tokens 16 and the
//     prompt as a user would, presses Send, waits for the streamed reply to finish; prints
//     {"state", "text", "stats", "console"} and saves a screenshot.
//   node browser.mjs stop SERVER_PORT KEY PROMPT
//     the same with max tokens 2000; presses Stop once text has streamed in; prints
//     {"state", "text", "stats", "stop_enabled", "send_enabled", "console"}.
// Exit 0 with the JSON on stdout; 1 with the reason (and Chromium's stderr) on stderr.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [mode, serverPort, key, prompt, shot] = process.argv.slice(2);
const CHROMIUM = process.env.SPEX_CHROMIUM || 'chromium';
const TIMEOUT_MS = 30000;

function fail(msg) {
  process.stderr.write(`browser.mjs: ${msg}\n`);
  process.exit(1);
}

// ---------------------------------------------------------------- DevTools protocol client
class Cdp {
  constructor(toBrowser, fromBrowser) {
    this.w = toBrowser;
    this.next = 1;
    this.pending = new Map();
    this.listeners = [];
    let buf = '';
    fromBrowser.setEncoding('utf8');
    fromBrowser.on('data', (chunk) => {
      buf += chunk;
      let z;
      while ((z = buf.indexOf('\0')) >= 0) {
        const msg = JSON.parse(buf.slice(0, z));
        buf = buf.slice(z + 1);
        if (msg.id && this.pending.has(msg.id)) {
          const { resolve, reject, method } = this.pending.get(msg.id);
          this.pending.delete(msg.id);
          if (msg.error) reject(new Error(`${method}: ${msg.error.message}`));
          else resolve(msg.result);
        } else if (msg.method) {
          for (const l of this.listeners) l(msg);
        }
      }
    });
  }
  send(method, params = {}, sessionId) {
    const id = this.next++;
    const msg = { id, method, params };
    if (sessionId) msg.sessionId = sessionId;
    this.w.write(JSON.stringify(msg) + '\0');
    return new Promise((resolve, reject) => this.pending.set(id, { resolve, reject, method }));
  }
}

const profile = mkdtempSync(join(tmpdir(), 'spex-chromium-'));
const browser = spawn(CHROMIUM, ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
  '--no-first-run', '--no-default-browser-check', '--disable-extensions', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--remote-debugging-pipe', `--user-data-dir=${profile}`,
  '--window-size=1100,800', 'about:blank'], { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
let chromeErr = '';
browser.stderr.on('data', (d) => { chromeErr = (chromeErr + d).slice(-4000); });
browser.on('error', (e) => fail(`cannot start ${CHROMIUM}: ${e.message}`));
const cdp = new Cdp(browser.stdio[3], browser.stdio[4]);
const consoleLines = [];
let pageServer = null;

function cleanup() {
  try { browser.kill('SIGKILL'); } catch (e) { /* gone */ }
  if (pageServer) pageServer.close();
  try { rmSync(profile, { recursive: true, force: true }); } catch (e) { /* best effort */ }
}

async function openPage() {
  const { targetId } = await cdp.send('Target.createTarget', { url: 'about:blank' });
  const { sessionId } = await cdp.send('Target.attachToTarget', { targetId, flatten: true });
  cdp.listeners.push((m) => {
    if (m.sessionId !== sessionId) return;
    if (m.method === 'Runtime.consoleAPICalled') consoleLines.push(m.params.args.map((a) => a.value ?? a.description).join(' '));
    if (m.method === 'Runtime.exceptionThrown') consoleLines.push('exception: ' + m.params.exceptionDetails.text);
    if (m.method === 'Log.entryAdded') consoleLines.push(`${m.params.entry.level}: ${m.params.entry.text}`);
  });
  await cdp.send('Page.enable', {}, sessionId);
  await cdp.send('Runtime.enable', {}, sessionId);
  await cdp.send('Log.enable', {}, sessionId);
  return sessionId;
}

async function evaluate(sid, expression) {
  const r = await cdp.send('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true }, sid);
  if (r.exceptionDetails) throw new Error(`${expression}: ${r.exceptionDetails.text}`);
  return r.result.value;
}

// Polls expression until it is truthy; its value, or an error after TIMEOUT_MS.
async function waitFor(sid, expression, what) {
  const t0 = Date.now();
  for (;;) {
    const v = await evaluate(sid, expression);
    if (v) return v;
    if (Date.now() - t0 > TIMEOUT_MS) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// ---------------------------------------------------------------- the second origin's page
const CORS_PAGE = `<!doctype html><html><head><meta charset="utf-8"><title>cors probe</title></head><body>
<pre id="result"></pre>
<script>
(async () => {
  const q = new URLSearchParams(location.hash.slice(1));
  const out = document.getElementById('result');
  try {
    const res = await fetch('http://127.0.0.1:' + q.get('port') + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Authorization': 'Bearer ' + q.get('key') },
      body: JSON.stringify({ messages: [{ role: 'user', content: q.get('prompt') }], temperature: 0, max_tokens: 16 }),
    });
    const j = await res.json();
    out.textContent = JSON.stringify(res.ok ? { ok: true, status: res.status, content: j.choices[0].message.content }
                                            : { ok: false, status: res.status, error: JSON.stringify(j) });
  } catch (e) {
    out.textContent = JSON.stringify({ ok: false, error: String(e) });
  }
})();
</script></body></html>`;

async function corsMode() {
  pageServer = http.createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store' });
    res.end(CORS_PAGE);
  });
  await new Promise((r) => pageServer.listen(0, '127.0.0.1', r));
  const origin = `http://127.0.0.1:${pageServer.address().port}`;
  const sid = await openPage();
  const hash = new URLSearchParams({ port: serverPort, key, prompt }).toString();
  await cdp.send('Page.navigate', { url: `${origin}/probe.html#${hash}` }, sid);
  const text = await waitFor(sid, `document.getElementById('result') && document.getElementById('result').textContent`,
    'the probe page\'s result');
  return { origin, result: JSON.parse(text), console: consoleLines };
}

// Opens the server's page, types key, temperature 0, maxTokens and the prompt as a user
// would (Input.insertText into the focused field) and presses Send; the page's session.
async function sendFromPage(maxTokens) {
  const sid = await openPage();
  await cdp.send('Page.navigate', { url: `http://127.0.0.1:${serverPort}/` }, sid);
  await waitFor(sid, `document.getElementById('status') && document.getElementById('status').textContent === 'ready'`,
    'the page\'s status "ready"');
  const typeInto = async (id, text) => {
    await evaluate(sid, `(() => { const e = document.getElementById(${JSON.stringify(id)}); e.value = ''; e.focus(); return true; })()`);
    if (text) await cdp.send('Input.insertText', { text }, sid);
    await evaluate(sid, `document.getElementById(${JSON.stringify(id)}).dispatchEvent(new Event('change')), true`);
  };
  await typeInto('api-key', key);
  await typeInto('temperature', '0');
  await typeInto('max-tokens', String(maxTokens));
  await typeInto('input', prompt);
  await evaluate(sid, `document.getElementById('send').click(), true`);
  return sid;
}

// stop mode: once some text has streamed in, press Stop; the reply's state and text then.
async function stopMode() {
  const sid = await sendFromPage(2000);
  const last = `[...document.querySelectorAll('.msg.assistant')].pop()`;
  await waitFor(sid, `(() => { const m = ${last}; return m && m.dataset.state === 'streaming' && m.querySelector('.text').textContent.length > 0; })()`,
    'streamed text before Stop');
  const stopEnabled = await evaluate(sid, `!document.getElementById('stop').disabled`);
  await evaluate(sid, `document.getElementById('stop').click(), true`);
  const state = await waitFor(sid, `(() => { const s = ${last}.dataset.state; return s !== 'streaming' ? s : ''; })()`, 'the stop');
  const got = await evaluate(sid, `({ text: ${last}.querySelector('.text').textContent, stats: ${last}.querySelector('.stats').textContent,
      send_enabled: !document.getElementById('send').disabled })`);
  return { state, stop_enabled: stopEnabled, ...got, console: consoleLines };
}

async function chatMode() {
  const sid = await sendFromPage(16);
  const state = await waitFor(sid, `(() => { const m = document.querySelectorAll('.msg.assistant');
      const s = m.length ? m[m.length - 1].dataset.state : ''; return s && s !== 'streaming' ? s : ''; })()`,
    'the reply to finish');
  const got = await evaluate(sid, `(() => { const m = [...document.querySelectorAll('.msg.assistant')].pop();
      return { text: m.querySelector('.text').textContent, stats: m.querySelector('.stats').textContent,
               user: [...document.querySelectorAll('.msg.user .text')].map((e) => e.textContent) }; })()`);
  const png = await cdp.send('Page.captureScreenshot', { format: 'png' }, sid);
  writeFileSync(shot, Buffer.from(png.data, 'base64'));
  return { state, ...got, console: consoleLines, screenshot: shot };
}

const timer = setTimeout(() => { cleanup(); fail(`no result in ${TIMEOUT_MS * 2} ms; chromium said: ${chromeErr}`); }, TIMEOUT_MS * 2);
try {
  const out = mode === 'cors' ? await corsMode() : mode === 'chat' ? await chatMode()
    : mode === 'stop' ? await stopMode() : fail(`unknown mode '${mode}'`);
  process.stdout.write(JSON.stringify(out) + '\n');
  clearTimeout(timer);
  cleanup();
} catch (e) {
  clearTimeout(timer);
  cleanup();
  fail(`${e.message}; chromium said: ${chromeErr}`);
}
