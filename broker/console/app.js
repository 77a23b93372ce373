// Floe web console: one page, hash routes, vanilla DOM. Every page reads the console's JSON API
// (the admin CLI's --format json documents, see notes/console-contract) as the logged-in user, so
// the broker's ACLs decide what shows; errors show the broker's own words (Kafka's error names).
// DOM is built with createElement/textContent only, never innerHTML: record keys and values,
// topic names and bench reports are untrusted text.

const REFRESH_MS = 5000;
const SVG_NS = 'http://www.w3.org/2000/svg';
const app = document.getElementById('app');
let session = { user: null, login_required: false, read_only: false, csrf: '' };
let refreshTimer = null;

// ------------------------------------------------------------------ DOM helpers

/** h('tag.class', {attr: v, onclick: fn}, ...children): children are nodes, strings or arrays. */
function h(spec, attrs = {}, ...children) {
  const [tag, ...classes] = spec.split('.');
  const el = document.createElement(tag || 'div');
  const { class: extra, ...rest } = attrs || {};
  const names = [...classes, ...(extra ? [extra] : [])];
  if (names.length) el.className = names.join(' ');
  setAttrs(el, rest);
  append(el, children);
  return el;
}

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'testid') el.setAttribute('data-testid', v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

/** Replace an element's children (arrays flattened, null/false skipped). */
function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

const enc = encodeURIComponent;
const link = (href, text, attrs = {}) => h('a', { href, ...attrs }, text);

function errorBox(err) {
  return h('div.error', { testid: 'error', role: 'alert' }, err instanceof Error ? err.message : String(err));
}

function notice(text) {
  return h('div.notice', { testid: 'notice', role: 'status' }, text);
}

/** A labelled form field; `input` is an element whose id is set here. */
function field(label, input) {
  input.id ||= `f-${Math.random().toString(36).slice(2, 9)}`;
  return h('div.field', {}, h('label', { for: input.id }, label), input);
}

/** A table from rows: columns are [header, row => cell] pairs. */
function table(columns, rows, attrs = {}, rowAttrs = () => ({})) {
  if (!rows.length) return h('p.empty', {}, attrs.empty || 'none');
  const { empty, ...rest } = attrs;
  return h('div.table-wrap', {},
    h('table', rest,
      h('thead', {}, h('tr', {}, columns.map(([title]) => h('th', { scope: 'col' }, title)))),
      h('tbody', {}, rows.map((r) => h('tr', rowAttrs(r), columns.map(([, cell]) => h('td', {}, fmtCell(cell(r)))))))));
}

function fmtCell(v) {
  if (v instanceof Node) return v;
  if (v === null || v === undefined) return h('span.muted', {}, '–');
  if (Array.isArray(v)) return v.join(', ');
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

function fmtBytes(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i && n < 10 ? 1 : 0)} ${units[i]}`;
}

function fmtNum(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  if (Math.abs(n) >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (Math.abs(n) >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  return Number.isInteger(n) ? String(n) : n.toFixed(n < 10 ? 2 : 1);
}

/** `n thing` or `n things`. */
const plural = (n, noun) => `${n} ${noun}${Number(n) === 1 ? '' : 's'}`;

/** Kafka's Long.MAX_VALUE (a setting meaning "no limit") as `unlimited`; other values unchanged.
 *  The API sends integers beyond 2^53 as strings, so this compares text, never a rounded number. */
const UNLIMITED = '9223372036854775807';
const fmtLimit = (v) => (String(v) === UNLIMITED ? h('span', { title: UNLIMITED }, 'unlimited') : v);

const fmtTime = (ms) => new Date(ms).toLocaleTimeString([], { hour12: false });
const fmtDate = (ms) => (ms === null || ms === undefined || ms < 0 ? '–' : new Date(ms).toISOString().replace('T', ' ').replace('Z', ''));

// ------------------------------------------------------------------ API

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (method !== 'GET') headers['X-CSRF-Token'] = session.csrf;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin' });
  } catch (e) {
    throw new ApiError(0, `the console did not answer (${e.message}); is floe still running?`);
  }
  const type = res.headers.get('content-type') || '';
  const data = type.includes('json') ? await res.json().catch(() => null) : await res.text();
  if (!res.ok) {
    const msg = data && typeof data === 'object' && data.error ? data.error : `${res.status} ${res.statusText}`;
    if (res.status === 401 && path !== '/api/login') {
      // The session expired or was never logged in: back to the login page.
      session.user = null;
      session.login_required = true;
      setTimeout(render, 0);
    }
    throw new ApiError(res.status, msg);
  }
  return data;
}

/** Run an async write from a form: disables its button, shows the error or the result. */
async function submit(form, slot, fn) {
  const button = form.querySelector('button[type=submit]');
  slot.replaceChildren();
  if (button) button.disabled = true;
  try {
    const shown = await fn();
    if (shown) slot.replaceChildren(shown instanceof Node ? shown : notice(shown));
  } catch (e) {
    slot.replaceChildren(errorBox(e));
  } finally {
    if (button) button.disabled = false;
  }
}

/** Parse `k=v` lines (configs, headers) into pairs; blank lines are skipped. */
function parsePairs(text, what) {
  const pairs = [];
  for (const line of text.split('\n').map((l) => l.trim()).filter(Boolean)) {
    const i = line.indexOf('=');
    if (i <= 0) throw new Error(`${what}: "${line}" is not key=value`);
    pairs.push([line.slice(0, i).trim(), line.slice(i + 1)]);
  }
  return pairs;
}

// ------------------------------------------------------------------ charts

const COLORS = ['#2563eb', '#d97706', '#059669', '#dc2626', '#7c3aed', '#0891b2'];

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** A line chart of series [{name, points: [[t_ms, value|null]]}] drawn as SVG; nulls break a line. */
function lineChart(title, series, { testid, fmt = fmtNum, wide = false, floor = 1 } = {}) {
  const W = wide ? 760 : 440, H = 190, L = 58, R = 10, T = 10, B = 24;
  const all = series.flatMap((s) => s.points).filter(([, v]) => v !== null && Number.isFinite(v));
  const fig = h(`figure.chart${wide ? '.wide' : ''}`, { testid }, h('figcaption', {}, title));
  if (!all.length) return append(fig, [h('p.empty', {}, 'no samples yet')]), fig;
  let t0 = Math.min(...all.map(([t]) => t)), t1 = Math.max(...all.map(([t]) => t));
  if (t1 === t0) { t0 -= 30000; t1 += 30000; }
  const vmax = niceMax(Math.max(floor, ...all.map(([, v]) => v)));
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / vmax) * (H - T - B);
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title, preserveAspectRatio: 'xMidYMid meet' });
  for (let i = 0; i <= 4; i++) {
    const v = (vmax * i) / 4;
    chart.append(svg('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), class: 'grid' }),
      svg('text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'axis' }, fmt(v)));
  }
  for (const [t, anchor] of [[t0, 'start'], [(t0 + t1) / 2, 'middle'], [t1, 'end']]) {
    chart.append(svg('text', { x: x(t), y: H - 6, 'text-anchor': anchor, class: 'axis' }, fmtTime(t)));
  }
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    let run = [];
    const flush = () => {
      if (run.length === 1) chart.append(svg('circle', { cx: run[0][0], cy: run[0][1], r: 3, fill: color }));
      else if (run.length > 1) chart.append(svg('polyline', { points: run.map((p) => p.join(',')).join(' '), fill: 'none', stroke: color, 'stroke-width': 2, 'stroke-linejoin': 'round' }));
      run = [];
    };
    for (const [t, v] of s.points) {
      if (v === null || !Number.isFinite(v)) flush();
      else run.push([x(t).toFixed(1), y(v).toFixed(1)]);
    }
    flush();
  });
  fig.append(chart, h('div.legend', {}, series.map((s, i) =>
    h('span', {}, h('span.swatch', { style: `background:${COLORS[i % COLORS.length]}` }), s.name))));
  return fig;
}

// ------------------------------------------------------------------ pages

/** A page: a title, optional actions, and a body filled by `load` (re-run every 5 s if `refresh`). */
function page(title, load, { refresh = false, actions = null } = {}) {
  const body = h('div.page-body', {}, h('p.muted', {}, 'loading…'));
  const section = h('section.page', {}, h('div.page-head', {}, h('h1', {}, title), actions), body);
  app.replaceChildren(section);
  const run = async () => {
    try {
      const content = await load();
      if (body.isConnected) fill(body, content);
    } catch (e) {
      if (body.isConnected) body.replaceChildren(errorBox(e));
    }
  };
  run();
  if (refresh) refreshTimer = setInterval(() => { if (!document.hidden && body.isConnected) run(); }, REFRESH_MS);
  section.reload = run;
  return section;
}

function overviewPage() {
  page('Overview', async () => {
    const { cluster, health, metrics } = await api('GET', '/api/overview');
    const samples = metrics?.samples || [];
    const byName = new Map((health?.brokers || []).map((b) => [b.id, b]));
    const healthy = health?.healthy;
    const issues = [
      ...(health?.unreachable_brokers || []).map((b) => `broker ${b} unreachable`),
      ...(health?.offline_partitions || []).map((p) => `offline partition ${typeof p === 'object' ? `${p.topic}-${p.partition}` : p}`),
      ...(health?.under_replicated_partitions || []).map((p) => `under-replicated ${typeof p === 'object' ? `${p.topic}-${p.partition}` : p}`),
    ];
    const series = (key) => samples.map((s) => [s.t, s[key] ?? null]);
    return [
      h('div.cards', {},
        card('Cluster', cluster.cluster_id, { testid: 'cluster-id', class: 'small-value' }),
        card('Health', h(`span.badge.${healthy ? 'ok' : 'bad'}`, { testid: 'health' }, healthy ? 'healthy' : 'unhealthy')),
        card('Brokers', cluster.brokers?.length ?? 0),
        card('Topics', cluster.topics), card('Partitions', cluster.partitions)),
      issues.length ? h('ul.issues', {}, issues.map((i) => h('li', {}, i))) : null,
      h('h2', {}, 'Brokers'),
      table([
        ['id', (b) => b.id], ['address', (b) => b.address], ['rack', (b) => b.rack],
        ['controller', (b) => (b.controller ? 'yes' : '')],
        ['reachable', (b) => {
          const hb = byName.get(b.id);
          if (!hb) return null;
          return h(`span.badge.${hb.reachable ? 'ok' : 'bad'}`, { title: hb.error || '' }, hb.reachable ? 'up' : 'down');
        }],
      ], cluster.brokers || [], { testid: 'brokers-table' }),
      h('h2', {}, 'Throughput and latency'),
      samples.length ? null : h('p.muted', {}, 'No samples yet: the console scrapes the broker\'s metrics endpoint (metrics.listen) every 5 s; none come when metrics are off.'),
      h('div.charts', {},
        lineChart('Throughput (bytes/s)', [
          { name: 'produce', points: series('produce_bytes_per_s') },
          { name: 'fetch', points: series('fetch_bytes_per_s') }], { testid: 'throughput-chart', fmt: fmtBytes, floor: 1024 }),
        lineChart('Requests/s', [{ name: 'requests', points: series('requests_per_s') }], { testid: 'requests-chart' }),
        lineChart('Request latency p99 (ms)', [{ name: 'p99', points: series('request_latency_p99_ms') }], { testid: 'latency-chart' })),
    ];
  }, { refresh: true });
}

function card(label, value, attrs = {}) {
  return h('div.card', {}, h('div.card-label', {}, label), h('div.card-value', attrs, value ?? '–'));
}

function topicsPage() {
  const name = h('input', { name: 'name', required: true, testid: 'create-topic-name', placeholder: 'orders', autocomplete: 'off' });
  const partitions = h('input', { name: 'partitions', type: 'number', min: 1, testid: 'create-topic-partitions', placeholder: 'broker default' });
  const replicas = h('input', { name: 'replicas', type: 'number', min: 1, testid: 'create-topic-replicas', placeholder: 'broker default' });
  const configs = h('textarea', { name: 'configs', rows: 3, testid: 'create-topic-configs', placeholder: 'retention.ms=86400000\nfloe.iceberg.enabled=true' });
  const slot = h('div.slot');
  const form = h('form.card-form', { testid: 'create-topic-form' },
    h('h2', {}, 'Create a topic'),
    h('div.row', {}, field('Name', name), field('Partitions', partitions), field('Replicas', replicas)),
    field('Configs (key=value per line)', configs),
    h('button', { type: 'submit', testid: 'create-topic-submit', disabled: session.read_only }, 'Create topic'), slot);
  const section = page('Topics', async () => {
    const topics = await api('GET', '/api/topics');
    return table([
      ['topic', (t) => link(`#/topics/${enc(t.topic)}`, t.topic)],
      ['partitions', (t) => t.partitions], ['replication', (t) => t.replication_factor],
      ['internal', (t) => (t.internal ? 'yes' : '')], ['error', (t) => t.error],
    ], topics, { testid: 'topics-table', empty: 'no topics (or none this user may describe)' });
  });
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    submit(form, slot, async () => {
      const body = {
        name: name.value.trim(),
        partitions: partitions.value ? Number(partitions.value) : null,
        replicas: replicas.value ? Number(replicas.value) : null,
        configs: Object.fromEntries(parsePairs(configs.value, 'configs')),
      };
      const res = await api('POST', '/api/topics', body);
      form.reset();
      section.reload();
      const done = Array.isArray(res) ? res[0] : res;
      return h('div.notice', { testid: 'notice' }, 'Created ', link(`#/topics/${enc(body.name)}`, body.name),
        done?.partitions ? ` with ${plural(done.partitions, 'partition')}` : '');
    });
  });
  section.append(form);
}

