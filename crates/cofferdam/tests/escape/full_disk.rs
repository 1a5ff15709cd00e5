//! Full-disk tests.
