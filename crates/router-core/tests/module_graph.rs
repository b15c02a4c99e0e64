//! The core's layout is its request's way: leaves, then the phases in the
//! order a request meets them (select, resolve, route, forward), then the
//! isolate. This test reads `src/` and fails when a module imports a later
//! phase, when modules form an import cycle at any depth, or when a new
//! top-level module is not given a phase here.
//!
//! It reads paths, not types: `crate::a::b`, `use crate::{a, b}` and
//! `super::` in non-test code (test modules and `tests.rs` and
//! `*_tests.rs` files may reach anywhere).
//!
//! The edge (the Worker crate's `src/`, two folders up) is read the same
//! way: no import cycle at any depth, and no module reaches into its crate
//! root, which holds only the exports the entry calls.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module and its phase; a module may import its own phase
/// and earlier ones.
const PHASES: &[(&str, &[&str])] = &[
    (
        "leaf",
        &[
            "address",
            "base64_codec",
            "decision",
            "disagreement",
            "error",
            "fields",
            "hex",
            "input",
            "json",
            "log",
            "metrics",
            "out_of_line",
            "platform",
            "question",
            "request",
            "trace",
            "wire",
        ],
    ),
    ("select", &["select"]),
    ("resolve", &["resolve"]),
    ("route", &["route"]),
    ("forward", &["forward"]),
    ("isolate", &["config", "control", "isolate"]),
    ("tests", &["testutil"]),
];

type Module = Vec<String>;

fn phase_of(top: &str) -> Option<usize> {
    PHASES.iter().position(|(_, ms)| ms.contains(&top))
}

