//! Finding and loading rulesets: `NAME` means `rules/NAME.json`, anything
//! that looks like a path is a file.

use std::path::{Path, PathBuf};

use router_core::Ruleset;

use crate::cli::{Failure, Outcome};

/// Where `rules/` is: `--rules-dir`, else `$RULESCTL_RULES_DIR`, else the
/// nearest `rules/` directory in the working directory or above it.
#[derive(Debug, Clone, Default)]
pub struct RulesDir {
    explicit: Option<PathBuf>,
}

/// `--rules-dir`, shared by the commands that look rulesets up by name.
#[derive(clap::Args)]
pub struct DirArg {
    /// Where NAMEs are looked up [default: $RULESCTL_RULES_DIR or the
    /// nearest rules/]
    #[arg(long = "rules-dir", value_name = "DIR")]
    rules_dir: Option<String>,
}

impl DirArg {
    pub fn dir(&self) -> RulesDir {
        RulesDir::new(self.rules_dir.clone())
    }
}

impl RulesDir {
    pub fn new(explicit: Option<String>) -> RulesDir {
        let explicit = explicit
            .or_else(|| {
                std::env::var("RULESCTL_RULES_DIR")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
            .map(PathBuf::from);
        RulesDir { explicit }
    }

    /// The directory, as a path relative to the working directory when it
    /// was found by looking upwards (`rules`, `../rules`, ...).
    pub fn locate(&self) -> Outcome<PathBuf> {
        if let Some(dir) = &self.explicit {
            return if dir.is_dir() {
                Ok(dir.clone())
            } else {
                Err(Failure::data(format!(
                    "rules directory {} does not exist",
                    dir.display()
                )))
            };
        }
        let cwd = std::env::current_dir()
            .map_err(|e| Failure::data(format!("cannot read the working directory: {e}")))?;
        let mut relative = PathBuf::new();
        for dir in cwd.ancestors() {
            if dir.join("rules").is_dir() {
                return Ok(relative.join("rules"));
            }
            relative.push("..");
        }
        Err(Failure::data(format!(
            "no rules/ directory in {} or above it: give a file path, --rules-dir DIR or RULESCTL_RULES_DIR",
            cwd.display()
        )))
    }

    /// Every `*.json` in the rules directory, sorted by name.
    pub fn all(&self) -> Outcome<Vec<PathBuf>> {
        let dir = self.locate()?;
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| Failure::data(format!("cannot list {}: {e}", dir.display())))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(Failure::data(format!(
                "no rulesets (*.json) in {}",
                dir.display()
            )));
        }
        Ok(files)
    }

    /// The file a command-line argument names.
    pub fn resolve(&self, arg: &str) -> Outcome<PathBuf> {
        if arg.is_empty() {
            return Err(Failure::usage("empty ruleset name"));
        }
        if looks_like_path(arg) {
            return Ok(PathBuf::from(arg));
        }
        let dir = self.locate()?;
        Ok(dir.join(format!("{arg}.json")))
    }
}

fn looks_like_path(arg: &str) -> bool {
    arg.contains('/')
        || arg.contains(std::path::MAIN_SEPARATOR)
        || arg.ends_with(".json")
        || arg.starts_with('.')
}

/// A ruleset read from a file, compiled.
pub struct Loaded {
    pub path: PathBuf,
    pub ruleset: Ruleset,
}

impl Loaded {
    pub fn display(&self) -> String {
        self.path.display().to_string()
    }
}

/// The ruleset name used in errors: the file stem (`session_token`).
pub fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Reads and compiles a ruleset. The error names the file and, through
/// the core's error, the rule and field.
pub fn load(path: &Path) -> Outcome<Loaded> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::data(format!("{}: cannot read: {e}", path.display())))?;
    let name = stem(path);
    let ruleset = Ruleset::from_json(&name, &text).map_err(|e| {
        let message = e.to_string();
        // The core's message starts with the ruleset name; the path says it.
        let message = message
            .strip_prefix(&format!("{name}: "))
            .unwrap_or(&message)
            .to_string();
        Failure::data(format!("{}: {message}", path.display()))
    })?;
    Ok(Loaded {
        path: path.to_path_buf(),
        ruleset,
    })
}

/// Resolves and loads a `NAME_OR_FILE` argument.
pub fn load_arg(dir: &RulesDir, arg: &str) -> Outcome<Loaded> {
    let path = dir.resolve(arg)?;
    if !looks_like_path(arg) && !path.exists() {
        let known = dir
            .all()
            .map(|files| files.iter().map(|f| stem(f)).collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        return Err(Failure::data(format!(
            "unknown ruleset {arg:?}: {} does not exist (known: {known})",
            path.display()
        )));
    }
    load(&path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        assert!(looks_like_path("rules/x.json"));
        assert!(looks_like_path("x.json"));
        assert!(looks_like_path("./x"));
        assert!(!looks_like_path("session_token"));
    }
}
