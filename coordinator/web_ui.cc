#include "coordinator/web_ui.h"

namespace tagi::coordinator {
namespace {

constexpr std::string_view kPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tagi-ddp</title>
<link rel="stylesheet" href="/ui/app.css">
<script src="/ui/app.js" defer></script>
</head>
<body>
<header>
  <a href="#/" id="home">tagi-ddp</a>
  <span id="status" role="status"></span>
  <form id="token-form">
    <input id="token" type="password" autocomplete="off" placeholder="API token (if required)">
    <button type="submit">use</button>
  </form>
</header>
<main id="main"><p>Loading...</p></main>
</body>
</html>
)html";

constexpr std::string_view kStyle = R"css(body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f6f7f9; }
header { display: flex; gap: 1em; align-items: center; padding: .6em 1.2em; background: #1d2330; color: #fff; }
header a { color: #fff; font-weight: 600; text-decoration: none; font-size: 1.1em; }
header form { margin-left: auto; }
#status.error { color: #ffb4a8; }
main { padding: 1em 1.2em; }
h2 { font-size: 1.1em; margin: 1.2em 0 .4em; }
table { border-collapse: collapse; background: #fff; width: 100%; }
th, td { text-align: left; padding: .3em .6em; border-bottom: 1px solid #e3e6ea; vertical-align: top; }
th { font-weight: 600; background: #eef0f3; }
.state { font-weight: 600; }
.SUCCEEDED { color: #1a7f37; } .FAILED { color: #c62828; } .CANCELLED { color: #8a6d00; }
.RUNNING { color: #0b5cad; } .PENDING { color: #555; }
progress { width: 10em; vertical-align: middle; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
.chart { background: #fff; border: 1px solid #e3e6ea; padding: .4em; }
.chart svg { display: block; }
.chart polyline { fill: none; stroke: #0b5cad; stroke-width: 2; }
.chart circle { fill: #0b5cad; }
.chart text { font-size: 10px; fill: #555; }
pre#logs { background: #fff; border: 1px solid #e3e6ea; padding: .6em; max-height: 30em; overflow: auto; white-space: pre-wrap; }
.muted { color: #777; }
)css";

constexpr std::string_view kScript = R"js("use strict";
// The tagi-ddp job page: reads the REST API of the coordinator that served it.
const REFRESH_MS = 2000;
let timer = null;
let logState = { job: "", after: "0", lines: [] };

function token() { return sessionStorage.getItem("tagi-token") || ""; }

async function api(path) {
  const headers = token() ? { Authorization: "Bearer " + token() } : {};
  const reply = await fetch(path, { headers, cache: "no-store" });
  let body = {};
  try { body = await reply.json(); } catch (e) { /* not JSON */ }
  if (!reply.ok) {
    const err = new Error((body.code || reply.status) + ": " + (body.message || reply.statusText));
    err.status = reply.status;
    throw err;
  }
  return body;
}

function esc(s) {
  return String(s === undefined || s === null ? "" : s).replace(/[&<>"']/g,
    c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}
const num = v => Number(v || 0);
function time(ms) { return num(ms) > 0 ? new Date(num(ms)).toLocaleString() : "-"; }
function classification(job) { return !!(job.spec && job.spec.head && job.spec.head.classification); }
function fraction(job) {
  const p = job.progress || {};
  if (job.state === "SUCCEEDED") return 1;
  return num(p.totalSteps) > 0 ? Math.min(1, num(p.globalStep) / num(p.totalSteps)) : 0;
}
function bar(f) { return '<progress max="1" value="' + f.toFixed(4) + '"></progress> ' + (100 * f).toFixed(0) + "%"; }
function latest(job) {
  const e = (job.progress && job.progress.epochs) || [];
  if (!e.length) return "";
  const last = e[e.length - 1];
  return classification(job) ? "test accuracy " + (100 * num(last.testAccuracy)).toFixed(2) + "%"
                             : "test rmse " + num(last.testRmse).toPrecision(4);
}

function setStatus(text, error) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = error ? "error" : "";
}

// A line chart of (x, y) points as inline SVG.
function chart(id, title, points) {
  const w = 320, h = 160, m = 30;
  if (!points.length) return '<div class="chart" id="' + id + '"><b>' + esc(title) + '</b><p class="muted">no epoch yet</p></div>';
  const xs = points.map(p => p[0]), ys = points.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = x => m + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (w - 2 * m);
  const sy = y => h - m + (y1 > y0 ? -(y - y0) / (y1 - y0) : -0.5) * (h - 2 * m);
  const line = points.map(p => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ");
  const dots = points.length <= 60 ? points.map(p => '<circle r="2.5" cx="' + sx(p[0]).toFixed(1) + '" cy="' + sy(p[1]).toFixed(1) + '"></circle>').join("") : "";
  const fmt = v => Math.abs(v) >= 1000 ? v.toFixed(0) : v.toPrecision(4);
  return '<div class="chart" id="' + id + '"><b>' + esc(title) + '</b><svg width="' + w + '" height="' + h + '" role="img" aria-label="' + esc(title) + '">' +
    '<text x="2" y="' + (m - 8) + '">' + fmt(y1) + '</text><text x="2" y="' + (h - m + 12) + '">' + fmt(y0) + '</text>' +
    '<text x="' + m + '" y="' + (h - 4) + '">epoch ' + x0 + '</text><text x="' + (w - m - 40) + '" y="' + (h - 4) + '">epoch ' + x1 + '</text>' +
    '<polyline points="' + line + '"></polyline>' + dots + '</svg></div>';
}

function jobsTable(jobs) {
  if (!jobs.length) return '<p class="muted">No jobs yet.</p>';
  return '<table id="jobs"><tr><th>job</th><th>name</th><th>state</th><th>progress</th><th>latest</th><th>reason</th></tr>' +
    jobs.map(j => '<tr data-job="' + esc(j.id) + '"><td><a href="#/job/' + encodeURIComponent(j.id) + '">' + esc(j.id) + '</a></td><td>' +
      esc(j.spec && j.spec.name) + '</td><td class="state ' + esc(j.state) + '">' + esc(j.state) + '</td><td>' + bar(fraction(j)) +
      '</td><td>' + esc(latest(j)) + '</td><td>' + esc(j.reason) + '</td></tr>').join("") + '</table>';
}

function workersTable(workers) {
  if (!workers.length) return '<p class="muted">No workers registered.</p>';
  return '<table id="workers"><tr><th>worker</th><th>state</th><th>job</th><th>rank</th><th>device</th><th>host</th><th>last seen</th></tr>' +
    workers.map(w => '<tr data-worker="' + esc(w.id) + '"><td>' + esc(w.id) + '</td><td>' + esc(w.state) + '</td><td>' + esc(w.jobId) +
      '</td><td>' + (w.state === "BUSY" ? num(w.rank) : "") + '</td><td>' + esc(w.device) + '</td><td>' + esc(w.hostname) + " " + esc(w.address) +
      '</td><td>' + time(w.lastSeenMs) + '</td></tr>').join("") + '</table>';
}

async function showJobs() {
  const [jobs, workers] = await Promise.all([api("/v1/jobs"), api("/v1/workers")]);
  document.getElementById("main").innerHTML = "<h2>Jobs</h2>" + jobsTable(jobs.jobs || []) +
    "<h2>Workers</h2>" + workersTable(workers.workers || []);
}

async function readLogs(id) {
  if (logState.job !== id) logState = { job: id, after: "0", lines: [] };
  for (let page = 0; page < 10; ++page) {
    const r = await api("/v1/jobs/" + encodeURIComponent(id) + "/logs?after=" + logState.after);
    const lines = r.lines || [];
    logState.lines.push(...lines);
    if (logState.lines.length > 5000) logState.lines.splice(0, logState.lines.length - 5000);
    logState.after = r.next || logState.after;
    logState.dropped = num(r.dropped);
    if (!lines.length) break;
  }
}

async function showJob(id) {
  const job = await api("/v1/jobs/" + encodeURIComponent(id));
  await readLogs(id);
  const p = job.progress || {};
  const epochs = p.epochs || [];
  const batch = num(job.spec && job.spec.batchSize) * Math.max(1, num(job.worldSize));
  const steps = num(p.stepsPerEpoch);
  const metric = classification(job)
    ? chart("chart-metric", "test accuracy (%)", epochs.map(e => [num(e.epoch), 100 * num(e.testAccuracy)]))
    : chart("chart-metric", "test RMSE", epochs.map(e => [num(e.epoch), num(e.testRmse)]));
  const charts = metric +
    chart("chart-loglik", "test log-likelihood", epochs.map(e => [num(e.epoch), num(e.testLogLikelihood)])) +
    chart("chart-rate", "samples/s (epoch)", epochs.filter(e => num(e.seconds) > 0).map(e => [num(e.epoch), steps * batch / num(e.seconds)]));
  const worlds = (job.worlds || []).map(w => "<tr><td>" + num(w.fromStep) + "</td><td>" + num(w.world) + "</td><td>" + num(w.generation) + "</td></tr>").join("");
  const recoveries = (job.recoveries || []).map(r => "<tr><td>" + num(r.failedGeneration) + "</td><td>" + esc(r.reason) + "</td><td>" +
    num(r.failedAtStep) + "</td><td>" + num(r.resumedFromStep) + "</td><td>" + num(r.stepsRedone) + "</td><td>" + time(r.detectedMs) + "</td></tr>").join("");
  const logs = logState.lines.map(l => new Date(num(l.timeMs)).toISOString().slice(11, 23) + " rank " + num(l.rank) + " gen " + num(l.generation) + " " + l.workerId + ": " + l.text).join("\n");
  document.getElementById("main").innerHTML =
    '<h2 id="job-title">' + esc(job.id) + " " + esc(job.spec && job.spec.name) + '</h2>' +
    '<p><span id="job-state" class="state ' + esc(job.state) + '">' + esc(job.state) + '</span> ' + esc(job.reason) + '</p>' +
    '<p id="job-progress">' + bar(fraction(job)) + " epoch " + Math.min(num(p.epoch) + 1, num(job.spec && job.spec.epochs)) + "/" + num(job.spec && job.spec.epochs) +
    ", step " + num(p.globalStep) + "/" + num(p.totalSteps) + (job.state === "RUNNING" && num(p.samplesPerSecond) > 0 ? ", " + num(p.samplesPerSecond).toFixed(0) + " samples/s, ETA " + num(p.etaSeconds).toFixed(0) + " s" : "") +
    ", generation " + num(job.generation) + ", " + num(job.restarts) + " restarts, workers " + esc((job.workers || []).join(", ")) + '</p>' +
    "<p>submitted " + time(job.submitTimeMs) + ", started " + time(job.startTimeMs) + ", ended " + time(job.endTimeMs) + "</p>" +
    '<h2>Curves</h2><div class="charts">' + charts + "</div>" +
    '<h2>Epochs</h2><table id="epochs"><tr><th>epoch</th><th>' + (classification(job) ? "test accuracy" : "test RMSE") + "</th><th>log-likelihood</th><th>seconds</th></tr>" +
    epochs.map(e => "<tr><td>" + num(e.epoch) + "</td><td>" + (classification(job) ? (100 * num(e.testAccuracy)).toFixed(2) + "%" : num(e.testRmse).toPrecision(4)) +
      "</td><td>" + num(e.testLogLikelihood).toPrecision(4) + "</td><td>" + num(e.seconds).toFixed(2) + "</td></tr>").join("") + "</table>" +
    '<h2>Worlds</h2>' + (worlds ? '<table id="worlds"><tr><th>from step</th><th>world</th><th>generation</th></tr>' + worlds + "</table>" : '<p class="muted">none yet</p>') +
    '<h2>Recoveries</h2>' + (recoveries ? '<table id="recoveries"><tr><th>failed generation</th><th>reason</th><th>failed at step</th><th>resumed from</th><th>redone</th><th>detected</th></tr>' + recoveries + "</table>" : '<p class="muted">none</p>') +
    '<h2>Log</h2>' + (logState.dropped ? '<p class="muted">' + logState.dropped + " older lines dropped</p>" : "") + '<pre id="logs">' + esc(logs) + "</pre>";
}

async function render() {
  clearTimeout(timer);
  const m = location.hash.match(/^#\/job\/(.+)$/);
  try {
    if (m) await showJob(decodeURIComponent(m[1])); else await showJobs();
    setStatus("updated " + new Date().toLocaleTimeString(), false);
  } catch (e) {
    setStatus(e.message, true);
    if (e.status === 401) {
      document.getElementById("main").innerHTML = '<p id="auth-needed">This coordinator requires an API token: type it above.</p>';
    }
  }
  timer = setTimeout(render, REFRESH_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("token-form").addEventListener("submit", ev => {
    ev.preventDefault();
    sessionStorage.setItem("tagi-token", document.getElementById("token").value.trim());
    document.getElementById("token").value = "";
    render();
  });
  window.addEventListener("hashchange", render);
  render();
});
)js";

}  // namespace

std::string_view WebUiPage() { return kPage; }
std::string_view WebUiScript() { return kScript; }
std::string_view WebUiStyle() { return kStyle; }

}  // namespace tagi::coordinator