function topicPage(name) {
  const del = h('button.danger', { type: 'button', testid: 'delete-topic', disabled: session.read_only }, 'Delete topic');
  const section = page(`Topic ${name}`, async () => {
    let t;
    try {
      t = await api('GET', `/api/topics/${enc(name)}`);
    } catch (e) {
      // Refused (an ACL): reading and writing records are separate rights, so offer them anyway.
      if (e.status !== 403) throw e;
      return [errorBox(e), messageBrowser(name, []), produceForm(name, [])];
    }
    return [
      h('h2', {}, 'Partitions'),
      table([
        ['partition', (p) => p.partition], ['leader', (p) => p.leader], ['replicas', (p) => p.replicas], ['isr', (p) => p.isr],
        ['log start', (p) => p.log_start_offset], ['high watermark', (p) => p.high_watermark], ['records', (p) => p.records],
        ['size', (p) => (p.size_bytes == null ? null : fmtBytes(p.size_bytes))], ['error', (p) => p.error],
      ], t.partitions || [], { testid: 'partitions-table' }),
      messageBrowser(name, t.partitions || []),
      produceForm(name, t.partitions || []),
      configsSection(name, t.configs || []),
    ];
  }, { actions: del });
  del.addEventListener('click', async () => {
    if (!confirm(`Delete topic ${name} and all its records?`)) return;
    try {
      await api('DELETE', `/api/topics/${enc(name)}`);
      location.hash = '#/topics';
    } catch (e) {
      section.querySelector('.page-body').prepend(errorBox(e));
    }
  });
}

