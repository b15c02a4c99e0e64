// The rollout record: one JSON file per deploy (ROLLOUT_RECORD) saying which
// versions, which steps with their deployment ids and times, the health
// results and the outcome. It is rewritten after every change, so a job that
// is killed still leaves what it did; CI keeps it as an artifact and the
// rollback job reads it to know what to return to.
import fs from "node:fs";
import path from "node:path";

export const RECORD_FORMAT = "gitlab-http-router/rollout-record@1";

/** A new record (pure): the deploy's identity, nothing done yet. */
export function newRecord({ environment, workerName, tag, message, now = new Date() }) {
  return {
    format: RECORD_FORMAT,
    environment,
    worker: workerName,
    tag,
    message,
    started_at: now.toISOString(),
    finished_at: null,
    kind: null, // first-deploy | rollout | resume | unchanged | refused
    old_version: null,
    new_version: null,
    routes: null, // {missing, uncheckable, published}
    tail_worker: null, // {name, version}: the tail consumer deployed first
    steps: [], // {percentage, smoke?, deployment_id, deployed_at, health?}
    rollback: null, // {to, deployment_id, at, ok}
    outcome: "in-progress", // completed | unchanged | rolled-back | rollback-failed | failed | refused
    traffic: null, // where traffic is at the end, as words
    problem: null,
  };
}

/** Reads a record file; throws with a readable message. */
export function readRecord(file) {
  let text;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (e) {
    throw new Error(`cannot read the rollout record ${file}: ${e.code === "ENOENT" ? "no such file" : e.message}`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`the rollout record ${file} is not JSON: ${e.message}`);
  }
}

/** A record kept in a file: change it through `update`, which writes it at once. */
export class RecordFile {
  constructor(file, record) {
    this.file = file;
    this.record = record;
  }

  update(change) {
    Object.assign(this.record, typeof change === "function" ? change(this.record) ?? {} : change);
    this.write();
  }

  /** Appends a step; returns it (to attach its health result later). */
  addStep(step) {
    const entry = { ...step };
    this.record.steps.push(entry);
    this.write();
    return entry;
  }

  finish(outcome, extra = {}) {
    this.update({ ...extra, outcome, finished_at: new Date().toISOString() });
  }

  write() {
    if (!this.file) return;
    fs.mkdirSync(path.dirname(this.file), { recursive: true });
    const tmp = `${this.file}.tmp-${process.pid}`;
    fs.writeFileSync(tmp, `${JSON.stringify(this.record, null, 2)}\n`);
    fs.renameSync(tmp, this.file);
  }
}
