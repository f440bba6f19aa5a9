// The page of `offload-lock serve`: its HTML, script and style. The script
// builds every row with textContent (never innerHTML), so a label is shown
// as the text it is, whatever it holds; it also shows control and
// bidirectional characters escaped, as the command does on a terminal. The
// Content-Security-Policy of the page allows scripts and styles from the
// server only, so nothing inline would run even if some text got in.
#include "cli/serve_page.hpp"

namespace offload_lock::cli {

const char* serve_page_html() {
  return R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>offload-lock</title>
<link rel="stylesheet" href="/style.css">
</head>
<body>
<header>
<h1>offload-lock</h1>
<p><span id="lock"></span> <span id="state" class="state">connecting</span></p>
</header>
<section>
<h2>GPU slots</h2>
<table id="slots"><thead><tr><th>GPU</th><th>Holder</th><th>Held</th><th>Expected free</th><th>Max hold</th><th>Priority</th></tr></thead><tbody></tbody></table>
</section>
<section>
<h2>Queue</h2>
<p id="queue-empty">Nobody waits.</p>
<table id="queue"><thead><tr><th>#</th><th>Waiter</th><th>Priority</th><th>Waited</th><th>ETA</th><th>For</th></tr></thead><tbody></tbody></table>
</section>
<section>
<h2>History</h2>
<p id="history-note"></p>
<ol id="history"></ol>
</section>
<footer>Read-only view. <a href="/status.json">status.json</a> · <a href="/metrics">metrics</a> · <a href="/history.json">history.json</a></footer>
<script src="/app.js"></script>
</body>
</html>
)html";
}

const char* serve_page_script() {
  return R"js('use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  // What a terminal or a reader could be fooled by, escaped as the command
  // escapes it: control characters, backslash, bidirectional controls.
  const shown = (s) =>
    String(s ?? '').replace(/[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\\]/g, (c) => {
      if (c === '\\') return '\\\\';
      if (c === '\n') return '\\n';
      const code = c.charCodeAt(0);
      return code < 0x80 ? '\\x' + code.toString(16).padStart(2, '0') : '\\u' + code.toString(16).padStart(4, '0');
    });
  // "850ms", "42s", "5m12s", "2h03m", as the command writes durations.
  const dur = (ms) => {
    ms = Math.max(0, Math.round(ms));
    const two = (v) => (v < 10 ? '0' : '') + v;
    if (ms < 1000) return ms + 'ms';
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + two(s % 60) + 's';
    return Math.floor(s / 3600) + 'h' + two(Math.floor(s / 60) % 60) + 'm';
  };
  const who = (label, pid, host) =>
    shown(label || 'an unnamed process') + ' (pid ' + pid + (host ? ', host ' + shown(host) : '') + ')';
  const row = (cells, cls) => {
    const tr = document.createElement('tr');
    if (cls) tr.className = cls;
    for (const c of cells) {
      const td = document.createElement('td');
      td.textContent = c;
      tr.appendChild(td);
    }
    return tr;
  };
  let last = null;
  let receivedAt = 0;
  const render = () => {
    if (!last) return;
    const moved = Date.now() - receivedAt;
    const st = last.status;
    $('lock').textContent = shown(last.lock);
    const slots = [];
    for (const s of st.slots || []) {
      let holder = 'free';
      if (s.held) {
        holder = who(s.label, s.pid, s.host);
        if (s.idleForMs !== null && s.idleForMs !== undefined) holder += ', idle for ' + dur(s.idleForMs + moved);
        if (s.yieldRequested) holder += ', asked to make way for ' + shown(s.yieldRequested.label);
      } else if (s.busyBy === 'gpulease' && st.gpulease) {
        // The lock is free, but a gpulease holder has the GPU.
        const l = st.gpulease;
        holder = l.state === 'held' && l.pid
          ? 'gpulease: ' + shown(l.class || 'unclassed') + ' lease (pid ' + l.pid + ', epoch ' + l.epoch +
            (l.reason ? ', reason "' + shown(l.reason) + '"' : '') + (l.origin ? ', origin "' + shown(l.origin) + '"' : '') + ')'
          : 'gpulease: ' + shown(l.why);
      } else if (s.stale) {
        holder = 'free (stale: ' + shown(s.stale) + ')';
      }
      let expected = '-';
      if (s.held && s.expectMs) {
        const left = s.expectMs - s.heldForMs - moved;
        expected = left >= 0 ? 'in ~' + dur(left) : 'overdue by ' + dur(-left);
      }
      let held = s.held ? dur(s.heldForMs + moved) : '-';
      if (!s.held && s.busyBy === 'gpulease' && st.gpulease && st.gpulease.heldForMs !== null)
        held = dur(st.gpulease.heldForMs + moved);
      // As top shows it: what is left of the maximum hold, or that it passed.
      let maxHold = '-';
      if (s.held && s.maxHoldInMs !== null && s.maxHoldInMs !== undefined)
        maxHold = s.maxHoldInMs - moved > 0 ? 'in ' + dur(s.maxHoldInMs - moved) : 'passed';
      slots.push(row(['gpu' + s.gpu, holder, held, expected, maxHold,
                      s.held && s.priority !== null ? String(s.priority) : '-'], s.busy ? 'held' : 'free'));
    }
    $('slots').tBodies[0].replaceChildren(...slots);
    const queue = [];
    for (const w of st.waiters || []) {
      const slot = w.gpu !== null ? 'gpu' + w.gpu : w.gpus > 1 ? 'any of ' + w.gpus : 'gpu0';
      queue.push(row([w.position ? '#' + w.position : '-', who(w.label, w.pid, w.host), String(w.priority),
                      dur(w.waitedMs + moved), w.etaMs !== null ? '~' + dur(w.etaMs - moved) : '-', slot]));
    }
    $('queue').tBodies[0].replaceChildren(...queue);
    $('queue').hidden = queue.length === 0;
    $('queue-empty').hidden = queue.length !== 0;
    const history = [];
    for (const line of last.recentText || []) {
      const li = document.createElement('li');
      li.textContent = line;
      history.push(li);
    }
    $('history').replaceChildren(...history);
    $('history-note').textContent = last.historyKept ? '' : 'No history is kept for this lock (offload-lock history --start begins one).';
  };
  const events = new EventSource('/events');
  events.addEventListener('board', (ev) => {
    last = JSON.parse(ev.data);
    receivedAt = Date.now();
    $('state').textContent = 'live';
    render();
  });
  events.addEventListener('error', () => {
    $('state').textContent = 'reconnecting';
  });
  setInterval(render, 1000);
})();
)js";
}

const char* serve_page_style() {
  return R"css(body { font: 15px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 70em; padding: 0 1em; color: #222; }
h1 { font-size: 1.4em; margin: 0; }
h2 { font-size: 1.1em; margin: 1.2em 0 0.4em; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 0.25em 0.6em; border-bottom: 1px solid #ddd; white-space: pre-wrap; word-break: break-word; }
tr.held td:first-child { border-left: 4px solid #c60; }
tr.free td:first-child { border-left: 4px solid #3a3; }
.state { color: #777; font-size: 0.9em; }
ol { font-family: ui-monospace, monospace; font-size: 0.9em; padding-left: 1.5em; white-space: pre-wrap; word-break: break-word; }
footer { margin-top: 2em; color: #777; font-size: 0.9em; }
)css";
}

}  // namespace offload_lock::cli
