//! cofferdam's job store and stage.
//!
//! Owns where jobs live and, as they land, the seal scan, the review model, the apply engine
//! with its ledger, and drop (DESIGN.md §4–§5). It may not run processes or decide
//! containment.

pub mod store;

pub use store::{StoreError, storage_root};
