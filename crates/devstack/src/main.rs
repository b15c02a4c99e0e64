//! `devstack`: the local Topology Service and demo cells that the router's
//! local stack and end-to-end tests run against. Loopback only.

mod cell;
mod config;
mod git_http;
mod http;
mod sink;
mod topology;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::json;

use crate::config::{parse_listen, Config, DEFAULT_ADMIN_LISTEN, DEFAULT_TOPOLOGY_LISTEN};
use crate::git_http::GitRepos;
use crate::topology::{Directory, Faults};

const USAGE: &str = "\
usage:
  devstack topology --config FILE [--listen ADDR] [--admin-listen ADDR] [--faults JSON]
  devstack cell --id ID [--listen ADDR]
  devstack up --config FILE [--listen ADDR] [--admin-listen ADDR] [--faults JSON]
  devstack sink [--listen ADDR]
  devstack cells --config FILE

`cells` prints the router's GITLAB_CELLS for the config's cells (one JSON
line: id, address, registry_address, session_prefix, health_path) and exits.

Every server prints one JSON ready line to stdout once it listens, e.g.
  {\"ready\":\"topology\",\"addr\":\"127.0.0.1:9096\",\"admin\":\"127.0.0.1:40001\"}
  {\"ready\":\"cell\",\"id\":\"2\",\"addr\":\"127.0.0.1:9102\"}
then logs to stderr. SIGINT/SIGTERM stop it (exit 0). ADDR must be a loopback
IP:port (port 0 = any free port). Defaults: topology --listen from the
config's [topology].listen, else 127.0.0.1:9096; --admin-listen 127.0.0.1:0;
cell --listen 127.0.0.1:9101; sink --listen 127.0.0.1:0.
";

/// `--name value` / `--name=value` options after the subcommand.
struct Args {
    values: HashMap<String, String>,
}

impl Args {
    fn parse(args: &[String], allowed: &[&str]) -> Result<Args, String> {
        let mut values = HashMap::new();
        let mut i = 0;
        while i < args.len() {
            let arg = &args[i];
            let Some(flag) = arg.strip_prefix("--") else {
                return Err(format!("unexpected argument {arg:?}"));
            };
            let (name, value) = match flag.split_once('=') {
                Some((n, v)) => (n.to_string(), v.to_string()),
                None => {
                    i += 1;
                    let v = args
                        .get(i)
                        .ok_or_else(|| format!("--{flag} needs a value"))?;
                    (flag.to_string(), v.clone())
                }
            };
            if !allowed.contains(&name.as_str()) {
                return Err(format!("unknown option --{name}"));
            }
            values.insert(name, value);
            i += 1;
        }
        Ok(Args { values })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    fn require(&self, name: &str) -> Result<&str, String> {
        self.get(name)
            .ok_or_else(|| format!("--{name} is required"))
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match argv.first().map(String::as_str) {
        None | Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            std::process::exit(if argv.is_empty() { 2 } else { 0 });
        }
        Some("cells") => match cells_var(&argv[1..]) {
            Ok(line) => {
                println!("{line}");
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("devstack: {e}");
                std::process::exit(2);
            }
        },
        _ => {}
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = runtime.block_on(async move {
        match run(&argv[0], &argv[1..]).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("devstack: {e}");
                2
            }
        }
    });
    std::process::exit(code);
}

async fn run(cmd: &str, rest: &[String]) -> Result<(), String> {
    // Install the signal handlers before anything is announced, so a signal
    // sent right after a ready line is handled (exit 0).
    let shutdown = shutdown_signal()?;
    // Git repositories created by `up`, removed when the process stops.
    let mut git = Vec::new();
    let started = start(cmd, rest, &mut git).await;
    if started.is_ok() {
        shutdown.await;
        eprintln!("devstack: signal received, stopping");
    }
    for repos in &git {
        repos.remove();
    }
    started
}

/// Starts the servers of one subcommand (they run on spawned tasks).
async fn start(cmd: &str, rest: &[String], git: &mut Vec<Arc<GitRepos>>) -> Result<(), String> {
    match cmd {
        "topology" => {
            let args = Args::parse(rest, &["config", "listen", "admin-listen", "faults"])?;
            let cfg = Config::load(args.require("config")?)?;
            let dir = Directory::new(&cfg, &HashMap::new())?;
            start_topology(&cfg, dir, &args).await?;
        }
        "cell" => {
            let args = Args::parse(rest, &["id", "listen"])?;
            let id = args.require("id")?.to_string();
            if id.is_empty() {
                return Err("--id must not be empty".into());
            }
            let listen = parse_listen(args.get("listen").unwrap_or("127.0.0.1:9101"))?;
            let listener = cell::bind(listen).await?;
            let addr = local_addr(&listener)?;
            cell::serve(id.clone(), listener, None, None);
            http::print_ready(&json!({"ready": "cell", "id": id, "addr": addr.to_string()}));
        }
        "up" => {
            let args = Args::parse(rest, &["config", "listen", "admin-listen", "faults"])?;
            let cfg = Config::load(args.require("config")?)?;
            let mut bound = HashMap::new();
            let mut started = Vec::new();
            for c in &cfg.cells {
                if let Some(l) = &c.listen {
                    let listener = cell::bind(parse_listen(l)?).await?;
                    let addr = local_addr(&listener)?;
                    bound.insert(c.id, addr);
                    started.push((c.id, listener, addr));
                }
            }
            let dir = Directory::new(&cfg, &bound)?;
            // Every repository exists before any ready line is printed.
            let mut repos_of = HashMap::new();
            for c in &cfg.cells {
                if c.listen.is_some() && !c.git_repositories.is_empty() {
                    let repos = Arc::new(GitRepos::create(c.id, &c.git_repositories)?);
                    git.push(repos.clone());
                    repos_of.insert(c.id, repos);
                }
            }
            for (id, listener, addr) in started {
                // Every demo cell answers route learning from the same data.
                let learn = cell::LearnService::new(
                    dir.clone(),
                    cfg.topology.cache_control.clone(),
                    cfg.topology.not_found_cache_control.clone(),
                );
                cell::serve(id.to_string(), listener, repos_of.remove(&id), Some(learn));
                http::print_ready(
                    &json!({"ready": "cell", "id": id.to_string(), "addr": addr.to_string()}),
                );
            }
            start_topology(&cfg, dir, &args).await?;
        }
        "sink" => {
            let args = Args::parse(rest, &["listen"])?;
            let listen = parse_listen(args.get("listen").unwrap_or("127.0.0.1:0"))?;
            let listener = sink::bind(listen).await?;
            let addr = local_addr(&listener)?;
            sink::serve(listener);
            http::print_ready(&json!({"ready": "sink", "addr": addr.to_string()}));
        }
        other => return Err(format!("unknown subcommand {other:?}\n{USAGE}")),
    }
    Ok(())
}

/// The router's `GITLAB_CELLS` for a Topology Service config: every cell
/// at its `address` (else its `listen` address), probed at `/-/readiness`
/// (the demo cell's health path).
fn cells_var(rest: &[String]) -> Result<String, String> {
    let args = Args::parse(rest, &["config"])?;
    let cfg = Config::load(args.require("config")?)?;
    let cells = cfg
        .cells
        .iter()
        .map(|c| {
            let address = c
                .address
                .clone()
                .or_else(|| c.listen.clone())
                .ok_or_else(|| format!("cell {}: neither address nor listen", c.id))?;
            let mut cell = json!({
                "id": c.id,
                "address": address,
                "session_prefix": c.session_prefix(),
                "health_path": "/-/readiness",
            });
            if let Some(registry) = &c.registry_address {
                cell["registry_address"] = json!(registry);
            }
            Ok(cell)
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(serde_json::Value::Array(cells).to_string())
}

async fn start_topology(cfg: &Config, dir: Directory, args: &Args) -> Result<(), String> {
    let listen = parse_listen(
        args.get("listen")
            .or(cfg.topology.listen.as_deref())
            .unwrap_or(DEFAULT_TOPOLOGY_LISTEN),
    )?;
    let admin_listen = parse_listen(
        args.get("admin-listen")
            .or(cfg.topology.admin_listen.as_deref())
            .unwrap_or(DEFAULT_ADMIN_LISTEN),
    )?;
    let mut faults = Faults::default();
    if let Some(f) = args.get("faults") {
        let v: serde_json::Value =
            serde_json::from_str(f).map_err(|e| format!("--faults: invalid JSON: {e}"))?;
        faults.apply(&v).map_err(|e| format!("--faults: {e}"))?;
    }
    let cells = dir.cells.len();
    let started = topology::start(dir, cfg.topology.clone(), listen, admin_listen, faults).await?;
    eprintln!(
        "topology: {cells} cells; classify on {}, admin on {}",
        started.addr, started.admin
    );
    http::print_ready(&json!({
        "ready": "topology",
        "addr": started.addr.to_string(),
        "admin": started.admin.to_string(),
    }));
    Ok(())
}

fn local_addr(l: &tokio::net::TcpListener) -> Result<SocketAddr, String> {
    l.local_addr().map_err(|e| e.to_string())
}

fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