function messageBrowser(topic, partitions) {
  // Every partition by default (`limit` records from each); one partition to page through it.
  const partition = partitions.length
    ? h('select', { testid: 'browse-partition' }, h('option', { value: '' }, 'all partitions'),
      partitions.map((p) => h('option', { value: p.partition }, String(p.partition))))
    : h('input', { type: 'number', min: 0, placeholder: 'all', testid: 'browse-partition', title: 'empty: all partitions' });
  let offsets = '';  // `P:O,...` where the next page of every partition starts
  const offset = h('input', { value: 'beginning', testid: 'browse-offset', title: 'beginning, end, an offset N, or -N for the last N' });
  const limit = h('input', { type: 'number', min: 1, max: 1000, value: 50, testid: 'browse-limit' });
  const results = h('div.results', { testid: 'messages' });
  const form = h('form.card-form', { testid: 'browse-form' },
    h('h2', {}, 'Messages'),
    h('div.row', {}, field('Partition', partition), field('Offset', offset), field('Limit', limit),
      h('div.field.button-field', {}, h('button', { type: 'submit', testid: 'browse-submit' }, 'Fetch'))),
    results);
  const load = async () => {
    const one = partition.value.trim() !== '';
    let q = `partition=${enc(partition.value.trim())}&offset=${enc(offset.value.trim() || 'beginning')}&limit=${enc(limit.value || 50)}`;
    if (!one && offsets) q += `&offsets=${enc(offsets)}`;
    offsets = '';
    results.replaceChildren(h('p.muted', {}, 'loading…'));
    try {
      const res = await api('GET', `/api/topics/${enc(topic)}/messages?${q}`);
      const msgs = res.messages || [];
      let next = null;
      if (one && res.next_offset !== undefined && res.next_offset !== null) {
        next = h('button', { type: 'button', testid: 'browse-next' }, `Next from offset ${res.next_offset}`);
        next.addEventListener('click', () => { offset.value = String(res.next_offset); load(); });
      } else if (!one && res.next_offsets && Object.keys(res.next_offsets).length) {
        // Each partition goes on where its page ended.
        next = h('button', { type: 'button', testid: 'browse-next' }, 'Next page of every partition');
        next.addEventListener('click', () => { offsets = Object.entries(res.next_offsets).map(([p, o]) => `${p}:${o}`).join(','); load(); });
      }
      fill(results,
        table([
          ['partition', (m) => m.partition], ['offset', (m) => m.offset], ['timestamp', (m) => fmtDate(m.timestamp)],
          ['key', (m) => payload(m.key, m.key_encoding)], ['value', (m) => payload(m.value, m.value_encoding)],
          ['headers', (m) => headersCell(m.headers)],
        ], msgs, { testid: 'messages-table', empty: 'no records at this offset' }, (m) => ({ testid: 'message-row', 'data-offset': `${m.partition}/${m.offset}` })),
        next);
    } catch (e) {
      results.replaceChildren(errorBox(e));
    }
  };
  form.addEventListener('submit', (ev) => { ev.preventDefault(); load(); });
  messageBrowser.reload = load;
  load();
  return form;
}

