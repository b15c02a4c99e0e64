// This process's workerd children and their memory, from /proc: for the
// tests and the soak that watch workerd's RSS (Miniflare spawns workerd
// directly).
import { readFileSync, readdirSync } from "node:fs";

/** PIDs of this process's workerd children. */
export function workerdChildren() {
  const pids = new Set();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid !== process.pid) continue;
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0")[0].endsWith("workerd")) pids.add(Number(entry));
    } catch {
      // Gone while we looked.
    }
  }
  return pids;
}

/** VmRSS of a process in bytes, or null when it is gone. */
export function rss(pid) {
  try {
    const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"));
    return Number(line.split(/\s+/)[1]) * 1024;
  } catch {
    return null;
  }
}
