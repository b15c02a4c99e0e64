// The processes a run starts, every one stopped by PID at the end
// (stopAll): devstack's sink and Topology Service, and one workerd per
// configuration, each started by Miniflare with the bench's options
// (bench/workerd-options.mjs).
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { existsSync } from "node:fs";
import { Miniflare } from "miniflare";
import { stopChild } from "../../tests/e2e/harness.mjs";
import { workerdOptions } from "../workerd-options.mjs";
import { childWorkerdPids } from "./proc.mjs";

const children = []; // devstack processes
const instances = []; // Miniflare instances

export const log = (...a) => console.error("bench:", ...a);

/** Starts `devstack <args>`; resolves when it prints its ready line (JSON). */
export function startDevstack(devstack, args, label) {
  return new Promise((resolve, reject) => {
    if (!existsSync(devstack)) {
      reject(new Error(`${devstack} is missing: cargo build --release -p devstack`));
      return;
    }
    // stderr is ignored: the Topology Service logs every classify call.
    const child = spawn(devstack, args, { stdio: ["ignore", "pipe", "ignore"] });
    children.push(child);
    const timer = setTimeout(() => reject(new Error(`${label} not ready`)), 15000);
    createInterface({ input: child.stdout }).once("line", (line) => {
      clearTimeout(timer);
      resolve({ child, ready: JSON.parse(line) });
    });
    child.once("exit", (code) => reject(new Error(`${label} exited ${code}`)));
  });
}

/**
 * Starts one worker in a workerd of its own: `{name, mf, url, pid, lines,
 * startedAt, readyAt}` (`url`: its direct socket; `lines`: what workerd
 * wrote, counted, the last 20 kept).
 */
export async function startWorker(name, options, { outboundHop }) {
  const before = new Set(childWorkerdPids());
  const lines = { count: 0, last: [] };
  const mf = new Miniflare({
    ...workerdOptions({
      outboundHop,
      onLine(line) {
        lines.count++;
        lines.last.push(line);
        if (lines.last.length > 20) lines.last.shift();
      },
    }),
    ...options,
  });
  instances.push(mf);
  const startedAt = performance.now();
  await mf.ready;
  const readyAt = performance.now();
  const url = (await mf.unsafeGetDirectURL("")).toString().replace(/\/$/, "");
  const pids = childWorkerdPids().filter((p) => !before.has(p));
  if (pids.length !== 1) throw new Error(`${name}: expected one new workerd process, found ${pids}`);
  return { name, mf, url, pid: pids[0], lines, startedAt, readyAt };
}

/** Forgets an instance disposed of (or disposed by someone else). */
export function forget(mf) {
  const i = instances.indexOf(mf);
  if (i >= 0) instances.splice(i, 1);
}

/** Disposes of a worker's instance and forgets it. */
export async function retire(target) {
  await target.mf.dispose();
  forget(target.mf);
}

/** Stops every workerd and devstack process still running. */
export async function stopAll() {
  for (const mf of instances) await mf.dispose().catch(() => {});
  for (const child of children) await stopChild(child);
}