function payload(v, encoding) {
  if (v === null || v === undefined) return h('span.muted', {}, 'null');
  const text = typeof v === 'string' ? v : JSON.stringify(v);
  return h('code.payload', { title: encoding ? `${encoding}-encoded` : '' }, text.length > 300 ? `${text.slice(0, 300)}…` : text);
}

function headersCell(headers) {
  if (!headers || !headers.length) return null;
  return h('span.headers', {}, headers.map(([k, v]) => h('span.header', { testid: 'message-header' }, `${k}=${v ?? 'null'}`)));
}

function produceForm(topic, partitions) {
  const key = h('input', { testid: 'produce-key', placeholder: 'none', autocomplete: 'off' });
  const value = h('textarea', { rows: 2, testid: 'produce-value' });
  const headers = h('textarea', { rows: 2, testid: 'produce-headers', placeholder: 'source=console' });
  const partition = h('select', { testid: 'produce-partition' }, h('option', { value: '' }, 'by key (default)'),
    partitions.map((p) => h('option', { value: p.partition }, String(p.partition))));
  const slot = h('div.slot');
  const form = h('form.card-form', { testid: 'produce-form' },
    h('h2', {}, 'Produce a record'),
    h('div.row', {}, field('Key', key), field('Partition', partition)),
    field('Value', value), field('Headers (key=value per line)', headers),
    h('button', { type: 'submit', testid: 'produce-submit', disabled: session.read_only }, 'Produce'), slot);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    submit(form, slot, async () => {
      const body = {
        key: key.value === '' ? null : key.value,
        value: value.value,
        headers: parsePairs(headers.value, 'headers'),
        partition: partition.value === '' ? null : Number(partition.value),
      };
      const res = await api('POST', `/api/topics/${enc(topic)}/messages`, body);
      const r = Array.isArray(res) ? res[0] : res;
      messageBrowser.reload?.();
      return r ? `Produced to partition ${r.partition} at offset ${r.base_offset}` : 'Produced';
    });
  });
  return form;
}

function configsSection(topic, configs) {
  const slot = h('div.slot');
  const rows = [...configs].sort((a, b) => (a.source === 'DEFAULT_CONFIG') - (b.source === 'DEFAULT_CONFIG') || a.name.localeCompare(b.name));
  const alter = async (body) => {
    slot.replaceChildren();
    try {
      await api('POST', `/api/topics/${enc(topic)}/configs`, body);
      render();
    } catch (e) {
      slot.replaceChildren(errorBox(e));
    }
  };
  const editCell = (c) => {
    const cell = h('span.config-value', {}, c.sensitive ? '(sensitive)' : fmtLimit(c.value ?? ''));
    if (c.read_only || session.read_only) return cell;
    const edit = h('button.small', { type: 'button', testid: `edit-config-${c.name}`, 'aria-label': `edit ${c.name}` }, 'Edit');
    const wrap = h('span.config-cell', {}, cell, edit);
    edit.addEventListener('click', () => {
      const input = h('input', { value: c.value ?? '', 'aria-label': c.name, testid: `config-input-${c.name}` });
      const save = h('button.small', { type: 'submit', testid: `save-config-${c.name}` }, 'Save');
      const cancel = h('button.small.plain', { type: 'button' }, 'Cancel');
      const form = h('form.inline', {}, input, save, cancel);
      form.addEventListener('submit', (ev) => { ev.preventDefault(); alter({ set: { [c.name]: input.value }, delete: [] }); });
      cancel.addEventListener('click', () => form.replaceWith(wrap));
      wrap.replaceWith(form);
      input.focus();
    });
    if (c.source === 'DYNAMIC_TOPIC_CONFIG') {
      const reset = h('button.small.plain', { type: 'button', title: 'back to the default' }, 'Reset');
      reset.addEventListener('click', () => alter({ set: {}, delete: [c.name] }));
      wrap.append(reset);
    }
    return wrap;
  };
  return h('div', {}, h('h2', {}, 'Configs'), slot,
    table([['name', (c) => c.name], ['value', editCell], ['source', (c) => h(`span.source${c.source === 'DEFAULT_CONFIG' ? '.muted' : ''}`, {}, c.source)]],
      rows, { testid: 'configs-table' }));
}

