//! The deployment's own KV namespace (`ROUTER_CONTROL`) as rulesctl reads
//! and writes it: through the pinned wrangler, in an environment that
//! wrangler.toml names.

use std::path::{Path, PathBuf};

use crate::cli::{Failure, Outcome};

/// The KV binding's name (`kv_namespaces` in wrangler.toml).
pub const BINDING: &str = "ROUTER_CONTROL";

/// Which KV store wrangler reads and writes, and which wrangler.
#[derive(clap::Args)]
pub struct Kv {
    /// The environment of wrangler.toml whose namespace is used (one that
    /// wrangler.toml names: [env.NAME])
    #[arg(long)]
    pub env: Option<String>,
    /// The local KV store of `wrangler dev` [default: remote]
    #[arg(long)]
    pub local: bool,
    /// The local store's directory (with --local)
    #[arg(long, value_name = "DIR")]
    pub persist_to: Option<String>,
    /// wrangler.toml [default: the nearest wrangler.toml, as wrangler
    /// looks it up]
    #[arg(long, value_name = "FILE")]
    pub config: Option<String>,
    /// The wrangler to run [default: $WRANGLER or the nearest
    /// node_modules/.bin/wrangler]
    #[arg(long, value_name = "PATH")]
    pub wrangler: Option<String>,
}

impl Kv {
    /// The wrangler to run for `what` (e.g. "control show"), once `--env`
    /// is known to name an environment of wrangler.toml.
    pub fn wrangler(&self, what: &str) -> Outcome<Wrangler> {
        let env = self
            .env
            .clone()
            .ok_or_else(|| Failure::usage(format!("{what}: --env is required")))?;
        check_environment(&env, self.config.as_deref(), what)?;
        Ok(Wrangler {
            program: self
                .wrangler
                .as_ref()
                .map_or_else(default_wrangler, PathBuf::from),
            env,
            local: self.local,
            persist_to: self.persist_to.clone(),
            config: self.config.clone(),
        })
    }
}

/// Refuses an `--env` that wrangler.toml does not name (wrangler itself
/// would fall back to the top-level configuration, another namespace).
pub fn check_environment(env: &str, config: Option<&str>, what: &str) -> Outcome<()> {
    let file = match config {
        Some(file) => PathBuf::from(file),
        None => nearest_config().ok_or_else(|| {
            Failure::usage(format!(
                "{what}: no wrangler.toml in the working directory or above it: run from the repository, or name it with --config FILE"
            ))
        })?,
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| Failure::data(format!("{}: cannot read: {e}", file.display())))?;
    let names = environments(&text);
    if names.iter().any(|n| n == env) {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "{what}: --env {env} is not an environment of {} (its environments: {})",
        file.display(),
        names.join(", ")
    )))
}

/// The environments a wrangler.toml names (`[env.NAME]`, `[env.NAME.…]`,
/// `[[env.NAME.…]]`), in order of first appearance.
pub fn environments(toml: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for line in toml.lines() {
        let line = line.trim();
        let Some(inner) = line
            .strip_prefix("[[")
            .or_else(|| line.strip_prefix('['))
            .and_then(|l| l.strip_prefix("env."))
        else {
            continue;
        };
        let name: String = match inner.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next().unwrap_or("").to_string(),
            None => inner
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect(),
        };
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

fn nearest_config() -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors()
        .map(|d| d.join("wrangler.toml"))
        .find(|f| f.is_file())
}

/// How wrangler is run.
pub struct Wrangler {
    pub program: PathBuf,
    pub env: String,
    pub local: bool,
    pub persist_to: Option<String>,
    pub config: Option<String>,
}

impl Wrangler {
    pub fn args(&self, verb: &str, key: &str, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = ["kv", "key", verb, key]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend([
            "--binding".into(),
            BINDING.into(),
            "--env".into(),
            self.env.clone(),
        ]);
        args.push(if self.local { "--local" } else { "--remote" }.into());
        if let Some(dir) = &self.persist_to {
            args.extend(["--persist-to".into(), dir.clone()]);
        }
        if let Some(config) = &self.config {
            args.extend(["--config".into(), config.clone()]);
        }
        args
    }

