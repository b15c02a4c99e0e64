//! Targeted invalidation (the control document's `invalidations`): cached
//! answers made unusable by claim, by `Cache-Tag` value or by cell, each
//! from a point in time, instead of every answer at once (the purge
//! generation).
//!
//! An answer is invalidated when an invalidation matches it and the
//! service was asked for it before the invalidation's `at_ms`
//! ([`super::CachedAnswer::asked_at_ms`]): answers asked for after it are
//! the new ones and stay. The isolate applies the list once per control
//! read ([`super::Resolver::invalidate`]): it builds an [`Index`] (hash
//! maps) and drops the matching memory entries then. A memory hit costs
//! nothing more; a Cache API hit, or an answer about to be cached, costs a
//! few hash lookups ([`Index::invalidated_at`]: one per ancestor of a route
//! value, each a slice of one lowercased copy of it, so linear in its
//! length; one per tag, one for the cell's address).
//!
//! An invalidation can matter only while an answer asked before it can
//! still be used: at most the longest TTL plus the stale window
//! ([`horizon_ms`]); older ones are left out of the index, and `rulesctl
//! control invalidate` drops them from the document.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::cells::CellList;
use super::topology::{CachePolicy, Classification};
use crate::question::{claim_names, CLAIM_TYPES};

/// The most invalidations a document may hold (the document's 64 KiB cap
/// binds first for long values).
pub const MAX_INVALIDATIONS: usize = 1_000;

/// The longest claim value or tag an invalidation may name.
pub const MAX_VALUE_BYTES: usize = 512;

/// How far ahead of the reader's clock an invalidation's `at_ms` may be
/// (clock skew between the machine that wrote it and the isolate). One
/// further ahead is refused, by the router (ignored, with a warn line) and
/// by `rulesctl control`: it would make its answers uncacheable until then
/// and stay in force for the horizon after, for good with an `at_ms` in
/// microseconds. (One in seconds reads as 1970: past the horizon, it
/// matches nothing.)
pub const MAX_AHEAD_MS: u64 = 5 * 60 * 1000;

/// The fields of one entry; others are ignored ([`unknown_fields`]).
const FIELDS: [&str; 4] = ["at_ms", "claim", "tag", "cell"];

/// What an invalidation matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Subject {
    /// Answers to this claim (`CLAIM_TYPES` index, value). A `route` or
    /// `redirectRoute` value also matches every route under it (`acme`
    /// matches `acme/app`), as the service matches them; values compare
    /// case-insensitively.
    Claim(usize, String),
    /// Answers stored with this `Cache-Tag` value (the service's or the
    /// router's own, e.g. `router-cell-<address>`).
    Tag(String),
    /// Answers naming this cell: its address or registry address in
    /// `GITLAB_CELLS`, or carrying the service's `cell-<id>` tag.
    Cell(u64),
}

/// One entry of the control document's `invalidations`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalidation {
    /// Milliseconds since the Unix epoch: answers asked for before it are
    /// unusable.
    pub at_ms: u64,
    pub subject: Subject,
}

impl Invalidation {
    /// Parses one entry: `{"at_ms": N, "claim": "route=acme"}`, `{"at_ms":
    /// N, "tag": "cell-2"}` or `{"at_ms": N, "cell": 2}`. Other fields (a
    /// later version's) are ignored: [`unknown_fields`] names them.
    pub fn from_value(value: &Value) -> Result<Invalidation, String> {
        let Value::Object(fields) = value else {
            return Err("not an object".into());
        };
        let at_ms = fields
            .get("at_ms")
            .and_then(Value::as_u64)
            .ok_or("at_ms: missing or not a non-negative integer (ms since the epoch)")?;
        let subjects = ["claim", "tag", "cell"]
            .iter()
            .filter(|k| fields.contains_key(**k))
            .count();
        if subjects != 1 {
            return Err("needs exactly one of claim, tag, cell".into());
        }
        let subject = if let Some(claim) = fields.get("claim") {
            let text = claim.as_str().ok_or("claim: not a string")?;
            parse_claim(text)?
        } else if let Some(tag) = fields.get("tag") {
            let tag = tag.as_str().ok_or("tag: not a string")?;
            check_value("tag", tag)?;
            Subject::Tag(tag.to_string())
        } else {
            let cell = &fields["cell"];
            Subject::Cell(
                cell.as_u64()
                    .or_else(|| cell.as_str().and_then(|s| s.parse().ok()))
                    .ok_or("cell: not a cell id")?,
            )
        };
        Ok(Invalidation { at_ms, subject })
    }

    /// How far `at_ms` is ahead of `now_ms`, when that is more than
    /// [`MAX_AHEAD_MS`]: the entry is refused.
    pub fn too_far_ahead(&self, now_ms: u64) -> Option<u64> {
        let ahead = self.at_ms.saturating_sub(now_ms);
        (ahead > MAX_AHEAD_MS).then_some(ahead)
    }

