// What the deploy program prints, and the error that carries an exit status.
// Messages keep the words operators know from deploy-worker.sh: progress on
// stderr as "==> ...", problems as "deploy-worker.sh: error: ...".

export const PROGRAM = "deploy-worker.sh";

/** Exit statuses (docs/deploying.md). */
export const EXIT = Object.freeze({ OK: 0, FAILED: 1, USAGE: 2, LOCKED: 3, INTERRUPTED: 130 });

/** A progress line on stderr. */
export function say(message) {
  process.stderr.write(`==> ${message}\n`);
}

/** A warning on stderr. */
export function warn(message) {
  process.stderr.write(`${PROGRAM}: warning: ${message}\n`);
}

/** Lines prefixed with the program's name, on stderr. */
export function tell(...lines) {
  for (const line of lines) process.stderr.write(`${PROGRAM}: ${line}\n`);
}

/**
 * Stops the program with `code`. `message` is printed as
 * "deploy-worker.sh: error: message", or as it is when `raw` (already
 * formatted, e.g. the rollback report).
 */
export class DeployError extends Error {
  constructor(code, message, { raw = false } = {}) {
    super(message);
    this.code = code;
    this.raw = raw;
  }
}

/** Shorthand: throw a DeployError. */
export function fail(code, message, options) {
  throw new DeployError(code, message, options);
}
