//! A ruleset's decision for one request, in the forms rulesctl prints.

use router_core::{Action, Decision};

/// An owned copy of a [`Decision`]: what `explain` prints and `diff`
/// compares (rule id, action, classify body, proxy address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub rule: Option<String>,
    pub action: ViewAction,
    /// The core's [`Decision::explain_json`].
    explained: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewAction {
    /// `body` is the exact JSON POSTed to `/v1/classify`; `kind` the
    /// classify type, with ` registry` when it targets the registry.
    Classify { body: String, kind: String },
    /// `None` is the legacy cell.
    Proxy { address: Option<String> },
    /// The router answers this client error itself.
    Reject { status: u16, message: String },
    /// A random healthy cell of `GITLAB_CELLS`.
    Spread,
}

impl View {
    /// `explain`'s object: `{"rule", "action", "classify", "proxy"}` in that
    /// order, with the classify body embedded byte for byte.
    pub fn to_json(&self) -> &str {
        &self.explained
    }

    fn rule_label(&self) -> String {
        match &self.rule {
            Some(id) => format!("[{id}]"),
            None => "[no rule]".to_string(),
        }
    }

    /// One-line form with the full classify body:
    /// `[session_cookie] classify {"type":"SESSION_PREFIX","value":"cell-2"}`.
    pub fn summary(&self) -> String {
        self.describe(true)
    }

    /// The form transitions are counted by, without the classified value:
    /// `[session_cookie] classify SESSION_PREFIX`.
    pub fn category(&self) -> String {
        self.describe(false)
    }

    fn describe(&self, classify_body: bool) -> String {
        let action = match &self.action {
            ViewAction::Classify { body, .. } if classify_body => format!("classify {body}"),
            ViewAction::Classify { kind, .. } => format!("classify {kind}"),
            ViewAction::Proxy { address: Some(a) } => format!("proxy {a}"),
            ViewAction::Proxy { address: None } => "proxy (legacy cell)".to_string(),
            ViewAction::Reject { status, .. } => format!("reject {status}"),
            ViewAction::Spread => "spread (a healthy listed cell)".to_string(),
        };
        format!("{} {action}", self.rule_label())
    }
}

impl From<Decision<'_>> for View {
    fn from(decision: Decision<'_>) -> View {
        let explained = decision.explain_json();
        let action = match decision.action {
            Action::Proxy { address } => ViewAction::Proxy {
                address: address.map(str::to_string),
            },
            Action::Spread => ViewAction::Spread,
            Action::Reject { status, message } => ViewAction::Reject {
                status,
                message: message.to_string(),
            },
            Action::Classify(request) => {
                let mut kind = request.kind.name().to_string();
                if request.target != router_core::Target::Web {
                    kind.push(' ');
                    kind.push_str(request.target.name());
                }
                ViewAction::Classify {
                    body: request.body(),
                    kind,
                }
            }
        };
        View {
            rule: decision.rule_id.map(str::to_string),
            action,
            explained,
        }
    }
}

/// The claim a decision sends, as (camelCase key, value): `None` for
/// anything but a classify of a claim type.
pub fn sent_claim(decision: &Decision<'_>) -> Option<(&'static str, String)> {
    match &decision.action {
        Action::Classify(q) => match q.kind {
            router_core::ClassifyKind::Claim(i) => Some((
                router_core::question::CLAIM_TYPES[i].1,
                q.value.clone().unwrap_or_default(),
            )),
            _ => None,
        },
        _ => None,
    }
}

pub fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_forms() {
        let v = View::from(Decision {
            rule_id: None,
            action: Action::Proxy { address: None },
            next_on_not_found: None,
            unavailable_on_outage: false,
            counts_gateway_statuses: false,
            value_too_long: None,
        });
        assert_eq!(
            v.to_json(),
            r#"{"rule":null,"action":"proxy","classify":null,"proxy":{"address":null}}"#
        );
        let v = View::from(Decision {
            rule_id: Some("r\"1"),
            action: Action::Classify(router_core::ClassifyRequest {
                kind: router_core::ClassifyKind::FirstCell,
                value: None,
                method: None,
                target: router_core::Target::Web,
            }),
            next_on_not_found: None,
            unavailable_on_outage: false,
            counts_gateway_statuses: false,
            value_too_long: None,
        });
        assert_eq!(
            v.to_json(),
            r#"{"rule":"r\"1","action":"classify","classify":{"type":"FIRST_CELL"},"proxy":null}"#
        );
        assert_eq!(v.category(), "[r\"1] classify FIRST_CELL");
    }
}
