//! cargo-fuzz target `agentctl`: see `cofferdam_fuzz::agentctl`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cofferdam_fuzz::agentctl(data);
});
