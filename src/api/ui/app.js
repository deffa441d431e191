// The status page: one event stream (/events, read with fetch so that a bearer token can go
// in a header), the process table read again when a process event says it changed (and every
// PROCESS_REFRESH_MS), the workers' statistics every METRICS_INTERVAL_MS for q/s and rcodes.
// Every text from the API is set with textContent: nothing it says is parsed as HTML.
'use strict';

const METRICS_INTERVAL_MS = 5000;
const PROCESS_REFRESH_MS = 15000;
const CHART_SAMPLES = 60;
const EVENTS_SHOWN = 50;
const CHANGES_SHOWN = 20;
const TRANSPORTS = ['udp', 'tcp', 'dot', 'doh', 'doq', 'xdp'];
// kresd's latency bins (answers per bin, not cumulative) and their upper bounds.
const LATENCY_BINS = [['1ms', '1 ms'], ['10ms', '10 ms'], ['50ms', '50 ms'], ['100ms', '100 ms'],
  ['250ms', '250 ms'], ['500ms', '500 ms'], ['1000ms', '1 s'], ['1500ms', '1.5 s'],
  ['slow', '> 1.5 s']];
const RCODES = [['NOERROR', ['noerror', 'nodata']], ['NXDOMAIN', ['nxdomain']],
  ['SERVFAIL', ['servfail']]];

const page = {
  token: null, // kept in memory only; never in a URL, never stored
  role: null,
  lastEventId: null,
  processes: [],
  processTimer: null,
  trace: null, // the trace route, when the resolver has one
  lastStats: null, // { at, total, rcodes: {NOERROR: n, ...} }
  samples: [],
  applied: 0,
};

const $ = (id) => document.getElementById(id);

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

class Unauthorized extends Error {}

async function api(path, init) {
  const options = Object.assign({ cache: 'no-store', credentials: 'omit' }, init || {});
  const headers = new Headers(options.headers || {});
  if (page.token) headers.set('Authorization', 'Bearer ' + page.token);
  options.headers = headers;
  const response = await fetch(path, options);
  if (response.status === 401) {
    askForToken('');
    throw new Unauthorized('the API asks for a bearer token');
  }
  return response;
}

async function json(path) {
  const response = await api(path);
  if (!response.ok) throw new Error(path + ': ' + response.status);
  return response.json();
}

function askForToken(error) {
  $('main').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = error;
  $('token').focus();
}

// ---- time and numbers ------------------------------------------------------------------

function duration(seconds) {
  if (!(seconds >= 0)) return '–';
  const s = Math.floor(seconds);
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
  if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
  return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
}

function clock(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleTimeString();
}

function exitText(exit) {
  if (exit === null || exit === undefined) return '–';
  if (typeof exit === 'object') {
    if ('code' in exit) return 'exit ' + exit.code;
    if (exit.signaled) return 'signal ' + exit.signaled.signal + (exit.signaled.core_dumped ? ' (core dumped)' : '');
    return JSON.stringify(exit);
  }
  return String(exit);
}

// ---- processes ---------------------------------------------------------------------------

function renderProcesses() {
  const body = $('processes').tBodies[0];
  const now = Date.now() / 1000;
  const rows = page.processes.map((p) => {
    const row = el('tr');
    row.dataset.name = p.name;
    const up = p.state === 'running' && p.since ? duration(now - p.since) : '–';
    const cells = [p.name, p.pid ?? '–', p.state, up, p.restarts, exitText(p.last_exit)];
    const classes = ['name', 'pid', 'state', 'uptime', 'restarts', 'last-exit'];
    cells.forEach((text, i) => row.appendChild(el('td', text, classes[i])));
    const state = row.children[2];
    state.classList.add(p.state === 'running' ? 'ok' : p.state === 'failed' ? 'bad' : 'warn');
    if (p.failure) state.title = p.failure;
    return row;
  });
  body.replaceChildren(...rows);
  const workers = page.processes.filter((p) => p.type === 'KRESD');
  $('workers-ready').textContent = workers.filter((p) => p.ready_at && p.state === 'running').length;
  const manager = page.processes.find((p) => p.failures);
  const failures = $('manager-failures');
  if (manager) {
    const f = manager.failures;
    const parts = ['manager failures: process ' + f.process_failures,
      'task ' + f.task_failures + ' (' + f.task_failures_total + ' in all)'];
    if (f.last_failure) parts.push('last: ' + f.last_failure);
    failures.textContent = parts.join(', ');
  } else {
    failures.textContent = '';
  }
}

async function refreshProcesses() {
  page.processes = await json('/processes');
  renderProcesses();
}

