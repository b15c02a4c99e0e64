//! `rulesctl validate`: compile rulesets as the build does, and warn about
//! what compiles but is likely a mistake.

use std::path::PathBuf;

use crate::cli::{no_value, set_once, unknown, Arg, Args, Failure, Outcome};
use crate::out;
use crate::rules::{self, Loaded, RulesDir};

pub const HELP: &str = "\
usage: rulesctl validate [--strict] [--rules-dir DIR] [NAME_OR_FILE...]

Compiles each ruleset exactly as the router does (all of rules/*.json when
none is given; NAME means rules/NAME.json). Prints `ok FILE (N rules)` for
each good one and `error FILE: ...` (naming the rule and field) for each bad
one; warnings are printed as `warning FILE: ...`.

  --strict         treat warnings as errors
  --rules-dir DIR  where NAME is looked up (default: the nearest rules/)

exit: 0 all valid, 1 any invalid (or any warning with --strict), 2 usage";

pub fn run(mut args: Args) -> Outcome<i32> {
    let mut strict = false;
    let mut rules_dir = None;
    let mut targets = Vec::new();
    while let Some(arg) = args.next_arg() {
        match arg {
            Arg::Opt(name, inline) if name == "--strict" => {
                no_value(&name, inline)?;
                strict = true;
            }
            Arg::Opt(name, inline) if name == "--rules-dir" => {
                let v = args.value(&name, inline)?;
                set_once(&mut rules_dir, &name, v)?;
            }
            Arg::Positional(p) => targets.push(p),
            other => return Err(unknown("validate", other)),
        }
    }
    let dir = RulesDir::new(rules_dir);
    let files: Vec<PathBuf> = if targets.is_empty() {
        dir.all()?
    } else {
        targets
            .iter()
            .map(|t| dir.resolve(t))
            .collect::<Outcome<_>>()?
    };

    let (mut valid, mut invalid, mut warned) = (0usize, 0usize, 0usize);
    for file in &files {
        match rules::load(file) {
            Ok(loaded) => {
                valid += 1;
                out::line(&format!(
                    "ok {} ({} rules)",
                    loaded.display(),
                    loaded.ruleset.rules().len()
                ));
                let warnings = warnings(&loaded);
                if !warnings.is_empty() {
                    warned += 1;
                }
                for w in warnings {
                    out::line(&format!("warning {}: {w}", loaded.display()));
                }
            }
            Err(Failure::Data(message) | Failure::Usage(message)) => {
                invalid += 1;
                out::err_line(&format!("error {message}"));
            }
        }
    }
    if files.len() > 1 {
        out::line(&format!(
            "{} rulesets: {valid} valid, {invalid} invalid, {warned} with warnings",
            files.len()
        ));
    }
    Ok(if invalid > 0 || (strict && warned > 0) {
        1
    } else {
        0
    })
}

/// What compiles but is probably not meant.
pub fn warnings(loaded: &Loaded) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(last) = loaded.ruleset.rules().last() {
        if !last.is_catch_all() {
            out.push(format!(
                "does not end in a catch-all rule: the last rule, {:?}, does not match every request, so requests that match no rule go to the legacy cell implicitly",
                last.id
            ));
        }
    }
    out
}
