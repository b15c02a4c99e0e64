//! `rulesctl config check`: an environment's settings, the `[vars]` of its
//! `[env.NAME]` in wrangler.toml and the names of its secrets, through the
//! router's own parser (`router_core::config::Config::from_lookup`), before
//! they ship. The deploy runs it in preflight.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use router_core::config::{self, Config, Level, Problem, RULES_CONFIG, SHADOW_RULES_CONFIG};
use serde_json::{json, Value};

use crate::cli::{Failure, Outcome};
use crate::out;
use crate::rules::{self, DirArg};

const CHECK: &str = "\
Reads [env.NAME.vars] of wrangler.toml as wrangler does: the top-level
[vars] are not inherited by an environment (wrangler warns; so does this).
Secrets are known by name only (their values are never read): --secret NAME,
and the names in [env.NAME.secrets] required (wrangler's own list).

Every value goes through the router's parser. Each problem is printed as
`LEVEL SETTING=\"value\": what is wrong; what the router does instead`
(never a secret's value): `error` and `warn` fail the check (at run time the
router logs them once per isolate and uses the stated fallback), `note` does
not. Also checked: GITLAB_RULES_CONFIG (and GITLAB_SHADOW_RULES_CONFIG, when
set) names a ruleset in rules/, names in
[vars] the router does not read (a misspelt name has no effect), secrets in
[vars] (plain text), values that are not strings (the router reads them as
not set), and placeholders: a value holding REPLACE_ME, which the shipped
environments carry where only an operator knows the value (an error; with
--allow-placeholders a note, and so are the problems it causes).

exit: 0 no problem (notes only), 1 any problem, 2 usage (an unknown --env)";

/// Check an environment's configuration before it ships
#[derive(clap::Subcommand)]
pub enum Command {
    /// Check an environment's [vars] and secret names with the router's
    /// own parser
    #[command(after_long_help = CHECK)]
    Check(CheckArgs),
    /// Print README.md's settings table (Markdown) from the router's own
    /// declarations: every setting's meaning, default, accepted values and
    /// what a value it cannot read does
    Table,
}

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The environment: a [env.NAME] of wrangler.toml
    #[arg(long, value_name = "NAME")]
    env: String,
    /// wrangler.toml [default: the nearest wrangler.toml in the working
    /// directory or above it]
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// A secret set on the Worker, by name (repeatable); its value is never
    /// read
    #[arg(long = "secret", value_name = "NAME")]
    secrets: Vec<String>,
    /// Print the result as one JSON document
    #[arg(long)]
    json: bool,
    /// Report REPLACE_ME values, and the problems they cause, as notes (the
    /// repository's own CI checks the shipped wrangler.toml this way)
    #[arg(long)]
    allow_placeholders: bool,
    #[command(flatten)]
    rules_dir: DirArg,
}

pub fn run(command: Command) -> Outcome<i32> {
    match command {
        Command::Check(args) => check(&args),
        Command::Table => {
            out::line(config::readme_table().trim_end());
            Ok(0)
        }
    }
}

