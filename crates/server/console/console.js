// headway's console: polls /api/state once a second and draws it. Rates and the lag
// history are computed here from successive polls; the broker keeps none of it.
"use strict";

const POLL_MS = 1000;
const HISTORY = 300; // points kept per plot: five minutes at one poll a second

let previous = null; // the last state, for rates
const traffic = []; // {t, recordsIn, recordsOut} per poll
const lagHistory = new Map(); // group id -> [{t, lag}]

const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) =>
  ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

const rate = (n) => (n >= 100 ? n.toFixed(0) : n.toFixed(1));

function push(list, point) {
  list.push(point);
  if (list.length > HISTORY) list.shift();
}

// A line plot of `series` ([{values, cls}]) over the same time axis, as inline SVG.
function plot(points, series, width, height) {
  const pad = 28;
  const max = Math.max(1, ...series.flatMap((s) => s.values));
  const n = points.length;
  const x = (i) => pad + (n < 2 ? 0 : (i * (width - pad - 4)) / (HISTORY - 1));
  const y = (v) => height - 14 - (v * (height - 22)) / max;
  const lines = series.map((s) => {
    const d = s.values.map((v, i) => (i ? "L" : "M") + x(i).toFixed(1) + " " + y(v).toFixed(1)).join(" ");
    return `<path class="${s.cls}" d="${d}"/>`;
  });
  return `<svg width="${width}" height="${height}" role="img">` +
    `<line class="grid" x1="${pad}" y1="${y(max)}" x2="${width}" y2="${y(max)}"/>` +
    `<line class="grid" x1="${pad}" y1="${y(0)}" x2="${width}" y2="${y(0)}"/>` +
    `<text x="0" y="${y(max) + 4}">${rate(max)}</text><text x="0" y="${y(0) + 4}">0</text>` +
    `<text x="${pad}" y="${height - 2}">last ${Math.round((HISTORY * POLL_MS) / 60000)} min</text>` +
    lines.join("") + "</svg>";
}

function renderTraffic(last) {
  const el = document.getElementById("traffic");
  el.innerHTML =
    `<div class="legend">publish <b class="in" id="rate-in">${rate(last.recordsIn)}</b> records/s · ` +
    `consume <b class="out" id="rate-out">${rate(last.recordsOut)}</b> records/s</div>` +
    plot(traffic, [
      { values: traffic.map((p) => p.recordsIn), cls: "in" },
      { values: traffic.map((p) => p.recordsOut), cls: "out" },
    ], 1300, 140);
}

function renderConnections(state) {
  const el = document.getElementById("connections");
  if (!state.connections.length) { el.innerHTML = '<p class="empty">no connections</p>'; return; }
  const rows = state.connections.map((c) => {
    const share = c.outbound_bytes_max ? Math.min(1, c.outbound_bytes_held / c.outbound_bytes_max) : 0;
    const slow = c.outbound_bytes_held > 0 || c.reader_paused;
    return `<tr class="conn${slow ? " slow" : ""}" data-id="${c.id}" data-client-id="${esc(c.client_id)}" data-held="${c.outbound_bytes_held}">` +
      `<td class="text">${esc(c.peer)}</td><td class="text">${esc(c.client_id ?? "–")}</td>` +
      `<td>${c.in_flight}/${c.in_flight_max}</td>` +
      `<td class="${c.reader_paused ? "paused" : ""}">${c.reader_paused ? "paused" : "reading"}</td>` +
      `<td class="text"><span class="bar" title="${(share * 100).toFixed(0)}% of the connection's budget"><span style="width:${(share * 100).toFixed(1)}%"></span></span> ` +
      `<span class="held">${bytes(c.outbound_bytes_held)}</span> / ${bytes(c.outbound_bytes_max)}</td>` +
      `<td>${c.window_full_events}</td><td>${bytes(c.bytes_written)}</td></tr>`;
  });
  el.innerHTML =
    `<p class="legend">${state.connections_total} open · outbound held broker-wide ${bytes(state.outbound_bytes_held)} of ${bytes(state.outbound_bytes_max)}</p>` +
    "<table><thead><tr><th>peer</th><th class=\"text\">client id</th><th>in flight</th><th>reader</th>" +
    "<th class=\"text\">held (against its budget)</th><th>window full</th><th>written</th></tr></thead><tbody>" +
    rows.join("") + "</tbody></table>";
}

