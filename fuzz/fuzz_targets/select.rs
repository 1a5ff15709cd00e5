//! cargo-fuzz target `select`: see `cofferdam_fuzz::selection`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cofferdam_fuzz::selection(data);
});
