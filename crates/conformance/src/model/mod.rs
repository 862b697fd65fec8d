//! The reference model of the queue and the differential runners behind the fuzz targets
//! (`fuzz/fuzz_targets/*.rs`), the kit's model rules (the `durable::model` rules (`durable/model.rs`): the corpus
//! replay and the property test, through any store's [`Harness`]) and the stable tests that
//! replay the corpus on SQLite's fast paths (`tests/fuzz_replay.rs`). Test support only: it
//! uses fenceq's public API only (the [`Store`] trait's `owns` included) and is not part of
//! fenceq's contract.
//!
//! - [`run_on`] applies a sequence of [`QueueOp`]s to a real [`Queue`] of any store, through
//!   its [`Harness`] (on a [`ManualClock`]), and to a small model (a
//!   `BTreeMap<JobId, ModelJob>` plus every claim id ever issued), and panics with the step,
//!   the operation, what the model expected and what the engine did at the first
//!   divergence. After every step it checks the ten invariants of DESIGN.md against the real
//!   table and compares every row, column by column, with the model, and the history of
//!   attempts (`Queue::attempts`) of every job whose attempt the step ended (of every job at a
//!   `Check` and at the end of the run): the model records each retry, snooze, back-off,
//!   exhaustion, unknown outcome, park, reap and reclaim as the store must. [`HarnessRuns`]
//!   does the same for many runs in a row.
//! - [`run`], [`run_bytes`] and [`run_bytes_file`] run the same runner on SQLite's own fast
//!   paths, for the fuzz targets' thousands of runs a second: this thread's in-memory queue,
//!   emptied and reused from run to run, or a database file in /dev/shm copied from a
//!   template when the sequence reopens the queue. Only how they get a queue, how they reopen
//!   it, and the domain table and the caller's transaction differ from [`run_on`]'s (the
//!   private `Backend` trait); every call and every check is shared.
//! - [`hostile`] feeds arbitrary bytes to the API as queue names, keys, payloads, worker ids,
//!   leases, durations, cursors and limits, and as database files (raw bytes, a valid queue
//!   file with bytes flipped, a valid file tampered with by SQL). It panics only when the
//!   engine panics or mishandles input: a failed call that changed rows, or a storage error
//!   (not `InvalidInput`) for bad caller input on a healthy database.
//!
//! [`FIXED_DEFECTS`] lists the engine defects these runners found (all fixed since); the
//! regression rules in the `durable::model` rules (`durable/model.rs`) and the tests in `tests/fuzz_replay.rs` keep them
//! fixed.
//! Should a new one be found and left open, steer around it here (so that fuzzing can go on)
//! and keep its failing case as an ignored test.
//!
//! The model knows the queue's limits too ([`LimitsModel`]): the limits set, cleared and read
//! back, which jobs each claim of a limited queue takes and which group heads it defers, the
//! starts the store keeps and what `stats` shows as throttled; after every claim it checks the
//! guarantee itself on its history of starts (never more than N starts of a key in any window).
//!
//! The code is in five files: `ops.rs`, the op grammar ([`QueueOp`] and the selectors its
//! steps are made of, decoded from fuzzer bytes); `reference.rs`, the reference model
//! ([`Model`]) and what it predicts; `limits.rs`, the model's limits and its limited claim;
//! `runner.rs`, the runner that applies ops to a real queue and to the model and compares
//! them; `hostile_input.rs`, [`hostile`] and its raw-SQL tampers, bad names and corrupted
//! files. Every public item is re-exported here.
//!
//! [`Harness`]: crate::harness::Harness
//! [`Store`]: fenceq::store::Store
//! [`Queue`]: fenceq::Queue
//! [`ManualClock`]: fenceq::ManualClock

mod hostile_input;
mod limits;
mod ops;
mod reference;
mod runner;

pub use hostile_input::{hostile, template, HBackoff, HToken, HostileCall, TAMPERS};
pub use limits::{LimitsModel, Start};
pub use ops::{
    decode, AttemptsSel, BackSel, BackoffSel, BadLimits, BatchLimit, CapSel, ClaimQueue, ClosureAct, DelaySel, Forgery,
    GroupRatesSel, GroupSel, InvalidJob, JobRef, JobSpec, KeySel, LeaseSel, LimitsSpec, PageLimit, ParkSel,
    PrioritySel, QueueOp, QueueSel, RateSel, ResolutionSel, RetentionSel, RunningSel, ScopeSel, SnoozeSel, StateSel,
    Step, TextSel, TokenRef, WorkerSel, LEASE, MAX_OPS,
};
pub use reference::{Model, ModelJob, DEFAULT_ATTEMPTS};
pub use runner::{
    check_row, run, run_bytes, run_bytes_file, run_on, try_run, try_run_on, HarnessRuns, RunStats, TempDb,
    MAX_LIVE_JOBS, T0,
};

/// Engine defects this module found that are fixed now; the regression rules in
/// the `durable::model` rules (`durable/model.rs`) and the tests in `tests/fuzz_replay.rs` keep them fixed.
pub const FIXED_DEFECTS: &[&str] = &[
    "nul-queue-name (fixed in bd2755f): a queue name that starts with a NUL byte passed the engine's name check but \
     failed the schema's CHECK (length(queue) > 0; SQLite's length() stops at the NUL): enqueue returned \
     Error::Sqlite (constraint) instead of InvalidInput",
    "claim-order (fixed in ac0020d): among running jobs whose lease expired, claim_batch pre-selected \
     by lease_until (inner LIMIT), not by the documented priority, run_at, id order",
    "retry-policy-overflow (fixed in ac0020d): Queue::retry with a RetryPolicy whose max is near \
     Duration::MAX panicked in RetryPolicy::delay (Duration::mul_f64 overflow)",
    "insert-trigger-panic (fixed in ac0020d): a BEFORE INSERT trigger on fenceq_jobs doing \
     RAISE(IGNORE) made an unkeyed enqueue panic (\"only keyed inserts can conflict\")",
    "starts-key (fixed in 1e4efb1): SQLite's starts log was keyed by (queue, at, job, attempt); a replay \
     restarts the attempt counter, so a replayed job claimed again under a rate within the same \
     millisecond failed its claim with a constraint error (Error::Sqlite) instead of starting",
    "backoff-since (fixed in 58a47d7): a queue back-off's `since` was read from its flow-control row's \
     updated_at, which set_limits and set_group_policy also moved: stats and queue_backoff reported the \
     back-off as set when the limits were",
];
