//! Git over smart HTTP for demo cells: bare repositories created at start
//! in a temporary directory the cell owns, served by running
//! `git http-backend` as a CGI program, one process per request.
//!
//! The request body streams into the CGI's stdin and its stdout streams
//! back as the response (after its header block), so packs are never held
//! in memory here.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::process::{ChildStdout, Command};

use crate::http::{full, header_str, Body};

const CHUNK: usize = 64 * 1024;
/// The CGI header block is small; more than this is a broken CGI.
const MAX_CGI_HEADER: usize = 64 * 1024;
/// Fixed identity and date for the initial commit: no dependency on the
/// machine's git configuration, and the same commit id on every start.
const IDENTITY: [(&str, &str); 6] = [
    ("GIT_AUTHOR_NAME", "devstack"),
    ("GIT_AUTHOR_EMAIL", "devstack@localhost"),
    ("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z"),
    ("GIT_COMMITTER_NAME", "devstack"),
    ("GIT_COMMITTER_EMAIL", "devstack@localhost"),
    ("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z"),
];

/// A cell's repositories: `<root>/<name>.git`, bare.
#[derive(Debug)]
pub struct GitRepos {
    root: PathBuf,
    /// Configured names (`group/project`, no `.git`).
    names: Vec<String>,
}

/// What a request path means for a cell that serves repositories.
#[derive(Debug, PartialEq)]
pub enum GitPath {
    /// A Git HTTP path of one of the cell's repositories: the CGI's
    /// `PATH_INFO` (`/<name>.git/<rest>`).
    Repo(String),
    /// A Git HTTP path (`/<x>.git/info/refs`, …) of a repository the cell
    /// does not have: 404.
    Unknown,
    /// Not a Git path: the usual echo.
    NotGit,
}

impl GitRepos {
    /// Creates a fresh root `<tmp>/devstack-git-<pid>-cell<id>` and each
    /// repository in it: one commit on `main` with a README, pushes
    /// allowed (`http.receivepack`). Blocking: call it before serving.
    pub fn create(cell_id: u64, names: &[String]) -> Result<GitRepos, String> {
        let root =
            std::env::temp_dir().join(format!("devstack-git-{}-cell{cell_id}", std::process::id()));
        if root.exists() {
            std::fs::remove_dir_all(&root)
                .map_err(|e| format!("cannot remove stale {}: {e}", root.display()))?;
        }
        std::fs::create_dir_all(&root)
            .map_err(|e| format!("cannot create {}: {e}", root.display()))?;
        let repos = GitRepos {
            root,
            names: names.to_vec(),
        };
        for name in names {
            if let Err(e) = repos.init(cell_id, name) {
                repos.remove();
                return Err(format!(
                    "cell {cell_id}: cannot create repository {name}: {e}"
                ));
            }
        }
        Ok(repos)
    }

    fn init(&self, cell_id: u64, name: &str) -> Result<(), String> {
        let dir = self.root.join(format!("{name}.git"));
        let dir_str = dir.to_str().ok_or("non-UTF-8 temporary directory")?;
        self.git(
            None,
            &[
                "init",
                "--quiet",
                "--bare",
                "--initial-branch=main",
                dir_str,
            ],
            None,
        )?;
        let readme = format!("# {name}\n\nA demo repository served by devstack cell {cell_id}.\n");
        let blob = self.git(
            Some(&dir),
            &["hash-object", "-w", "--stdin"],
            Some(readme.as_bytes()),
        )?;
        let tree = self.git(
            Some(&dir),
            &["mktree"],
            Some(format!("100644 blob {blob}\tREADME.md\n").as_bytes()),
        )?;
        let commit = self.git(
            Some(&dir),
            &["commit-tree", &tree, "-m", "Initial commit"],
            None,
        )?;
        self.git(
            Some(&dir),
            &["update-ref", "refs/heads/main", &commit],
            None,
        )?;
        self.git(Some(&dir), &["config", "http.receivepack", "true"], None)?;
        eprintln!(
            "cell {cell_id}: git repository {name} at {} (main = {commit})",
            dir.display()
        );
        Ok(())
    }

