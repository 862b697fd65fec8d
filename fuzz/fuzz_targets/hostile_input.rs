//! T2: arbitrary bytes as queue names, keys, payloads, worker ids, leases, durations, cursors
//! and limits, and as database files (raw, a valid queue file with bytes flipped, a valid file
//! tampered with by SQL): no panic, only `fenceq::Error`s, and a failed call changes nothing.
//! The body is `fenceq_conformance::model::hostile`, so `tests/fuzz_replay.rs` replays this
//! corpus on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fenceq_conformance::model::hostile(data);
});