    pub fn run(&self, args: &[String]) -> Outcome<String> {
        match self.output(args)? {
            (true, stdout, _) => Ok(stdout),
            (false, stdout, stderr) => Err(self.failed(args, &stdout, &stderr)),
        }
    }

    /// Whether wrangler succeeded, its stdout and its stderr.
    fn output(&self, args: &[String]) -> Outcome<(bool, String, String)> {
        let output = std::process::Command::new(&self.program)
            .args(args)
            .env("WRANGLER_SEND_METRICS", "false")
            .output()
            .map_err(|e| Failure::data(format!("cannot run {}: {e}", self.program.display())))?;
        Ok((
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ))
    }

    fn failed(&self, args: &[String], stdout: &str, stderr: &str) -> Failure {
        Failure::data(format!(
            "wrangler {} failed:\n{stdout}{stderr}",
            args.join(" ")
        ))
    }

    /// The text under `key`; `None` when the key is absent.
    pub fn get(&self, key: &str) -> Outcome<Option<String>> {
        let args = self.args("get", key, &["--text"]);
        let (ok, stdout, stderr) = self.output(&args)?;
        if ok {
            // The local store: wrangler says so on stdout, exit 0.
            return Ok(match stdout.trim() {
                "Value not found" => None,
                _ => Some(stdout.trim_end_matches('\n').to_string()),
            });
        }
        // The remote store: wrangler fails with the API's 404 for the key
        // ("Failed to fetch …/values/<key> - 404: Not Found").
        if is_absent_remotely(&stderr) || is_absent_remotely(&stdout) {
            return Ok(None);
        }
        Err(self.failed(&args, &stdout, &stderr))
    }

    /// Where it reads and writes, for messages.
    pub fn place(&self) -> String {
        format!(
            "{} {} namespace of --env {}",
            if self.local {
                "the local"
            } else {
                "the remote"
            },
            BINDING,
            self.env
        )
    }
}

/// Whether wrangler's output says the remote store has no such key.
fn is_absent_remotely(output: &str) -> bool {
    output
        .lines()
        .any(|l| l.contains("Failed to fetch") && l.contains("/values/") && l.contains(" - 404"))
}

fn default_wrangler() -> PathBuf {
    if let Some(w) = std::env::var_os("WRANGLER") {
        return PathBuf::from(w);
    }
    let mut dir = std::env::current_dir().ok();
    while let Some(d) = dir {
        let candidate = d.join("node_modules/.bin/wrangler");
        if candidate.exists() {
            return candidate;
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    PathBuf::from("wrangler")
}

/// Milliseconds since the Unix epoch on this machine's clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_404_is_an_absent_key() {
        assert!(is_absent_remotely(
            "\u{2718} [ERROR] Failed to fetch https://api.cloudflare.com/client/v4/accounts/a/storage/kv/namespaces/n/values/control - 404: Not Found\n"
        ));
        assert!(!is_absent_remotely(
            "Failed to fetch https://api.cloudflare.com/client/v4/accounts/a/storage/kv/namespaces/n/values/control - 403: Forbidden"
        ));
        assert!(!is_absent_remotely("Authentication error [code: 10000]"));
    }

    #[test]
    fn environments_are_the_env_tables() {
        let toml = r#"
name = "x"
[env.dev]
name = "x-dev"
[env.dev.vars]
A = "1"
[env.production]
[env.production.vars]
[[env.staging.kv_namespaces]]
binding = "ROUTER_CONTROL"
[env."registry-production"]
# [env.commented]
[vars]
"#;
        assert_eq!(
            environments(toml),
            ["dev", "production", "staging", "registry-production"]
        );
    }

    #[test]
    fn the_repository_wrangler_toml_names_its_environments() {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wrangler.toml"),
        )
        .unwrap();
        assert_eq!(
            environments(&text),
            [
                "dev",
                "staging",
                "production",
                "registry-staging",
                "registry-production"
            ]
        );
    }
}
