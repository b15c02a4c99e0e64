// The reports' charts as SVG strings, written by hand: a timeline (lines
// and stacked bars over the run's seconds, with shaded bands behind) and
// horizontal bars (stacked segments, reference lines). Inline SVG in the
// HTML page: no script, no font or stylesheet from elsewhere. Every drawn
// series is an element of class "series" (a path, a rect, or a group of a
// timeline's bars) and the chart's `data-series` says how many it drew (tests/bench/report-render.test.mjs checks each
// rendered with a size); a coordinate that is not a finite number throws.
import { esc } from "./html.mjs";

/** A coordinate, rounded to 0.1 px; not a finite number: a bug in the figures, thrown. */
function px(x) {
  if (!Number.isFinite(x)) throw new Error(`chart coordinate ${x} is not a finite number`);
  return Math.round(x * 10) / 10;
}

/** Axis ticks from 0 to at least `max`: steps of 1, 2 or 5 × 10^k, about `n` of them. */
export function ticks(max, n = 5) {
  if (!(max > 0)) return [0, 1];
  const raw = max / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw * (1 - 1e-9));
  const out = [];
  for (let i = 0; out.length === 0 || out[out.length - 1] < max * (1 - 1e-9); i++) out.push(Number((i * step).toPrecision(12)));
  return out;
}

const label = (v) => (Math.abs(v) >= 10_000 ? `${Number((v / 1000).toPrecision(3))}k` : String(Number(v.toPrecision(4))));

/** The legend: coloured keys, each `{ name, color, note? }`. */
export function legend(items) {
  return items.map((i) => `<span class="key"><span class="swatch" style="background:${esc(i.color)};opacity:${i.opacity ?? 1}"></span>${esc(i.name)}${i.note !== undefined ? ` <b>${esc(i.note)}</b>` : ""}</span>`).join("");
}

/** A figure: the title and legend above the chart. */
function figure(id, title, keys, svg) {
  return `<figure id="${esc(id)}"><figcaption><span class="title">${esc(title)}</span><br>${legend(keys)}</figcaption>\n${svg}</figure>`;
}

/**
 * A timeline over `xMax` ms: `series` of { name, color, kind: "line" | "bar",
 * points: [[ms, value or null (no value: a gap)]] }, bars stacked in order,
 * each `intervalMs` wide; behind them `phases` ({ name, from, to }: named,
 * alternately tinted) and `bands` ({ from, to, color, opacity }: shaded
 * windows). `keys`: more legend entries (the bands').
 */
