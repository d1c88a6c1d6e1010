// grps-py dashboard: polls /grps/v1/monitor/series once a second and draws each series as SVG.
// Plain JS, no dependencies, so the page works offline. Each chart's <svg> carries
// data-points="N" (buckets with a value) so tests and scripts can see what was drawn.
"use strict";

const API = "grps/v1/monitor/"; // relative: the page also works behind a path-prefixing proxy
const SVG = "http://www.w3.org/2000/svg"; // the SVG namespace name, never fetched
const W = 380, H = 150, PAD = { l: 46, r: 8, t: 8, b: 18 };
const COLORS = ["#2f80ed", "#f2994a", "#eb5757", "#27ae60", "#9b51e0"];
// The charts, in page order; a chart shows only when the server has its series.
const BASE_CHARTS = [
  { name: "qps", title: "QPS", unit: "req/s" },
  { name: "fail_rate(%)", title: "Failure rate", unit: "%" },
  { name: "latency_cdf(ms)", title: "Latency", unit: "ms", keys: ["p50", "p90", "p99"] },
  { name: "queue_time_avg(ms)", title: "Queue time", unit: "ms" },
  { name: "batch_size_avg", title: "Batch size", unit: "" },
  { name: "cpu_usage(%)", title: "CPU", unit: "%" },
  { name: "mem_usage(%)", title: "Memory", unit: "%" },
];
// Generative models' charts: on the page only while their series have data in the window shown (some
// model generates, or the model chosen does); they follow the base charts.
const GENERATION_CHARTS = [
  { name: "tokens_per_s", title: "Tokens generated", unit: "tokens/s" },
  { name: "ttft_cdf(ms)", title: "Time to first token", unit: "ms", keys: ["p50", "p90", "p99"] },
  { name: "inter_token_cdf(ms)", title: "Inter-token", unit: "ms", keys: ["p50", "p90", "p99"] },
  { name: "running_sequences", title: "Running sequences", unit: "" },
  { name: "waiting_sequences", title: "Waiting sequences", unit: "" },
];

const state = { meta: null, charts: [], generation: null, model: "", window: "minute", busy: false };
const $ = (id) => document.getElementById(id);

function el(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmt(v) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(a >= 1e5 ? 0 : 1) + "k";
  return String(Number(v.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : 2)));
}

function niceCeil(x) {
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}

function timeLabel(t) {
  const d = new Date(t * 1000), two = (n) => String(n).padStart(2, "0");
  const hm = two(d.getHours()) + ":" + two(d.getMinutes());
  const md = two(d.getMonth() + 1) + "-" + two(d.getDate());
  if (state.window === "minute") return hm + ":" + two(d.getSeconds());
  if (state.window === "hour") return hm;
  return state.window === "day" ? md + " " + hm : md;
}

// The lines of a chart: one per key (latency percentiles) or the value itself.
function lines(chart, points) {
  const pick = chart.keys
    ? chart.keys.map((k) => (p) => (p.v && typeof p.v === "object" ? p.v[k] : null))
    : [(p) => p.v];
  return pick.map((get) => points.map((p) => {
    const v = get(p);
    return typeof v === "number" && isFinite(v) ? v : null;
  }));
}

function makeChart(spec, parent) {
  const card = document.createElement("section");
  card.className = "card";
  const h2 = document.createElement("h2");
  const title = document.createElement("span");
  title.textContent = spec.title + (spec.unit ? " (" + spec.unit + ")" : "");
  const scope = document.createElement("span");
  scope.className = "scope";
  title.appendChild(scope);
  const last = document.createElement("span");
  last.className = "last";
  h2.append(title, last);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, "data-series": spec.name, "data-points": "0", role: "img" });
  svg.setAttribute("aria-label", spec.title);
  card.append(h2, svg);
  if (spec.keys) {
    const legend = document.createElement("div");
    legend.className = "legend";
    spec.keys.forEach((k, i) => {
      const swatch = document.createElement("i");
      swatch.style.background = COLORS[i];
      legend.append(swatch, k);
    });
    card.appendChild(legend);
  }
  (parent || $("charts")).appendChild(card);
  return { ...spec, card, svg, scope, last };
}

