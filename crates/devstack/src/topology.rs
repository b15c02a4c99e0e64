//! The local Topology Service: `POST /v1/classify` (SPEC §5) plus the
//! operator/test endpoints `/_stats` and `/_faults`.
//!
//! One file per concept:
//! - [`directory`]: the cell directory and the classify logic (pure);
//! - [`faults`]: fault injection and the classify statistics;
//! - [`server`]: the HTTP handling and start-up.

mod directory;
mod faults;
mod server;

pub use directory::{Directory, Learned};
pub use faults::Faults;
pub use server::start;
