//! cargo-fuzz target `import`: see `cofferdam_fuzz::import`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = cofferdam_fuzz::import(data);
});
