//! Crash tests of `apply`.
