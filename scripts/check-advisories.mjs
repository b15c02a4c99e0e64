#!/usr/bin/env node
// Checks every package version in the repository's lock files against the
// known advisories in scripts/advisories.json and exits 1 on any hit.
//
//   node scripts/check-advisories.mjs [--db FILE] [LOCK_FILE ...]
//
// Without lock files it reads every package-lock.json and Cargo.lock that git
// tracks (package-lock.json, toolchain/node/package-lock.json, Cargo.lock,
// crates/router-core/fuzz/Cargo.lock). package-lock.json: every entry under
// node_modules/ (nested copies included; an alias is checked under the name
// it installs). Cargo.lock: every package from a registry (the workspace's own
// crates have no source and are skipped).
//
// Each hit prints its advisory id, package, version, where it is and the
// version that fixes it. The advisory list is kept by hand: no advisory
// database can be had here from a package registry (docs/operations.md,
// Known advisories, says how an operator checks against the live ones).
import { readFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse as parseToml } from "smol-toml";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const DEFAULT_DB = join(ROOT, "scripts", "advisories.json");
const DEFAULT_LOCKS = [
  "package-lock.json",
  "toolchain/node/package-lock.json",
  "Cargo.lock",
  "crates/router-core/fuzz/Cargo.lock",
];

// --- versions ---------------------------------------------------------------

/** Parses a SemVer version ("1.2.3", "1.2.3-rc.1", "1.0.0+build"); null if it is none. */
export function parseVersion(text) {
  const m = /^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/.exec(String(text).trim());
  if (!m) return null;
  return {
    nums: [Number(m[1]), Number(m[2] ?? 0), Number(m[3] ?? 0)],
    pre: m[4] ? m[4].split(".") : [],
  };
}

/** SemVer precedence: negative, zero or positive. Throws on a version that is not SemVer. */
export function compareVersions(a, b) {
  const x = parseVersion(a);
  const y = parseVersion(b);
  if (!x || !y) throw new Error(`not a version: ${!x ? a : b}`);
  for (let i = 0; i < 3; i++) if (x.nums[i] !== y.nums[i]) return x.nums[i] - y.nums[i];
  // A pre-release sorts before its release.
  if (!x.pre.length || !y.pre.length) return y.pre.length - x.pre.length;
  for (let i = 0; i < Math.min(x.pre.length, y.pre.length); i++) {
    const [p, q] = [x.pre[i], y.pre[i]];
    const [pn, qn] = [/^\d+$/.test(p), /^\d+$/.test(q)];
    if (pn && qn && Number(p) !== Number(q)) return Number(p) - Number(q);
    if (pn !== qn) return pn ? -1 : 1;
    if (!pn && p !== q) return p < q ? -1 : 1;
  }
  return x.pre.length - y.pre.length;
}

/** Whether a version falls in one OSV-style range {introduced, fixed | last_affected}. */
export function inRange(version, range) {
  if (range.introduced && range.introduced !== "0" && compareVersions(version, range.introduced) < 0) return false;
  if (range.fixed) return compareVersions(version, range.fixed) < 0;
  if (range.last_affected) return compareVersions(version, range.last_affected) <= 0;
  return true; // no fix published
}

// --- the advisory list --------------------------------------------------------

const ECOSYSTEMS = new Set(["npm", "crates.io"]);

/** Reads and checks the advisory list; throws on a malformed entry. */
export function loadAdvisories(file = DEFAULT_DB) {
  const db = JSON.parse(readFileSync(file, "utf8"));
  if (!Array.isArray(db.advisories) || !db.advisories.length) throw new Error(`${file}: no advisories`);
  for (const a of db.advisories) {
    const where = `${file}: ${a.id ?? "an entry without an id"}`;
    if (!a.id || !a.package || !ECOSYSTEMS.has(a.ecosystem)) throw new Error(`${where}: needs id, package and ecosystem (npm or crates.io)`);
    if (!Array.isArray(a.ranges) || !a.ranges.length) throw new Error(`${where}: needs ranges`);
    for (const r of a.ranges) {
      for (const key of ["introduced", "fixed", "last_affected"]) {
        if (r[key] !== undefined && r[key] !== "0" && !parseVersion(r[key])) throw new Error(`${where}: ${key} ${r[key]} is not a version`);
      }
      if (!r.fixed && !r.last_affected && !r.introduced) throw new Error(`${where}: an empty range`);
    }
  }
  return db;
}

// --- lock files -----------------------------------------------------------------