// A process event: read the table once the burst is over (a restart is three events).
function processesChanged() {
  if (page.processTimer !== null) return;
  page.processTimer = setTimeout(() => {
    page.processTimer = null;
    refreshProcesses().catch(showProblem);
  }, 150);
}

// ---- configuration -----------------------------------------------------------------------

async function refreshIdentity() {
  const who = await json('/ui/whoami');
  page.role = who.role;
  $('role').textContent = who.role;
  $('version').textContent = who.version;
  $('etag').textContent = who.etag;
  $('workers-configured').textContent = who.workers;
  $('admin-panel').hidden = who.role !== 'admin';
  return who;
}

function addChange(record, result, detail, className) {
  const item = el('li');
  item.className = 'change ' + className;
  item.appendChild(el('span', clock(record.time) + ' ', 'muted'));
  item.appendChild(el('strong', result));
  item.appendChild(el('span', ' (' + (record.cause || '') + ')', 'muted'));
  if (detail) item.appendChild(el('span', ': ' + detail, 'reason'));
  const list = $('changes');
  list.prepend(item);
  while (list.children.length > CHANGES_SHOWN) list.lastChild.remove();
}

// ---- events ------------------------------------------------------------------------------

function describe(record) {
  const skip = new Set(['kind', 'id', 'time']);
  return Object.keys(record).filter((k) => !skip.has(k)).map((k) => {
    const v = record[k];
    return k + '=' + (typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v));
  }).join(' ');
}

function onEvent(kind, record, replayed) {
  const list = $('events');
  const item = el('li');
  item.appendChild(el('span', clock(record.time || Date.now() / 1000) + ' ', 'muted'));
  item.appendChild(el('strong', kind));
  item.appendChild(el('span', ' ' + describe(record)));
  list.prepend(item);
  while (list.children.length > EVENTS_SHOWN) list.lastChild.remove();
  switch (kind) {
    case 'config-applied':
      page.applied += 1;
      $('applied-count').textContent = page.applied;
      addChange(record, 'applied', (record.changed || []).join(', '), 'ok');
      if (!replayed) refreshIdentity().catch(showProblem);
      break;
    case 'config-refused':
      addChange(record, 'refused', record.reason, 'bad');
      break;
    case 'config-rolled-back':
      addChange(record, 'rolled back', record.reason, 'bad');
      if (!replayed) refreshIdentity().catch(showProblem);
      break;
    case 'manager-started':
      if (!replayed) refreshIdentity().catch(showProblem);
      break;
    default:
      if (kind.startsWith('process-')) processesChanged();
      else if (kind.startsWith('rpz-') && !replayed) refreshRpz().catch(showProblem);
  }
}

function onMessage(block, replayed) {
  let id = null; let kind = 'message'; const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'id') id = value;
    else if (field === 'event') kind = value;
    else if (field === 'data') data.push(value);
  }
  if (data.length === 0) return;
  if (id) page.lastEventId = id;
  let record;
  try { record = JSON.parse(data.join('\n')); } catch (e) { return; }
  onEvent(kind, record, replayed);
}

async function follow(from) {
  const stream = $('stream');
  let delay = 1000;
  for (;;) {
    try {
      const last = page.lastEventId || from;
      const response = await api('/events', { headers: { 'Last-Event-ID': last } });
      if (!response.ok) throw new Error('/events: ' + response.status);
      stream.textContent = 'live';
      stream.className = 'badge ok';
      delay = 1000;
      // What the log kept comes at once; later events are live.
      const started = Date.now();
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          onMessage(block, Date.now() - started < 200);
        }
      }
    } catch (e) {
      if (e instanceof Unauthorized) return;
    }
    stream.textContent = 'reconnecting';
    stream.className = 'badge warn';
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 30000);
    refreshIdentity().then(refreshProcesses).catch(showProblem);
  }
}

// ---- traffic -----------------------------------------------------------------------------

function sumStats(stats) {
  const sum = { total: 0, answers: 0, cached: 0, rcodes: {}, bins: {} };
  for (const [name] of RCODES) sum.rcodes[name] = 0;
  for (const [bin] of LATENCY_BINS) sum.bins[bin] = 0;
  for (const worker of Object.values(stats)) {
    const request = (worker && worker.request) || {};
    const answer = (worker && worker.answer) || {};
    // Queries from clients, by transport (`total` counts kresd's own internal requests too).
    for (const transport of TRANSPORTS) sum.total += Number(request[transport]) || 0;
    sum.answers += Number(answer.total) || 0;
    sum.cached += Number(answer.cached) || 0;
    for (const [bin] of LATENCY_BINS) sum.bins[bin] += Number(answer[bin]) || 0;
    for (const [name, keys] of RCODES) {
      for (const key of keys) sum.rcodes[name] += Number(answer[key]) || 0;
    }
  }
  return sum;
}

