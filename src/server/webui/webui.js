// webui.js — spex serve's chat page: sends the conversation to /v1/chat/completions with
// stream: true, reads the server-sent events with fetch() (no EventSource: it cannot POST or
// send an Authorization header), shows the text as it arrives and, from the last chunk's
// llama.cpp `timings`, the speed and the speculative acceptance (draft_n_accepted / draft_n).
// No framework, no outside fetch; text is set with textContent only, never parsed as HTML.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const els = {
    messages: $('messages'), input: $('input'), send: $('send'), stop: $('stop'), form: $('composer'),
    system: $('system'), temperature: $('temperature'), maxTokens: $('max-tokens'), apiKey: $('api-key'),
    status: $('status'), clear: $('clear'),
  };
  const history = [];      // {role, content} of the finished turns
  let controller = null;   // the running request's AbortController

  // Settings survive a reload (this origin's storage only; the key too, as typed by the user).
  const KEEP = { system: 'spex.system', temperature: 'spex.temperature', maxTokens: 'spex.max_tokens', apiKey: 'spex.api_key' };
  for (const [k, name] of Object.entries(KEEP)) {
    try {
      const v = localStorage.getItem(name);
      if (v !== null) els[k].value = v;
    } catch (e) { /* storage disabled: defaults */ }
    els[k].addEventListener('change', () => { try { localStorage.setItem(name, els[k].value); } catch (e) { /* ignore */ } });
  }

  function headers() {
    const h = { 'Content-Type': 'application/json' };
    const key = els.apiKey.value.trim();
    if (key) h['Authorization'] = 'Bearer ' + key;
    return h;
  }

  function addMessage(role, text) {
    const div = document.createElement('div');
    div.className = 'msg ' + role;
    const r = document.createElement('div');
    r.className = 'role';
    r.textContent = role;
    const reasoning = document.createElement('div');
    reasoning.className = 'reasoning';
    const t = document.createElement('div');
    t.className = 'text';
    t.textContent = text || '';
    const stats = document.createElement('div');
    stats.className = 'stats';
    div.append(r, reasoning, t, stats);
    els.messages.append(div);
    els.messages.scrollTop = els.messages.scrollHeight;
    return { div, reasoning, text: t, stats };
  }

  // "12 tokens, 48.1 tok/s · speculative: 9/14 drafted tokens accepted (64%) in 5 rounds"
  function statsLine(tm) {
    if (!tm) return '';
    const parts = [];
    if (typeof tm.predicted_n === 'number') {
      let s = tm.predicted_n + ' tokens';
      if (tm.predicted_per_second > 0) s += ', ' + tm.predicted_per_second.toFixed(1) + ' tok/s';
      parts.push(s);
    }
    if (typeof tm.prompt_n === 'number') parts.push('prompt ' + tm.prompt_n + (tm.cache_n ? ' (+' + tm.cache_n + ' cached)' : ''));
    if (typeof tm.draft_n === 'number' && tm.draft_n > 0) {
      const acc = tm.draft_n_accepted || 0;
      let s = 'speculative: ' + acc + '/' + tm.draft_n + ' drafted tokens accepted (' + Math.round(100 * acc / tm.draft_n) + '%)';
      if (tm.draft_rounds) s += ' in ' + tm.draft_rounds + ' rounds';
      parts.push(s);
    } else {
      parts.push('speculative: nothing drafted');
    }
    return parts.join(' · ');
  }

  function setBusy(busy) {
    els.send.disabled = busy;
    els.stop.disabled = !busy;
  }

  async function errorText(res) {
    try {
      const j = await res.json();
      if (j && j.error && j.error.message) return 'HTTP ' + res.status + ': ' + j.error.message;
    } catch (e) { /* not JSON */ }
    return 'HTTP ' + res.status + ' ' + res.statusText;
  }

  // Calls onEvent(obj) for each `data:` JSON event of an SSE body; returns at [DONE] or the end.
  async function readEvents(body, onEvent) {
    const reader = body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.search(/\r?\n\r?\n/)) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut).replace(/^\r?\n\r?\n/, '');
        const data = event.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
        if (!data) continue;   // a comment (": ping") or an empty event
        if (data === '[DONE]') return;
        onEvent(JSON.parse(data));
      }
    }
  }

  async function send() {
    const content = els.input.value;
    if (!content.trim() || controller) return;
    els.input.value = '';
    history.push({ role: 'user', content });
    addMessage('user', content);
    const out = addMessage('assistant', '');
    out.div.dataset.state = 'streaming';
    const messages = [];
    if (els.system.value.trim()) messages.push({ role: 'system', content: els.system.value });
    messages.push(...history);
    const req = { messages, stream: true };
    const temp = parseFloat(els.temperature.value);
    if (Number.isFinite(temp)) req.temperature = temp;
    const maxTokens = parseInt(els.maxTokens.value, 10);
    if (maxTokens > 0) req.max_tokens = maxTokens;

    controller = new AbortController();
    setBusy(true);
    let text = '', timings = null, state = 'done';
    try {
      const res = await fetch('v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(req), signal: controller.signal });
      if (!res.ok) throw new Error(await errorText(res));
      await readEvents(res.body, (ev) => {
        if (ev.error) throw new Error(ev.error.message || 'server error');
        const ch = ev.choices && ev.choices[0];
        const d = ch && ch.delta;
        if (d && typeof d.content === 'string') text += d.content, out.text.textContent = text;
        if (d && typeof d.reasoning_content === 'string') out.reasoning.textContent += d.reasoning_content;
        if (ev.timings) timings = ev.timings;
        els.messages.scrollTop = els.messages.scrollHeight;
      });
      out.stats.textContent = statsLine(timings);
    } catch (e) {
      if (e.name === 'AbortError') {
        state = 'stopped';
        out.stats.textContent = 'stopped';
      } else {
        state = 'error';
        out.div.classList.add('error');
        out.text.textContent = text + (text ? '\n' : '') + String(e.message || e);
      }
    } finally {
      if (text) history.push({ role: 'assistant', content: text });
      out.div.dataset.state = state;
      controller = null;
      setBusy(false);
      els.input.focus();
    }
  }

  els.form.addEventListener('submit', (e) => { e.preventDefault(); send(); });
  $('settings').addEventListener('submit', (e) => e.preventDefault());   // Enter in a field: no reload
  els.input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  els.stop.addEventListener('click', () => { if (controller) controller.abort(); });
  els.clear.addEventListener('click', () => {
    if (controller) controller.abort();
    history.length = 0;
    els.messages.textContent = '';
  });

  // /health needs no key: 200 ready, 503 while the model loads.
  async function health() {
    try {
      const res = await fetch('health');
      els.status.textContent = res.ok ? 'ready' : 'loading model…';
      if (!res.ok) setTimeout(health, 1000);
    } catch (e) {
      els.status.textContent = 'server unreachable';
      setTimeout(health, 3000);
    }
  }
  health();
})();
