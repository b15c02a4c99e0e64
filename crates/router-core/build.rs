//! Compiles the reserved top-level routes (`rules/reserved_top_level_routes.txt`)
//! into the crate: the list is read strictly (a word without a source, or
//! any other slip, fails the build with its line) and its words are written
//! as a sorted table, `WORDS`, so the router never parses it at run time.

use std::fmt::Write as _;
use std::path::Path;

// The list's own parser; the tools use the rest of it.
#[allow(dead_code)]
#[path = "src/select/reserved/list.rs"]
mod list;

fn main() {
    // Read when the script runs, not baked in when it was compiled: cargo
    // may reuse this script's binary for a copy of the crate elsewhere (a
    // test that copies the project and shares the target directory).
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let path = Path::new(&dir).join("../../rules/reserved_top_level_routes.txt");
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let list = list::ReservedList::parse(&text).unwrap_or_else(|e| panic!("rules/{e}"));
    let mut words: Vec<&str> = list
        .sources
        .iter()
        .flat_map(|s| s.words.iter().copied())
        .collect();
    words.sort_unstable();
    words.dedup();
    let mut out = String::from("static WORDS: &[&str] = &[\n");
    for word in words {
        writeln!(out, "    {word:?},").unwrap();
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("reserved_words.rs");
    std::fs::write(dest, out).expect("write reserved_words.rs");
}
