//! `rulesctl`: validate, explain and diff the router's rulesets, and make
//! routable tokens for tests. See `rulesctl --help`.
//!
//! Exit codes: 0 success, 1 bad data (a ruleset, a request, a file, a
//! token), 2 a wrong command line.

mod cli;
mod control;
mod decision;
mod diff;
mod explain;
mod out;
mod request;
mod reserved_words;
mod route_claims;
mod route_lookup;
mod route_template;
mod routes_check;
mod rules;
mod signature;
mod snapshot;
mod token;
mod validate;

use cli::{Args, Failure};

const USAGE: &str = "\
rulesctl: validate, explain and diff GitLab Cells HTTP router rulesets

usage:
  rulesctl validate [--strict] [NAME_OR_FILE...]
  rulesctl explain --ruleset NAME_OR_FILE --url URL [--method METHOD]
                   [--header 'Name: value']... [--cookie 'name=value']...
  rulesctl diff OLD NEW --requests FILE [--json]
  rulesctl routes-check FILE [--ruleset NAME_OR_FILE] [--claims FILE]
  rulesctl token --cell ID [--prefix glpat-] [--field k=v]... [--seed N]
  rulesctl token --decode TOKEN
  rulesctl signature keygen | public-key --key-file F | verify ... TOKEN
  rulesctl control show|set|put|check --env ENV [--dry-run] ...
  rulesctl help [COMMAND]

A NAME is rules/NAME.json in the nearest rules/ directory (or --rules-dir
DIR, or $RULESCTL_RULES_DIR); an argument with a / or ending in .json is a
file. `rulesctl COMMAND --help` tells more.

exit: 0 ok, 1 bad data (ruleset, request, file, token), 2 usage error";

fn help_for(command: &str) -> Option<&'static str> {
    Some(match command {
        "validate" => validate::HELP,
        "explain" => explain::HELP,
        "diff" => diff::HELP,
        "token" => token::HELP,
        "signature" => signature::HELP,
        "routes-check" => routes_check::HELP,
        "control" => control::HELP,
        _ => return None,
    })
}

fn main() {
    let mut argv = Vec::new();
    for arg in std::env::args_os().skip(1) {
        match arg.into_string() {
            Ok(a) => argv.push(a),
            Err(bad) => {
                out::err_line(&format!("rulesctl: argument {bad:?} is not UTF-8"));
                std::process::exit(2);
            }
        }
    }
    std::process::exit(match run(argv) {
        Ok(code) => code,
        Err(Failure::Usage(message)) => {
            out::err_line(&format!(
                "rulesctl: {message}\nrun `rulesctl --help` for usage"
            ));
            2
        }
        Err(Failure::Data(message)) => {
            out::err_line(&format!("rulesctl: {message}"));
            1
        }
    });
}

fn run(mut argv: Vec<String>) -> cli::Outcome<i32> {
    if argv.is_empty() {
        out::err_line(USAGE);
        return Ok(2);
    }
    let command = argv.remove(0);
    let wants_help = argv
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--help" || a == "-h");
    match command.as_str() {
        "--help" | "-h" => {
            out::line(USAGE);
            Ok(0)
        }
        "help" => match argv.first() {
            None => {
                out::line(USAGE);
                Ok(0)
            }
            Some(c) => {
                let text = help_for(c)
                    .ok_or_else(|| Failure::usage(format!("help: unknown command {c:?}")))?;
                out::line(text);
                Ok(0)
            }
        },
        c if wants_help && help_for(c).is_some() => {
            out::line(help_for(c).unwrap_or(USAGE));
            Ok(0)
        }
        "validate" => validate::run(Args::new(argv)),
        "explain" => explain::run(Args::new(argv)),
        "diff" => diff::run(Args::new(argv)),
        "token" => token::run(Args::new(argv)),
        "signature" => signature::run(Args::new(argv)),
        "routes-check" => routes_check::run(Args::new(argv)),
        "control" => control::run(Args::new(argv)),
        other => Err(Failure::usage(format!(
            "unknown command {other:?} (commands: validate, explain, diff, routes-check, token, signature, control, help)"
        ))),
    }
}
