// The status page: one event stream (/events, read with fetch so that a bearer token can go
// in a header), the process table read again when a process event says it changed (and every
// PROCESS_REFRESH_MS), the workers' statistics every METRICS_INTERVAL_MS for q/s and rcodes,
// the top lists and the query log every INSIGHT_INTERVAL_MS, the upstreams and the fleet every
// PROCESS_REFRESH_MS; nothing periodic while the page is hidden (a tab in the background).
// Every text from the API is set with textContent: nothing it says is parsed as HTML.
// Through `kresctl ui`, the URL kresctl printed carries its secret in the fragment (which no
// request carries): taken out of the URL into this tab's sessionStorage (its own origin's,
// port included: no page of another port reads it; it survives a reload of the tab), and
// sent as X-Kresctl-Ui-Secret with every request, all of them made through api(). No cookie:
// browsers send the cookies of 127.0.0.1 to its every port.
'use strict';

const METRICS_INTERVAL_MS = 5000;
const PROCESS_REFRESH_MS = 15000;
const INSIGHT_INTERVAL_MS = 10000;
const QUERY_LOG_SHOWN = 25;
const TOP_SHOWN = 10;
const TOP_LISTS = [['clients', 'Top clients'], ['names', 'Top names'],
  ['servfail', 'Top SERVFAIL names'], ['nxdomain', 'Top NXDOMAIN names']];
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
  fleet: false, // whether the node is in a fleet (/ui/whoami)
  lastEventId: null,
  processes: [],
  processTimer: null,
  trace: null, // the trace route, when the resolver has one
  lastStats: null, // { at, total, rcodes: {NOERROR: n, ...} }
  samples: [],
  applied: 0,
  generation: 0,
  insight: null, // { top: bool, log: bool } once the API's description was read
  filter: '', // the query log's filter, as query parameters
};

const $ = (id) => document.getElementById(id);

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

class Unauthorized extends Error {}

const SECRET_KEY = 'kresctl-ui-secret';

// `kresctl ui`'s secret in this tab, or null.
function uiSecret() {
  try { return window.sessionStorage.getItem(SECRET_KEY); } catch (e) { return null; }
}

// No credentials: the API reads no cookie, and kresctl ui admits by header only.
async function api(path, init) {
  const options = Object.assign({ cache: 'no-store', credentials: 'omit' }, init || {});
  const headers = new Headers(options.headers || {});
  if (page.token) headers.set('Authorization', 'Bearer ' + page.token);
  const secret = uiSecret();
  if (secret) headers.set('X-Kresctl-Ui-Secret', secret);
  options.headers = headers;
  const response = await fetch(path, options);
  if (response.status === 401) {
    askForToken('');
    throw new Unauthorized('the API asks for a bearer token');
  }
  if (response.status === 403 && response.headers.get('X-Kresctl-Ui') === 'secret-needed') {
    throw new Error(await response.text());
  }
  return response;
}

