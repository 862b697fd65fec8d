//! T2: op sequences decoded from the bytes (`arbitrary`) run against a real in-memory queue on
//! a manual clock and against the reference model; any divergence or invariant violation
//! panics. The body is `fenceq_conformance::model::run_bytes`, so `tests/fuzz_replay.rs`
//! replays this corpus on stable. `fence_invariants_file` runs the same inputs on a file where
//! they reopen.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fenceq_conformance::model::run_bytes(data);
});