export function timeChart({ id, title, yLabel, xMax, intervalMs, series, phases = [], bands = [], keys = [], width = 1120, height = 190 }) {
  const m = { l: 58, r: 14, t: 18, b: 34 };
  const w = width - m.l - m.r;
  const h = height - m.t - m.b;
  const x = (ms) => m.l + (Math.min(Math.max(ms, 0), xMax) / xMax) * w;
  const bars = series.filter((s) => s.kind === "bar");
  const lines = series.filter((s) => s.kind === "line");
  // Stacks: interval start → height so far.
  const stack = new Map();
  let top = 0;
  for (const s of bars) {
    for (const [t, v] of s.points) {
      stack.set(t, (stack.get(t) ?? 0) + (v ?? 0));
      top = Math.max(top, stack.get(t));
    }
  }
  for (const s of lines) for (const [, v] of s.points) top = Math.max(top, v ?? 0);
  const yt = ticks(top, 4);
  const yMax = yt[yt.length - 1];
  const y = (v) => m.t + h - (v / yMax) * h;
  const out = [];
  phases.forEach((p, i) => {
    if (i % 2) out.push(`<rect class="phase" x="${px(x(p.from))}" y="${m.t}" width="${px(x(p.to) - x(p.from))}" height="${h}" fill="#f6f8fa"/>`);
    out.push(`<text x="${px(x(p.from) + 3)}" y="${m.t - 5}">${esc(p.name)}</text>`);
    if (i) out.push(`<line class="grid" x1="${px(x(p.from))}" x2="${px(x(p.from))}" y1="${m.t - 14}" y2="${m.t + h}"/>`);
  });
  for (const b of bands) out.push(`<rect class="band" x="${px(x(b.from))}" y="${m.t}" width="${px(Math.max(1, x(b.to) - x(b.from)))}" height="${h}" fill="${esc(b.color)}" fill-opacity="${b.opacity ?? 0.25}"/>`);
  for (const v of yt) out.push(`<line class="grid" x1="${m.l}" x2="${m.l + w}" y1="${px(y(v))}" y2="${px(y(v))}"/><text x="${m.l - 6}" y="${px(y(v) + 4)}" text-anchor="end">${label(v)}</text>`);
  const xt = ticks(xMax / 1000, 10);
  for (const s of xt) if (s * 1000 <= xMax) out.push(`<text x="${px(x(s * 1000))}" y="${m.t + h + 14}" text-anchor="middle">${label(s)}</text>`);
  out.push(`<text x="${m.l + w}" y="${height - 2}" text-anchor="end">s since the schedule began</text>`);
  out.push(`<text transform="translate(12 ${px(m.t + h / 2)}) rotate(-90)" text-anchor="middle">${esc(yLabel)}</text>`);
  let drawn = 0;
  const base = new Map();
  const bw = Math.max(0.6, (intervalMs / xMax) * w - (intervalMs / xMax) * w * 0.15);
  for (const s of bars) {
    const rects = [];
    for (const [t, v] of s.points) {
      if (!v) continue;
      const b0 = base.get(t) ?? 0;
      base.set(t, b0 + v);
      rects.push(`<rect x="${px(x(t))}" y="${px(y(b0 + v))}" width="${px(bw)}" height="${px(y(b0) - y(b0 + v))}"/>`);
    }
    if (rects.length) {
      out.push(`<g class="series" data-name="${esc(s.name)}" fill="${esc(s.color)}">${rects.join("")}</g>`);
      drawn++;
    }
  }
  for (const s of lines) {
    // Runs of points between gaps; a lone point gets a 1 px stroke.
    const runs = [[]];
    for (const [t, v] of s.points) {
      if (v === null || v === undefined) runs.push([]);
      else runs[runs.length - 1].push(`${px(x(t + intervalMs / 2))} ${px(y(v))}`);
    }
    const d = runs.filter((r) => r.length).map((r) => `M${r.join("L")}${r.length === 1 ? "h1" : ""}`).join("");
    if (d) {
      out.push(`<path class="series" data-name="${esc(s.name)}" d="${d}" fill="none" stroke="${esc(s.color)}" stroke-width="1.6" stroke-linejoin="round"/>`);
      drawn++;
    }
  }
  if (!drawn) out.push(`<text x="${m.l + w / 2}" y="${m.t + h / 2}" text-anchor="middle">none</text>`);
  out.push(`<line class="axis" x1="${m.l}" x2="${m.l + w}" y1="${m.t + h}" y2="${m.t + h}"/><line class="axis" x1="${m.l}" x2="${m.l}" y1="${m.t}" y2="${m.t + h}"/>`);
  const total = (s) => s.points.reduce((a, [, v]) => a + (v ?? 0), 0);
  const seriesKeys = series.map((s) => ({ name: s.name, color: s.color, note: s.kind === "bar" ? total(s).toLocaleString("en") : undefined }));
  const svg = `<svg class="chart" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="${esc(title)}" data-series="${drawn}">${out.join("")}</svg>`;
  return figure(id, title, [...seriesKeys, ...keys], svg);
}

/**
 * Horizontal bars: `rows` of { label, segments: [{ name, value, color }],
 * range?: [lo, hi] (a whisker), text? (at the bar's end) }, and `refs`
 * ({ value, label, color }: dashed lines across all rows). `cap`: the
 * scale ends there; a longer bar is cut, with a break mark (its text says
 * its value), so one outlier does not flatten the others.
 */
