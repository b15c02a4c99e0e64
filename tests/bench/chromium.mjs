// The reports as a browser shows them: headless Chromium (Debian's
// `chromium`, installed by bash scripts/setup.sh --registry) opens a copy of
// a report with a small inline script added that writes every chart's
// rendered size and each drawn series' bounding box into the page, and
// --dump-dom hands the page back. Offline: a file:// page, background
// networking off, every host name resolving to nothing.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const CHROMIUM = process.env.CHROMIUM_BIN || "chromium";

/** Throws unless Chromium runs. */
export function requireChromium() {
  if (spawnSync(CHROMIUM, ["--version"], { stdio: "ignore" }).status !== 0) throw new Error(`${CHROMIUM} not installed: run bash scripts/setup.sh --registry`);
}

// Runs where the page's own content ends: layout is done when asked for.
const MEASURE = `<script>(() => {
  const charts = [...document.querySelectorAll("svg.chart")].map((svg) => {
    const r = svg.getBoundingClientRect();
    const series = [...svg.querySelectorAll(".series")].map((e) => {
      const b = e.getBBox();
      // A group's bars each need an area.
      const empty = [...e.querySelectorAll("rect")].filter((r) => !(r.getBBox().width > 0 && r.getBBox().height > 0)).length;
      return { name: e.dataset.name, filled: e.getAttribute("fill") !== "none", width: b.width, height: b.height, empty };
    });
    return { id: svg.closest("figure")?.id ?? null, width: r.width, height: r.height, declared: Number(svg.dataset.series), series };
  });
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify(charts);
  document.body.append(out);
})();</script>`;

const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--no-default-browser-check", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-breakpad", "--disable-domain-reliability", "--host-resolver-rules=MAP * ~NOTFOUND"];

/** Runs Chromium with `args` and a fresh profile; resolves with its stdout. Killed (its process group, by PID) after `timeoutMs`. */
function runChromium(args, timeoutMs = 60_000) {
  const profile = mkdtempSync(join(tmpdir(), "report-chromium-"));
  return new Promise((resolve, reject) => {
    const child = spawn(CHROMIUM, [...FLAGS, `--user-data-dir=${profile}`, ...args], { stdio: ["ignore", "pipe", "pipe"], detached: true });
    let out = "";
    let err = "";
    child.stdout.on("data", (c) => (out += c));
    child.stderr.on("data", (c) => (err += c));
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {}
    }, timeoutMs);
    child.on("error", reject);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      rmSync(profile, { recursive: true, force: true });
      if (code === 0) resolve(out);
      else reject(new Error(`chromium exited ${code ?? signal}: ${err.slice(-2000)}`));
    });
  });
}

/**
 * Opens the report `html` (its text) in headless Chromium; resolves with
 * its charts as rendered: [{ id, width, height, declared, series: [{ name,
 * filled, width, height, empty (bars of a group without an area) }] }].
 */
export async function renderedCharts(html) {
  const dir = mkdtempSync(join(tmpdir(), "report-page-"));
  try {
    const file = join(dir, "report.html");
    writeFileSync(file, html.replace("</body>", `${MEASURE}\n</body>`));
    const dom = await runChromium(["--dump-dom", `file://${file}`]);
    const m = dom.match(/<pre id="measured">([^<]*)<\/pre>/);
    if (!m) throw new Error(`no measurements in the page Chromium dumped (${dom.length} bytes): ${dom.slice(0, 300)}`);
    return JSON.parse(m[1].replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&nbsp;/g, "\u00a0").replace(/&amp;/g, "&"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * What did not render: a chart without a size, a series missing, a filled
 * one (bars) without an area or with a bar without one, a line with no
 * extent (a flat line has no height).
 */
export function renderProblems(charts) {
  const problems = [];
  for (const c of charts) {
    if (!(c.width > 0 && c.height > 0)) problems.push(`${c.id}: the chart has no size (${c.width} × ${c.height})`);
    if (c.series.length !== c.declared) problems.push(`${c.id}: ${c.series.length} series in the page, ${c.declared} drawn`);
    for (const s of c.series) {
      if (!(s.filled ? s.width > 0 && s.height > 0 : s.width > 0 || s.height > 0)) problems.push(`${c.id}: series ${s.name} rendered empty (${s.width} × ${s.height})`);
      if (s.empty) problems.push(`${c.id}: series ${s.name}: ${s.empty} bars rendered without an area`);
    }
  }
  return problems;
}
