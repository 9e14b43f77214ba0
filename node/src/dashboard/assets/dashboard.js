// murmur dashboard: renders the board snapshot (GET /api/snapshot, then live
// over Server-Sent Events at /api/events) as SVG charts and tables. No
// libraries, no network access beyond this server.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';
const PALETTE = ['#2f6fdb', '#d6453d', '#1f9d55', '#c28a2b', '#8e44ad', '#16a2b8', '#e67e22', '#5d6d7e',
  '#c0392b', '#27ae60', '#2980b9', '#f39c12'];

function svg(tag, attrs, parent) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function html(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }

function fmt(n, digits) {
  if (n === null || n === undefined || !isFinite(n)) return '–';
  return Number(n).toFixed(digits === undefined ? 3 : digits);
}

function bytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i === 0 ? Math.round(n) : n.toFixed(1)) + ' ' + units[i];
}

function rate(n) {
  if (!isFinite(n)) return '–';
  return n >= 1000 ? (n / 1000).toFixed(1) + 'k' : n.toFixed(0);
}

function secs(ms) { return ms === null || ms === undefined ? '–' : (ms / 1000).toFixed(1) + 's'; }

function colorOf(peer, nodes) {
  const i = nodes.findIndex(n => n.peer === peer);
  return i < 0 ? '#8a96a3' : PALETTE[i % PALETTE.length];
}