fn check(args: &CheckArgs) -> Outcome<i32> {
    let known_secrets = config::secrets();
    for name in &args.secrets {
        if !known_secrets.contains(&name.as_str()) {
            return Err(Failure::usage(format!(
                "--secret {name}: not a secret the router reads (its secrets: {})",
                known_secrets.join(" ")
            )));
        }
    }
    let file = match &args.config {
        Some(file) => PathBuf::from(file),
        None => nearest_wrangler_toml()?,
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| Failure::data(format!("{}: cannot read: {e}", file.display())))?;
    let environment = Environment::read(&text, &file, &args.env)?;
    let mut secrets: BTreeSet<String> = args.secrets.iter().cloned().collect();
    secrets.extend(
        environment
            .required_secrets
            .iter()
            .filter(|s| known_secrets.contains(&s.as_str()))
            .cloned(),
    );

    let mut problems = environment.problems.clone();
    problems.extend(name_problems(&environment.vars));
    let (config, parsed) = Config::from_lookup(|name| {
        if secrets.contains(name) {
            return Some(config::secret_stand_in(name).to_string());
        }
        environment
            .vars
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_str().map(str::to_string))
    });
    problems.extend(parsed);
    problems.extend(ruleset_problem(&config, &args.rules_dir));
    problems.extend(shadow_problem(&config, &args.rules_dir));
    mark_placeholders(&mut problems, &environment.vars, args.allow_placeholders);

    let failing = problems.iter().filter(|p| p.level.fails_check()).count();
    if args.json {
        let doc = json!({
            "env": args.env,
            "config": file.display().to_string(),
            "secrets": secrets,
            "ok": failing == 0,
            "problems": problems.iter().map(problem_json).collect::<Vec<Value>>(),
        });
        out::line(&doc.to_string());
    } else {
        for problem in &problems {
            out::line(&format!("{} {problem}", label(problem.level)));
        }
        let notes = problems.len() - failing;
        out::line(&format!(
            "config check: [env.{}] of {}: {} vars, secrets: {}; {failing} problem{}, {notes} note{}",
            args.env,
            file.display(),
            environment.vars.len(),
            if secrets.is_empty() {
                "none given".to_string()
            } else {
                secrets.iter().cloned().collect::<Vec<_>>().join(" ")
            },
            if failing == 1 { "" } else { "s" },
            if notes == 1 { "" } else { "s" },
        ));
    }
    Ok(if failing > 0 { 1 } else { 0 })
}

/// The marker of a value only an operator knows (scripts/deploy/placeholders.mjs).
const PLACEHOLDER: &str = "REPLACE_ME";

/// Adds a problem per var that is still a placeholder; with `allow`, that
/// one and the problems the placeholders cause (same setting) are notes.
fn mark_placeholders(problems: &mut Vec<Problem>, vars: &[(String, toml::Value)], allow: bool) {
    let placeholders: BTreeSet<&str> = vars
        .iter()
        .filter(|(_, value)| value.as_str().is_some_and(|v| v.contains(PLACEHOLDER)))
        .map(|(name, _)| name.as_str())
        .collect();
    if allow {
        for problem in problems.iter_mut() {
            if placeholders.contains(problem.setting.as_str()) {
                problem.level = Level::Note;
            }
        }
    }
    problems.extend(placeholders.iter().map(|name| Problem {
        level: if allow { Level::Note } else { Level::Error },
        setting: (*name).to_string(),
        value: Some(PLACEHOLDER.to_string()),
        wrong: "still a placeholder".to_string(),
        instead: "set the operator's value before a deploy".to_string(),
    }));
}

fn label(level: Level) -> &'static str {
    match level {
        Level::Error => "error",
        Level::Warn => "warn",
        Level::Note => "note",
    }
}

fn problem_json(p: &Problem) -> Value {
    json!({
        "level": label(p.level),
        "setting": p.setting,
        "value": p.value,
        "wrong": p.wrong,
        "instead": p.instead,
        "message": p.to_string(),
    })
}

/// `wrangler.toml` in the working directory or the nearest above it, as
/// wrangler looks for it.
fn nearest_wrangler_toml() -> Outcome<PathBuf> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::data(format!("cannot read the working directory: {e}")))?;
    cwd.ancestors()
        .map(|dir| dir.join("wrangler.toml"))
        .find(|f| f.is_file())
        .ok_or_else(|| {
            Failure::data(format!(
                "no wrangler.toml in {} or above it: give --config FILE",
                cwd.display()
            ))
        })
}

/// One environment of wrangler.toml, as wrangler reads it.
struct Environment {
    /// `[env.NAME.vars]`, in the file's order.
    vars: Vec<(String, toml::Value)>,
    /// `[env.NAME.secrets] required`.
    required_secrets: Vec<String>,
    /// What is wrong with the file's shape for the router.
    problems: Vec<Problem>,
}