    /// The entry as the document spells it.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("at_ms".into(), self.at_ms.into());
        match &self.subject {
            Subject::Claim(i, v) => {
                map.insert("claim".into(), format!("{}={v}", claim_names(*i).1).into())
            }
            Subject::Tag(t) => map.insert("tag".into(), t.clone().into()),
            Subject::Cell(id) => map.insert("cell".into(), (*id).into()),
        };
        Value::Object(map)
    }

    /// A short description for log lines (`route=acme`, `tag=cell-2`,
    /// `cell=2`).
    pub fn describe(&self) -> String {
        match &self.subject {
            Subject::Claim(i, v) => format!("{}={v}", claim_names(*i).1),
            Subject::Tag(t) => format!("tag={t}"),
            Subject::Cell(id) => format!("cell={id}"),
        }
    }
}

/// The fields of an entry (a JSON object) that [`Invalidation::from_value`]
/// ignores.
pub fn unknown_fields(value: &Value) -> impl Iterator<Item = &str> {
    value
        .as_object()
        .into_iter()
        .flat_map(|fields| fields.keys())
        .map(String::as_str)
        .filter(|k| !FIELDS.contains(k))
}

/// `key=value` with a claim key of [`CLAIM_TYPES`] (camelCase, as the
/// service's claims are spelled).
pub fn parse_claim(text: &str) -> Result<Subject, String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("claim {text:?}: not key=value"))?;
    let index = CLAIM_TYPES
        .iter()
        .position(|(_, camel)| *camel == key)
        .ok_or_else(|| {
            format!(
                "claim {text:?}: {key:?} is no claim key (one of {})",
                CLAIM_TYPES
                    .iter()
                    .map(|(_, c)| *c)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
    check_value("claim", value)?;
    Ok(Subject::Claim(index, value.to_string()))
}

fn check_value(what: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{what}: empty"));
    }
    if value.len() > MAX_VALUE_BYTES {
        return Err(format!("{what}: over {MAX_VALUE_BYTES} bytes"));
    }
    Ok(())
}

/// How long an invalidation can matter: an answer asked for just before
/// it may be used until the longest TTL plus the stale window have passed
/// (70 minutes with the defaults).
pub fn horizon_ms(cache: &CachePolicy) -> u64 {
    (u64::from(cache.max_ttl) + u64::from(cache.stale_if_error)) * 1000
}

/// Whether `kind` is a claim whose values nest like paths.
fn nests(index: usize) -> bool {
    matches!(claim_names(index).1, "route" | "redirectRoute")
}

/// The invalidations in force, indexed for lookups.
#[derive(Debug, Default)]
pub struct Index {
    /// Per claim kind ([`CLAIM_TYPES`] index): normalized value to time,
    /// looked up by borrowed `&str` (a route's ancestors are slices of it).
    claims: HashMap<usize, HashMap<String, u64>>,
    tags: HashMap<String, u64>,
    addresses: HashMap<String, u64>,
    /// What was indexed (within the horizon), kept so that a later
    /// document that leaves one out does not make its answers usable again
    /// before the horizon.
    in_force: Vec<Invalidation>,
}

impl Index {
    /// Indexes `list` together with what was in force before (`self`),
    /// leaving out what is past the horizon at `now`. `cells` resolves a
    /// cell id to its addresses.
    pub fn rebuild(
        &self,
        list: &[Invalidation],
        cells: &CellList,
        now: u64,
        horizon: u64,
    ) -> Index {
        let mut merged: HashMap<Subject, u64> = HashMap::new();
        for inv in self.in_force.iter().chain(list) {
            if inv.at_ms.saturating_add(horizon) <= now {
                continue;
            }
            let at = merged.entry(inv.subject.clone()).or_insert(0);
            *at = (*at).max(inv.at_ms);
        }
        let mut index = Index::default();
        for (subject, at) in merged {
            match &subject {
                Subject::Claim(i, v) => {
                    let v = normalize(*i, v);
                    raise(index.claims.entry(*i).or_default(), v, at);
                }
                Subject::Tag(t) => raise(&mut index.tags, t.clone(), at),
                Subject::Cell(id) => {
                    raise(&mut index.tags, format!("cell-{id}"), at);
                    if let Some(cell) = cells.by_id(*id) {
                        raise(&mut index.addresses, cell.address.clone(), at);
                        if let Some(r) = &cell.registry_address {
                            raise(&mut index.addresses, r.clone(), at);
                        }
                    }
                }
            }
            index.in_force.push(Invalidation { at_ms: at, subject });
        }
        index
            .in_force
            .sort_by(|a, b| a.at_ms.cmp(&b.at_ms).then(a.describe().cmp(&b.describe())));
        index
    }

    pub fn is_empty(&self) -> bool {
        self.in_force.is_empty()
    }

    /// The invalidations in force.
    pub fn in_force(&self) -> &[Invalidation] {
        &self.in_force
    }

    /// The latest `at_ms` of the invalidations matching an answer: to
    /// `claim` (its [`CLAIM_TYPES`] index and value; `None` for other
    /// kinds), stored with `tags`, saying `classification`. `None`: none
    /// matches.
    pub fn invalidated_at<'t>(
        &self,
        claim: Option<(usize, &str)>,
        tags: impl IntoIterator<Item = &'t str>,
        classification: &Classification,
    ) -> Option<u64> {
        if self.in_force.is_empty() {
            return None;
        }
        let mut latest: Option<u64> = None;
        let mut seen = |at: Option<&u64>| {
            if let Some(at) = at {
                latest = Some(latest.map_or(*at, |l| l.max(*at)));
            }
        };
        if let Some((values, (i, value))) =
            claim.and_then(|(i, value)| Some((self.claims.get(&i)?, (i, value))))
        {
            // One lowercased copy of the value; its ancestors are looked up
            // as slices of it (linear in its length, not quadratic).
            let value = normalize(i, value);
            if nests(i) {
                let ends = value.match_indices('/').map(|(cut, _)| cut);
                for prefix in ends.chain([value.len()]).filter_map(|end| value.get(..end)) {
                    seen(values.get(prefix));
                }
            } else {
                seen(values.get(value.as_str()));
            }
        }
        if !self.tags.is_empty() {
            for tag in tags {
                seen(self.tags.get(tag));
            }
        }
        if let (Classification::Cell(cell), false) = (classification, self.addresses.is_empty()) {
            seen(self.addresses.get(&cell.address));
            if let Some(r) = &cell.registry_address {
                seen(self.addresses.get(r));
            }
        }
        latest
    }
}

