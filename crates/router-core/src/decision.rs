//! What the select phase decides for one request, and how `rulesctl
//! explain` and the route tables print it.

use serde_json::Value;

use crate::log::RequestAction;
use crate::question::ClassifyRequest;

/// What a rule decided for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<'r> {
    /// The matching rule's id; `None` when no rule matched.
    pub rule_id: Option<&'r str>,
    pub action: Action<'r>,
    /// For a classify rule with `notFound: next-rule`: the position of the
    /// rule after it, where [`Ruleset::decide_from`](crate::select::Ruleset::decide_from) resumes when the
    /// Topology Service does not know the key.
    pub next_on_not_found: Option<usize>,
    /// For a classify rule with `onOutage: unavailable`: when the service
    /// cannot answer and nothing is cached, the request gets a 503 with
    /// `Retry-After` instead of going to the legacy cell.
    pub unavailable_on_outage: bool,
    /// The rule counts 502, 503 and 504 from the cell against its circuit
    /// (`circuit.countGatewayStatuses`).
    pub counts_gateway_statuses: bool,
    /// The first rule passed over because its classify value was longer
    /// than [`MAX_CLASSIFY_VALUE_BYTES`](crate::question::MAX_CLASSIFY_VALUE_BYTES)
    /// (the rules after it decided), in the pass over the rules that
    /// decided.
    pub value_too_long: Option<&'r str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action<'r> {
    /// Proxy to a fixed address; `None` is the legacy cell.
    Proxy { address: Option<&'r str> },
    /// Ask the Topology Service.
    Classify(ClassifyRequest),
    /// Answer with this client error; nothing is forwarded.
    Reject { status: u16, message: &'r str },
    /// Proxy to a random healthy cell of the cell list (the legacy cell
    /// when none is healthy).
    Spread,
}

impl Decision<'_> {
    /// The decision as `rulesctl explain` prints it and route tables
    /// state it: `{"rule", "action", "classify": <classify body> | null,
    /// "proxy": {"address": <host> | null} | null}`, plus `"reject":
    /// {"status", "message"}` for a rejection.
    pub fn explain(&self) -> Value {
        serde_json::from_str(&self.explain_json()).unwrap_or(Value::Null)
    }

    /// [`Decision::explain`] as text: keys in that order and the classify
    /// body embedded byte for byte as it is POSTed.
    pub fn explain_json(&self) -> String {
        let text = |s: &str| Value::String(s.to_string()).to_string();
        let text_or_null = |s: Option<&str>| s.map_or_else(|| "null".to_string(), text);
        let null = || "null".to_string();
        let (classify, proxy, reject) = match &self.action {
            Action::Classify(c) => (c.body(), null(), String::new()),
            Action::Proxy { address } => (
                null(),
                format!(r#"{{"address":{}}}"#, text_or_null(*address)),
                String::new(),
            ),
            Action::Spread => (null(), null(), String::new()),
            Action::Reject { status, message } => (
                null(),
                null(),
                format!(
                    r#","reject":{{"status":{status},"message":{}}}"#,
                    text(message)
                ),
            ),
        };
        let on_outage = if self.unavailable_on_outage {
            r#","on_outage":"unavailable""#
        } else {
            ""
        };
        let not_found = if self.next_on_not_found.is_some() {
            r#","not_found":"next-rule""#
        } else {
            ""
        };
        let gateway = if self.counts_gateway_statuses {
            r#","circuit":"counts-gateway-statuses""#
        } else {
            ""
        };
        format!(
            r#"{{"rule":{},"action":"{}","classify":{classify},"proxy":{proxy}{reject}{not_found}{on_outage}{gateway}}}"#,
            text_or_null(self.rule_id),
            self.action.name()
        )
    }
}

impl Action<'_> {
    /// The action as the log line names it.
    pub fn log_action(&self) -> RequestAction {
        match self {
            Action::Proxy { .. } => RequestAction::Proxy,
            Action::Classify(_) => RequestAction::Classify,
            Action::Reject { .. } => RequestAction::Reject,
            Action::Spread => RequestAction::Spread,
        }
    }

    /// `classify`, `proxy`, `reject` or `spread`.
    pub fn name(&self) -> &'static str {
        self.log_action().name()
    }
}