impl Environment {
    fn read(text: &str, file: &Path, name: &str) -> Outcome<Environment> {
        let doc: toml::Table = toml::from_str(text)
            .map_err(|e| Failure::data(format!("{}: not TOML: {e}", file.display())))?;
        let envs = doc.get("env").and_then(toml::Value::as_table);
        let Some(env) = envs
            .and_then(|t| t.get(name))
            .and_then(toml::Value::as_table)
        else {
            let known: Vec<&str> = envs
                .map(|t| t.keys().map(String::as_str).collect())
                .unwrap_or_default();
            return Err(Failure::usage(format!(
                "--env {name}: {} has no [env.{name}]; its environments: {}",
                file.display(),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(" ")
                }
            )));
        };
        let vars: Vec<(String, toml::Value)> = env
            .get("vars")
            .and_then(toml::Value::as_table)
            .map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let required_secrets = env
            .get("secrets")
            .and_then(|s| s.get("required"))
            .and_then(toml::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(toml::Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let mut problems = Vec::new();
        // wrangler: `vars` is not inherited; a top-level one is not seen.
        if let Some(top) = doc.get("vars").and_then(toml::Value::as_table) {
            for key in top.keys() {
                if !vars.iter().any(|(k, _)| k == key) {
                    problems.push(Problem::warn(
                        key,
                        None,
                        &format!(
                            "set in the top-level [vars] only, which wrangler does not give to [env.{name}]"
                        ),
                        &format!("the router does not see it: set it in [env.{name}.vars]"),
                    ));
                }
            }
        }
        let secrets = config::secrets();
        for (key, value) in &vars {
            let secret = secrets.contains(&key.as_str());
            if secret {
                problems.push(Problem::error(
                    key,
                    None,
                    "a secret in [vars]: kept in wrangler.toml and shown in plain text",
                    &format!("remove it and set it with `wrangler secret put {key} --env {name}`"),
                ));
            } else if !value.is_str() {
                problems.push(Problem::warn(
                    key,
                    Some(serde_json::to_string(value).unwrap_or_default().as_str()),
                    &format!(
                        "a TOML {}, not a string: the Worker gets a {}, which the router does not read",
                        value.type_str(),
                        value.type_str()
                    ),
                    "the router treats it as not set: quote the value",
                ));
            }
        }
        Ok(Environment {
            vars,
            required_secrets,
            problems,
        })
    }
}

/// Names in `[vars]` the router does not read: a misspelt name has no
/// effect (and the setting it meant keeps its default).
fn name_problems(vars: &[(String, toml::Value)]) -> Vec<Problem> {
    let known: Vec<&str> = config::settings().iter().map(|s| s.name).collect();
    vars.iter()
        .filter(|(name, _)| !known.contains(&name.as_str()))
        .map(|(name, _)| {
            let nearest = known
                .iter()
                .map(|known| (distance(name, known), *known))
                .min();
            let instead = match nearest {
                Some((d, known)) if d <= 3 => {
                    format!("it has no effect (did you mean {known}?)")
                }
                _ => "it has no effect".to_string(),
            };
            Problem::warn(name, None, "not a setting the router reads", &instead)
        })
        .collect()
}

/// `GITLAB_RULES_CONFIG` names a ruleset of rules/ that compiles: the
/// worker has every rules/*.json compiled in, by name.
fn ruleset_problem(config: &Config, dir: &DirArg) -> Option<Problem> {
    const INSTEAD: &str = "every request goes to the legacy cell";
    let Some(name) = config.rules_config.as_deref() else {
        return Some(Problem::error(RULES_CONFIG.name, None, "not set", INSTEAD));
    };
    unknown_ruleset(RULES_CONFIG.name, name, dir, INSTEAD)
}

/// `GITLAB_SHADOW_RULES_CONFIG`, when set, names a ruleset of rules/ that
/// compiles (else no shadow runs), and not the active one (which would
/// agree with itself on every request).
fn shadow_problem(config: &Config, dir: &DirArg) -> Option<Problem> {
    let name = config.shadow_rules_config.as_deref()?;
    if config.rules_config.as_deref() == Some(name) {
        return Some(Problem::note(
            SHADOW_RULES_CONFIG.name,
            Some(name),
            "the active ruleset itself",
            "every evaluated request agrees",
        ));
    }
    unknown_ruleset(SHADOW_RULES_CONFIG.name, name, dir, "no shadow evaluation")
}

/// Why `setting`'s value `name` is not a ruleset of rules/ that compiles,
/// and what the router does `instead`; `None` when it is.
fn unknown_ruleset(setting: &str, name: &str, dir: &DirArg, instead: &str) -> Option<Problem> {
    let wrong = if name.contains('/') || name.contains('.') {
        "not a ruleset name (the file stem in rules/)".to_string()
    } else {
        match rules::load_arg(&dir.dir(), name) {
            Ok(_) => return None,
            Err(Failure::Data(e) | Failure::Usage(e)) => e,
        }
    };
    Some(Problem::error(setting, Some(name), &wrong, instead))
}

/// Edit distance between two names (for "did you mean").
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut next = Vec::with_capacity(row.len());
        next.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let up = row.get(j + 1).copied().unwrap_or(usize::MAX);
            let diag = row.get(j).copied().unwrap_or(usize::MAX);
            let left = next.last().copied().unwrap_or(usize::MAX);
            let cost = usize::from(ca != *cb);
            next.push(
                up.saturating_add(1)
                    .min(left.saturating_add(1))
                    .min(diag.saturating_add(cost)),
            );
        }
        row = next;
    }
    row.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML: &str = r#"
