//! The reserved list's file format, read strictly: `[source] description`
//! lines, each followed by its words, one a line; `#` starts a comment.
//! Self-contained, so `build.rs` reads the list with this same code when
//! it compiles the words into the router.

/// One `[source]` of the list and the words listed under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source<'a> {
    /// The word in brackets: `snapshot`, `reserved_names`, ...
    pub id: &'a str,
    /// What follows it on its line: where the words come from.
    pub description: &'a str,
    pub words: Vec<&'a str>,
}

/// The list read strictly: what `build.rs` and the tools check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedList<'a> {
    pub sources: Vec<Source<'a>>,
}

impl<'a> ReservedList<'a> {
    /// Reads the list; an error names the line and what is wrong with it
    /// (a word before any `[source]` line, a source without a description
    /// or without words, a word twice under one source, a character no
    /// path segment of GitLab's has, upper case).
    pub fn parse(text: &'a str) -> Result<ReservedList<'a>, String> {
        let mut sources: Vec<Source<'a>> = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            let at = |what: String| format!("reserved_top_level_routes.txt:{}: {what}", n + 1);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(rest) = line.strip_prefix('[') {
                let (id, description) = rest
                    .split_once(']')
                    .ok_or_else(|| at(format!("{line:?}: want \"[source] description\"")))?;
                let description = description.trim();
                if id.is_empty() || !id.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                    return Err(at(format!("source {id:?}: want lower case letters and _")));
                }
                if description.is_empty() {
                    return Err(at(format!(
                        "source [{id}] says nothing of where its words come from"
                    )));
                }
                if sources.iter().any(|s| s.id == id) {
                    return Err(at(format!("source [{id}] is listed twice")));
                }
                sources.push(Source {
                    id,
                    description,
                    words: Vec::new(),
                });
                continue;
            }
            let Some(source) = sources.last_mut() else {
                return Err(at(format!(
                    "{line:?} has no source: list it under a \"[source] description\" line"
                )));
            };
            if line != raw.trim_end() || line.contains(char::is_whitespace) {
                return Err(at(format!("{line:?}: one word a line, no indentation")));
            }
            if let Some(c) = line
                .chars()
                .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || "-_./".contains(*c)))
            {
                return Err(at(format!(
                    "{line:?}: {c:?} (words are lower case path characters)"
                )));
            }
            if line.starts_with('/') || line.ends_with('/') || line.contains("//") {
                return Err(at(format!(
                    "{line:?}: segments joined by single /, none at either end"
                )));
            }
            if source.words.contains(&line) {
                return Err(at(format!(
                    "{line:?} is listed twice under [{}]",
                    source.id
                )));
            }
            source.words.push(line);
        }
        if let Some(empty) = sources.iter().find(|s| s.words.is_empty()) {
            return Err(format!(
                "reserved_top_level_routes.txt: source [{}] lists no word",
                empty.id
            ));
        }
        if sources.is_empty() {
            return Err("reserved_top_level_routes.txt: no source, no word".to_string());
        }
        Ok(ReservedList { sources })
    }

    /// The sources that list `word`.
    pub fn sources_of(&self, word: &str) -> Vec<&'a str> {
        self.sources
            .iter()
            .filter(|s| s.words.contains(&word))
            .map(|s| s.id)
            .collect()
    }

    pub fn source(&self, id: &str) -> Option<&Source<'a>> {
        self.sources.iter().find(|s| s.id == id)
    }
}