// `kresctl ui`'s secret, from the fragment of the URL it printed, kept in this tab and taken
// out of the URL; whether there was one.
function takeSecret() {
  const secret = /^#secret=([0-9a-f]{1,256})$/.exec(window.location.hash);
  if (!secret) return false;
  window.history.replaceState(null, '', window.location.pathname + window.location.search);
  try {
    window.sessionStorage.setItem(SECRET_KEY, secret[1]);
  } catch (e) {
    throw new Error('kresctl ui: this browser keeps no sessionStorage for the page');
  }
  return true;
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

// With the date: for times days away (an RPZ zone's expiry).
function dateAndClock(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleString();
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
    // Wrapped (app.css): `words` between words only, `text` a long token anywhere too.
    const classes = ['name words', 'pid', 'state', 'uptime words', 'restarts', 'last-exit text'];
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

// `fresh`: a new manager process counts its generations from 1 again.
async function refreshIdentity(fresh) {
  const who = await json('/ui/whoami');
  // The count follows the event log as this page does: it may not have seen the change
  // this page was told of yet.
  page.generation = fresh ? who.generation : Math.max(page.generation, who.generation);
  $('generation').textContent = page.generation;
  page.role = who.role;
  page.fleet = who.fleet === true;
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

async function showConfig() {
  const out = $('config-json');
  out.hidden = false;
  out.textContent = JSON.stringify(await json('/v1/config'), null, 2);
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
      if (!replayed) {
        if ((record.changed || []).length > 0) page.generation += 1;
        refreshIdentity().catch(showProblem);
      }
      break;
    case 'config-refused':
      addChange(record, 'refused', record.reason, 'bad');
      break;
    case 'config-rolled-back':
      addChange(record, 'rolled back', record.reason, 'bad');
      if (!replayed) refreshIdentity().catch(showProblem);
      break;
    case 'manager-started':
      if (!replayed) refreshIdentity(true).catch(showProblem);
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
    // Perhaps a new manager process, counting its generations from 1 again.
    refreshIdentity(true).then(refreshProcesses).catch(showProblem);
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
  renderRpz(await json('/rpz'));
  renderLists(await json('/rpz/lists'));
}

// The subscribed lists: what is in force, how the last fetch went, when the next one is.
function renderLists(lists) {
  const rows = (Array.isArray(lists) ? lists : []).map((l) => {
    const row = el('tr');
    row.dataset.list = l.name;
    // The lists' fields are kebab-case, as `GET /rpz/lists` sends them.
    const fetched = l['last-fetch'] != null ? (l.result || '–') + ' at ' + clock(l['last-fetch'])
      + (l.error ? ': ' + l.error : '') : '–';
    [l.name + (l.action === 'passthru' ? ' (allowlist)' : ''), l.entries ?? '–', l.skipped ?? '–',
      fetched, l['next-refresh'] != null ? clock(l['next-refresh']) : '–', l.failures]
      .forEach((text, i) => row.appendChild(el('td', text, i === 0 || i === 3 ? 'text' : '')));
    if (l.error) row.children[3].className = 'text bad';
    return row;
  });
  $('rpz-lists').tBodies[0].replaceChildren(...rows);
  $('lists-panel').hidden = rows.length === 0;
}

// How the RPZ table's cells wrap (app.css): texts from outside anywhere, times between words.
const RPZ_CELLS = ['text', '', 'text', 'words', 'words', '', 'text'];

function renderRpz(zones) {
  const rows = (Array.isArray(zones) ? zones : []).map((z) => {
    const row = el('tr');
    row.dataset.zone = z.zone;
    // The zones' fields are kebab-case, as `kresctl rpz --json` prints them.
    const last = z['last-transfer'];
    const transfer = last ? last.kind + ' ' + last.result + ' at ' + clock(last.time)
      + (last.error ? ': ' + last.error : '') : '–';
    [z.zone, z.serial ?? '–', transfer, z['next-refresh'] ? clock(z['next-refresh']) : '–',
      z.expires != null ? dateAndClock(z.expires) : '–',
      z.expired ? 'yes' : 'no', z.broken ? 'no: ' + z.broken : 'yes']
      .forEach((text, i) => row.appendChild(el('td', text, RPZ_CELLS[i])));
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

// ---- what the resolver does (top lists, query log, upstreams), when it serves them ------

function cells(row, texts) {
  texts.forEach((text) => row.appendChild(el('td', text)));
  return row;
}

function renderTop(kind, title, list) {
  const part = el('div');
  part.dataset.top = kind;
  part.appendChild(el('h3', title));
  const entries = (list && Array.isArray(list.entries)) ? list.entries : [];
  if (entries.length === 0) {
    part.appendChild(el('p', 'none', 'muted'));
    return part;
  }
  const table = el('table');
  const body = el('tbody');
  entries.slice(0, TOP_SHOWN).forEach((e) => {
    const row = cells(el('tr'), [e.key, e.count]);
    row.children[0].className = 'key text';
    body.appendChild(row);
  });
  table.appendChild(body);
  part.appendChild(table);
  return part;
}

function renderQueryLog(answers) {
  const rows = answers.slice(-QUERY_LOG_SHOWN).reverse().map((a) => {
    const latency = typeof a.latency_ms === 'number' ? a.latency_ms.toFixed(1) + ' ms' : '–';
    const cache = a.cached === true ? 'hit' : a.cached === false ? 'miss' : '–';
    const row = cells(el('tr'), [clock(a.time), a.client, a.transport, a.name, a.qtype,
      a.rcode, latency, a.answers, cache, a.ede ?? '']);
    for (const i of [1, 3, 9]) row.children[i].className = 'text';
    row.children[3].classList.add('name');
    row.children[5].className = a.rcode === 'SERVFAIL' ? 'bad' : '';
    return row;
  });
  $('querylog').tBodies[0].replaceChildren(...rows);
}

// The routes are looked up in the API's own description, so a resolver without them is
// never asked (a 404 would be a console error for nothing).
async function insightRoutes() {
  const doc = await json('/openapi.json');
  const all = Object.keys((doc && doc.paths) || {});
  page.trace = all.find((p) => p === '/trace' || p.startsWith('/trace/'));
  $('trace-form').hidden = !page.trace || page.role !== 'admin';
  // The top lists and the query log count nothing when the query log is off.
  const status = all.includes('/query-log/status') ? await json('/query-log/status') : null;
  const on = !status || status.enabled !== false;
  // Per-query rows and client addresses are the admin's only (the API refuses the rest).
  const admin = page.role === 'admin';
  page.insight = { top: on && all.includes('/top/{kind}'),
    log: on && admin && all.includes('/query-log'), upstreams: all.includes('/upstreams'),
    fleet: all.includes('/fleet') };
}

async function refreshQueryLog() {
  const response = await api('/query-log?limit=' + QUERY_LOG_SHOWN + page.filter);
  if (response.status === 400) {
    $('filter-error').textContent = await response.text();
    return;
  }
  if (!response.ok) throw new Error('/query-log: ' + response.status);
  $('filter-error').textContent = '';
  const answers = await response.json();
  renderQueryLog(Array.isArray(answers) ? answers : []);
}

async function refreshInsight() {
  const shown = page.insight && (page.insight.top || page.insight.log);
  $('insight-panel').hidden = !shown;
  if (!shown) return;
  if (page.insight.top) {
    const parts = [];
    for (const [kind, title] of TOP_LISTS) {
      if (kind === 'clients' && page.role !== 'admin') continue;
      parts.push(renderTop(kind, title, await json('/top/' + kind + '?limit=' + TOP_SHOWN)));
    }
    $('top-lists').replaceChildren(...parts);
  }
  $('querylog-part').hidden = !page.insight.log;
  if (page.insight.log) await refreshQueryLog();
}

function applyFilter() {
  const params = new URLSearchParams();
  for (const key of ['client', 'name', 'qtype', 'rcode']) {
    const value = $('filter-' + key).value.trim();
    if (value) params.set(key, value);
  }
  const text = params.toString();
  page.filter = text ? '&' + text : '';
  refreshQueryLog().catch(showProblem);
}

async function refreshUpstreams() {
  if (!page.insight || !page.insight.upstreams) return;
  renderUpstreams(await json('/upstreams'));
}

function renderUpstreams(u) {
  const forwards = (u.forwards || []).map((f) => el('li', 'forward ' + (f.subtrees || []).join(', ')
    + ' → ' + (f.servers || []).join(', ')));
  $('forwards').replaceChildren(...forwards);
  const ms = (v) => (typeof v === 'number' ? v.toFixed(1) + ' ms' : '–');
  const rows = (u.addresses || []).map((a) => {
    const row = cells(el('tr'), [a.address, a.samples, ms(a.rtt_avg_ms), ms(a.rtt_min_ms),
      ms(a.rtt_max_ms), a.queries ?? '–', a.unanswered ?? '–', a.error_answers ?? '–',
      (a.workers || []).join(', ')]);
    row.dataset.address = a.address;
    row.children[0].className = 'text';
    row.children[2].className = 'rtt';
    row.children[6].className = 'unanswered';
    row.children[8].className = 'text';
    return row;
  });
  $('upstreams').tBodies[0].replaceChildren(...rows);
  $('upstreams-panel').hidden = forwards.length === 0 && rows.length === 0;
}

// The fleet this node is in, asked only of a node in one (/ui/whoami says).
async function refreshFleet() {
  if (!page.fleet || !page.insight || !page.insight.fleet) return;
  renderFleet(await json('/fleet'));
}

function renderFleet(f) {
  const nodes = f.nodes || [];
  const behind = nodes.filter((n) => f.newest != null && n.revision !== f.newest);
  $('fleet-summary').textContent = 'fleet ' + f.prefix + ' seen from ' + f.node + ': newest document '
    + (f.newest ?? '–') + ', ' + nodes.length + ' nodes, ' + behind.length + ' behind';
  const r = f.rollout;
  $('fleet-rollout').hidden = !r;
  if (r) {
    $('fleet-rollout').textContent = 'staged rollout of revision ' + (r.revision ?? '…') + ': wave '
      + r.admitted + ' of ' + r.waves.length + ' (canary ' + (r.waves[0] || []).join(', ') + '), '
      + r.state + (r.halted ? ': ' + r.halted : '');
    $('fleet-rollout').className = r.state === 'halted' ? 'bad' : '';
  }
  const rows = nodes.map((n) => {
    const why = n.refused ? n.refused.revision + ': ' + n.refused.reason
      : n.store_error ? 'store: ' + n.store_error
        : n.held != null ? n.held + ': held until its wave' : '–';
    const row = cells(el('tr'), [n.node, n.revision ?? '–', n.workers_running + '/' + n.workers,
      n.version, why]);
    row.dataset.node = n.node;
    row.children[0].className = 'text';
    row.children[4].className = n.refused || n.store_error ? 'text bad' : 'text';
    if (behind.includes(n)) row.children[1].className = 'bad';
    return row;
  });
  $('fleet').tBodies[0].replaceChildren(...rows);
  $('fleet-panel').hidden = false;
}

// One query traced (admins): `/trace/{name}/{type}`-like routes get the name and type in
// the path, a `/trace` route without parameters a JSON body.
async function trace() {
  const name = $('trace-name').value.trim();
  const type = $('trace-type').value.trim() || 'A';
  $('trace-result').hidden = false;
  $('trace-summary').textContent = '…';
  $('trace-answer').replaceChildren();
  $('trace-log').textContent = '';
  let response;
  if (page.trace.includes('{')) {
    const path = page.trace.replace(/\{name\}/, encodeURIComponent(name))
      .replace(/\{[a-z_]*type\}/, encodeURIComponent(type));
    response = await api(path);
  } else {
    response = await api(page.trace, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ name, type }) });
  }
  const text = await response.text();
  if (!response.ok) {
    $('trace-summary').className = 'bad';
    $('trace-summary').textContent = response.status + ': ' + text.slice(0, 2000);
    return;
  }
  let t;
  try { t = JSON.parse(text); } catch (e) { t = null; }
  if (!t || typeof t !== 'object') {
    $('trace-summary').textContent = text.slice(0, 2000);
    return;
  }
  $('trace-summary').className = t.rcode === 'NOERROR' ? 'ok' : 'bad';
  $('trace-summary').textContent = t.name + ' ' + t.type + ' on ' + t.worker + ': '
    + (t.rcode || 'no answer') + ' in ' + t['elapsed-ms'] + ' ms'
    + (t.truncated ? ' (log cut at its limit)' : '');
  $('trace-answer').replaceChildren(...(t.answer || []).map((r) => el('li', r)));
  $('trace-log').textContent = (t.log || []).join('\n');
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
  every(METRICS_INTERVAL_MS, refreshMetrics);
  every(PROCESS_REFRESH_MS, refreshProcesses);
  // Uptimes move on between reads of the table.
  setInterval(renderProcesses, 1000);
  insightRoutes().then(() => {
    refreshInsight().catch(showProblem);
    refreshUpstreams().catch(showProblem);
    refreshFleet().catch(showProblem);
    every(INSIGHT_INTERVAL_MS, refreshInsight);
    every(PROCESS_REFRESH_MS, refreshUpstreams);
    every(PROCESS_REFRESH_MS, refreshFleet);
  }).catch(showProblem);
}

// `refresh` every `ms` while the page is shown; at once when it is shown again.
function every(ms, refresh) {
  setInterval(() => {
    if (!document.hidden) refresh().catch(showProblem);
  }, ms);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) refresh().catch(showProblem);
  });
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
  $('querylog-filter').addEventListener('submit', (event) => {
    event.preventDefault();
    applyFilter();
  });
  $('config-link').addEventListener('click', (event) => {
    // A link carries neither the bearer token nor kresctl ui's secret: with one, the page
    // shows the JSON itself.
    if (!page.token && !uiSecret()) return;
    event.preventDefault();
    showConfig().catch(showProblem);
  });
  $('reload').addEventListener('click', () => control('/reload'));
  $('cache-clear').addEventListener('click', () => control('/cache/clear', {}));
  try {
    takeSecret();
  } catch (e) {
    showProblem(e);
    return;
  }
  start();
});

// The URL kresctl printed, given to a page that loaded without it: the page again, with it.
window.addEventListener('hashchange', () => {
  try {
    if (takeSecret()) window.location.reload();
  } catch (e) {
    showProblem(e);
  }
});
