//! No production function in the core holds more than a phase's step:
//! this test reads `src/` (rustfmt'ed) and fails on a function over
//! [`MAX_LINES`] lines, signature to closing brace. Test code (`tests.rs`
//! files, `#[cfg(test)] mod` blocks, the shared fakes) is not counted.

use std::path::Path;

const MAX_LINES: usize = 120;

/// Each function of `source` that opens a body: its name, first line
/// (1-based) and length in lines. rustfmt closes a body opened at
/// indent `n` with a line of `n` spaces and `}`.
fn functions(source: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = source.lines().collect();
    // Production code ends where the test module starts.
    let end = lines
        .windows(2)
        .position(|w| w[0].starts_with("#[cfg(test)]") && w[1].starts_with("mod "))
        .unwrap_or(lines.len());
    let mut out = Vec::new();
    for (i, line) in lines[..end].iter().enumerate() {
        let code = line.trim_start();
        let indent = &line[..line.len() - code.len()];
        let Some(at) = code.find("fn ") else { continue };
        let head = &code[..at];
        let is_fn = head
            .split_whitespace()
            .all(|w| matches!(w, "pub" | "const" | "async" | "unsafe") || w.starts_with("pub("));
        if !is_fn || code.starts_with("//") {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // The body opens on the signature's last line; a `;` ends a
        // declaration without one.
        let Some(open) = (i..end).find(|&j| {
            let t = lines[j].trim_end();
            t.ends_with('{') || t.ends_with(';')
        }) else {
            continue;
        };
        if lines[open].trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(last) = (open + 1..end).find(|&j| lines[j] == close) {
            out.push((name, i + 1, last - i + 1));
        }
    }
    out
}

fn walk(dir: &Path, src: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, src, out);
            continue;
        }
        let rel = path
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if !rel.ends_with(".rs") || rel.ends_with("tests.rs") || rel == "testutil.rs" {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        for (name, line, length) in functions(&source) {
            if length > MAX_LINES {
                out.push(format!("{rel}:{line} {name}: {length} lines"));
            }
        }
    }
}

#[test]
fn no_production_function_is_over_the_limit() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut over = Vec::new();
    walk(&src, &src, &mut over);
    assert!(
        over.is_empty(),
        "over {MAX_LINES} lines: cut at the seams\n{}",
        over.join("\n")
    );
}

#[test]
fn a_long_function_is_counted_to_its_closing_brace() {
    let body = "    x();\n".repeat(3);
    let source = format!("pub(crate) fn short() -> u8 {{\n{body}}}\n\nfn declared();\n");
    assert_eq!(functions(&source), [("short".to_string(), 1, 5)]);
    let nested =
        format!("impl X {{\n    async fn f(\n        a: u8,\n    ) {{\n{body}    }}\n}}\n");
    assert_eq!(functions(&nested), [("f".to_string(), 2, 7)]);
}