function groupsPage() {
  page('Consumer groups', async () => {
    const groups = await api('GET', '/api/groups');
    return table([
      ['group', (g) => link(`#/groups/${enc(g.group)}`, g.group)], ['state', (g) => g.state],
      ['protocol type', (g) => g.protocol_type || null], ['coordinator', (g) => g.coordinator],
    ], groups, { testid: 'groups-table', empty: 'no consumer groups' });
  }, { refresh: true });
}

function groupPage(id) {
  const section = page(`Group ${id}`, async () => {
    const g = await api('GET', `/api/groups/${enc(id)}`);
    const history = g.history || [];
    const keys = [...new Set(history.flatMap((s) => Object.keys(s.partitions || {})))].sort().slice(0, 5);
    return [
      h('div.cards', {}, card('State', g.state, { testid: 'group-state' }), card('Protocol', g.protocol || '–'),
        card('Coordinator', g.coordinator ? `${g.coordinator.id} (${g.coordinator.address})` : '–', { class: 'small-value' }),
        card('Total lag', fmtNum(g.total_lag), { testid: 'group-total-lag' })),
      h('h2', {}, 'Members'),
      table([['member', (m) => m.member_id], ['client', (m) => m.client_id], ['host', (m) => m.host],
        ['assignment', (m) => (m.assignment || []).map((a) => `${a.topic}[${a.partitions.join(',')}]`).join(' ')]],
      g.members || [], { testid: 'members-table', empty: 'no members (the group is empty)' }),
      h('h2', {}, 'Lag per partition'),
      table([['topic', (p) => link(`#/topics/${enc(p.topic)}`, p.topic)], ['partition', (p) => p.partition],
        ['committed', (p) => p.committed_offset], ['log end', (p) => p.log_end_offset], ['lag', (p) => p.lag],
        ['member', (p) => p.client_id || p.member_id]],
      g.partitions || [], { testid: 'group-lag-table', empty: 'no committed offsets' }, (p) => ({ testid: 'lag-row', 'data-partition': `${p.topic}/${p.partition}` })),
      lineChart('Lag over time (records)', [
        { name: 'total', points: history.map((s) => [s.t, s.total_lag ?? null]) },
        ...keys.map((k) => ({ name: k, points: history.map((s) => [s.t, s.partitions?.[k] ?? null]) }))],
      { testid: 'lag-chart', wide: true }),
    ];
  }, { refresh: true });
  section.append(seekForm(id));
}

function seekForm(id) {
  const to = h('input', { required: true, testid: 'seek-to', placeholder: 'earliest | latest | N | @ms | shift:N' });
  const topic = h('input', { testid: 'seek-topic', placeholder: 'every topic (or T, or T:0,1)' });
  const dry = h('input', { type: 'checkbox', testid: 'seek-dry-run', checked: true });
  const slot = h('div.slot');
  const form = h('form.card-form', { testid: 'seek-form' }, h('h2', {}, 'Reset offsets'),
    h('p.muted', {}, 'Only an empty group can be moved (stop its consumers first).'),
    h('div.row', {}, field('To', to), field('Topic', topic), h('div.field.check', {}, dry, h('label', { for: (dry.id = 'seek-dry') }, 'dry run'))),
    h('button', { type: 'submit', testid: 'seek-submit', disabled: session.read_only }, 'Seek'), slot);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    submit(form, slot, async () => {
      const res = await api('POST', `/api/groups/${enc(id)}/seek`, { to: to.value.trim(), topic: topic.value.trim() || null, dry_run: dry.checked });
      return h('div', {}, notice(res.dry_run ? 'Dry run: nothing changed' : 'Offsets moved'),
        table([['topic', (p) => p.topic], ['partition', (p) => p.partition], ['old', (p) => p.old_offset], ['new', (p) => p.new_offset]],
          res.partitions || [], { testid: 'seek-result' }));
    });
  });
  return form;
}

/** The per-partition tiering status as rows, whatever nesting the backend uses (table → partitions). */
function icebergStatusRows(status) {
  const rows = [];
  const push = (table, p, v) => rows.push({ table, partition: p, ...(v && typeof v === 'object' ? v : { committed_offset: v }) });
  if (Array.isArray(status)) {
    for (const s of status) {
      if (Array.isArray(s.partitions)) s.partitions.forEach((p) => push(s.table ?? s.topic, p.partition, p));
      else rows.push(s);
    }
  } else if (status && typeof status === 'object') {
    for (const [table, v] of Object.entries(status)) {
      const parts = Array.isArray(v) ? v : v?.partitions ?? v;
      if (Array.isArray(parts)) parts.forEach((p) => push(table, p.partition, p));
      else if (parts && typeof parts === 'object') Object.entries(parts).forEach(([p, pv]) => push(table, Number(p), pv));
    }
  }
  return rows;
}