name = "w"
[vars]
GITLAB_PROXY_HOST = "top.example"
GITLAB_ENVIRONMENT = "top"
[env.staging]
name = "w-staging"
[env.staging.vars]
GITLAB_RULES_CONFIG = "cells"
GITLAB_PROXY_HOST = "legacy.example"
GITLAB_TOPOLOGY_TIMEOUT_MS = 500
GITLAB_ROUTER_SIGNING_KEY = "never-shown"
GITLAB_ROUTER_SIGNING_POLIC = "required"
[env.staging.secrets]
required = ["GITLAB_SMOKE_TEST_SECRET", "OTHER"]
[env.dev]
"#;

    #[test]
    fn an_environment_is_read_as_wrangler_reads_it() {
        let env = Environment::read(TOML, Path::new("w.toml"), "staging").unwrap();
        assert_eq!(env.vars.len(), 5);
        assert_eq!(env.required_secrets, ["GITLAB_SMOKE_TEST_SECRET", "OTHER"]);
        let text: Vec<String> = env.problems.iter().map(ToString::to_string).collect();
        // Top-level vars are not inherited: the one staging lacks is named.
        assert!(text
            .iter()
            .any(|p| p.starts_with("GITLAB_ENVIRONMENT: set in the top-level [vars] only")));
        assert!(!text.iter().any(|p| p.starts_with("GITLAB_PROXY_HOST")));
        assert!(text
            .iter()
            .any(|p| p.starts_with("GITLAB_TOPOLOGY_TIMEOUT_MS=\"500\": a TOML integer")));
        assert!(text
            .iter()
            .any(|p| p.starts_with("GITLAB_ROUTER_SIGNING_KEY: a secret in [vars]")));
        assert!(text.iter().all(|p| !p.contains("never-shown")), "{text:?}");

        let dev = Environment::read(TOML, Path::new("w.toml"), "dev").unwrap();
        assert!(dev.vars.is_empty());
        assert_eq!(dev.problems.len(), 2, "both top-level vars are lost");
    }

    #[test]
    fn an_unknown_environment_is_a_usage_error_naming_the_known_ones() {
        match Environment::read(TOML, Path::new("w.toml"), "prod") {
            Err(Failure::Usage(m)) => {
                assert!(m.contains("has no [env.prod]; its environments: "), "{m}");
                assert!(m.contains("staging") && m.contains("dev"), "{m}");
            }
            _ => panic!("prod was accepted"),
        }
        assert!(matches!(
            Environment::read("x = [", Path::new("w.toml"), "staging"),
            Err(Failure::Data(_))
        ));
    }

    #[test]
    fn a_misspelt_name_is_named_with_the_nearest_setting() {
        let vars = vec![
            (
                "GITLAB_ROUTER_SIGNING_POLIC".to_string(),
                toml::Value::from("required"),
            ),
            ("SOMETHING_ELSE".to_string(), toml::Value::from("x")),
            ("GITLAB_PROXY_HOST".to_string(), toml::Value::from("x")),
        ];
        let problems = name_problems(&vars);
        assert_eq!(problems.len(), 2);
        assert_eq!(
            problems[0].instead,
            "it has no effect (did you mean GITLAB_ROUTER_SIGNING_POLICY?)"
        );
        assert_eq!(problems[1].instead, "it has no effect");
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
    }
}