function draw(chart, series) {
  const { svg } = chart, points = (series && series.points) || [];
  const ys = lines(chart, points);
  const values = ys.flat().filter((v) => v !== null);
  const drawn = points.filter((_, i) => ys.some((line) => line[i] !== null)).length;
  svg.replaceChildren();
  svg.setAttribute("data-points", String(drawn));
  const pw = W - PAD.l - PAD.r, ph = H - PAD.t - PAD.b;
  let lo = Math.min(0, ...values), hi = Math.max(0, ...values);
  hi = hi > lo ? lo + niceCeil(hi - lo) : lo + 1;
  const y = (v) => PAD.t + ph - ((v - lo) / (hi - lo)) * ph;
  for (const v of [lo, (lo + hi) / 2, hi]) {
    svg.appendChild(el("line", { class: "grid", x1: PAD.l, x2: W - PAD.r, y1: y(v), y2: y(v) }));
    svg.appendChild(el("text", { x: PAD.l - 4, y: y(v) + 3, "text-anchor": "end" }, fmt(v)));
  }
  if (points.length) {
    const t0 = points[0].t, t1 = points[points.length - 1].t;
    const x = (t) => (t1 > t0 ? PAD.l + ((t - t0) / (t1 - t0)) * pw : PAD.l + pw);
    svg.appendChild(el("text", { x: PAD.l, y: H - 4 }, timeLabel(t0)));
    svg.appendChild(el("text", { x: W - PAD.r, y: H - 4, "text-anchor": "end" }, timeLabel(t1)));
    ys.forEach((line, li) => plot(svg, line, points.map((p) => x(p.t)), y, COLORS[li]));
  }
  if (!drawn) {
    const at = { class: "empty", x: PAD.l + pw / 2, y: PAD.t + ph / 2, "text-anchor": "middle" };
    svg.appendChild(el("text", at, "no data"));
  }
  const latest = ys.map((line) => [...line].reverse().find((v) => v !== null));
  chart.last.textContent = chart.keys
    ? chart.keys.map((k, i) => k + " " + fmt(latest[i])).join("  ")
    : fmt(latest[0]);
}

// One path per line, broken at nulls; a lone value between gaps is drawn as a dot.
function plot(svg, line, xs, y, color) {
  let d = "", run = 0;
  line.forEach((v, i) => {
    if (v === null) { run = 0; return; }
    d += (run ? "L" : "M") + xs[i].toFixed(1) + " " + y(v).toFixed(1);
    run += 1;
    const lone = run === 1 && (i + 1 >= line.length || line[i + 1] === null);
    if (lone) svg.appendChild(el("circle", { cx: xs[i], cy: y(v), r: 2, fill: color }));
  });
  if (d) svg.appendChild(el("path", { d, stroke: color }));
}

async function getJSON(path) {
  const reply = await fetch(API + path, { cache: "no-store" });
  const doc = await reply.json().catch(() => null);
  if (!reply.ok) throw new Error((doc && doc.status && doc.status.msg) || reply.status + " " + reply.statusText);
  return doc;
}

