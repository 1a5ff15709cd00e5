//! cofferdam's records: the vocabulary every other crate speaks and the files a run leaves.
//!
//! Owns the Run Bundle (schema 4) types and their strict reader, the trace event types, the
//! host-facts value the probe fills, the containment vocabulary, and the scope report type.
//! It may not touch the operating system: no file, process or clock access lives here (the
//! caller passes times and bytes in), so every type can be built and checked in a unit test.

pub mod bundle;
pub mod containment;
pub mod host;
pub mod reader;
pub mod schema;
pub mod scope;
pub mod shown;
pub mod trace;

pub use bundle::{RunBundle, SCHEMA_VERSION};
pub use containment::{ContainmentClass, EnforcementTier};
pub use host::{CgroupFacts, HostFacts, UsernsFacts, UsernsGrant};
pub use reader::{BundleError, check_bundle, read_bundle, write_bundle_json};
pub use schema::{run_bundle_schema, run_bundle_schema_json};
pub use trace::{TornTail, TraceError, TraceEvent, TraceEventKind, encode_line, parse_lines};