async function refreshMetrics() {
  const stats = await json('/metrics/json');
  const now = { at: Date.now() / 1000, ...sumStats(stats) };
  const before = page.lastStats;
  page.lastStats = now;
  $('answers-total').textContent = now.answers;
  $('hit-ratio').textContent = now.answers > 0
    ? Math.round((100 * now.cached) / now.answers) + ' %' : '–';
  if (!before) return;
  const seconds = Math.max(now.at - before.at, 0.001);
  // A restarted worker starts its counters again: never a negative rate.
  const rate = (a, b) => Math.max(a - b, 0) / seconds;
  const qps = rate(now.total, before.total);
  $('qps').textContent = qps.toFixed(1);
  const rows = RCODES.map(([name]) => {
    const row = el('tr');
    row.dataset.rcode = name;
    row.appendChild(el('td', name));
    row.appendChild(el('td', rate(now.rcodes[name], before.rcodes[name]).toFixed(1)));
    row.appendChild(el('td', now.rcodes[name]));
    return row;
  });
  $('rcodes').tBodies[0].replaceChildren(...rows);
  const deltas = LATENCY_BINS.map(([bin]) => Math.max(now.bins[bin] - before.bins[bin], 0));
  $('p50').textContent = percentile(deltas, 0.5);
  $('p99').textContent = percentile(deltas, 0.99);
  page.samples.push(qps);
  if (page.samples.length > CHART_SAMPLES) page.samples.shift();
  drawChart();
}

// The upper bound of the bin that holds the `q` quantile of the answers counted in `deltas`.
function percentile(deltas, q) {
  const count = deltas.reduce((a, b) => a + b, 0);
  if (count === 0) return '–';
  let seen = 0;
  for (let i = 0; i < deltas.length; i += 1) {
    seen += deltas[i];
    if (seen >= q * count) return '≤ ' + LATENCY_BINS[i][1];
  }
  return LATENCY_BINS[LATENCY_BINS.length - 1][1];
}

// ---- RPZ zones ---------------------------------------------------------------------------

async function refreshRpz() {
  const zones = await json('/rpz');
  const rows = (Array.isArray(zones) ? zones : []).map((z) => {
    const row = el('tr');
    row.dataset.zone = z.zone;
    const last = z.last_transfer;
    const transfer = last ? last.kind + ' ' + last.result + ' at ' + clock(last.time)
      + (last.error ? ': ' + last.error : '') : '–';
    [z.zone, z.serial ?? '–', transfer, z.next_refresh ? clock(z.next_refresh) : '–',
      z.expired ? 'yes' : 'no'].forEach((text) => row.appendChild(el('td', text)));
    return row;
  });
  $('rpz').tBodies[0].replaceChildren(...rows);
  $('rpz-panel').hidden = rows.length === 0;
}

function drawChart() {
  const canvas = $('chart');
  const ctx = canvas.getContext('2d');
  const { width, height } = canvas;
  ctx.clearRect(0, 0, width, height);
  const style = getComputedStyle(document.body);
  const max = Math.max(1, ...page.samples);
  ctx.fillStyle = style.color;
  ctx.font = '11px sans-serif';
  ctx.fillText(max.toFixed(0) + ' q/s', 4, 12);
  ctx.textAlign = 'right';
  ctx.fillText('last ' + (CHART_SAMPLES * METRICS_INTERVAL_MS) / 60000 + ' min', width - 4, 12);
  ctx.textAlign = 'left';
  ctx.strokeStyle = '#2d6cdf';
  ctx.lineWidth = 2;
  ctx.beginPath();
  const step = width / (CHART_SAMPLES - 1);
  const offset = CHART_SAMPLES - page.samples.length;
  page.samples.forEach((q, i) => {
    const x = (offset + i) * step;
    const y = height - 4 - (q / max) * (height - 20);
    if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
  });
  ctx.stroke();
}

// ---- admin controls ----------------------------------------------------------------------

async function control(path, body) {
  const result = $('admin-result');
  result.textContent = '…';
  try {
    const init = { method: 'POST' };
    if (body !== undefined) {
      init.headers = { 'Content-Type': 'application/json' };
      init.body = JSON.stringify(body);
    }
    const response = await api(path, init);
    const text = await response.text();
    result.className = response.ok ? 'ok' : 'bad';
    result.textContent = path + ': ' + response.status + (text ? ' ' + text.slice(0, 2000) : '');
  } catch (e) {
    result.className = 'bad';
    result.textContent = path + ': ' + e.message;
  }
}

