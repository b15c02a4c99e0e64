//! A ruleset's decision for one request, in the forms rulesctl prints.

use router_core::{Action, Decision, RequestParts, Ruleset};

/// An owned copy of a [`Decision`]: what `explain` prints and `diff`
/// compares (rule id, action, classify body, proxy address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub rule: Option<String>,
    pub action: ViewAction,
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
}

impl View {
    pub fn decide(ruleset: &Ruleset, request: &RequestParts) -> View {
        View::from(ruleset.decide(request))
    }

    /// `explain`'s object: `{"rule", "action", "classify", "proxy"}` in that
    /// order, with the classify body embedded byte for byte.
    pub fn to_json(&self) -> String {
        let (classify, proxy) = match &self.action {
            ViewAction::Classify { body, .. } => (body.clone(), "null".to_string()),
            ViewAction::Proxy { address } => (
                "null".to_string(),
                format!("{{\"address\":{}}}", json_opt(address.as_deref())),
            ),
            ViewAction::Reject { status, message } => {
                return format!(
                    "{{\"rule\":{},\"action\":\"reject\",\"classify\":null,\"proxy\":null,\"reject\":{{\"status\":{status},\"message\":{}}}}}",
                    json_opt(self.rule.as_deref()),
                    json_str(message)
                )
            }
        };
        format!(
            "{{\"rule\":{},\"action\":{},\"classify\":{classify},\"proxy\":{proxy}}}",
            json_opt(self.rule.as_deref()),
            json_str(self.action_name()),
        )
    }

    pub fn action_name(&self) -> &'static str {
        match self.action {
            ViewAction::Classify { .. } => "classify",
            ViewAction::Proxy { .. } => "proxy",
            ViewAction::Reject { .. } => "reject",
        }
    }

    fn rule_label(&self) -> String {
        match &self.rule {
            Some(id) => format!("[{id}]"),
            None => "[no rule]".to_string(),
        }
    }

    fn proxy_label(address: &Option<String>) -> String {
        match address {
            Some(a) => format!("proxy {a}"),
            None => "proxy (legacy cell)".to_string(),
        }
    }

    /// One-line form with the full classify body:
    /// `[session_cookie] classify {"type":"SESSION_PREFIX","value":"cell-2"}`.
    pub fn summary(&self) -> String {
        match &self.action {
            ViewAction::Classify { body, .. } => format!("{} classify {body}", self.rule_label()),
            ViewAction::Proxy { address } => {
                format!("{} {}", self.rule_label(), View::proxy_label(address))
            }
            ViewAction::Reject { status, .. } => format!("{} reject {status}", self.rule_label()),
        }
    }

    /// The form transitions are counted by, without the classified value:
    /// `[session_cookie] classify SESSION_PREFIX`.
    pub fn category(&self) -> String {
        match &self.action {
            ViewAction::Classify { kind, .. } => format!("{} classify {kind}", self.rule_label()),
            ViewAction::Proxy { address } => {
                format!("{} {}", self.rule_label(), View::proxy_label(address))
            }
            ViewAction::Reject { status, .. } => format!("{} reject {status}", self.rule_label()),
        }
    }
}

impl From<Decision<'_>> for View {
    fn from(decision: Decision<'_>) -> View {
        let action = match decision.action {
            Action::Proxy { address } => ViewAction::Proxy {
                address: address.map(str::to_string),
            },
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
        }
    }
}

pub fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

pub fn json_opt(s: Option<&str>) -> String {
    s.map_or_else(|| "null".to_string(), json_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_forms() {
        let v = View {
            rule: None,
            action: ViewAction::Proxy { address: None },
        };
        assert_eq!(
            v.to_json(),
            r#"{"rule":null,"action":"proxy","classify":null,"proxy":{"address":null}}"#
        );
        let v = View {
            rule: Some("r\"1".into()),
            action: ViewAction::Classify {
                body: r#"{"type":"FIRST_CELL"}"#.into(),
                kind: "FIRST_CELL".into(),
            },
        };
        assert_eq!(
            v.to_json(),
            r#"{"rule":"r\"1","action":"classify","classify":{"type":"FIRST_CELL"},"proxy":null}"#
        );
        assert_eq!(v.category(), "[r\"1] classify FIRST_CELL");
    }
}