function icebergPage() {
  const detail = h('div', { testid: 'iceberg-detail' });
  const section = page('Iceberg tables', async () => {
    const { tables = [], status } = await api('GET', '/api/iceberg');
    const rows = icebergStatusRows(status);
    const lagMs = (r) => r.lag_ms ?? r.lag_time_ms ?? null;
    return [
      table([
        ['table', (t) => t.table], ['format', (t) => `v${t.format_version}`],
        ['current snapshot', (t) => (t.current_snapshot_id == null ? null : h('code', { testid: 'current-snapshot-id' }, t.current_snapshot_id))],
        ['snapshots', (t) => t.snapshots],
        ['data files', (t) => t.data_files], ['records', (t) => t.records], ['size', (t) => fmtBytes(t.bytes)],
        ['', (t) => {
          const b = h('button.small', { type: 'button', testid: `snapshots-${t.table}` }, 'Snapshots & queries');
          b.addEventListener('click', () => showSnapshots(t.table, detail));
          return b;
        }],
      ], tables, { testid: 'iceberg-table', empty: 'no tables yet: a topic is tiered once it has floe.iceberg.enabled=true' }),
      h('h2', {}, 'Tiering per partition'),
      table([
        ['table', (r) => r.table ?? r.topic], ['partition', (r) => r.partition],
        ['committed offset', (r) => r.committed_offset ?? r.committed_next_offset ?? r.committed],
        ['high watermark', (r) => r.high_watermark], ['lag (records)', (r) => r.lag_records ?? r.lag],
        ['lag (time)', (r) => (lagMs(r) === null ? null : `${(lagMs(r) / 1000).toFixed(1)} s`)],
      ], rows, { testid: 'iceberg-status', empty: 'no tiered partitions' }, (r) => ({ testid: 'iceberg-status-row', 'data-partition': `${r.table ?? r.topic}/${r.partition}` })),
    ];
  });
  section.append(detail);
}

async function showSnapshots(name, slot) {
  slot.replaceChildren(h('p.muted', {}, 'loading…'));
  try {
    const res = await api('GET', `/api/iceberg/${enc(name)}/snapshots`);
    const snaps = Array.isArray(res) ? res : res.snapshots || [];
    const queries = res.queries || {};
    fill(slot, h('h2', {}, `Snapshots of ${name}`),
      // Ids are strings in the API (64-bit: a JSON number would be rounded), shown and copied as they are.
      table([['id', (s) => h('code', { testid: 'snapshot-id' }, s.snapshot_id)], ['parent', (s) => s.parent_snapshot_id],
        ['time', (s) => s.timestamp], ['operation', (s) => s.operation],
        ['added files', (s) => s.added_data_files], ['added records', (s) => s.added_records], ['current', (s) => (s.current ? 'yes' : '')]],
      snaps, { testid: 'snapshots-table' }, (s) => ({ testid: 'snapshot-row', 'data-current': s.current ? 'yes' : 'no' })),
      Object.keys(queries).length ? h('h2', {}, 'Query it') : null,
      Object.entries(queries).map(([engine, q]) => h('div.query', {}, h('h3', {}, engine), h('pre', { testid: `query-${engine}` }, q))));
  } catch (e) {
    slot.replaceChildren(errorBox(e));
  }
}

const ACL_OPERATIONS = ['ALL', 'READ', 'WRITE', 'CREATE', 'DELETE', 'ALTER', 'DESCRIBE', 'CLUSTER_ACTION', 'DESCRIBE_CONFIGS', 'ALTER_CONFIGS', 'IDEMPOTENT_WRITE'];

function select(options, attrs) {
  return h('select', attrs, options.map((o) => h('option', { value: o }, o)));
}

function securityPage() {
  page('Security', async () => {
    const [acls, users] = await Promise.allSettled([api('GET', '/api/acls'), api('GET', '/api/users')]);
    const aclsOff = acls.status === 'rejected' && /SECURITY_DISABLED/.test(acls.reason?.message || '');
    return [h('h2', {}, 'ACLs'), aclSection(acls), aclsOff ? null : aclForm(), h('h2', {}, 'SCRAM users'), usersSection(users), userForm()];
  });
}

function aclSection(result) {
  if (result.status === 'rejected' && /SECURITY_DISABLED/.test(result.reason?.message || '')) {
    // The default install: no authorizer, so no ACLs to show. Not an error.
    return h('div.notice', { testid: 'acls-off', role: 'status' },
      h('strong', {}, 'ACLs are off. '),
      'The broker has no authorizer (', h('code', {}, 'authorizer.class.name'), ' is empty), so every request is allowed. ',
      'To enforce ACLs, start floe with ', h('code', {}, 'authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer'),
      ' and ', h('code', {}, 'super.users=User:admin'), ' (and a SASL or mTLS listener, so principals have names); then ACLs can be added here.');
  }
  if (result.status === 'rejected') return errorBox(result.reason);
  const slot = h('div.slot');
  const aclBody = (a) => ({ principal: a.principal, operation: a.operation, permission: String(a.permission).toLowerCase(),
    resource_type: String(a.resource_type).toLowerCase().replace('_', '-'), name: a.resource_name, pattern: String(a.pattern_type).toLowerCase(), host: a.host });
  return h('div', {}, slot, table([
    ['principal', (a) => a.principal], ['host', (a) => a.host], ['operation', (a) => a.operation], ['permission', (a) => a.permission],
    ['resource', (a) => `${a.resource_type}:${a.resource_name}`], ['pattern', (a) => a.pattern_type],
    ['', (a) => {
      const b = h('button.small.danger', { type: 'button', disabled: session.read_only, testid: 'delete-acl' }, 'Delete');
      b.addEventListener('click', async () => {
        try { await api('DELETE', '/api/acls', aclBody(a)); render(); } catch (e) { slot.replaceChildren(errorBox(e)); }
      });
      return b;
    }],
  ], result.value, { testid: 'acls-table', empty: 'no ACLs' }));
}

