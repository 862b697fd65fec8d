//! T2, file-backed: the `fence_invariants` differential on a database file whenever the ops
//! close and reopen the queue (`Reopen`), so that what a reopen finds is checked too. Slower
//! than the in-memory target (each reopen opens connections and parses the schema). The body
//! is `fenceq_conformance::model::run_bytes_file`; `tests/fuzz_replay.rs` replays the corpus
//! on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fenceq_conformance::model::run_bytes_file(data);
});