/// Sets `map[key]` to `at` unless it holds a later time.
fn raise<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u64>, key: K, at: u64) {
    let slot = map.entry(key).or_insert(0);
    *slot = (*slot).max(at);
}

/// A claim value as compared: lower case; a route without surrounding `/`.
fn normalize(index: usize, value: &str) -> String {
    let value = if nests(index) {
        value.trim_matches('/')
    } else {
        value
    };
    value.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::topology::CellAnswer;
    use serde_json::json;

    fn claim(text: &str) -> (usize, String) {
        match parse_claim(text).unwrap() {
            Subject::Claim(i, v) => (i, v),
            other => panic!("{other:?}"),
        }
    }

    fn cell(address: &str) -> Classification {
        Classification::Cell(CellAnswer {
            address: address.into(),
            registry_address: None,
        })
    }

    #[test]
    fn parses_the_three_kinds_and_refuses_the_rest() {
        let inv = Invalidation::from_value(&json!({"at_ms": 5, "claim": "route=acme"})).unwrap();
        assert_eq!(inv.describe(), "route=acme");
        assert_eq!(inv.to_value(), json!({"at_ms": 5, "claim": "route=acme"}));
        let inv = Invalidation::from_value(&json!({"at_ms": 5, "tag": "cell-2"})).unwrap();
        assert_eq!(inv.subject, Subject::Tag("cell-2".into()));
        let inv = Invalidation::from_value(&json!({"at_ms": 5, "cell": 2})).unwrap();
        assert_eq!(inv.subject, Subject::Cell(2));
        for bad in [
            json!({"claim": "route=acme"}),
            json!({"at_ms": -1, "claim": "route=acme"}),
            json!({"at_ms": 5}),
            json!({"at_ms": 5, "claim": "route=acme", "tag": "x"}),
            json!({"at_ms": 5, "claim": "colour=red"}),
            json!({"at_ms": 5, "claim": "route"}),
            json!({"at_ms": 5, "claim": "route="}),
            json!({"at_ms": 5, "tag": ""}),
            json!({"at_ms": 5, "cell": "two"}),
            json!("route=acme"),
        ] {
            assert!(Invalidation::from_value(&bad).is_err(), "{bad} accepted");
        }
        // A later version's field is ignored, and named.
        let later = json!({"at_ms": 5, "claim": "route=acme", "why": "x"});
        assert_eq!(
            Invalidation::from_value(&later).unwrap().describe(),
            "route=acme"
        );
        assert_eq!(unknown_fields(&later).collect::<Vec<_>>(), ["why"]);
    }

    #[test]
    fn an_entry_more_than_five_minutes_ahead_is_too_far() {
        let now = 1_700_000_000_000;
        let at = |at_ms| Invalidation {
            at_ms,
            subject: Subject::Cell(2),
        };
        assert_eq!(at(now + MAX_AHEAD_MS).too_far_ahead(now), None, "skew");
        assert_eq!(at(now - 1).too_far_ahead(now), None);
        assert_eq!(
            at(now + MAX_AHEAD_MS + 1).too_far_ahead(now),
            Some(MAX_AHEAD_MS + 1)
        );
        assert!(at(now * 1000).too_far_ahead(now).is_some(), "microseconds");
        // Seconds read as 1970: past the horizon, in force for nothing.
        let index =
            Index::default().rebuild(&[at(now / 1000)], &CellList::default(), now, 4_200_000);
        assert!(index.is_empty());
    }

    #[test]
    fn matches_by_claim_tag_and_cell_and_nothing_else() {
        let cells = CellList::parse(
            r#"[{"id":2,"address":"c2.example","registry_address":"r2.example","session_prefix":"cell-2"}]"#,
        )
        .0;
        let list = [
            Invalidation::from_value(&json!({"at_ms": 100, "claim": "route=Acme"})).unwrap(),
            Invalidation::from_value(&json!({"at_ms": 110, "claim": "organizationPath=acme-org"}))
                .unwrap(),
            Invalidation::from_value(&json!({"at_ms": 120, "claim": "projectId=200"})).unwrap(),
            Invalidation::from_value(&json!({"at_ms": 130, "tag": "org-acme"})).unwrap(),
            Invalidation::from_value(&json!({"at_ms": 140, "cell": 2})).unwrap(),
        ];
        let index = Index::default().rebuild(&list, &cells, 1_000, 10_000);
        let c3 = cell("c3.example");
        let at = |text: &str, tags: &[&str], answer: &Classification| {
            let (i, v) = claim(text);
            index.invalidated_at(Some((i, &v)), tags.iter().copied(), answer)
        };
        assert_eq!(at("route=acme", &[], &c3), Some(100));
        assert_eq!(at("route=ACME/app/sub", &[], &c3), Some(100), "under it");
        assert_eq!(at("route=/acme/", &[], &c3), Some(100));
        assert_eq!(at("route=acmeish", &[], &c3), None, "not a prefix match");
        assert_eq!(at("route=other/acme", &[], &c3), None);
        assert_eq!(
            at("redirectRoute=acme", &[], &c3),
            None,
            "another claim key"
        );
        assert_eq!(at("organizationPath=ACME-org", &[], &c3), Some(110));
        assert_eq!(
            at("organizationPath=acme-org/x", &[], &c3),
            None,
            "exact only"
        );
        assert_eq!(at("projectId=200", &[], &c3), Some(120));
        assert_eq!(at("projectId=2000", &[], &c3), None);
        assert_eq!(at("projectId=201", &["org-acme"], &c3), Some(130));
        assert_eq!(at("projectId=300", &[], &cell("c2.example")), Some(140));
        assert_eq!(at("projectId=300", &["cell-2"], &c3), Some(140));
        assert_eq!(
            at("projectId=300", &[], &Classification::NotFound),
            None,
            "a 404 names no cell"
        );
        // The latest matching one counts.
        assert_eq!(
            at("route=acme", &["org-acme"], &cell("c2.example")),
            Some(140)
        );
        assert_eq!(
            index.invalidated_at(None, [], &cell("r2.example")),
            Some(140),
            "the registry address too"
        );
    }

    #[test]
    fn what_is_past_the_horizon_is_left_out_and_what_is_left_out_of_a_document_stays() {
        let cells = CellList::default();
        let a = Invalidation::from_value(&json!({"at_ms": 1_000, "claim": "route=a"})).unwrap();
        let b = Invalidation::from_value(&json!({"at_ms": 5_000, "claim": "route=b"})).unwrap();
        let index = Index::default().rebuild(&[a.clone(), b.clone()], &cells, 6_000, 4_500);
        assert_eq!(index.in_force(), std::slice::from_ref(&b), "a is past it");
        // A later document without b: b stays until its horizon.
        let index = index.rebuild(&[], &cells, 7_000, 4_500);
        assert_eq!(index.in_force(), std::slice::from_ref(&b));
        let (i, v) = claim("route=b");
        assert_eq!(
            index.invalidated_at(Some((i, &v)), [], &cell("x")),
            Some(5_000)
        );
        let index = index.rebuild(&[], &cells, 9_500, 4_500);
        assert!(index.is_empty());
        // The same subject twice: the later time.
        let b2 = Invalidation {
            at_ms: 8_000,
            ..b.clone()
        };
        let index = Index::default().rebuild(&[b, b2.clone()], &cells, 8_000, 4_500);
        assert_eq!(index.in_force(), &[b2]);
    }
}