/// `a/b/mod.rs` and `a/b.rs` are `a::b`; `lib.rs` is the root.
fn module_of(rel: &Path) -> Module {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The source without comments and without `#[cfg(test)] mod … { … }`.
fn code_of(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let block = trimmed
            .find('{')
            .filter(|&b| trimmed.find(';').is_none_or(|e| b < e));
        if trimmed.starts_with("mod ") && block.is_some() {
            let open = after.find('{').unwrap();
            let mut depth = 0;
            let mut end = after.len();
            for (i, c) in after[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            rest = &after[end..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0 && s.as_bytes()[0].is_ascii_lowercase()).then(|| &s[..end])
}

/// The modules `code` (of module `me`) names.
fn references(me: &Module, code: &str) -> BTreeSet<Module> {
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let mut rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a::X, b}`: each first segment.
            let inner = &group[..group.find("};").unwrap_or(group.len())];
            for item in inner.split(',') {
                if let Some(name) = ident_at(item.trim()) {
                    out.insert(vec![name.to_string()]);
                }
            }
            continue;
        }
        let mut path = Vec::new();
        while let Some(name) = ident_at(rest) {
            path.push(name.to_string());
            rest = &rest[name.len()..];
            match rest.strip_prefix("::") {
                Some(r) => rest = r,
                None => break,
            }
        }
        // `crate::RequestParts` and the like: the root's re-exports of leaves.
        if !path.is_empty() {
            out.insert(path);
        }
    }
    for (i, _) in code.match_indices("super::") {
        if i >= 2 && &code[i - 2..i] == "::" {
            continue;
        }
        let mut rest = &code[i..];
        let mut base = me.clone();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        if let Some(name) = ident_at(rest) {
            base.push(name.to_string());
            out.insert(base);
        }
    }
    out
}

/// Every non-test module of `src` and the modules it names.
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<Module, BTreeSet<Module>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, src, out);
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.extension().is_none_or(|e| e != "rs") || name.ends_with("tests.rs") {
                continue;
            }
            let me = module_of(rel);
            let code = code_of(&std::fs::read_to_string(&path).unwrap());
            out.insert(me.clone(), references(&me, &code));
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// The edges between modules cut at `depth` segments, self-edges dropped.
fn edges_at(
    graph: &BTreeMap<Module, BTreeSet<Module>>,
    depth: usize,
) -> BTreeMap<Module, BTreeSet<Module>> {
    let known: BTreeSet<Module> = graph.keys().cloned().collect();
    let cut = |m: &Module| m[..m.len().min(depth)].to_vec();
    let mut out: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (from, tos) in graph {
        if from.is_empty() {
            continue;
        }
        for to in tos {
            // Only paths into the crate's own modules (not items of the root).
            let Some(len) = (1..=to.len()).rev().find(|&n| known.contains(&to[..n])) else {
                continue;
            };
            let (a, b) = (cut(from), cut(&to[..len].to_vec()));
            if a != b && !b.is_empty() && !b.starts_with(&a) && !a.starts_with(&b) {
                out.entry(a).or_default().insert(b);
            }
        }
    }
    out
}

/// The import cycles (strongly connected components of more than one).
fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<String>> {
    fn reach(edges: &BTreeMap<Module, BTreeSet<Module>>, from: &Module) -> BTreeSet<Module> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for n in edges.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    }
    let mut out: Vec<Vec<String>> = Vec::new();
    for m in edges.keys() {
        let from_m = reach(edges, m);
        if !from_m.contains(m) {
            continue;
        }
        let mut comp: Vec<String> = from_m
            .iter()
            .filter(|n| reach(edges, n).contains(m))
            .map(|n| n.join("::"))
            .collect();
        comp.sort();
        if !out.contains(&comp) {
            out.push(comp);
        }
    }
    out
}

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_top_level_module_has_a_phase() {
    let g = graph(&src());
    let unplaced: Vec<String> = g
        .keys()
        .filter(|m| m.len() == 1 && phase_of(&m[0]).is_none())
        .map(|m| m[0].clone())
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules without a phase in tests/module_graph.rs PHASES: {unplaced:?}"
    );
}

#[test]
fn no_module_imports_a_later_phase() {
    let edges = edges_at(&graph(&src()), 1);
    let mut wrong = Vec::new();
    for (from, tos) in &edges {
        let (Some(a), true) = (phase_of(&from[0]), true) else {
            continue;
        };
        for to in tos {
            if let Some(b) = phase_of(&to[0]) {
                if b > a {
                    wrong.push(format!(
                        "{} ({}) imports {} ({})",
                        from[0], PHASES[a].0, to[0], PHASES[b].0
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "later phases imported: {wrong:#?}");
}

/// Fails on an import cycle in `g` at any depth.
fn assert_no_cycle(g: &BTreeMap<Module, BTreeSet<Module>>, dir: &str) {
    let deepest = g.keys().map(Vec::len).max().unwrap_or(1);
    for depth in 1..=deepest {
        let found = cycles(&edges_at(g, depth));
        assert!(
            found.is_empty(),
            "import cycles in {dir} at depth {depth}: {found:?}"
        );
    }
}

#[test]
fn no_import_cycle_at_any_depth() {
    assert_no_cycle(&graph(&src()), "src/");
}

#[test]
fn the_reader_sees_the_imports_it_must() {
    // The checks above are only as good as this reader: a module of each
    // phase, with imports the reader must find.
    let g = graph(&src());
    // What a top-level module and everything under it names.
    let of = |m: &str| -> BTreeSet<Module> {
        g.iter()
            .filter(|(k, _)| k.first().is_some_and(|f| f == m))
            .flat_map(|(_, v)| v.iter().cloned())
            .collect()
    };
    let firsts = |m: &str| {
        of(m)
            .into_iter()
            .map(|p| p[0].clone())
            .collect::<BTreeSet<_>>()
    };
    assert!(firsts("route").contains("select"), "{:?}", of("route"));
    assert!(firsts("route").contains("resolve"));
    assert!(firsts("forward").contains("route"));
    // `super::` from a folder's file lands on its siblings.
    let compile = g
        .get(&vec!["select".to_string(), "compile".to_string()])
        .unwrap();
    assert!(compile
        .iter()
        .any(|m| m.starts_with(&["select".into(), "pattern".into()])));
    // A planted cycle is found.
    let mut planted = g.clone();
    planted
        .get_mut(&vec!["select".to_string()])
        .unwrap()
        .insert(vec!["forward".to_string()]);
    assert!(!cycles(&edges_at(&planted, 1)).is_empty());
}

/// The edge's `src/` (the `gitlab-http-router` package at the workspace's
/// root).
fn edge_src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../src")
}

/// What the edge's modules name of its crate root (`crate::item` where
/// `item` is no module): `"module -> item"`.
fn root_reaches(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    let known: BTreeSet<&str> = graph
        .keys()
        .filter_map(|m| m.first())
        .map(String::as_str)
        .collect();
    graph
        .iter()
        .filter(|(from, _)| !from.is_empty())
        .flat_map(|(from, tos)| {
            tos.iter()
                .filter(|to| to.first().is_some_and(|t| !known.contains(t.as_str())))
                .map(move |to| format!("{} -> {}", from.join("::"), to.join("::")))
        })
        .collect()
}

#[test]
fn the_edge_has_no_import_cycle_and_no_module_reaches_into_its_root() {
    let g = graph(&edge_src());
    assert_no_cycle(&g, "the edge's src/");
    let reaches = root_reaches(&g);
    assert!(
        reaches.is_empty(),
        "modules of src/ that reach into its crate root (lib.rs holds only the entry's exports): {reaches:?}"
    );
}

#[test]
fn the_reader_sees_the_edges_imports() {
    let g = graph(&edge_src());
    let isolate = g.get(&vec!["isolate".to_string()]).unwrap();
    // `use crate::control::{self, Controls}` and `use crate::{clock, log}`.
    assert!(
        isolate.contains(&vec!["control".to_string()]),
        "{isolate:?}"
    );
    assert!(isolate.contains(&vec!["log".to_string()]), "{isolate:?}");
    // The tests' files are not read.
    assert!(!g.contains_key(&vec!["wasm_tests".to_string()]));
    // A planted cycle and a planted reach into the root are found.
    let mut planted = g.clone();
    planted
        .get_mut(&vec!["control".to_string()])
        .unwrap()
        .insert(vec!["isolate".to_string(), "Isolate".to_string()]);
    assert!(!cycles(&edges_at(&planted, 1)).is_empty());
    let mut planted = g.clone();
    planted
        .get_mut(&vec!["start".to_string()])
        .unwrap()
        .insert(vec!["made_isolate".to_string()]);
    assert_eq!(root_reaches(&planted), ["start -> made_isolate"]);
}
