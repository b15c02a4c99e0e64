//! A [`CachedAnswer`] as the Cache API entry's body: the JSON serde writes
//! for it, written with the log line's writers. A fresh isolate's first
//! request stores its first answer, and V8 compiles whatever writes it:
//! serde_json's serializer is about 25 functions, this is one
//! (docs/performance-ledger.md, "Ruleset loading and the first
//! request"). Read back with serde.

use crate::json::{push_quoted, push_u64, PushAscii};

use super::topology::Classification;
use super::CachedAnswer;

impl CachedAnswer {
    /// The entry's JSON, exactly as `serde_json::to_string` writes it.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(128 + self.question.len());
        out.push_str("{\"question\":");
        push_quoted(&mut out, &self.question);
        out.push_str(",\"classification\":");
        match &self.classification {
            Classification::NotFound => out.push_str("{\"kind\":\"not_found\"}"),
            Classification::Cell(cell) => {
                out.push_str("{\"kind\":\"cell\",\"address\":");
                push_quoted(&mut out, &cell.address);
                if let Some(registry) = &cell.registry_address {
                    out.push_str(",\"registry_address\":");
                    push_quoted(&mut out, registry);
                }
                out.push_ascii('}');
            }
        }
        out.push_str(",\"expires_at_ms\":");
        push_u64(&mut out, self.expires_at_ms);
        out.push_str(",\"tags\":[");
        for (i, tag) in self.tags.iter().enumerate() {
            if i > 0 {
                out.push_ascii(',');
            }
            push_quoted(&mut out, tag);
        }
        out.push_str("],\"asked_at_ms\":");
        push_u64(&mut out, self.asked_at_ms);
        out.push_ascii('}');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::topology::CellAnswer;
    use super::*;

    fn answers() -> Vec<CachedAnswer> {
        let cell = |registry: Option<&str>| {
            Classification::Cell(CellAnswer {
                address: "cell-2.example.com:443".into(),
                registry_address: registry.map(String::from),
            })
        };
        let answer = |question: &str, classification, tags: &[&str]| CachedAnswer {
            question: question.into(),
            classification,
            expires_at_ms: 1_765_000_000_123,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            asked_at_ms: 1_764_999_999_000,
        };
        vec![
            answer(
                r#"{"type":"SESSION_PREFIX","value":"cell-2"}"#,
                cell(None),
                &["session:cell-2", "cell:2"],
            ),
            answer("q", cell(Some("registry.cell-2:5000")), &[]),
            answer("q", Classification::NotFound, &["one"]),
            answer(
                "\"quotes\\ \n\t\u{1}\u{7f} é ✓",
                cell(Some("")),
                &["a\"b", "c\\d", ""],
            ),
            CachedAnswer {
                expires_at_ms: u64::MAX,
                asked_at_ms: 0,
                ..answer("", Classification::NotFound, &[])
            },
        ]
    }

    #[test]
    fn writes_what_serde_writes() {
        for answer in answers() {
            assert_eq!(answer.to_json(), serde_json::to_string(&answer).unwrap());
        }
    }

    #[test]
    fn reads_back_as_the_same_answer() {
        for answer in answers() {
            let back: CachedAnswer = serde_json::from_str(&answer.to_json()).unwrap();
            assert_eq!(back, answer);
        }
    }
}