// ---- what the resolver does (top lists, query log), when the resolver serves them --------

function renderGeneric(container, title, value) {
  container.replaceChildren(el('h3', title));
  const rows = Array.isArray(value) ? value : (value && (value.entries || value.items)) || [];
  if (!Array.isArray(rows) || rows.length === 0) {
    container.appendChild(el('pre', JSON.stringify(value, null, 1).slice(0, 4000)));
    return;
  }
  const table = el('table');
  const keys = Object.keys(rows[0] || {});
  const head = el('tr');
  keys.forEach((k) => head.appendChild(el('th', k)));
  table.appendChild(el('thead')).appendChild(head);
  const body = el('tbody');
  rows.slice(0, 50).forEach((r) => {
    const row = el('tr');
    keys.forEach((k) => row.appendChild(el('td', typeof r[k] === 'object' ? JSON.stringify(r[k]) : r[k])));
    body.appendChild(row);
  });
  table.appendChild(body);
  container.appendChild(table);
}

// The routes are looked up in the API's own description, so a resolver without them is
// never asked (a 404 would be a console error for nothing).
async function insightRoutes() {
  const doc = await json('/openapi.json');
  const all = Object.keys((doc && doc.paths) || {});
  page.trace = all.find((p) => p === '/trace' || p.startsWith('/trace/'));
  $('trace-form').hidden = !page.trace || page.role !== 'admin';
  const top = all.includes('/top/{kind}');
  const log = all.includes('/query-log');
  return [
    [top && '/top/clients?limit=10', 'top', 'Top clients'],
    [top && '/top/servfail?limit=10', 'top-servfail', 'Top SERVFAIL names'],
    [log && '/query-log?limit=20', 'querylog', 'Query log'],
  ].filter(([path]) => path);
}

async function refreshInsight(routes) {
  let shown = false;
  for (const [path, id, title] of routes) {
    const response = await api(path);
    if (response.status !== 200) { $(id).replaceChildren(); continue; }
    renderGeneric($(id), title + ' (' + path + ')', await response.json());
    shown = true;
  }
  $('insight-panel').hidden = !shown;
}

// One query traced (admins): `/trace/{name}/{type}`-like routes get the name and type in
// the path, a `/trace` route without parameters a JSON body.
async function trace() {
  const name = $('trace-name').value.trim();
  const type = $('trace-type').value.trim() || 'A';
  const out = $('trace-result');
  out.textContent = '…';
  let response;
  if (page.trace.includes('{')) {
    const path = page.trace.replace(/\{name\}/, encodeURIComponent(name))
      .replace(/\{[a-z_]*type\}/, encodeURIComponent(type));
    response = await api(path);
  } else {
    response = await api(page.trace, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ name, type }) });
  }
  out.textContent = response.status + '\n' + (await response.text()).slice(0, 100000);
}

// ---- start -------------------------------------------------------------------------------

function showProblem(e) {
  if (e instanceof Unauthorized) return;
  const stream = $('stream');
  stream.textContent = e.message;
  stream.className = 'badge bad';
}

async function start() {
  let who;
  try {
    who = await refreshIdentity();
  } catch (e) {
    if (!(e instanceof Unauthorized)) showProblem(e);
    return;
  }
  $('login').hidden = true;
  $('main').hidden = false;
  await refreshProcesses().catch(showProblem);
  follow(who.events_from);
  refreshMetrics().catch(showProblem);
  refreshRpz().catch(showProblem);
  setInterval(() => refreshMetrics().catch(showProblem), METRICS_INTERVAL_MS);
  setInterval(() => refreshProcesses().catch(showProblem), PROCESS_REFRESH_MS);
  // Uptimes move on between reads of the table.
  setInterval(renderProcesses, 1000);
  insightRoutes().then((routes) => {
    if (routes.length === 0) return;
    refreshInsight(routes).catch(showProblem);
    setInterval(() => refreshInsight(routes).catch(showProblem), METRICS_INTERVAL_MS);
  }).catch(showProblem);
}

document.addEventListener('DOMContentLoaded', () => {
  $('login').addEventListener('submit', (event) => {
    event.preventDefault();
    page.token = $('token').value.trim();
    $('token').value = '';
    start();
  });
  $('trace-form').addEventListener('submit', (event) => {
    event.preventDefault();
    trace().catch(showProblem);
  });
  $('reload').addEventListener('click', () => control('/reload'));
  $('cache-clear').addEventListener('click', () => control('/cache/clear', {}));
  start();
});