// A line chart: series = [{name, color, cls, points: [[x, y], ...]}], hlines = [{y, label, cls}],
// fmtY formats the y ticks.
function lineChart(el, series, hlines, yLabel, fmtY) {
  clear(el);
  const [W, H] = [el.viewBox.baseVal.width, el.viewBox.baseVal.height];
  const pad = { l: 60, r: 12, t: 22, b: 24 };
  const pts = series.flatMap(s => s.points);
  const ys = pts.map(p => p[1]).concat(hlines.map(h => h.y)).filter(isFinite);
  el.setAttribute('data-series', String(series.filter(s => s.points.length > 0).length));
  if (pts.length === 0) {
    svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty' }, el).textContent = 'no rounds reported yet';
    return;
  }
  let [x0, x1] = [Math.min(...pts.map(p => p[0])), Math.max(...pts.map(p => p[0]))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const m = (y1 - y0) * 0.06; y0 -= m; y1 += m;
  const X = x => pad.l + (x - x0) / (x1 - x0) * (W - pad.l - pad.r);
  const Y = y => H - pad.b - (y - y0) / (y1 - y0) * (H - pad.t - pad.b);
  for (let i = 0; i <= 4; i++) {
    const y = y0 + (y1 - y0) * i / 4;
    svg('line', { x1: pad.l, x2: W - pad.r, y1: Y(y), y2: Y(y), class: 'axis' }, el);
    svg('text', { x: pad.l - 6, y: Y(y) + 4, 'text-anchor': 'end' }, el).textContent = fmtY(y, y1 - y0);
  }
  const xt = Math.max(1, Math.ceil((x1 - x0) / 8));
  for (let x = Math.ceil(x0); x <= x1; x += xt) {
    svg('text', { x: X(x), y: H - 6, 'text-anchor': 'middle' }, el).textContent = String(x);
  }
  svg('text', { x: pad.l, y: 12 }, el).textContent = yLabel;
  for (const h of hlines) {
    svg('line', { x1: pad.l, x2: W - pad.r, y1: Y(h.y), y2: Y(h.y), class: h.cls }, el);
    svg('text', { x: W - pad.r - 4, y: Y(h.y) - 4, 'text-anchor': 'end', class: h.cls }, el).textContent = h.label;
  }
  for (const s of series) {
    if (s.points.length === 0) continue;
    const d = s.points.map((p, i) => (i ? 'L' : 'M') + X(p[0]).toFixed(1) + ' ' + Y(p[1]).toFixed(1)).join(' ');
    const path = svg('path', { d, class: 'series ' + (s.cls || ''), 'data-name': s.name,
      'data-points': String(s.points.length) }, el);
    if (s.color) path.setAttribute('stroke', s.color);
    for (const p of s.points) {
      svg('circle', { cx: X(p[0]), cy: Y(p[1]), r: s.cls === 'network' ? 3 : 2, fill: s.color || '#1d232b',
        class: 'point' }, el);
    }
  }
}

function renderLoss(snap) {
  const series = snap.nodes.map(n => ({
    name: n.short, color: colorOf(n.peer, snap.nodes),
    points: n.history.filter(p => p.val_loss !== null).map(p => [p.round, p.val_loss]),
  }));
  series.push({ name: 'network', cls: 'network', points: snap.network.val_loss.map(p => [p.round, p.val_loss]) });
  const floor = snap.run.entropy_floor;
  const hlines = floor ? [{ y: floor, label: 'entropy floor ' + fmt(floor), cls: 'floor' }] : [];
  lineChart(document.getElementById('chart-loss'), series, hlines, 'validation loss (nats/token) by round',
    (y, span) => fmt(y, span < 1 ? 3 : 2));
  const legend = document.getElementById('legend-loss');
  clear(legend);
  for (const s of series) {
    const e = html('span', { style: '--c:' + (s.color || '#1d232b') }, s.name === 'network' ? 'network (median)' : s.name);
    legend.appendChild(e);
  }
}

function renderTokens(snap) {
  const series = snap.nodes.map(n => ({
    name: n.short, color: colorOf(n.peer, snap.nodes),
    points: n.history.map(p => [p.round, p.tokens_per_sec]),
  }));
  lineChart(document.getElementById('chart-tokens'), series, [], 'tokens/s by round',
    (y, span) => (span < 1000 ? y.toFixed(0) : rate(y)));
  document.getElementById('tokens-total').textContent =
    rate(snap.network.tokens_per_sec) + ' tokens/s in total from ' + snap.network.alive + ' live nodes';
}

function renderBytes(snap) {
  const series = snap.nodes.map(n => ({
    name: n.short, color: colorOf(n.peer, snap.nodes),
    points: n.history.filter(p => p.bytes_sent !== null).map(p => [p.round, p.bytes_sent]),
  }));
  lineChart(document.getElementById('chart-bytes'), series, [], 'bytes sent by round', y => bytes(y));
  const r = snap.run;
  document.getElementById('compression').textContent = r.compression
    ? 'delta ' + bytes(r.delta_bytes) + ' vs ' + bytes(r.f32_bytes) + ' in f32: ' + r.compression.toFixed(1) + '× (' + r.codec + ')'
    : r.codec;
}

function renderGraph(snap) {
  const el = document.getElementById('peer-graph');
  clear(el);
  const peers = snap.graph.peers;
  el.setAttribute('data-peers', String(peers.length));
  if (peers.length === 0) {
    svg('text', { x: 160, y: 120, 'text-anchor': 'middle', class: 'empty' }, el).textContent = 'no peers reported yet';
    return;
  }
  const pos = {};
  const trainers = peers.filter(p => p.role === 'trainer');
  const others = peers.filter(p => p.role !== 'trainer');
  trainers.forEach((p, i) => {
    const a = 2 * Math.PI * i / Math.max(1, trainers.length) - Math.PI / 2;
    pos[p.peer] = [160 + 100 * Math.cos(a), 112 + 80 * Math.sin(a)];
  });
  others.forEach((p, i) => { pos[p.peer] = [160 + (i - (others.length - 1) / 2) * 110, 232]; });
  for (const l of snap.graph.links) {
    if (!pos[l.a] || !pos[l.b]) continue;
    svg('line', { x1: pos[l.a][0], y1: pos[l.a][1], x2: pos[l.b][0], y2: pos[l.b][1],
      class: 'link ' + (l.relayed ? 'relayed' : 'direct'), 'data-a': l.a, 'data-b': l.b }, el);
  }
  for (const p of peers) {
    const g = svg('g', { class: 'peer', 'data-peer': p.peer, 'data-role': p.role }, el);
    const fill = p.role === 'trainer' ? colorOf(p.peer, snap.nodes) : (p.role === 'bootstrap' ? '#1d232b' : '#8a96a3');
    svg('circle', { cx: pos[p.peer][0], cy: pos[p.peer][1], r: p.role === 'trainer' ? 11 : 8, fill }, g);
    svg('text', { x: pos[p.peer][0], y: pos[p.peer][1] + 24, 'text-anchor': 'middle' }, g).textContent =
      p.role === 'trainer' ? p.short : p.role;
    svg('title', {}, g).textContent = p.role + ' ' + p.peer;
  }
}

function renderTimeline(snap) {
  const body = document.querySelector('#timeline tbody');
  clear(body);
  for (const r of snap.rounds) {
    const tr = html('tr', { 'data-round': String(r.round) });
    const span = r.closed_ms !== null && r.opened_ms !== null ? secs(r.closed_ms - r.opened_ms) : (r.closed_ms === null ? 'open' : '–');
    const cells = [
      String(r.round), span,
      r.committers === null ? '–' : String(r.committers) + (r.disagreeing_commits ? ' (+' + r.disagreeing_commits + ' other)' : ''),
      r.stragglers.map(s => s.slice(-6)).join(' ') || '–',
      r.refused.map(x => x.count + ' ' + x.reason).join(', ') || '–', r.state ? r.state.slice(0, 12) : '–',
    ];
    cells.forEach((c, i) => tr.appendChild(html('td', i === 5 ? { class: 'mono' } : (i === 4 && c !== '–' ? { class: 'warn' } : {}), c)));
    body.appendChild(tr);
  }
}

function renderNodes(snap) {
  const body = document.querySelector('#nodes tbody');
  clear(body);
  for (const n of snap.nodes) {
    const tr = html('tr', { 'data-peer': n.peer, class: n.alive ? 'alive' : 'gone' });
    const name = html('td', { class: 'mono' });
    name.appendChild(html('span', { class: 'swatch', style: 'background:' + colorOf(n.peer, snap.nodes) }));
    name.appendChild(document.createTextNode(n.short));
    tr.appendChild(name);
    const state = html('td', { class: 'mono ' + ({ true: 'ok', false: 'warn' }[n.on_majority_state] || '') }, n.state.slice(0, 12));
    const device = n.trainer_restarts > 0 ? n.device + ' (trainer restarted ' + n.trainer_restarts + '×)' : n.device;
    for (const c of [device, n.backend, String(n.round), fmt(n.val_loss), rate(n.tokens_per_sec),
      bytes(n.bytes_sent), bytes(n.bytes_recv), String(n.peer_count)]) {
      tr.appendChild(html('td', {}, c));
    }
    tr.appendChild(state);
    body.appendChild(tr);
  }
}

function renderSample(snap) {
  const el = document.getElementById('sample');
  if (!snap.sample) return;
  clear(el);
  el.appendChild(html('b', {}, snap.sample.prompt));
  el.appendChild(document.createTextNode(snap.sample.text));
  el.setAttribute('data-round', String(snap.sample.round));
  document.getElementById('sample-meta').textContent =
    'after round ' + snap.sample.round + ', state ' + snap.sample.state.slice(0, 12);
  if (snap.sample.export) {
    document.getElementById('export-cmd').textContent = snap.sample.export;
  }
}

function renderEvents(snap) {
  const rej = document.getElementById('rejections');
  clear(rej);
  for (const r of snap.rejections) rej.appendChild(html('li', { 'data-reason': r.reason }, r.count + ' × ' + r.reason));
  const ev = document.getElementById('events');
  clear(ev);
  for (const e of snap.events.slice(0, 15)) ev.appendChild(html('li', { 'data-kind': e.kind }, secs(e.at_ms) + '  ' + e.text));
}

function render(snap) {
  const r = snap.run;
  document.getElementById('run').textContent =
    'run ' + r.id.slice(0, 12) + ' · ' + r.preset + ' (' + rate(r.params) + ' parameters) · ' + r.data + ' · H=' +
    r.inner_steps + ' · ' + r.codec + ' · round ' + (snap.network.latest_round === null ? '–' : snap.network.latest_round) +
    ' · ' + snap.network.alive + ' nodes';
  for (const f of [renderLoss, renderTokens, renderBytes, renderGraph, renderTimeline, renderNodes, renderSample, renderEvents]) {
    try { f(snap); } catch (e) { console.error(f.name, e); }
  }
  document.body.setAttribute('data-updated', String(snap.now_ms));
}

function setStatus(text, cls) {
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = 'status ' + cls;
}

fetch('/api/snapshot').then(r => r.json()).then(render).catch(e => console.error(e));
const events = new EventSource('/api/events');
let streamed = 0;
events.addEventListener('snapshot', e => {
  setStatus('live', 'live');
  // Snapshots received over the stream; unlike the status it is not reset
  // when the stream drops (or the browser stops the page).
  document.body.setAttribute('data-streamed', String(++streamed));
  render(JSON.parse(e.data));
});
events.onerror = () => setStatus('reconnecting', 'down');
