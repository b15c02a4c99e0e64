//! A demo cell serving a real Git repository over smart HTTP, driven by the
//! real `git` CLI on 127.0.0.1 (no proxy in between).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "devstack-gittest-{what}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the `git` CLI isolated from the machine's configuration: no system
/// config, `HOME` in a temp dir, no prompts, a fixed identity.
fn git(home: &Path, cwd: &Path, args: &[&str]) -> Output {
    git_with_env(home, cwd, args, &[])
}

/// [`git`] with these variables set besides the usual ones.
fn git_with_env(home: &Path, cwd: &Path, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("git");
    cmd.current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .args([
            "-c",
            "user.name=Devstack Test",
            "-c",
            "user.email=test@localhost",
        ])
        .envs(vars.iter().copied())
        .args(args);
    cmd.output().expect("run git")
}

/// `git` that must succeed; returns its trimmed stdout.
fn git_ok(home: &Path, cwd: &Path, args: &[&str]) -> String {
    let out = git(home, cwd, args);
    assert!(
        out.status.success(),
        "git {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `devstack up` with one demo cell (id 2) serving `cell2-group/demo`.
fn git_cell() -> (Proc, String) {
    let cfg = temp_config(
        r#"
[[cells]]
id = 2
listen = "127.0.0.1:0"
routes = ["cell2-group"]
git_repositories = ["cell2-group/demo"]
"#,
    );
    let p = Proc::start(
        &[
            "up",
            "--config",
            cfg.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ],
        2,
    );
    let _ = std::fs::remove_file(cfg);
    let addr = p.ready_of("cell", Some("2"))["addr"]
        .as_str()
        .unwrap()
        .to_string();
    (p, addr)
}

/// A file of `len` pseudo-random (incompressible) bytes.
fn noise(len: usize) -> Vec<u8> {
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

#[tokio::test]
async fn git_clone_push_and_fetch_through_http_backend() {
    let (mut p, addr) = git_cell();
    let home = TempDir::new("home");
    let work = TempDir::new("work");
    let h = &home.0;
    let url = format!("http://{addr}/cell2-group/demo.git");

    // Clone: the initial commit's README.
    git_ok(h, &work.0, &["clone", "--quiet", &url, "one"]);
    let one = work.0.join("one");
    let readme = std::fs::read_to_string(one.join("README.md")).unwrap();
    assert!(readme.contains("cell2-group/demo"), "{readme}");
    assert_eq!(
        git_ok(h, &one, &["rev-parse", "--abbrev-ref", "HEAD"]),
        "main"
    );
    assert_eq!(git_ok(h, &one, &["rev-list", "--count", "HEAD"]), "1");

    // Push a commit with a 3 MB incompressible file: more than git's 1 MiB
    // post buffer, so the receive-pack body is sent chunked, without a
    // Content-Length, and streams through the CGI.
    std::fs::write(one.join("change.txt"), "pushed through devstack\n").unwrap();
    std::fs::write(one.join("noise.bin"), noise(3 << 20)).unwrap();
    git_ok(h, &one, &["add", "change.txt", "noise.bin"]);
    git_ok(h, &one, &["commit", "--quiet", "-m", "A change"]);
    git_ok(h, &one, &["push", "--quiet", "origin", "main"]);
    let pushed = git_ok(h, &one, &["rev-parse", "HEAD"]);

    // A second clone sees it.
    git_ok(h, &work.0, &["clone", "--quiet", &url, "two"]);
    let two = work.0.join("two");
    assert_eq!(git_ok(h, &two, &["rev-parse", "HEAD"]), pushed);
    assert_eq!(
        std::fs::read_to_string(two.join("change.txt")).unwrap(),
        "pushed through devstack\n"
    );
    assert_eq!(
        std::fs::read(two.join("noise.bin")).unwrap(),
        noise(3 << 20)
    );

    // A fetch with many local commits sends its "have" lines gzipped
    // (Content-Encoding: gzip), which http-backend must inflate. The local
    // commits are dated later than any commit the server has, one second
    // apart: git sends haves newest first, and with dates tied (40 commits
    // made within a second) a common commit could come in the first round
    // of 16, end the negotiation there, and leave the request under the
    // 1 KiB git starts gzipping at.
    for i in 0..40 {
        let date = format!("{} +0000", 4_000_000_000u64 + i);
        let out = git_with_env(
            h,
            &two,
            &[
                "commit",
                "--quiet",
                "--allow-empty",
                "-m",
                &format!("local {i}"),
            ],
            &[("GIT_COMMITTER_DATE", &date), ("GIT_AUTHOR_DATE", &date)],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    git_ok(
        h,
        &one,
        &["commit", "--quiet", "--allow-empty", "-m", "Another"],
    );
    git_ok(h, &one, &["push", "--quiet", "origin", "main"]);
    let another = git_ok(h, &one, &["rev-parse", "HEAD"]);
    git_ok(h, &two, &["fetch", "--quiet", "origin"]);
    assert_eq!(git_ok(h, &two, &["rev-parse", "origin/main"]), another);

    // Git requests count in the cell's stats like any other, and both
    // request body shapes were really exercised.
    let stats = get(addr.parse().unwrap(), "/_stats").await.json();
    let last = stats["last_requests"].as_array().unwrap();
    let posts = |service: &str| -> Vec<&Value> {
        last.iter()
            .filter(|r| {
                r["method"] == "POST" && r["path"] == format!("/cell2-group/demo.git/{service}")
            })
            .collect()
    };
    assert!(
        posts("git-receive-pack")
            .iter()
            .any(|r| r["headers"]["transfer-encoding"] == "chunked"),
        "no chunked receive-pack: {last:?}"
    );
    assert!(
        posts("git-upload-pack")
            .iter()
            .any(|r| r["headers"]["content-encoding"] == "gzip"),
        "no gzipped upload-pack: {last:?}"
    );
    assert!(stats["requests"].as_u64().unwrap() >= last.len() as u64);
    assert_eq!(stats["in_flight"], 0);

    // SIGTERM: exit 0 and the repositories' directory is gone.
    let root = std::env::temp_dir().join(format!("devstack-git-{}-cell2", p.pid()));
    assert!(root.join("cell2-group/demo.git").is_dir());
    sigterm(p.pid());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            assert_eq!(status.code(), Some(0));
            break;
        }
        assert!(Instant::now() < deadline, "devstack up did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!root.exists(), "{} left behind", root.display());
}

#[tokio::test]
async fn git_answers_carry_the_cell_header_and_unknown_repositories_404() {
    let (_p, addr) = git_cell();
    let a = addr.parse().unwrap();
    let home = TempDir::new("home");

    // The smart HTTP advertisement, straight from http-backend.
    let r = get(a, "/cell2-group/demo.git/info/refs?service=git-upload-pack").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/x-git-upload-pack-advertisement")
    );
    assert_eq!(r.header("x-demo-cell"), Some("2"));
    assert!(r.body.starts_with(b"001e# service=git-upload-pack\n0000"));
    assert!(String::from_utf8_lossy(&r.body).contains("refs/heads/main"));

    // Without the `.git` suffix too (as GitLab accepts).
    let r = get(a, "/cell2-group/demo/info/refs?service=git-upload-pack").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-demo-cell"), Some("2"));

    // Dumb HTTP: HEAD names the default branch.
    let r = get(a, "/cell2-group/demo.git/HEAD").await;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..], b"ref: refs/heads/main\n");

    // A repository the cell does not have.
    let r = get(a, "/cell2-group/nope.git/info/refs?service=git-upload-pack").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-demo-cell"), Some("2"));
    let out = git(
        &home.0,
        &home.0,
        &["ls-remote", &format!("http://{addr}/cell2-group/nope.git")],
    );
    assert!(
        !out.status.success(),
        "ls-remote of an unknown repository succeeded"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not found"), "{stderr}");

    // The known one lists main.
    let refs = git_ok(
        &home.0,
        &home.0,
        &["ls-remote", &format!("http://{addr}/cell2-group/demo.git")],
    );
    assert!(refs.contains("refs/heads/main"), "{refs}");

    // Everything else is still the JSON echo.
    let r = get(a, "/cell2-group/demo/-/tree/main").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["cell"], "2");
    assert_eq!(r.json()["path"], "/cell2-group/demo/-/tree/main");
}

#[test]
fn up_without_git_fails_fast() {
    // `git` not on PATH: a clear error, exit 2, no ready line.
    let cfg = temp_config(
        "[[cells]]\nid = 2\nlisten = \"127.0.0.1:0\"\ngit_repositories = [\"cell2-group/demo\"]\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_devstack"))
        .args([
            "up",
            "--config",
            cfg.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(cfg);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot run git"), "{stderr}");
}
