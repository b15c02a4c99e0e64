//! `rulesctl validate`: compile rulesets as the build does, and warn about
//! what compiles but is likely a mistake.

use std::path::PathBuf;

use crate::cli::{Failure, Outcome};
use crate::out;
use crate::rules::{self, DirArg, Loaded};

/// Compile rulesets as the router does; warn about likely mistakes
#[derive(clap::Args)]
#[command(after_long_help = "\
Prints `ok FILE (N rules)` for each good ruleset and `error FILE: ...`
(naming the rule and field) for each bad one; warnings are printed as
`warning FILE: ...`.

exit: 0 all valid, 1 any invalid (or any warning with --strict), 2 usage")]
pub struct Args {
    /// Treat warnings as errors
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    rules_dir: DirArg,
    /// The rulesets to compile [default: every rules/*.json]
    #[arg(value_name = "NAME_OR_FILE")]
    targets: Vec<String>,
}

pub fn run(args: Args) -> Outcome<i32> {
    let dir = args.rules_dir.dir();
    let files: Vec<PathBuf> = if args.targets.is_empty() {
        dir.all()?
    } else {
        args.targets
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
    Ok(if invalid > 0 || (args.strict && warned > 0) {
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