export function barChart({ id, title, unit, rows, refs = [], cap = Infinity, width = 1120 }) {
  const m = { l: 230, r: 160, t: 16 + 12 * refs.length, b: 34 };
  const rowH = 22;
  const h = rows.length * rowH;
  const height = m.t + h + m.b;
  const w = width - m.l - m.r;
  for (const r of rows) for (const s of r.segments) if (!(s.value >= 0)) throw new Error(`bar ${r.label} / ${s.name}: ${s.value} is not a number ≥ 0`);
  const top = Math.min(cap, Math.max(0, ...rows.map((r) => Math.max(r.segments.reduce((a, s) => a + s.value, 0), r.range?.[1] ?? 0)), ...refs.map((f) => f.value)));
  const xt = ticks(top, 6);
  const xMax = xt[xt.length - 1];
  const x = (v) => m.l + (Math.min(v, xMax) / xMax) * w;
  const out = [];
  for (const v of xt) out.push(`<line class="grid" x1="${px(x(v))}" x2="${px(x(v))}" y1="${m.t}" y2="${m.t + h}"/><text x="${px(x(v))}" y="${m.t + h + 14}" text-anchor="middle">${label(v)}</text>`);
  out.push(`<text x="${m.l + w}" y="${height - 2}" text-anchor="end">${esc(unit)}</text>`);
  let drawn = 0;
  rows.forEach((r, i) => {
    const y0 = m.t + i * rowH + 4;
    out.push(`<text x="${m.l - 8}" y="${y0 + 11}" text-anchor="end">${esc(r.label)}</text>`);
    let at = 0;
    for (const s of r.segments) {
      if (s.value > 0) {
        out.push(`<rect class="series" data-name="${esc(`${r.label}: ${s.name}`)}" x="${px(x(at))}" y="${y0}" width="${px(Math.max(0.8, x(at + s.value) - x(at)))}" height="${rowH - 8}" fill="${esc(s.color)}"/>`);
        drawn++;
      }
      at += s.value;
    }
    if (at > xMax) out.push(`<path d="M${px(x(xMax) - 9)} ${y0 - 1}l6 ${rowH - 6}M${px(x(xMax) - 4)} ${y0 - 1}l6 ${rowH - 6}" stroke="#ffffff" stroke-width="2.5"/>`);
    if (r.range) {
      const [lo, hi] = r.range.map((v) => px(x(v)));
      const mid = y0 + (rowH - 8) / 2;
      out.push(`<path d="M${lo} ${mid}H${hi}M${lo} ${mid - 4}v8M${hi} ${mid - 4}v8" stroke="#1f2328" stroke-width="1" fill="none"/>`);
    }
    out.push(`<text x="${px(x(Math.max(at, r.range?.[1] ?? 0)) + 6)}" y="${y0 + 11}">${esc(r.text ?? label(at))}</text>`);
  });
  refs.forEach((f, i) => {
    out.push(`<line x1="${px(x(f.value))}" x2="${px(x(f.value))}" y1="${m.t - 4 - 12 * (refs.length - 1 - i)}" y2="${m.t + h}" stroke="${esc(f.color)}" stroke-width="1.5" stroke-dasharray="4 3"/>`);
    out.push(`<text x="${px(x(f.value) + 4)}" y="${m.t - 6 - 12 * (refs.length - 1 - i)}" style="fill:${esc(f.color)}">${esc(f.label)}</text>`);
  });
  out.push(`<line class="axis" x1="${m.l}" x2="${m.l}" y1="${m.t}" y2="${m.t + h}"/>`);
  const names = new Map();
  for (const r of rows) for (const s of r.segments) names.set(s.name, s.color);
  const keys = [...names].map(([name, color]) => ({ name, color }));
  const svg = `<svg class="chart" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="${esc(title)}" data-series="${drawn}">${out.join("")}</svg>`;
  return figure(id, title, keys, svg);
}
