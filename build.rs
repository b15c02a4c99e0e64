//! Compiles every ruleset in `rules/` into the worker: each is parsed and
//! its regexes compiled here, so an invalid ruleset fails the build with a
//! message naming the file, the rule and the problem.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let rules_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
    println!("cargo:rerun-if-changed={}", rules_dir.display());
    let mut entries: Vec<_> = std::fs::read_dir(&rules_dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", rules_dir.display()))
        .map(|e| e.expect("readable rules/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    entries.sort();

    let mut failures = Vec::new();
    let mut table = String::from("/// Rulesets compiled into the worker: (name, JSON).\npub static RULESETS: &[(&str, &str)] = &[\n");
    for path in &entries {
        println!("cargo:rerun-if-changed={}", path.display());
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("UTF-8 file name");
        let json = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        if let Err(e) = router_core::Ruleset::from_json(name, &json) {
            failures.push(format!("rules/{name}.json: {e}"));
        }
        writeln!(
            table,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    table.push_str("];\n");
    if !failures.is_empty() {
        for f in &failures {
            println!("cargo:warning={f}");
        }
        panic!("invalid rulesets:\n{}", failures.join("\n"));
    }
    let out = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("rulesets.rs");
    std::fs::write(out, table).expect("write rulesets.rs");
}
