//! `rulesctl`: validate, explain and diff the router's rulesets, and make
//! routable tokens for tests. See `rulesctl --help`.
//!
//! Exit codes: 0 success, 1 bad data (a ruleset, a request, a file, a
//! token), 2 a wrong command line.

mod cli;
mod config;
mod confirm;
mod control;
mod decision;
mod diff;
mod docdiff;
mod explain;
mod health;
mod kv;
mod out;
mod request;
mod reserved_words;
mod route_claims;
mod route_lookup;
mod route_template;
mod routes_check;
mod rules;
mod shadow;
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

exit: 0 ok, 1 bad data (ruleset, request, file, token), 2 usage error
(control and health: see their --help)"
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
    #[command(subcommand)]
    Health(health::Command),
    #[command(subcommand)]
    Shadow(shadow::Command),
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
        Command::Health(command) => health::run(command),
        Command::Shadow(command) => shadow::run(command),
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

    /// A document's rulesctl command lines: (line number, words, whether
    /// the line is a whole command). A fenced code block's lines (joined
    /// over a trailing `\`) are whole commands; an inline code span
    /// (`rulesctl …` in prose) may name a verb only. The words run from
    /// `rulesctl` (or `cargo run … --bin rulesctl --`) to the end, a pipe,
    /// `;`, `&&`, a redirection or a comment; `<placeholder>`s read as 1.
    fn doc_commands(text: &str) -> Vec<(usize, Vec<String>, bool)> {
        fn words(command: &str) -> Vec<String> {
            // A synopsis's optional parts ("[--content-type T]") are left out.
            let mut required = String::new();
            let mut rest = command;
            while let Some(open) = rest.find("[-") {
                let Some(close) = rest[open..].find(']') else {
                    break;
                };
                required.push_str(&rest[..open]);
                rest = &rest[open + close + 1..];
            }
            required.push_str(rest);
            let mut placeheld = String::new();
            let mut rest = required.as_str();
            while let Some(open) = rest.find('<') {
                let Some(close) = rest[open..].find('>') else {
                    break;
                };
                placeheld.push_str(&rest[..open]);
                placeheld.push('1');
                rest = &rest[open + close + 1..];
            }
            placeheld.push_str(rest);
            let (mut words, mut word, mut quote, mut started) =
                (Vec::new(), String::new(), None, false);
            let mut chars = placeheld.chars();
            while let Some(c) = chars.next() {
                match (quote, c) {
                    (None, '\'' | '"') => {
                        quote = Some(c);
                        started = true;
                    }
                    (Some(q), c) if c == q => quote = None,
                    (Some('"') | None, '\\') => {
                        if let Some(next) = chars.next() {
                            word.push(next);
                        }
                    }
                    (None, c) if c.is_whitespace() => {
                        if started || !word.is_empty() {
                            words.push(std::mem::take(&mut word));
                        }
                        started = false;
                    }
                    (None, '|' | ';' | '>' | '&') => break,
                    (None, '#') if word.is_empty() && !started => break,
                    (_, c) => word.push(c),
                }
            }
            if started || !word.is_empty() {
                words.push(word);
            }
            words.retain(|w| w != "…" && w != "...");
            words
        }
        fn from_rulesctl(line: &str) -> Option<String> {
            let line = line.trim().trim_start_matches("$ ");
            if let Some(at) = line.find("--bin rulesctl -- ") {
                return Some(format!("rulesctl {}", &line[at + 18..]));
            }
            let at = line.find("rulesctl ")?;
            let before = &line[..at];
            (before.is_empty() || before.ends_with(' ') || before.ends_with('/'))
                .then(|| line[at..].to_string())
        }
        let mut found = Vec::new();
        let mut fenced = false;
        let mut pending: Option<(usize, String)> = None;
        let mut paragraph: Option<(usize, String)> = None;
        let flush = |paragraph: &mut Option<(usize, String)>,
                     found: &mut Vec<(usize, Vec<String>, bool)>| {
            if let Some((n, text)) = paragraph.take() {
                for (i, span) in text.split('`').enumerate() {
                    if i % 2 == 1 && span.starts_with("rulesctl ") {
                        found.push((n, words(span), false));
                    }
                }
            }
        };
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            if line.trim_start().starts_with("```") {
                flush(&mut paragraph, &mut found);
                fenced = !fenced;
                continue;
            }
            if fenced {
                let (start, joined) = match pending.take() {
                    Some((start, head)) => (start, format!("{head} {}", line.trim())),
                    None => (n, line.to_string()),
                };
                if let Some(head) = joined.trim_end().strip_suffix('\\') {
                    pending = Some((start, head.to_string()));
                } else if let Some(command) = from_rulesctl(&joined) {
                    found.push((start, words(&command), true));
                }
            } else if line.trim().is_empty() {
                flush(&mut paragraph, &mut found);
            } else {
                match &mut paragraph {
                    Some((_, text)) => {
                        text.push(' ');
                        text.push_str(line);
                    }
                    None => paragraph = Some((n, line.to_string())),
                }
            }
        }
        flush(&mut paragraph, &mut found);
        found
    }

    /// Every rulesctl command the runbooks and the README give parses with
    /// this rulesctl: a whole command line (a code block) as it is, a verb
    /// named in prose as far as it goes (missing arguments allowed,
    /// unknown verbs and options not); an `--env` they name is an
    /// environment of wrangler.toml.
    #[test]
    fn the_documented_commands_parse() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let read = |f: &str| std::fs::read_to_string(root.join(f)).unwrap();
        let environments = crate::kv::environments(&read("wrangler.toml"));
        let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
            .unwrap()
            .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
            .filter(|f| f.ends_with(".md"))
            .collect();
        docs.push("README.md".into());
        let (mut whole, mut failures) = (0, Vec::new());
        for doc in &docs {
            for (line, words, is_whole) in doc_commands(&read(doc)) {
                let shown = format!("{doc}:{line}: {}", words.join(" "));
                match Cli::try_parse_from(&words) {
                    Ok(_) => whole += usize::from(is_whole),
                    Err(e) => {
                        use clap::error::ErrorKind::*;
                        // Prose names a verb without its arguments, or
                        // an option without its value.
                        let an_option_named = e.kind() == InvalidValue
                            && words.last().is_some_and(|w| w.starts_with("--"));
                        let a_verb_named = an_option_named
                            || matches!(
                                e.kind(),
                                MissingRequiredArgument
                                    | MissingSubcommand
                                    | DisplayHelpOnMissingArgumentOrSubcommand
                            );
                        if is_whole || !a_verb_named {
                            failures.push(format!("{shown}\n{e}"));
                        }
                    }
                }
                if let Some(at) = words.iter().position(|w| w == "--env") {
                    let env = words.get(at + 1).map_or("", String::as_str);
                    if !env.starts_with('$') && env != "1" && !environments.iter().any(|e| e == env)
                    {
                        failures.push(format!("{shown}\n--env {env} is not in wrangler.toml"));
                    }
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
        assert!(whole >= 20, "only {whole} whole command lines found");
    }

    #[test]
    fn doc_commands_are_read_from_blocks_and_spans() {
        let text = "Run `rulesctl control show --env <env>` or\n`rulesctl control\nput`.\n\n```sh\nrulesctl token [--cell N] --decode T\nrulesctl control set --env production mode=passthrough note=\"INC 1: x\" --yes   # why\nbin/rulesctl control invalidate --env production \\\n  --cell 2 --dry-run | tee log\necho rulesctl\ncargo run -q --bin rulesctl -- validate\n```\n";
        let found = doc_commands(text);
        let shown: Vec<(usize, String, bool)> = found
            .into_iter()
            .map(|(n, w, whole)| (n, w.join("|"), whole))
            .collect();
        assert_eq!(
            shown,
            [
                (1, "rulesctl|control|show|--env|1".to_string(), false),
                (1, "rulesctl|control|put".to_string(), false),
                (6, "rulesctl|token|--decode|T".to_string(), true),
                (
                    7,
                    "rulesctl|control|set|--env|production|mode=passthrough|note=INC 1: x|--yes"
                        .to_string(),
                    true
                ),
                (
                    8,
                    "rulesctl|control|invalidate|--env|production|--cell|2|--dry-run".to_string(),
                    true
                ),
                (11, "rulesctl|validate".to_string(), true),
            ]
        );
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
            "control set --env production mode=passthrough note=INC-1 --yes",
            "control set --env production purge --dry-run --document control.json",
            "control put --env production new.json --dry-run --document -",
            "control show --env production --json",
            "control check control.json --json",
            "health show --env production --json --max-age-secs 60",
            "health show --env dev --local --persist-to d --config w",
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
        // --document is the stored document of a dry run only.
        let argv = "rulesctl control set --env production purge --document d";
        assert!(Cli::try_parse_from(argv.split(' ')).is_err());
    }
}
