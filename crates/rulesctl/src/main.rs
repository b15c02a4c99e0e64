//! `rulesctl`: validate, explain and diff the router's rulesets, and make
//! routable tokens for tests. See `rulesctl --help`.
//!
//! Exit codes: 0 success, 1 bad data (a ruleset, a request, a file, a
//! token), 2 a wrong command line.

mod cli;
mod config;
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

use clap::{Parser, Subcommand};
use cli::Failure;

/// Validate, explain and diff GitLab Cells HTTP router rulesets
#[derive(Parser)]
#[command(
    name = "rulesctl",
    version,
    arg_required_else_help = true,
    after_help = "\
A NAME_OR_FILE with a / or ending in .json is a file; a NAME is rules/NAME.json
in the rules directory: --rules-dir DIR, else $RULESCTL_RULES_DIR, else the
nearest rules/ in the working directory or above it.

exit: 0 ok, 1 bad data (ruleset, request, file, token), 2 usage error"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Validate(validate::Args),
    Explain(explain::Args),
    Diff(diff::Args),
    RoutesCheck(routes_check::Args),
    Token(token::Args),
    #[command(subcommand)]
    Signature(signature::Command),
    #[command(subcommand)]
    Control(control::Command),
    #[command(subcommand)]
    Config(config::Command),
}

fn main() {
    let code = match run(Cli::parse().command) {
        Ok(code) => code,
        // As clap reports what it finds wrong.
        Err(Failure::Usage(message)) => {
            out::err_line(&format!(
                "error: {message}\n\nFor more information, try '--help'."
            ));
            2
        }
        Err(Failure::Data(message)) => {
            out::err_line(&format!("rulesctl: {message}"));
            1
        }
    };
    std::process::exit(code);
}

fn run(command: Command) -> cli::Outcome<i32> {
    match command {
        Command::Validate(args) => validate::run(args),
        Command::Explain(args) => explain::run(args),
        Command::Diff(args) => diff::run(args),
        Command::RoutesCheck(args) => routes_check::run(args),
        Command::Token(args) => token::run(args),
        Command::Signature(command) => signature::run(command),
        Command::Control(command) => control::run(command),
        Command::Config(command) => config::run(command),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every command and argument has its line in the help.
    #[test]
    fn every_command_and_argument_is_documented() {
        fn check(command: &clap::Command, path: &str) {
            for arg in command.get_arguments() {
                assert!(arg.get_help().is_some(), "{path} {}", arg.get_id());
            }
            for sub in command.get_subcommands() {
                let path = format!("{path} {}", sub.get_name());
                assert!(sub.get_about().is_some(), "{path}");
                check(sub, &path);
            }
        }
        let mut command = Cli::command();
        command.build();
        check(&command, "rulesctl");
        Cli::command().debug_assert();
    }

    /// The command lines of the docs, scripts and tests that the
    /// integration tests do not run (they need wrangler or a stack).
    #[test]
    fn command_lines_in_use_parse() {
        for line in [
            "control set --env dev --local mode=passthrough --dry-run",
            "control show --env production",
            "control set --env production mode=passthrough note=INC-123",
            "control set --env production purge request_log=all reset",
            "control put --env production control.json",
            "control check control.json",
            "control check -",
            "config check --env production",
            "config check --env staging --config wrangler.toml --secret GITLAB_ROUTER_SIGNING_KEY \
             --secret GITLAB_SMOKE_TEST_SECRET --json --rules-dir rules",
            "control show --env dev --local --persist-to d --config w",
            "control set --dry-run mode=passthrough note=INC-2 --env dev",
            "control set --env dev --local --start-generation 0 reset",
            "control invalidate --env production --cell 2 --start-generation 12",
            "signature keygen",
            "signature public-key --key-file key",
            "signature verify --public-key K --audience 127.0.0.1:1 --method POST \
             --url /api/v4/projects?page=2 --content-length 2 --content-type a/b \
             --issuer i --max-lifetime 10 --leeway 0 --now 1 TOKEN",
        ] {
            let argv = std::iter::once("rulesctl").chain(line.split_whitespace());
            if let Err(e) = Cli::try_parse_from(argv) {
                panic!("{line}: {e}");
            }
        }
    }
}