/** Every package of an npm lock file (v1, v2 or v3): {ecosystem, name, version, where}. */
export function npmPackages(lock) {
  const out = [];
  if (lock.packages) {
    for (const [path, entry] of Object.entries(lock.packages)) {
      if (!path.includes("node_modules/") || entry.link || !entry.version) continue;
      const name = entry.name ?? path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length);
      out.push({ ecosystem: "npm", name, version: entry.version, where: path });
    }
    return out;
  }
  const walk = (deps, prefix) => {
    for (const [name, entry] of Object.entries(deps ?? {})) {
      const where = `${prefix}node_modules/${name}`;
      // An alias records "npm:real-name@version".
      const alias = /^npm:(.+)@([^@]+)$/.exec(entry.version ?? "");
      if (alias) out.push({ ecosystem: "npm", name: alias[1], version: alias[2], where });
      else if (entry.version && parseVersion(entry.version)) out.push({ ecosystem: "npm", name, version: entry.version, where });
      walk(entry.dependencies, `${where}/`);
    }
  };
  walk(lock.dependencies, "");
  return out;
}

/** Every registry package of a Cargo.lock: {ecosystem, name, version, where}. */
export function cargoPackages(lock) {
  return (lock.package ?? [])
    .filter((p) => typeof p.source === "string" && /^(registry|sparse)\+/.test(p.source))
    .map((p) => ({ ecosystem: "crates.io", name: p.name, version: p.version, where: `${p.name} ${p.version}` }));
}

/** Reads one lock file by its name: package-lock.json (or any *.json) or Cargo.lock. */
export function readLock(file) {
  const text = readFileSync(file, "utf8");
  if (file.endsWith(".json")) return npmPackages(JSON.parse(text));
  if (file.endsWith(".lock")) return cargoPackages(parseToml(text));
  throw new Error(`${file}: not a package-lock.json or a Cargo.lock`);
}

/** The lock files git tracks in the repository, or the known list where git is not there. */
export function trackedLocks(root = ROOT) {
  try {
    const out = execFileSync("git", ["ls-files", "--", "*package-lock.json", "*Cargo.lock"], {
      cwd: root,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    });
    // Exactly these names: the tests' fixtures (vulnerable.package-lock.json) are not the project's.
    const files = out.split("\n").filter((f) => /(^|\/)(package-lock\.json|Cargo\.lock)$/.test(f));
    if (files.length) return files.map((f) => join(root, f));
  } catch {
    // not a git work tree: the known list
  }
  return DEFAULT_LOCKS.map((f) => join(root, f));
}

// --- the check ------------------------------------------------------------------

/** The hits of a list of packages against the advisories: [{advisory, pkg, fixed}]. */
export function findHits(packages, advisories) {
  const byKey = new Map();
  for (const a of advisories) {
    const key = `${a.ecosystem}:${a.package}`;
    if (!byKey.has(key)) byKey.set(key, []);
    byKey.get(key).push(a);
  }
  const hits = [];
  for (const pkg of packages) {
    for (const a of byKey.get(`${pkg.ecosystem}:${pkg.name}`) ?? []) {
      if (!parseVersion(pkg.version)) continue;
      const range = a.ranges.find((r) => inRange(pkg.version, r));
      if (range) hits.push({ advisory: a, pkg, fixed: range.fixed ?? "none published" });
    }
  }
  return hits;
}

/** Runs the check; returns the exit code and prints what it found. */
export function main(argv = process.argv.slice(2), { log = console.log, error = console.error } = {}) {
  let dbFile = DEFAULT_DB;
  const locks = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--db") dbFile = argv[++i];
    else locks.push(resolve(argv[i]));
  }
  const db = loadAdvisories(dbFile);
  const files = locks.length ? locks : trackedLocks();
  let count = 0;
  const hits = [];
  for (const file of files) {
    const packages = readLock(file);
    count += packages.length;
    for (const h of findHits(packages, db.advisories)) hits.push({ ...h, file: relative(process.cwd(), file) || file });
  }
  for (const { advisory: a, pkg, fixed, file } of hits) {
    error(`${a.id} (${a.severity ?? "unrated"}): ${pkg.name} ${pkg.version} in ${file} (${pkg.where}), fixed in ${fixed}: ${a.title ?? ""}`);
  }
  const summary = `${count} package versions in ${files.length} lock files against ${db.advisories.length} known advisories (list reviewed ${db.reviewed ?? "never"})`;
  if (hits.length) {
    error(`known advisories: ${hits.length} hit(s) in ${summary}`);
    return 1;
  }
  log(`known advisories: none in ${summary}`);
  return 0;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    process.exitCode = main();
  } catch (err) {
    console.error(`check-advisories: ${err.message}`);
    process.exitCode = 2;
  }
}
