//! `rulesctl health show`: the cell-health record the scheduled probe (the
//! Cron Trigger, every minute) keeps in the deployment's KV namespace
//! (`ROUTER_CONTROL`, key `cell-health`), read through the pinned wrangler
//! and decoded by the router's own reader.

use router_core::resolve::cells::{HealthRecord, Verdict, HEALTH_KEY};
use serde_json::{json, Value};

use crate::cli::Outcome;
use crate::kv::{self, Kv};
use crate::out;

const ABOUT: &str = "\
Every minute the router's Cron Trigger probes each cell of GITLAB_CELLS
(its health_path) and writes one record, key \"cell-health\" in the KV
namespace bound as ROUTER_CONTROL; every isolate applies it (a cell found
down gets its circuit opened) while it is younger than
GITLAB_CELL_HEALTH_MAX_AGE_SECONDS. A verdict: up (2xx), down (no answer
or 5xx), misconfigured (anything else: GitLab answers 404 to an address
outside its monitoring allowlist; never marks the cell down).

exit: 0 every cell up in a current record; 1 a cell down or misconfigured,
no record, an unreadable or stale one (the cron stopped: isolates ignore
it), or wrangler failed; 2 usage";

/// The cell-health record the scheduled probe writes (KV)
#[derive(clap::Subcommand)]
#[command(after_help = ABOUT)]
pub enum Command {
    /// Print the latest probe record: when, and each cell's verdict
    Show {
        /// One JSON object: environment, status (ok, down, missing,
        /// unreadable, stale), checked_at_ms, age_ms, cells
        #[arg(long)]
        json: bool,
        /// The age past which isolates ignore the record: the environment's
        /// GITLAB_CELL_HEALTH_MAX_AGE_SECONDS
        #[arg(long, value_name = "SECS", default_value_t = 180)]
        max_age_secs: u64,
        #[command(flatten, next_help_heading = "Wrangler options")]
        kv: Kv,
    },
}

fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Up => "up",
        Verdict::Down => "down",
        Verdict::Misconfigured => "misconfigured",
    }
}

pub fn run(command: Command) -> Outcome<i32> {
    let Command::Show {
        json,
        max_age_secs,
        kv,
    } = command;
    let wrangler = kv.wrangler("health show")?;
    let stored = wrangler.get(HEALTH_KEY)?;
    let now_ms = kv::now_ms();
    let record = stored.as_deref().map(HealthRecord::decode);
    let (status, problem) = match &record {
        None => (
            "missing",
            Some(format!(
                "no cell-health record in {}: the probe has not run (no cron trigger, GITLAB_CELLS empty) or its writes fail (the router's cell-health error lines say why); isolates rely on their own circuits",
                wrangler.place()
            )),
        ),
        Some(None) => (
            "unreadable",
            Some("the stored record is not one this version reads: isolates ignore it".into()),
        ),
        Some(Some(r)) if !r.is_current(now_ms, max_age_secs * 1000) => (
            "stale",
            Some(format!(
                "the record is from {} ms ago, past {max_age_secs} s (or dated ahead of this clock): isolates ignore it; is the cron trigger running?",
                now_ms.saturating_sub(r.checked_at_ms)
            )),
        ),
        Some(Some(r)) if r.cells.iter().any(|c| c.verdict() != Verdict::Up) => ("down", None),
        Some(Some(_)) => ("ok", None),
    };
    let decoded = record.flatten();
    if json {
        let cells: Vec<Value> = decoded
            .as_ref()
            .map(|r| {
                r.cells
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "verdict": verdict_name(c.verdict()),
                            "status": c.status,
                            "ms": c.ms,
                            "error": c.error,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        out::line(
            &json!({
                "environment": wrangler.env,
                "local": wrangler.local,
                "key": HEALTH_KEY,
                "status": status,
                "checked_at_ms": decoded.as_ref().map(|r| r.checked_at_ms),
                "age_ms": decoded.as_ref().map(|r| now_ms.saturating_sub(r.checked_at_ms)),
                "problem": problem,
                "cells": cells,
            })
            .to_string(),
        );
    } else {
        if let Some(r) = &decoded {
            out::line(&format!(
                "cell-health record ({}): checked at {} ms, {} s ago",
                wrangler.place(),
                r.checked_at_ms,
                now_ms.saturating_sub(r.checked_at_ms) / 1000
            ));
            for c in &r.cells {
                let line = format!(
                    "cell {:<4} {:<13} status {:<3}  {:>6} ms  {}",
                    c.id,
                    verdict_name(c.verdict()),
                    c.status,
                    c.ms,
                    c.error.as_deref().unwrap_or("")
                );
                out::line(line.trim_end());
            }
        }
        if let Some(problem) = &problem {
            out::err_line(&format!("rulesctl: {problem}"));
        }
    }
    Ok(if status == "ok" { 0 } else { 1 })
}
