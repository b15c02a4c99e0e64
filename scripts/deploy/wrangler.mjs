// Running the pinned wrangler for one environment: commands that change
// something are logged (or, with --dry-run, only printed), reads are
// captured; results come from wrangler's machine-readable output
// (WRANGLER_OUTPUT_FILE_PATH, one JSON entry a line, and --json), never
// from its text.
import { spawn } from "node:child_process";
import fs from "node:fs";
import { say } from "./log.mjs";
import { quoteWords } from "./shell-words.mjs";

/** The entries wrangler appended to its output file since `fromLine`. */
export function readOutputEntries(file, fromLine = 0) {
  let text;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch {
    return [];
  }
  return text
    .split("\n")
    .slice(fromLine)
    .filter((line) => line.trim())
    .flatMap((line) => {
      try {
        return [JSON.parse(line)];
      } catch {
        return [];
      }
    });
}

function lineCount(file) {
  try {
    return fs.readFileSync(file, "utf8").split("\n").filter((l) => l.trim()).length;
  } catch {
    return 0;
  }
}

export class Wrangler {
  /**
   * bin: the command as words; configArgs: ["--config", file] or [];
   * outputFile: WRANGLER_OUTPUT_FILE_PATH; env: the environment key.
   */
  constructor({ bin, configArgs, outputFile, env, dryRun = false }) {
    Object.assign(this, { bin, configArgs, outputFile, env, dryRun });
  }

  #spawn(args, capture) {
    const [cmd, ...pre] = this.bin;
    const from = lineCount(this.outputFile);
    const child = spawn(cmd, [...pre, ...args, ...this.configArgs], {
      stdio: ["ignore", capture ? "pipe" : "inherit", capture ? "pipe" : "inherit"],
      env: { ...process.env, WRANGLER_OUTPUT_FILE_PATH: this.outputFile },
    });
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (d) => (stdout += d));
    child.stderr?.on("data", (d) => (stderr += d));
    return new Promise((resolve) => {
      child.on("error", (error) => resolve({ status: 127, stdout, stderr: `${stderr}${error.message}\n`, entries: [] }));
      child.on("close", (status, signal) => {
        const entries = readOutputEntries(this.outputFile, from);
        const failed = entries.find((e) => e.type === "command-failed");
        resolve({ status: status ?? 128, signal, stdout, stderr, entries, errorCode: failed?.code ?? null, errorMessage: failed?.message ?? null });
      });
    });
  }

  /** The line a dry run prints for these arguments. */
  dryRunLine(args) {
    return `DRY-RUN: wrangler ${quoteWords(args)}`;
  }

  /** A command that changes something: logged, its output shown; dry run: printed. */
  async run(args) {
    if (this.dryRun) {
      process.stdout.write(`${this.dryRunLine(args)}\n`);
      return { status: 0, entries: [], dryRun: true };
    }
    say(`wrangler ${quoteWords(args)}`);
    return this.#spawn(args, false);
  }

  /** A read: output captured, not shown. */
  capture(args) {
    return this.#spawn(args, true);
  }

  /** A read with --json: {ok, value} or {ok: false, result}. */
  async json(args) {
    const result = await this.capture(args);
    if (result.status !== 0) return { ok: false, result };
    try {
      return { ok: true, value: JSON.parse(result.stdout) };
    } catch (e) {
      return { ok: false, result: { ...result, stderr: `${result.stderr}wrangler ${args.join(" ")} printed no JSON (${e.message})\n` } };
    }
  }
}

/** The last entry of `type` in wrangler's output entries (null when none). */
export function lastEntry(entries, type) {
  return entries.filter((e) => e.type === type).at(-1) ?? null;
}
