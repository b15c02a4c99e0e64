// The health check of one version: HEALTH_CHECK_CMD and/or a request to
// HEALTH_CHECK_URL carrying Cloudflare's version override header, so the
// probe reaches that version whatever the traffic split (also at 0 %, as
// long as the version is in the deployment), and the smoke-test secret
// (SMOKE_TEST_SECRET), without which the router answers an override 403.
// A first deploy's checks (the canary, then the routes) probe the only
// version there is: `override: false` sends neither header, so they need no
// secret the new Worker may not have yet.
import { spawn } from "node:child_process";
import { say } from "./log.mjs";

/** The header the router reads the smoke-test secret from (router_core::forward::SMOKE_TEST_HEADER). */
export const SMOKE_TEST_HEADER = "x-gitlab-http-router-smoke-test";

/** The Cloudflare-Workers-Version-Overrides value: a structured-header dictionary. */
export function versionOverride(workerName, versionId) {
  return `${workerName}="${versionId}"`;
}

/** Whether a URL's `hostname` is this machine: 127.0.0.0/8, ::1, localhost. */
export function isLoopbackHost(hostname) {
  const host = String(hostname).toLowerCase().replace(/\.$/, "");
  return host === "localhost" || host === "[::1]" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * Why the smoke-test secret must not be sent to `url`: not a URL, not
 * http(s), or `http:` to a host that is not loopback (the secret would
 * cross the network in the clear); null when it may.
 */
export function smokeUrlProblem(url) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    return `HEALTH_CHECK_URL=${url} is not a URL`;
  }
  if (parsed.protocol === "https:") return null;
  if (parsed.protocol === "http:" && isLoopbackHost(parsed.hostname)) return null;
  if (parsed.protocol !== "http:") return `HEALTH_CHECK_URL=${url} is neither https: nor http:`;
  return `HEALTH_CHECK_URL=${url} is http: to ${parsed.hostname}, which is not loopback: the smoke-test secret (SMOKE_TEST_SECRET) would cross the network in the clear. Use its https: URL (http: is for a local stand-in on 127.0.0.1, ::1 or localhost only)`;
}

/** 2xx and 3xx count as healthy. */
export function healthyStatus(status) {
  return status >= 200 && status < 400;
}

function runCommand(cmd, env, signal) {
  return new Promise((resolve) => {
    const child = spawn("bash", ["-c", cmd], { stdio: ["ignore", 2, 2], env: { ...process.env, ...env } });
    const stop = () => child.kill("SIGTERM");
    signal?.addEventListener("abort", stop, { once: true });
    child.on("error", () => resolve(127));
    child.on("close", (code, sig) => {
      signal?.removeEventListener("abort", stop);
      resolve(code ?? (sig ? 128 : 1));
    });
  });
}

async function probe(url, headers, timeoutS, signal) {
  const signals = [AbortSignal.timeout(timeoutS * 1000), ...(signal ? [signal] : [])];
  try {
    const res = await fetch(url, { headers, redirect: "manual", signal: AbortSignal.any(signals) });
    await res.body?.cancel();
    return { status: res.status };
  } catch (e) {
    return { status: null, error: e.name === "TimeoutError" ? `no answer within ${timeoutS}s` : (e.cause?.message ?? e.message) };
  }
}

/**
 * Checks `newVersion` at `percentage` (0 = the smoke test before any
 * traffic). Returns {ok, problem, command?, url?, checked_at}; without a
 * command or a URL it warns and passes.
 */
export async function runHealthCheck({ cmd, url, timeoutS = 10, environment, workerName, newVersion, oldVersion, percentage, signal, warn, smokeSecret = "", override = true }) {
  const result = { ok: true, problem: null, checked_at: new Date().toISOString() };
  if (cmd) {
    say(`health check: ${cmd}`);
    const code = await runCommand(
      cmd,
      {
        DEPLOY_ENVIRONMENT: environment,
        DEPLOY_WORKER_NAME: workerName,
        DEPLOY_PERCENTAGE: String(percentage),
        DEPLOY_NEW_VERSION: newVersion ?? "",
        DEPLOY_OLD_VERSION: oldVersion ?? "",
      },
      signal,
    );
    result.command = { exit: code };
    if (code !== 0) return { ...result, ok: false, problem: `HEALTH_CHECK_CMD (${cmd}) exited ${code}` };
  }
  if (url) {
    // Checked at preflight too; here so no caller can send the secret in the clear.
    const secret = override ? smokeSecret : "";
    const refused = secret ? smokeUrlProblem(url) : null;
    if (refused) return { ...result, ok: false, problem: refused };
    const overrideValue = override ? versionOverride(workerName, newVersion) : null;
    const headers = override ? { "cloudflare-workers-version-overrides": overrideValue, ...(secret ? { [SMOKE_TEST_HEADER]: secret } : {}) } : {};
    const { status, error } = await probe(url, headers, timeoutS, signal);
    say(`health check: ${url} answered ${status ?? "nothing"} (version ${newVersion}${override ? "" : ", the only one: no override"})`);
    result.url = { url, status, override: overrideValue, ...(error ? { error } : {}) };
    if (status === null || !healthyStatus(status)) {
      return { ...result, ok: false, problem: `HEALTH_CHECK_URL ${url} answered ${status ?? "nothing"} (${error ? `${error}; ` : ""}2xx/3xx expected)` };
    }
  }
  if (!cmd && !url) {
    warn?.("no HEALTH_CHECK_CMD or HEALTH_CHECK_URL: baking without a health check");
    result.skipped = true;
  }
  return result;
}
