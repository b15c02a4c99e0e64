//! What the integration tests share: the built `rulesctl` run in the
//! repository or in a temporary directory, and what it printed.
// Each test file is its own crate and uses only some of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

/// The repository root (where rules/ is).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// A finished `rulesctl`'s exit code and output; it must not have
    /// panicked.
    pub fn of(output: std::process::Output) -> Run {
        let run = Run {
            code: output.status.code().expect("exit code, not a signal"),
            stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
            stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
        };
        assert_no_panic(&run);
        run
    }

    pub fn stdout_has(&self, needle: &str) {
        assert!(
            self.stdout.contains(needle),
            "stdout lacks {needle:?}:\n{}",
            self.stdout
        );
    }

    pub fn stderr_has(&self, needle: &str) {
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}:\n{}",
            self.stderr
        );
    }

    /// A failure with a message on stderr, nothing on stdout, and no panic.
    pub fn assert_fails(&self, code: i32, needle: &str) {
        assert_eq!(self.code, code, "exit code; stderr: {}", self.stderr);
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}:\n{}",
            self.stderr
        );
        assert!(
            self.stdout.is_empty(),
            "stdout should be empty: {}",
            self.stdout
        );
        assert_no_panic(self);
    }

    pub fn json(&self) -> Value {
        assert_eq!(self.code, 0, "stderr: {}", self.stderr);
        assert_eq!(
            self.stdout.lines().count(),
            1,
            "one JSON line: {}",
            self.stdout
        );
        serde_json::from_str(&self.stdout).expect("stdout is JSON")
    }
}

pub fn assert_no_panic(run: &Run) {
    assert!(
        !run.stderr.contains("panicked") && !run.stderr.contains("RUST_BACKTRACE"),
        "panic output: {}",
        run.stderr
    );
}

pub fn rulesctl_in(dir: &Path, args: &[&str]) -> Run {
    Run::of(
        Command::new(env!("CARGO_BIN_EXE_rulesctl"))
            .args(args)
            .current_dir(dir)
            .env_remove("RULESCTL_RULES_DIR")
            .output()
            .expect("run rulesctl"),
    )
}

pub fn rulesctl(args: &[&str]) -> Run {
    rulesctl_in(&repo(), args)
}

/// A temporary directory with a rules/ subdirectory, removed on drop.
pub struct Temp(pub PathBuf);

impl Temp {
    pub fn new() -> Temp {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rulesctl-test-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("rules")).expect("temp dir");
        Temp(dir)
    }

    pub fn write(&self, relative: &str, text: &str) -> String {
        let path = self.0.join(relative);
        std::fs::write(&path, text).expect("write temp file");
        path.to_string_lossy().into_owned()
    }

    pub fn rule(&self, name: &str, ruleset: &Value) -> String {
        self.write(&format!("rules/{name}.json"), &ruleset.to_string())
    }

    pub fn run(&self, args: &[&str]) -> Run {
        rulesctl_in(&self.0, args)
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