    /// Runs one git command (blocking) and returns its trimmed stdout.
    fn git(
        &self,
        git_dir: Option<&Path>,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<String, String> {
        use std::io::Write;
        let mut cmd = std::process::Command::new("git");
        cmd.args(args)
            .env_clear()
            .envs(self.base_env())
            .envs(IDENTITY)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(d) = git_dir {
            cmd.env("GIT_DIR", d);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run git (is it installed?): {e}"))?;
        if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(data)
                .map_err(|e| format!("git {}: {e}", args[0]))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("git {}: {e}", args[0]))?;
        if !out.status.success() {
            return Err(format!(
                "git {} failed ({}): {}",
                args[0],
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The environment every git process gets: nothing from the machine's
    /// git configuration (system or global) or the caller's `GIT_*`.
    fn base_env(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        let mut env = vec![
            ("GIT_CONFIG_NOSYSTEM", "1".into()),
            ("GIT_CONFIG_GLOBAL", "/dev/null".into()),
            ("HOME", self.root.clone().into_os_string()),
        ];
        if let Some(path) = std::env::var_os("PATH") {
            env.push(("PATH", path));
        }
        env
    }

    /// Removes the repositories' root directory (at shutdown).
    pub fn remove(&self) {
        if let Err(e) = std::fs::remove_dir_all(&self.root) {
            eprintln!("devstack: cannot remove {}: {e}", self.root.display());
        }
    }

    /// Maps a request path to a repository. Accepted: `/<name>.git/<rest>`
    /// and `/<name>/<rest>` (the name compared case-insensitively) where
    /// `<rest>` is `info/refs`, `git-upload-pack`, `git-receive-pack`,
    /// `HEAD` or `objects/...`.
    pub fn classify(&self, path: &str) -> GitPath {
        let lower = path.to_ascii_lowercase();
        for name in &self.names {
            let name_l = name.to_ascii_lowercase();
            for prefix in [format!("/{name_l}.git/"), format!("/{name_l}/")] {
                if let Some(rest) = lower.strip_prefix(&prefix) {
                    let rest = &path[path.len() - rest.len()..];
                    if is_git_rest(rest) {
                        return GitPath::Repo(format!("/{name}.git/{rest}"));
                    }
                }
            }
        }
        match lower.find(".git/") {
            Some(i) if i > 1 && is_git_rest(&path[i + ".git/".len()..]) => GitPath::Unknown,
            _ => GitPath::NotGit,
        }
    }

    /// Answers one Git HTTP request with `git http-backend`.
    pub async fn serve(
        &self,
        path_info: &str,
        req: Request<Incoming>,
        peer: SocketAddr,
    ) -> Response<Body> {
        match self.run_cgi(path_info, req, peer).await {
            Ok(resp) => resp,
            Err(e) => {
                eprintln!("git http-backend {path_info}: {e}");
                text(StatusCode::BAD_GATEWAY, format!("git http-backend: {e}\n"))
            }
        }
    }

    async fn run_cgi(
        &self,
        path_info: &str,
        req: Request<Incoming>,
        peer: SocketAddr,
    ) -> Result<Response<Body>, String> {
        let (parts, body) = req.into_parts();
        let h = &parts.headers;
        let mut cmd = Command::new("git");
        cmd.arg("http-backend")
            .env_clear()
            .envs(self.base_env())
            .env("GIT_PROJECT_ROOT", &self.root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            // upload-pack requests are buffered by http-backend (default
            // limit 10 MB); big negotiations of a demo repo stay far below.
            .env("GIT_HTTP_MAX_REQUEST_BUFFER", "100M")
            .env("GATEWAY_INTERFACE", "CGI/1.1")
            .env("SERVER_PROTOCOL", "HTTP/1.1")
            .env("REQUEST_METHOD", parts.method.as_str())
            .env("PATH_INFO", path_info)
            .env("QUERY_STRING", parts.uri.query().unwrap_or(""))
            .env("REMOTE_ADDR", peer.ip().to_string());
        let optional = [
            ("CONTENT_TYPE", "content-type"),
            ("CONTENT_LENGTH", "content-length"),
            // git gzips large request bodies; http-backend inflates them.
            ("HTTP_CONTENT_ENCODING", "content-encoding"),
            // `Git-Protocol: version=2`; http-backend passes it on.
            ("HTTP_GIT_PROTOCOL", "git-protocol"),
        ];
        for (var, header) in optional {
            if let Some(v) = header_str(h, header) {
                cmd.env(var, v);
            }
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run git: {e}"))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = child.stdout.take().expect("piped stdout");
        let what = path_info.to_string();
        tokio::spawn(async move {
            // Reap the process; a failure was already told on stderr.
            match child.wait().await {
                Ok(s) if !s.success() => eprintln!("git http-backend {what}: {s}"),
                Ok(_) => {}
                Err(e) => eprintln!("git http-backend {what}: wait: {e}"),
            }
        });
        // Feed the body while the response is read: neither side can block
        // the other. Closing stdin is the end of the request.
        tokio::spawn(async move {
            let mut body = body;
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { break };
                if let Ok(data) = frame.into_data() {
                    if stdin.write_all(&data).await.is_err() {
                        break;
                    }
                }
            }
        });

        let (head, rest) = read_cgi_head(&mut stdout).await?;
        let mut resp = Response::new(
            CgiBody {
                head: Some(rest),
                out: stdout,
                buf: vec![0; CHUNK],
            }
            .boxed(),
        );
        for line in head.lines() {
            let line = line.trim_end_matches('\r');
            let Some((name, value)) = line.split_once(':') else {
                return Err(format!("bad CGI header line {line:?}"));
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("status") {
                let code = value.split(' ').next().unwrap_or("");
                *resp.status_mut() = code
                    .parse::<u16>()
                    .ok()
                    .and_then(|c| StatusCode::from_u16(c).ok())
                    .ok_or_else(|| format!("bad CGI status {value:?}"))?;
            } else {
                let name = HeaderName::from_bytes(name.trim().as_bytes())
                    .map_err(|_| format!("bad CGI header name {name:?}"))?;
                let value = HeaderValue::from_str(value)
                    .map_err(|_| format!("bad CGI header value {value:?}"))?;
                resp.headers_mut().append(name, value);
            }
        }
        Ok(resp)
    }
}

/// The Git HTTP paths inside a repository.
fn is_git_rest(rest: &str) -> bool {
    match rest {
        "info/refs" | "git-upload-pack" | "git-receive-pack" | "HEAD" => true,
        _ => rest.strip_prefix("objects/").is_some_and(|o| {
            !o.is_empty()
                && !o.split('/').any(|s| s.is_empty() || s.starts_with('.'))
                && o.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'-' | b'_'))
        }),
    }
}

/// Reads the CGI header block (up to the first empty line); returns it and
/// the body bytes read past it.
async fn read_cgi_head(out: &mut ChildStdout) -> Result<(String, Bytes), String> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        for sep in [&b"\r\n\r\n"[..], &b"\n\n"[..]] {
            if let Some(i) = buf.windows(sep.len()).position(|w| w == sep) {
                let head = String::from_utf8_lossy(&buf[..i]).into_owned();
                let rest = Bytes::copy_from_slice(&buf[i + sep.len()..]);
                return Ok((head, rest));
            }
        }
        if buf.len() > MAX_CGI_HEADER {
            return Err("CGI header block too long".into());
        }
        let mut chunk = [0u8; 4096];
        let n = out
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading CGI output: {e}"))?;
        if n == 0 {
            return Err("CGI ended before its header block".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The CGI's stdout after its header block, streamed in chunks.
struct CgiBody {
    head: Option<Bytes>,
    out: ChildStdout,
    buf: Vec<u8>,
}

impl hyper::body::Body for CgiBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(head) = self.head.take().filter(|h| !h.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        let this = &mut *self;
        let mut rb = ReadBuf::new(&mut this.buf);
        match Pin::new(&mut this.out).poll_read(cx, &mut rb) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) if rb.filled().is_empty() => Poll::Ready(None),
            Poll::Ready(Ok(())) => {
                Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(rb.filled())))))
            }
            Poll::Ready(Err(e)) => {
                // The body type cannot carry an error: end it (git notices
                // the truncated pack).
                eprintln!("git http-backend: reading output: {e}");
                Poll::Ready(None)
            }
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

/// The answer for a Git path of a repository the cell does not have.
pub fn not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "Repository not found\n".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repos() -> GitRepos {
        GitRepos {
            root: PathBuf::from("/nonexistent"),
            names: vec!["cell2-group/demo".into()],
        }
    }

    #[test]
    fn classify_paths() {
        let r = repos();
        let repo = |p: &str| GitPath::Repo(p.to_string());
        assert_eq!(
            r.classify("/cell2-group/demo.git/info/refs"),
            repo("/cell2-group/demo.git/info/refs")
        );
        assert_eq!(
            r.classify("/Cell2-Group/Demo.git/git-upload-pack"),
            repo("/cell2-group/demo.git/git-upload-pack")
        );
        assert_eq!(
            r.classify("/cell2-group/demo/git-receive-pack"),
            repo("/cell2-group/demo.git/git-receive-pack")
        );
        assert_eq!(
            r.classify("/cell2-group/demo.git/HEAD"),
            repo("/cell2-group/demo.git/HEAD")
        );
        assert_eq!(
            r.classify("/cell2-group/demo.git/objects/info/packs"),
            repo("/cell2-group/demo.git/objects/info/packs")
        );
        assert_eq!(
            r.classify("/cell2-group/other.git/info/refs"),
            GitPath::Unknown
        );
        assert_eq!(r.classify("/x.git/git-upload-pack"), GitPath::Unknown);
        for not_git in [
            "/cell2-group/demo",
            "/cell2-group/demo.git",
            "/cell2-group/demo.git/tree/main",
            "/cell2-group/demo.git/objects/../config",
            "/cell2-group/demo.git/objects/",
            "/cell2-group/demo/-/tree/main",
            "/.git/info/refs",
            "/",
        ] {
            assert_eq!(r.classify(not_git), GitPath::NotGit, "{not_git}");
        }
    }
}
