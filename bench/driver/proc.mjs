// What the driver reads of its children from /proc: CPU time, memory, and
// which workerd processes it started.
import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { CALLGRIND_COMM } from "../callgrind.mjs";

/** Clock ticks per second of /proc/PID/stat's CPU times. */
export const CLK_TCK = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;

/** A process's parent, and its CPU time in clock ticks (user + system, and user alone). */
export function procStat(pid) {
  const s = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
  return { ppid: Number(f[1]), cpuTicks: Number(f[11]) + Number(f[12]), userTicks: Number(f[11]) };
}

/** A `kB` field of /proc/PID/status (VmRSS, VmHWM), in KiB; 0 when absent. */
export function procStatusKiB(pid, field) {
  const m = readFileSync(`/proc/${pid}/status`, "utf8").match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"));
  return m ? Number(m[1]) : 0;
}

/** workerd processes this process started (run under callgrind in BENCH_INSTRUCTIONS mode). */
export function childWorkerdPids() {
  const out = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const comm = readFileSync(`/proc/${d}/comm`, "utf8").trim();
      if (comm !== "workerd" && comm !== CALLGRIND_COMM) continue;
      if (procStat(d).ppid === process.pid) out.push(Number(d));
    } catch {
      // gone
    }
  }
  return out;
}

/** Samples a process's VmRSS every `ms` until stopped; returns the peak (KiB). */
export function rssSampler(pid, ms = 50) {
  let peak = procStatusKiB(pid, "VmRSS");
  const t = setInterval(() => {
    try {
      peak = Math.max(peak, procStatusKiB(pid, "VmRSS"));
    } catch {}
  }, ms);
  return () => {
    clearInterval(t);
    try {
      peak = Math.max(peak, procStatusKiB(pid, "VmRSS"));
    } catch {}
    return peak;
  };
}

/** A process's CPU time in ns: the sum of its threads' schedstat run time (finer than /proc/PID/stat's ticks). */
export function procCpuNs(pid) {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
    } catch {
      // thread gone
    }
  }
  return ns;
}
