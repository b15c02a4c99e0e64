// The HTML around the reports' charts (bench/report/soak-report.mjs,
// bench/report/bench-report.mjs): text escaped, a page with its CSS inline
// and the system's fonts, tables. A report is one file that shows the
// same offline: no script, no stylesheet, font or image from anywhere.

/** `value` as text safe inside HTML or SVG, element content or a quoted attribute. */
export function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

const CSS = `
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "DejaVu Sans", sans-serif; color: #1f2328; margin: 24px auto; max-width: 1240px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #d8dee4; padding-bottom: 4px; }
p.meta { color: #59636e; margin: 0 0 12px; }
.ok { color: #1a7f37; } .bad { color: #cf222e; }
figure { margin: 12px 0 20px; }
figcaption { font-size: 12px; color: #59636e; margin-top: 2px; }
figcaption .title { font-weight: 600; color: #1f2328; font-size: 13px; }
.key { display: inline-block; margin-right: 14px; white-space: nowrap; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; vertical-align: -1px; margin-right: 4px; }
svg.chart { display: block; font-family: inherit; }
svg.chart text { font-size: 11px; fill: #59636e; }
svg.chart .axis { stroke: #8c959f; stroke-width: 1; }
svg.chart .grid { stroke: #eaeef2; stroke-width: 1; }
table { border-collapse: collapse; font-size: 12px; font-variant-numeric: tabular-nums; margin: 8px 0 16px; }
th, td { padding: 3px 6px; border-bottom: 1px solid #eaeef2; text-align: right; white-space: nowrap; }
th { background: #f6f8fa; font-weight: 600; }
th:first-child, td:first-child, td.text { text-align: left; }
td.text { white-space: normal; max-width: 640px; }
code { font: 12px ui-monospace, "SFMono-Regular", "DejaVu Sans Mono", monospace; }
`;

/** An ISO time as "YYYY-MM-DD HH:MM UTC" (text as given when it is not one). */
export const when = (iso) => (/^\d{4}-\d\d-\d\dT\d\d:\d\d/.test(iso ?? "") ? `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC` : (iso ?? ""));

/** A whole page: `title` (text) and `body` (HTML). */
export function page(title, body) {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)}</title>
<style>${CSS}</style>
</head>
<body>
${body}
</body>
</html>
`;
}

/**
 * A table: `header` (texts) and `rows` (arrays of cells: a number, a text,
 * or { text, cls } for a cell with a class); every text escaped.
 */
export function table(header, rows) {
  const cell = (c, tag) => (c !== null && typeof c === "object" ? `<${tag} class="${esc(c.cls)}">${esc(c.text)}</${tag}>` : `<${tag}>${esc(c)}</${tag}>`);
  return `<table><thead><tr>${header.map((h) => cell(h, "th")).join("")}</tr></thead><tbody>${rows.map((r) => `<tr>${r.map((c) => cell(c, "td")).join("")}</tr>`).join("\n")}</tbody></table>`;
}