function aclForm() {
  const principal = h('input', { required: true, value: 'User:', testid: 'acl-principal' });
  const operation = select(ACL_OPERATIONS, { testid: 'acl-operation' });
  const permission = select(['allow', 'deny'], { testid: 'acl-permission' });
  const resource = select(['topic', 'group', 'cluster', 'transactional-id'], { testid: 'acl-resource-type' });
  const name = h('input', { required: true, testid: 'acl-name', placeholder: 'orders (kafka-cluster for cluster)' });
  const pattern = select(['literal', 'prefixed'], { testid: 'acl-pattern' });
  const host = h('input', { value: '*', testid: 'acl-host' });
  const slot = h('div.slot');
  const form = h('form.card-form', { testid: 'acl-form' }, h('h3', {}, 'Add an ACL'),
    h('div.row', {}, field('Principal', principal), field('Operation', operation), field('Permission', permission)),
    h('div.row', {}, field('Resource type', resource), field('Resource name', name), field('Pattern', pattern), field('Host', host)),
    h('button', { type: 'submit', testid: 'acl-submit', disabled: session.read_only }, 'Add ACL'), slot);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    submit(form, slot, async () => {
      await api('POST', '/api/acls', { principal: principal.value.trim(), operation: operation.value, permission: permission.value,
        resource_type: resource.value, name: name.value.trim(), pattern: pattern.value, host: host.value.trim() || '*' });
      render();
    });
  });
  return form;
}

function usersSection(result) {
  if (result.status === 'rejected') return errorBox(result.reason);
  const slot = h('div.slot');
  return h('div', {}, slot, table([
    ['user', (u) => u.user],
    ['credentials', (u) => (u.credentials || []).map((c) => `${c.mechanism} (${c.iterations} iterations)`).join(', ')],
    ['', (u) => {
      const b = h('button.small.danger', { type: 'button', disabled: session.read_only, testid: `delete-user-${u.user}` }, 'Delete');
      b.addEventListener('click', async () => {
        if (!confirm(`Delete every SCRAM credential of ${u.user}?`)) return;
        try { await api('DELETE', `/api/users/${enc(u.user)}`); render(); } catch (e) { slot.replaceChildren(errorBox(e)); }
      });
      return b;
    }],
  ], result.value, { testid: 'users-table', empty: 'no SCRAM users' }));
}

function userForm() {
  const name = h('input', { required: true, testid: 'user-name', autocomplete: 'off' });
  const password = h('input', { type: 'password', required: true, testid: 'user-password', autocomplete: 'new-password' });
  const mechanism = select(['SCRAM-SHA-256', 'SCRAM-SHA-512'], { testid: 'user-mechanism' });
  const slot = h('div.slot');
  const form = h('form.card-form', { testid: 'user-form' }, h('h3', {}, 'Add or change a user'),
    h('div.row', {}, field('Name', name), field('Password', password), field('Mechanism', mechanism)),
    h('button', { type: 'submit', testid: 'user-submit', disabled: session.read_only }, 'Save user'), slot);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    submit(form, slot, async () => {
      await api('POST', '/api/users', { name: name.value.trim(), password: password.value, mechanism: mechanism.value });
      render();
    });
  });
  return form;
}

function benchPage(report) {
  page(report ? `Benchmark ${report}` : 'Benchmarks', async () => {
    const res = await api('GET', '/api/bench');
    if (!res.dir) return h('div.notice', {}, 'No reports directory. ', res.how || 'Set floe.console.bench-reports-dir.');
    const reports = res.reports || [];
    if (!report) {
      return table([['report', (r) => link(`#/bench/${enc(r.name)}`, r.name)], ['files', (r) => r.files.join(', ')]],
        reports, { testid: 'bench-table', empty: `no reports in ${res.dir}` });
    }
    const r = reports.find((x) => x.name === report);
    if (!r) throw new Error(`no report ${report} in ${res.dir}`);
    const base = `/api/bench/${enc(report)}/`;
    const out = [h('p', {}, link('#/bench', '← all reports'))];
    if (r.files.includes('report.md')) {
      const md = await api('GET', `${base}report.md`);
      out.push(h('article.markdown', { testid: 'bench-report' }, renderMarkdown(String(md), base)));
    }
    const svgs = r.files.filter((f) => f.endsWith('.svg'));
    if (svgs.length) out.push(h('h2', {}, 'Plots'), h('div.plots', {}, svgs.map((f) => h('img', { src: base + enc(f), alt: f, loading: 'lazy' }))));
    return out;
  });
}