async function loadMeta() {
  const meta = await getJSON("models");
  const select = $("model");
  for (const key of meta.models) {
    const option = document.createElement("option");
    option.value = option.textContent = key;
    select.appendChild(option);
  }
  if (!meta.models.includes(state.model)) state.model = "";
  select.value = state.model;
  const base = BASE_CHARTS.filter((c) => meta.names.includes(c.name));
  const generation = GENERATION_CHARTS.filter((c) => meta.names.includes(c.name));
  const specs = []; // after those: every GPU's, then the user metrics'
  for (const name of meta.names) {
    const m = /^gpu(\d+)_(mem_)?usage\((%|MIB)\)$/.exec(name);
    if (m) specs.push({ name, title: `GPU ${m[1]} ${m[2] ? "memory" : "utilisation"}`, unit: m[2] ? "MiB" : "%" });
  }
  // Model code's app_monitor metrics, under their own names: inc as a sum per second, avg / max / min
  // per bucket, cdf as percentiles of each bucket's values (as grps's monitor shows them).
  for (const [name, kind] of Object.entries(meta.user_metrics || {})) {
    const unit = kind === "inc" ? "per s" : kind;
    specs.push(kind === "cdf" ? { name, title: name, unit, keys: ["p50", "p90", "p99"] } : { name, title: name, unit });
  }
  state.charts = base.map((spec) => makeChart(spec));
  if (generation.length) {
    state.generation = makeGroup(generation);
    state.charts.push(...state.generation.charts);
  }
  state.charts.push(...specs.map((spec) => makeChart(spec)));
  state.meta = meta;
}

// The generation charts live in a group of their own (display: contents, so they sit in the grid as
// the others do), filled only while they have something to show.
function makeGroup(specs) {
  const group = document.createElement("div");
  group.className = "group";
  $("charts").appendChild(group);
  const charts = specs.map((spec) => makeChart(spec, group));
  group.replaceChildren();
  return { group, charts, shown: false };
}

function hasData(series) {
  return !!series && (series.points || []).some((p) => p.v !== null && p.v !== undefined);
}

function showGeneration(got) {
  const generation = state.generation;
  if (!generation) return;
  const shown = generation.charts.some((chart) => hasData(got[chart.name]));
  if (shown !== generation.shown) {
    generation.group.replaceChildren(...(shown ? generation.charts.map((chart) => chart.card) : []));
    generation.shown = shown;
  }
}

// One request a second for every chart. Server-wide series (process, GPU) asked for a model answer
// for the whole server, with "model": "", and say so on their chart.
async function refresh() {
  if (!state.meta) await loadMeta();
  if (!state.charts.length) return;
  const query = "&window=" + state.window + (state.model ? "&model=" + encodeURIComponent(state.model) : "");
  // A user metric's name may hold a comma, which ?names= splits on: such a series is asked for alone.
  const listed = state.charts.filter((c) => !c.name.includes(","));
  const names = listed.map((c) => encodeURIComponent(c.name)).join(",");
  const got = listed.length ? (await getJSON("series?names=" + names + query)).series : {};
  for (const chart of state.charts.filter((c) => c.name.includes(","))) {
    got[chart.name] = await getJSON("series?name=" + encodeURIComponent(chart.name) + query);
  }
  showGeneration(got);
  for (const chart of state.charts) {
    const series = got[chart.name];
    chart.scope.textContent = state.model && series && series.model !== state.model ? "server" : "";
    draw(chart, series);
  }
}

function setStatus(text, error) {
  $("status").textContent = text;
  $("status").classList.toggle("error", !!error);
}

async function tick() {
  if (state.busy) return; // a slow answer: skip this second rather than pile requests up
  state.busy = true;
  try {
    await refresh();
    setStatus("updated " + new Date().toLocaleTimeString());
  } catch (err) {
    setStatus("update failed: " + err.message, true);
  } finally {
    state.busy = false;
  }
}

function remember() {
  const hash = "#model=" + encodeURIComponent(state.model) + "&window=" + state.window;
  history.replaceState(null, "", hash);
  tick();
}

function start() {
  const saved = new URLSearchParams(location.hash.slice(1));
  state.model = saved.get("model") || "";
  const win = saved.get("window");
  if (win && [...$("window").options].some((o) => o.value === win)) state.window = win;
  $("window").value = state.window;
  $("model").addEventListener("change", (e) => { state.model = e.target.value; remember(); });
  $("window").addEventListener("change", (e) => { state.window = e.target.value; remember(); });
  tick();
  setInterval(tick, 1000);
}

start();