function renderTopics(state, dt) {
  const el = document.getElementById("topics");
  if (!state.topics.length) { el.innerHTML = '<p class="empty">no topics</p>'; return; }
  const before = new Map();
  for (const t of previous?.topics ?? []) {
    for (const p of t.partitions) before.set(t.name + "/" + p.partition, p.traffic);
  }
  const rows = [];
  for (const t of state.topics) {
    for (const p of t.partitions) {
      const was = before.get(t.name + "/" + p.partition);
      const r = (k) => (was && dt > 0 ? rate(Math.max(0, p.traffic[k] - was[k]) / dt) : "–");
      rows.push(`<tr class="partition" data-topic="${esc(t.name)}" data-partition="${p.partition}">` +
        `<td class="text topic">${esc(t.name)}</td><td>${p.partition}</td><td>${bytes(p.size_bytes)}</td>` +
        `<td>${p.log_end ?? "offline"}</td><td>${p.high_watermark}</td>` +
        `<td>${r("records_in")}</td><td>${r("records_out")}</td></tr>`);
    }
  }
  el.innerHTML = "<table><thead><tr><th>topic</th><th>partition</th><th>size</th><th>log end</th>" +
    "<th>high watermark</th><th>in/s</th><th>out/s</th></tr></thead><tbody>" + rows.join("") + "</tbody></table>";
}

function renderGroups(state) {
  const el = document.getElementById("groups");
  if (!state.groups.length) { el.innerHTML = '<p class="empty">no groups</p>'; return; }
  el.innerHTML = state.groups.map((g) => {
    const members = g.members.map((m) => {
      const assigned = m.assignment.map((a) => `${esc(a.topic)}[${a.partitions.join(",")}]`).join(" ");
      return `<tr class="member"><td class="text">${esc(m.client_id)}</td><td class="text">${esc(m.client_host)}</td>` +
        `<td class="text">${assigned || "–"}</td></tr>`;
    }).join("");
    const offsets = g.offsets.map((o) =>
      `<tr class="offset" data-topic="${esc(o.topic)}" data-partition="${o.partition}" data-lag="${o.lag ?? ""}">` +
      `<td class="text">${esc(o.topic)}</td><td>${o.partition}</td><td>${o.committed}</td>` +
      `<td>${o.high_watermark ?? "–"}</td><td class="lag">${o.lag ?? "–"}</td></tr>`).join("");
    const more = g.members_omitted || g.offsets_omitted
      ? `<p class="warn">${g.members_omitted} members and ${g.offsets_omitted} partitions not listed</p>` : "";
    const history = lagHistory.get(g.group_id) ?? [];
    return `<div class="group" data-group="${esc(g.group_id)}" data-lag="${g.lag}">` +
      `<h3>${esc(g.group_id)} <small>${esc(g.state)} · ${esc(g.protocol || g.protocol_type)} · lag <b class="group-lag">${g.lag}</b></small></h3>` +
      (g.members.length ? `<table><thead><tr><th>member (client id)</th><th class="text">host</th><th class="text">assignment</th></tr></thead><tbody>${members}</tbody></table>` : "") +
      (g.offsets.length ? `<table><thead><tr><th>topic</th><th>partition</th><th>committed</th><th>high watermark</th><th>lag</th></tr></thead><tbody>${offsets}</tbody></table>` : "") +
      more + plot(history, [{ values: history.map((p) => p.lag), cls: "lag" }], 600, 90) + "</div>";
  }).join("");
}

function render(state) {
  const dt = previous ? (state.now_ms - previous.now_ms) / 1000 : 0;
  if (previous && dt > 0) {
    push(traffic, {
      t: state.now_ms,
      recordsIn: Math.max(0, state.totals.records_in - previous.totals.records_in) / dt,
      recordsOut: Math.max(0, state.totals.records_out - previous.totals.records_out) / dt,
    });
  }
  for (const g of state.groups) {
    if (!lagHistory.has(g.group_id)) lagHistory.set(g.group_id, []);
    push(lagHistory.get(g.group_id), { t: state.now_ms, lag: g.lag });
  }
  renderTraffic(traffic[traffic.length - 1] ?? { recordsIn: 0, recordsOut: 0 });
  renderConnections(state);
  renderTopics(state, dt);
  renderGroups(state);
  const cut = document.getElementById("truncated");
  cut.hidden = !state.truncated;
  cut.textContent = state.truncated
    ? `truncated: ${state.partitions_omitted} partitions, ${state.groups_omitted} groups, ` +
      `${state.connections_omitted} connections not listed`
    : "";
  document.getElementById("status").textContent =
    `node ${state.node_id} · ${state.topics_total} topics · ${state.partitions_total} partitions · ` +
    `${state.groups_total} groups · updated ${new Date(state.now_ms).toLocaleTimeString()}`;
  previous = state;
}

async function poll() {
  try {
    const answer = await fetch("/api/state", { cache: "no-store" });
    if (!answer.ok) throw new Error("HTTP " + answer.status);
    render(await answer.json());
  } catch (e) {
    document.getElementById("status").textContent = "broker unreachable: " + e.message;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
