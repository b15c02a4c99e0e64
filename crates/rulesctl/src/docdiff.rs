//! Old -> new of a stored KV document, as lines an operator reads before a
//! write: both pretty-printed (keys sorted), every line shown, removed
//! lines `- `, added lines `+ `, kept lines two spaces.

use serde_json::Value;

/// The document's text pretty-printed when it is JSON, as it is otherwise.
pub fn pretty(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_string())
}

/// The lines of old -> new (`old` None: nothing stored). Empty when the
/// two read the same.
pub fn diff(old: Option<&str>, new: &str) -> Vec<String> {
    let old = old.map(pretty).unwrap_or_default();
    let new = pretty(new);
    if old == new {
        return Vec::new();
    }
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    // The longest common subsequence, table from the ends; documents are
    // at most 64 KiB: past a few million cells, every line is changed.
    if a.len().saturating_mul(b.len()) > 4_000_000 {
        return a
            .iter()
            .map(|l| format!("- {l}"))
            .chain(b.iter().map(|l| format!("+ {l}")))
            .collect();
    }
    let width = b.len() + 1;
    let mut table = vec![0u32; (a.len() + 1) * width];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            let value = if a.get(i) == b.get(j) {
                table.get((i + 1) * width + j + 1).copied().unwrap_or(0) + 1
            } else {
                let down = table.get((i + 1) * width + j).copied().unwrap_or(0);
                let right = table.get(i * width + j + 1).copied().unwrap_or(0);
                down.max(right)
            };
            if let Some(cell) = table.get_mut(i * width + j) {
                *cell = value;
            }
        }
    }
    let at = |i: usize, j: usize| table.get(i * width + j).copied().unwrap_or(0);
    let mut lines = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                lines.push(format!("  {x}"));
                i += 1;
                j += 1;
            }
            (Some(x), Some(_)) if at(i + 1, j) >= at(i, j + 1) => {
                lines.push(format!("- {x}"));
                i += 1;
            }
            (_, Some(y)) => {
                lines.push(format!("+ {y}"));
                j += 1;
            }
            (Some(x), None) => {
                lines.push(format!("- {x}"));
                i += 1;
            }
            (None, None) => break,
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_lines_are_marked_and_the_rest_kept() {
        let lines = diff(
            Some(r#"{"mode":"normal","purge_generation":3}"#),
            r#"{"mode":"passthrough","note":"INC-1","purge_generation":3}"#,
        );
        assert_eq!(
            lines,
            [
                "  {",
                r#"-   "mode": "normal","#,
                r#"+   "mode": "passthrough","#,
                r#"+   "note": "INC-1","#,
                r#"    "purge_generation": 3"#,
                "  }",
            ]
        );
    }

    #[test]
    fn nothing_stored_is_all_added_and_the_same_is_nothing() {
        assert_eq!(
            diff(None, r#"{"purge_generation":0}"#),
            ["+ {", r#"+   "purge_generation": 0"#, "+ }"]
        );
        assert!(diff(Some(r#"{"a":1, "b":2}"#), r#"{"b":2,"a":1}"#).is_empty());
        assert_eq!(diff(Some("[1]"), "{}"), ["- [", "-   1", "- ]", "+ {}"]);
    }
}
