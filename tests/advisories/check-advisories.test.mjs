// scripts/check-advisories.mjs: the lock files' packages against the known
// advisories (scripts/advisories.json). The fixtures hold versions with
// published advisories and must be reported, with the process exiting 1; the
// repository's own lock files must pass.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import {
  compareVersions,
  findHits,
  loadAdvisories,
  readLock,
  trackedLocks,
} from "../../scripts/check-advisories.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const SCRIPT = join(ROOT, "scripts", "check-advisories.mjs");
const NPM_FIXTURE = join(ROOT, "tests", "advisories", "fixtures", "vulnerable.package-lock.json");
const CARGO_FIXTURE = join(ROOT, "tests", "advisories", "fixtures", "vulnerable.Cargo.lock");

const run = (...args) => spawnSync(process.execPath, [SCRIPT, ...args], { cwd: ROOT, encoding: "utf8" });
const { advisories } = loadAdvisories();
const hitsOf = (file) => findHits(readLock(file), advisories).map((h) => `${h.advisory.id} ${h.pkg.name} ${h.pkg.version} ${h.pkg.where} -> ${h.fixed}`);

test("SemVer order: numbers, pre-releases before their release, build metadata ignored", () => {
  assert.ok(compareVersions("7.24.8", "7.29.0") < 0);
  assert.ok(compareVersions("7.30.1", "7.29.0") > 0);
  assert.ok(compareVersions("0.10.0", "0.9.9") > 0);
  assert.ok(compareVersions("0.28.1-rc.1", "0.28.1") < 0);
  assert.ok(compareVersions("1.0.0-alpha.2", "1.0.0-alpha.10") < 0);
  assert.ok(compareVersions("1.0.0-alpha", "1.0.0-alpha.1") < 0);
  assert.ok(compareVersions("1.0.0-alpha.1", "1.0.0-beta") < 0);
  assert.equal(compareVersions("1.2.2+spec-1.1.0", "1.2.2"), 0);
  assert.equal(compareVersions("5.20261117.0-beta", "5.20261117.0-beta"), 0);
  assert.throws(() => compareVersions("latest", "1.0.0"), /not a version/);
});

test("package-lock.json: known-vulnerable versions are reported, nested copies and aliases included", () => {
  const hits = hitsOf(NPM_FIXTURE);
  // undici 7.24.8, the version miniflare 4.20260426.0 brought: every 7.x advisory.
  for (const [id, fixed] of [
    ["GHSA-4cwx-7wf7-3272", "7.29.0"],
    ["GHSA-8xcm-r25x-g524", "7.29.0"],
    ["GHSA-vmh5-mc38-953g", "7.28.0"],
    ["GHSA-pr7r-676h-xcf6", "7.28.0"],
  ]) {
    assert.ok(hits.includes(`${id} undici 7.24.8 node_modules/undici -> ${fixed}`), `${id} on undici 7.24.8 in ${hits.join("\n")}`);
  }
  // A nested copy (ws 8.18.0 under miniflare).
  assert.ok(hits.includes("GHSA-96hv-2xvq-fx4p ws 8.18.0 node_modules/miniflare/node_modules/ws -> 8.21.0"));
  assert.ok(hits.includes("GHSA-58qx-3vcg-4xpx ws 8.18.0 node_modules/miniflare/node_modules/ws -> 8.20.1"));
  // An alias is checked under the package it installs, on its own branch's range.
  assert.ok(hits.includes("GHSA-4cwx-7wf7-3272 undici 8.4.0 node_modules/undici8 -> 8.9.0"));
  // A pre-release of the fixed version is still affected.
  assert.ok(hits.includes("GHSA-gv7w-rqvm-qjhr esbuild 0.28.1-rc.1 node_modules/esbuild -> 0.28.1"));
  // The fixed versions themselves are not reported (ws 8.21.0, sharp 0.35.0), nor a linked folder.
  assert.ok(!hits.some((h) => / ws 8\.21\.0 | sharp | local-tool /.test(h)), hits.join("\n"));
});

test("Cargo.lock: a registry crate with an advisory is reported; its fixed version and the workspace's own crates are not", () => {
  assert.deepEqual(hitsOf(CARGO_FIXTURE), ["RUSTSEC-2024-0421 idna 0.5.0 idna 0.5.0 -> 1.0.0"]);
});

test("the command exits 1 and prints id, package, version and fix for each hit", () => {
  const r = run(NPM_FIXTURE, CARGO_FIXTURE);
  assert.equal(r.status, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /^GHSA-4cwx-7wf7-3272 \(high\): undici 7\.24\.8 in tests\/advisories\/fixtures\/vulnerable\.package-lock\.json \(node_modules\/undici\), fixed in 7\.29\.0/m);
  assert.match(r.stderr, /^RUSTSEC-2024-0421 \(moderate\): idna 0\.5\.0 in tests\/advisories\/fixtures\/vulnerable\.Cargo\.lock .*fixed in 1\.0\.0/m);
  assert.match(r.stderr, /known advisories: \d+ hit\(s\)/);
});

test("the repository's own lock files pass: every package-lock.json and Cargo.lock git tracks, not the fixtures", () => {
  const locks = trackedLocks().map((f) => relative(ROOT, f)).sort();
  assert.deepEqual(locks, ["Cargo.lock", "crates/router-core/fuzz/Cargo.lock", "package-lock.json", "toolchain/node/package-lock.json"]);
  const r = run();
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /known advisories: none in \d+ package versions in 4 lock files/);
});

test("a malformed advisory list is refused (exit 2), not read as no advisory", () => {
  const dir = mkdtempSync(join(tmpdir(), "advisories-"));
  try {
    for (const db of [
      { advisories: [] },
      { advisories: [{ id: "X-1", ecosystem: "pypi", package: "a", ranges: [{ fixed: "1.0.0" }] }] },
      { advisories: [{ id: "X-2", ecosystem: "npm", package: "a", ranges: [{ fixed: "one" }] }] },
    ]) {
      const file = join(dir, "db.json");
      writeFileSync(file, JSON.stringify(db));
      const r = run("--db", file, NPM_FIXTURE);
      assert.equal(r.status, 2, JSON.stringify(db) + r.stderr);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