/** Markdown as floe-bench writes it: headings, paragraphs, lists, pipe tables, fenced code, inline code/bold/links/images. */
function renderMarkdown(text, base) {
  const lines = text.replace(/\r/g, '').split('\n');
  const out = [];
  let para = [];
  const flush = () => { if (para.length) out.push(h('p', {}, inline(para.join(' '), base))); para = []; };
  const cells = (l) => l.trim().replace(/^\|/, '').replace(/\|$/, '').split('|').map((c) => c.trim());
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i];
    if (l.startsWith('```')) {
      flush();
      const code = [];
      while (++i < lines.length && !lines[i].startsWith('```')) code.push(lines[i]);
      out.push(h('pre', {}, h('code', {}, code.join('\n'))));
    } else if (/^#{1,6}\s/.test(l)) {
      flush();
      const level = l.match(/^#+/)[0].length;
      out.push(h(`h${Math.min(level + 1, 6)}`, {}, inline(l.replace(/^#+\s*/, ''), base)));
    } else if (l.trim().startsWith('|') && /^\s*\|?[\s:|-]+\|?\s*$/.test(lines[i + 1] || '') && lines[i + 1].includes('-')) {
      flush();
      const head = cells(l);
      const aligns = cells(lines[++i]).map((c) => (c.endsWith(':') ? (c.startsWith(':') ? 'center' : 'right') : 'left'));
      const body = [];
      while (i + 1 < lines.length && lines[i + 1].trim().startsWith('|')) body.push(cells(lines[++i]));
      out.push(h('div.table-wrap', {}, h('table', {},
        h('thead', {}, h('tr', {}, head.map((c, j) => h('th', { style: `text-align:${aligns[j] || 'left'}` }, inline(c, base))))),
        h('tbody', {}, body.map((r) => h('tr', {}, r.map((c, j) => h('td', { style: `text-align:${aligns[j] || 'left'}` }, inline(c, base)))))))));
    } else if (/^\s*[-*]\s/.test(l)) {
      flush();
      const items = [l];
      while (i + 1 < lines.length && /^\s*[-*]\s/.test(lines[i + 1])) items.push(lines[++i]);
      out.push(h('ul', {}, items.map((it) => h('li', {}, inline(it.replace(/^\s*[-*]\s/, ''), base)))));
    } else if (!l.trim()) flush();
    else para.push(l.trim());
  }
  flush();
  return out;
}

function inline(text, base) {
  const nodes = [];
  const re = /`([^`]+)`|\*\*([^*]+)\*\*|!\[([^\]]*)\]\(([^)]+)\)|\[([^\]]+)\]\(([^)]+)\)/g;
  let last = 0, m;
  const local = (src) => (/^[\w.-]+$/.test(src) ? base + enc(src) : src);
  while ((m = re.exec(text))) {
    if (m.index > last) nodes.push(text.slice(last, m.index));
    if (m[1] !== undefined) nodes.push(h('code', {}, m[1]));
    else if (m[2] !== undefined) nodes.push(h('strong', {}, m[2]));
    else if (m[4] !== undefined) nodes.push(h('img', { src: local(m[4]), alt: m[3] }));
    else if (/^(https?:|#|[\w.-]+$)/.test(m[6])) nodes.push(h('a', { href: local(m[6]) }, m[5]));
    else nodes.push(m[5]);
    last = re.lastIndex;
  }
  if (last < text.length) nodes.push(text.slice(last));
  return nodes;
}

function loginPage() {
  const user = h('input', { required: true, testid: 'login-user', autocomplete: 'username' });
  const password = h('input', { type: 'password', required: true, testid: 'login-password', autocomplete: 'current-password' });
  const slot = h('div.slot');
  const form = h('form.login card-form', { testid: 'login-form' },
    h('h1', {}, 'Log in'), h('p.muted', {}, 'The console talks to the broker as you: use your Kafka (SASL) user.'),
    field('User', user), field('Password', password), h('button', { type: 'submit', testid: 'login-submit' }, 'Log in'), slot);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    submit(form, slot, async () => {
      const res = await api('POST', '/api/login', { username: user.value.trim(), password: password.value });
      session = { ...session, user: res.user, csrf: res.csrf };
      render();
    });
  });
  app.replaceChildren(form);
  user.focus();
}

// ------------------------------------------------------------------ shell and router

const NAV = [['#/', 'Overview'], ['#/topics', 'Topics'], ['#/groups', 'Groups'], ['#/iceberg', 'Iceberg'], ['#/security', 'Security'], ['#/bench', 'Bench']];

function renderHeader(route) {
  const nav = document.getElementById('nav');
  const who = document.getElementById('session');
  const loggedOut = session.login_required && !session.user;
  nav.replaceChildren(...(loggedOut ? [] : NAV.map(([href, text]) => {
    const active = href === '#/' ? route[0] === '' : route[0] === href.slice(2);
    return h('a', { href, 'aria-current': active ? 'page' : null, testid: `nav-${text.toLowerCase()}` }, text);
  })));
  const items = [];
  if (session.read_only) items.push(h('span.badge.warn', { testid: 'read-only-badge', title: 'floe.console.read-only=true' }, 'read-only'));
  if (session.user) items.push(h('span.user', { testid: 'session-user' }, session.user));
  else if (!loggedOut) items.push(h('span.user.muted', { testid: 'session-user' }, 'anonymous'));
  if (session.user && session.login_required) {
    const out = h('button.small.plain', { type: 'button', testid: 'logout' }, 'Log out');
    out.addEventListener('click', async () => {
      try { await api('POST', '/api/logout'); } catch { /* the session is gone either way */ }
      await loadSession();
      render();
    });
    items.push(out);
  }
  who.replaceChildren(...items);
}

function render() {
  clearInterval(refreshTimer);
  refreshTimer = null;
  const route = location.hash.replace(/^#\/?/, '').split('/').map((p) => decodeURIComponent(p));
  renderHeader(route);
  if (session.login_required && !session.user) return loginPage();
  const [section, arg] = route;
  switch (section) {
    case '': return overviewPage();
    case 'topics': return arg ? topicPage(arg) : topicsPage();
    case 'groups': return arg ? groupPage(arg) : groupsPage();
    case 'iceberg': return icebergPage();
    case 'security': return securityPage();
    case 'bench': return benchPage(arg);
    default: return page('Not found', async () => errorBox(`no page ${location.hash}`));
  }
}

async function loadSession() {
  session = await api('GET', '/api/session');
}

window.addEventListener('hashchange', render);
loadSession().then(render, (e) => app.replaceChildren(errorBox(e)));
