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
//!   table and compares every row, column by column, with the model. [`HarnessRuns`] does the
//!   same for many runs in a row.
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

use crate::harness::Harness;
use arbitrary::{Arbitrary, Unstructured};
use fenceq::rusqlite;
use fenceq::store::Store;
use fenceq::{
    Backoff, ClaimId, ClaimToken, Claimed, Cursor, Enqueued, Error, Exhaustion, Job, JobId, JobState, ListFilter,
    LostReason, ManualClock, NewJob, Page, Queue, QueueStats, Resolution, Retention, Retried, RetryPolicy, SqliteStore,
    Stats, UnknownOutcome,
};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use uuid::Uuid;

/// The manual clock's start (2023-11-14), far from zero so that clock jumps back stay positive.
pub const T0: i64 = 1_700_000_000_000;
/// The standard lease of the model's claims.
pub const LEASE: Duration = Duration::from_secs(30);
const LEASE_MS: i64 = 30_000;
const HOUR_MS: i64 = 3_600_000;
/// Eight days: more than the default retention (7 days).
const WEEK_MS: i64 = 8 * 24 * HOUR_MS;
/// Longest op sequence [`run_bytes`] decodes.
pub const MAX_OPS: usize = 64;
/// Most rows the model lets exist at once (enqueues beyond it are skipped).
pub const MAX_LIVE_JOBS: usize = 16;
/// Attempt budget of the model's queue when a job does not set one.
pub const DEFAULT_ATTEMPTS: u32 = 3;
/// Most jobs in one `EnqueueBatch`.
const MAX_BATCH_JOBS: usize = 4;

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
];

// ==================================================================== operations

/// A queue the model's calls name.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueSel {
    /// "a"
    A,
    /// "b"
    B,
}

impl QueueSel {
    fn name(self) -> &'static str {
        match self {
            QueueSel::A => "a",
            QueueSel::B => "b",
        }
    }
}

/// A queue name for claims: the two queues, one that never has jobs, and two invalid names.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimQueue {
    /// "a"
    A,
    /// "b"
    B,
    /// "idle": never has jobs.
    Idle,
    /// "" (invalid)
    Empty,
    /// 129 bytes (invalid)
    TooLong,
}

impl ClaimQueue {
    fn name(self) -> String {
        match self {
            ClaimQueue::A => "a".into(),
            ClaimQueue::B => "b".into(),
            ClaimQueue::Idle => "idle".into(),
            ClaimQueue::Empty => String::new(),
            ClaimQueue::TooLong => "q".repeat(fenceq::MAX_NAME_LEN + 1),
        }
    }
}

/// A worker id.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerSel {
    /// "w1"
    W1,
    /// "w2"
    W2,
    /// "" (invalid)
    Empty,
}

impl WorkerSel {
    fn name(self) -> &'static str {
        match self {
            WorkerSel::W1 => "w1",
            WorkerSel::W2 => "w2",
            WorkerSel::Empty => "",
        }
    }
}

/// An idempotency key (few, so that keys repeat).
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySel {
    /// "k0"
    K0,
    /// "k1"
    K1,
    /// "k2"
    K2,
}

impl KeySel {
    fn name(self) -> &'static str {
        match self {
            KeySel::K0 => "k0",
            KeySel::K1 => "k1",
            KeySel::K2 => "k2",
        }
    }
}

/// A job priority.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrioritySel {
    /// 0
    Normal,
    /// -1
    Low,
    /// 5
    High,
}

impl PrioritySel {
    fn value(self) -> i32 {
        match self {
            PrioritySel::Normal => 0,
            PrioritySel::Low => -1,
            PrioritySel::High => 5,
        }
    }
}

/// An enqueue delay.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelaySel {
    /// Due now.
    Now,
    /// 1 ms.
    OneMs,
    /// One lease.
    Lease,
    /// One hour.
    Hour,
}

impl DelaySel {
    fn ms(self) -> i64 {
        match self {
            DelaySel::Now => 0,
            DelaySel::OneMs => 1,
            DelaySel::Lease => LEASE_MS,
            DelaySel::Hour => HOUR_MS,
        }
    }
}

/// A job's attempt budget.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptsSel {
    /// The queue's default ([`DEFAULT_ATTEMPTS`]).
    Default,
    /// 1
    One,
    /// 2
    Two,
    /// 4
    Four,
}

impl AttemptsSel {
    fn value(self) -> Option<u32> {
        match self {
            AttemptsSel::Default => None,
            AttemptsSel::One => Some(1),
            AttemptsSel::Two => Some(2),
            AttemptsSel::Four => Some(4),
        }
    }
}

/// A valid job to enqueue.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobSpec {
    /// The queue.
    pub queue: QueueSel,
    /// The idempotency key, if any.
    pub key: Option<KeySel>,
    /// The priority.
    pub priority: PrioritySel,
    /// The delay.
    pub delay: DelaySel,
    /// The attempt budget.
    pub attempts: AttemptsSel,
}

/// A job that intake must refuse with `InvalidInput`, changing nothing.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidJob {
    /// Empty queue name.
    EmptyQueue,
    /// Queue name of 129 bytes.
    LongQueue,
    /// Empty key.
    EmptyKey,
    /// Key of 513 bytes.
    LongKey,
    /// Empty payload.
    EmptyPayload,
    /// `max_attempts(0)`.
    ZeroAttempts,
    /// A delay of more than a hundred years.
    HugeDelay,
}

impl InvalidJob {
    fn job(self) -> NewJob {
        let ok = NewJob::new("a", b"bad".to_vec());
        match self {
            InvalidJob::EmptyQueue => NewJob::new("", b"bad".to_vec()),
            InvalidJob::LongQueue => NewJob::new("q".repeat(fenceq::MAX_NAME_LEN + 1), b"bad".to_vec()),
            InvalidJob::EmptyKey => ok.key(""),
            InvalidJob::LongKey => ok.key("k".repeat(fenceq::MAX_KEY_LEN + 1)),
            InvalidJob::EmptyPayload => NewJob::new("a", Vec::new()),
            InvalidJob::ZeroAttempts => ok.max_attempts(0),
            InvalidJob::HugeDelay => ok.delay(Duration::from_secs(101 * 365 * 24 * 3600)),
        }
    }
}

/// A lease for claims and renewals.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseSel {
    /// [`LEASE`] (30 s).
    Standard,
    /// 1 ms.
    OneMs,
    /// One hour.
    Hour,
    /// The longest allowed ([`fenceq::MAX_LEASE`]).
    Max,
    /// Zero (invalid).
    Zero,
    /// One ms over the longest allowed (invalid).
    TooLong,
}

impl LeaseSel {
    fn duration(self) -> Duration {
        match self {
            LeaseSel::Standard => LEASE,
            LeaseSel::OneMs => Duration::from_millis(1),
            LeaseSel::Hour => Duration::from_secs(3600),
            LeaseSel::Max => fenceq::MAX_LEASE,
            LeaseSel::Zero => Duration::ZERO,
            LeaseSel::TooLong => fenceq::MAX_LEASE + Duration::from_millis(1),
        }
    }

    fn valid_ms(self) -> Option<i64> {
        match self {
            LeaseSel::Zero | LeaseSel::TooLong => None,
            other => Some(other.duration().as_millis() as i64),
        }
    }
}

/// A `claim_batch` limit.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchLimit {
    /// 1
    One,
    /// 2
    Two,
    /// 3
    Three,
    /// 8
    Eight,
    /// 0 (invalid)
    Zero,
    /// `MAX_BATCH + 1` (invalid)
    TooMany,
}

impl BatchLimit {
    fn value(self) -> u32 {
        match self {
            BatchLimit::One => 1,
            BatchLimit::Two => 2,
            BatchLimit::Three => 3,
            BatchLimit::Eight => 8,
            BatchLimit::Zero => 0,
            BatchLimit::TooMany => fenceq::MAX_BATCH + 1,
        }
    }
}

/// A page size for exhaustion and unknown pages.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageLimit {
    /// 1
    One,
    /// 2
    Two,
    /// 3
    Three,
    /// 100
    Hundred,
    /// 0 (invalid)
    Zero,
}

impl PageLimit {
    fn value(self) -> u32 {
        match self {
            PageLimit::One => 1,
            PageLimit::Two => 2,
            PageLimit::Three => 3,
            PageLimit::Hundred => 100,
            PageLimit::Zero => 0,
        }
    }
}

/// A job's state, to pick a job by.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateSel {
    /// pending
    Pending,
    /// running
    Running,
    /// waiting
    Waiting,
    /// exhausted
    Exhausted,
    /// unknown
    Unknown,
    /// completed
    Completed,
    /// cancelled
    Cancelled,
}

impl StateSel {
    fn state(self) -> JobState {
        match self {
            StateSel::Pending => JobState::Pending,
            StateSel::Running => JobState::Running,
            StateSel::Waiting => JobState::Waiting,
            StateSel::Exhausted => JobState::Exhausted,
            StateSel::Unknown => JobState::Unknown,
            StateSel::Completed => JobState::Completed,
            StateSel::Cancelled => JobState::Cancelled,
        }
    }
}

/// A job id.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobRef {
    /// Any id ever assigned (pruned ones included): `ever[i % len]`.
    Ever(u8),
    /// The `i % n`-th of the `n` jobs now in this state (by id), else `Ever(i)`.
    InState(StateSel, u8),
    /// An id that never existed.
    Missing,
}

/// Which token a token-taking call presents.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRef {
    /// The token of the most recent claim.
    Latest,
    /// Any token ever issued: `issued[i % len]` (a replay of an old or current token).
    Issued(u8),
    /// The job's current identity (what an exhaustion page or `Queue::job` shows).
    CurrentOf(JobRef),
    /// A forgery derived from `issued[i % len]`.
    Forged(u8, Forgery),
}

/// How a forged token differs from the issued token it is derived from.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forgery {
    /// Right id and attempt, a claim id never issued.
    FreshClaimId,
    /// Right id and attempt, the claim id of another issued token (`issued[i % len]`).
    OtherClaimId(u8),
    /// Right attempt and claim id, another job's id (`ever[i % len]`).
    OtherJob(u8),
    /// Right attempt and claim id, an id that never existed.
    UnknownJob,
    /// Attempt + 1.
    NextAttempt,
    /// Attempt - 1.
    PrevAttempt,
    /// Attempt 0 (what a replayed job's row shows).
    ZeroAttempt,
    /// Attempt `u32::MAX`.
    MaxAttempt,
    /// The nil claim id (what a malformed stored claim id reads as).
    NilClaimId,
}

/// Backoff of a `retry`.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackoffSel {
    /// Due again at once.
    Now,
    /// 1 ms.
    OneMs,
    /// One lease.
    Lease,
    /// `Duration::MAX` (run_at saturates).
    Huge,
    /// `RetryPolicy::default()` (random jitter).
    Policy,
    /// A policy without jitter (base 1 s, max 10 s).
    PolicyNoJitter,
}

impl BackoffSel {
    fn backoff(self) -> Backoff {
        match self {
            BackoffSel::Now => Backoff::After(Duration::ZERO),
            BackoffSel::OneMs => Backoff::After(Duration::from_millis(1)),
            BackoffSel::Lease => Backoff::After(LEASE),
            BackoffSel::Huge => Backoff::After(Duration::MAX),
            BackoffSel::Policy => Backoff::Policy(RetryPolicy::default()),
            BackoffSel::PolicyNoJitter => {
                Backoff::Policy(RetryPolicy { base: Duration::from_secs(1), max: Duration::from_secs(10), jitter: 0.0 })
            }
        }
    }
}

/// An error, reason or evidence text.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextSel {
    /// A short text.
    Short,
    /// ""
    Empty,
    /// Longer than `MAX_ERROR_LEN`, with multi-byte characters across the cut.
    Long,
}

impl TextSel {
    fn text(self, what: &str) -> String {
        match self {
            TextSel::Short => format!("{what} text"),
            TextSel::Empty => String::new(),
            TextSel::Long => format!("{what}!{}", "é".repeat(3000)),
        }
    }
}

/// A park timeout.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkSel {
    /// 1 ms.
    OneMs,
    /// One lease.
    Lease,
    /// One hour.
    Hour,
    /// Zero (invalid).
    Zero,
    /// More than a year (invalid).
    TooLong,
}

impl ParkSel {
    fn duration(self) -> Duration {
        match self {
            ParkSel::OneMs => Duration::from_millis(1),
            ParkSel::Lease => LEASE,
            ParkSel::Hour => Duration::from_secs(3600),
            ParkSel::Zero => Duration::ZERO,
            ParkSel::TooLong => Duration::from_secs(366 * 24 * 3600),
        }
    }
}

/// A resolution of an unknown outcome.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolutionSel {
    /// `Resolution::Complete`
    Completed,
    /// `Resolution::Retry`
    Retry,
    /// `Resolution::Exhaust`
    Exhaust,
}

/// What a `complete_with` or `with_ownership` closure does with its transaction.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClosureAct {
    /// Writes a domain row and returns `Ok`: both commit.
    Write,
    /// Writes a domain row, then fails: both roll back.
    Fail,
    /// Writes a domain row, then calls the queue from inside (`NestedWrite`): both roll back.
    Nested,
    /// Writes a domain row, then panics: both roll back, the panic reaches the caller, and the
    /// queue stays usable. (The panic starts with `resume_unwind`, which skips the panic hook,
    /// so it also works under libFuzzer's aborting hook.)
    Panic,
}

/// A retention for `prune`.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionSel {
    /// `Retention::default()` (7 days).
    Default,
    /// Everything settled up to now.
    Zero,
    /// One lease.
    Lease,
    /// One hour, one row per batch.
    HourBatch1,
    /// Batch size 0 (invalid).
    ZeroBatch,
    /// Batch size over 100,000 (invalid).
    HugeBatch,
}

impl RetentionSel {
    fn retention(self) -> Retention {
        let of = |ms: u64, batch_size: u32| Retention { older_than: Duration::from_millis(ms), batch_size };
        match self {
            RetentionSel::Default => Retention::default(),
            RetentionSel::Zero => of(0, 1000),
            RetentionSel::Lease => of(LEASE_MS as u64, 1000),
            RetentionSel::HourBatch1 => of(HOUR_MS as u64, 1),
            RetentionSel::ZeroBatch => of(0, 0),
            RetentionSel::HugeBatch => of(0, 100_001),
        }
    }
}

/// A clock step forward.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// 0 ms.
    Zero,
    /// 1 ms.
    OneMs,
    /// One lease minus 1 ms.
    LeaseMinusOne,
    /// One lease.
    Lease,
    /// One lease plus 1 ms.
    LeasePlusOne,
    /// One hour.
    Hour,
    /// Eight days (past the default retention).
    Week,
    /// Ten years.
    Decade,
    /// This many ms.
    Ms(u16),
}

impl Step {
    fn ms(self) -> i64 {
        match self {
            Step::Zero => 0,
            Step::OneMs => 1,
            Step::LeaseMinusOne => LEASE_MS - 1,
            Step::Lease => LEASE_MS,
            Step::LeasePlusOne => LEASE_MS + 1,
            Step::Hour => HOUR_MS,
            Step::Week => WEEK_MS,
            Step::Decade => 3652 * 24 * HOUR_MS,
            Step::Ms(ms) => i64::from(ms),
        }
    }
}

/// A clock jump backwards (as a wall clock can make).
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackSel {
    /// 1 ms.
    OneMs,
    /// One lease.
    Lease,
    /// One hour.
    Hour,
    /// Eight days.
    Week,
}

impl BackSel {
    fn ms(self) -> i64 {
        match self {
            BackSel::OneMs => 1,
            BackSel::Lease => LEASE_MS,
            BackSel::Hour => HOUR_MS,
            BackSel::Week => WEEK_MS,
        }
    }
}

/// One step of a model run: every operation of DESIGN.md, clock moves, reopening the queue,
/// and replays of any token ever issued (plus forgeries).
#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub enum QueueOp {
    /// `enqueue` of a valid job (a repeated key returns the existing id).
    Enqueue(JobSpec),
    /// `enqueue_batch` of up to four jobs; `poison` appends an invalid one (nothing is added).
    EnqueueBatch {
        /// The jobs (only the first four are used).
        jobs: Vec<JobSpec>,
        /// Append an invalid job: the whole batch must be refused.
        poison: bool,
    },
    /// `enqueue` of an invalid job: `InvalidInput`, nothing changes.
    EnqueueInvalid(InvalidJob),
    /// `enqueue_tx` inside a caller's `BEGIN IMMEDIATE` transaction (the outbox pattern),
    /// then commit or roll back: the job exists exactly when the caller's commit does.
    EnqueueTx {
        /// The job.
        job: JobSpec,
        /// Commit (else roll back).
        commit: bool,
    },
    /// `claim`.
    Claim {
        /// The queue.
        queue: ClaimQueue,
        /// The worker id.
        worker: WorkerSel,
        /// The lease.
        lease: LeaseSel,
    },
    /// `claim_batch`.
    ClaimBatch {
        /// The queue.
        queue: ClaimQueue,
        /// The worker id.
        worker: WorkerSel,
        /// The lease.
        lease: LeaseSel,
        /// The limit.
        limit: BatchLimit,
    },
    /// `renew`.
    Renew {
        /// The token presented.
        token: TokenRef,
        /// The new lease.
        lease: LeaseSel,
    },
    /// `renew_all` for up to four tokens: one result per token.
    RenewAll {
        /// The tokens presented (only the first four are used).
        tokens: Vec<TokenRef>,
        /// The new lease.
        lease: LeaseSel,
    },
    /// `owns`, and `owns_in` on a connection at the same instant.
    Owns(TokenRef),
    /// `complete_all` for up to four tokens: one result per token.
    CompleteAll(Vec<TokenRef>),
    /// `complete`.
    Complete(TokenRef),
    /// `complete_with` and a domain write.
    CompleteWith {
        /// The token presented.
        token: TokenRef,
        /// What the closure does.
        act: ClosureAct,
    },
    /// `with_ownership` and a domain write.
    WithOwnership {
        /// The token presented.
        token: TokenRef,
        /// What the closure does.
        act: ClosureAct,
    },
    /// `retry` with an explicit delay or a policy.
    Retry {
        /// The token presented.
        token: TokenRef,
        /// The backoff.
        backoff: BackoffSel,
        /// The error text.
        error: TextSel,
    },
    /// `exhaust`.
    Exhaust {
        /// The token presented.
        token: TokenRef,
        /// The error text.
        error: TextSel,
    },
    /// `mark_unknown`.
    MarkUnknown {
        /// The token presented.
        token: TokenRef,
        /// The evidence text.
        evidence: TextSel,
    },
    /// `park`.
    Park {
        /// The token presented.
        token: TokenRef,
        /// The timeout.
        timeout: ParkSel,
        /// The reason text.
        reason: TextSel,
    },
    /// `resume`.
    Resume(TokenRef),
    /// `cancel`.
    Cancel(JobRef),
    /// `acknowledge`.
    Acknowledge(TokenRef),
    /// `replay`.
    Replay(JobRef),
    /// `resolve`.
    Resolve {
        /// The token presented.
        token: TokenRef,
        /// The decision.
        resolution: ResolutionSel,
    },
    /// `reap`.
    Reap,
    /// `prune`.
    Prune(RetentionSel),
    /// The next page of the current exhaustion pass (starting a pass when none is open).
    ExhaustionsPage(PageLimit),
    /// One page of unknowns after a job's id (or from the start).
    UnknownsPage {
        /// Start after this job's id.
        after: Option<JobRef>,
        /// The page size.
        limit: PageLimit,
    },
    /// Moves the clock forward.
    Advance(Step),
    /// Moves the clock backwards.
    ClockBack(BackSel),
    /// Drops the queue and opens the same database file again.
    Reopen,
    /// `owns` for every token ever issued, `stats`, and `reap_preview` / `prune_preview`.
    Check,
}

impl QueueOp {
    /// A short name for counting calls per operation.
    pub fn name(&self) -> &'static str {
        match self {
            QueueOp::Enqueue(_) => "enqueue",
            QueueOp::EnqueueBatch { .. } => "enqueue_batch",
            QueueOp::EnqueueInvalid(_) => "enqueue_invalid",
            QueueOp::EnqueueTx { .. } => "enqueue_tx",
            QueueOp::RenewAll { .. } => "renew_all",
            QueueOp::CompleteAll(_) => "complete_all",
            QueueOp::Claim { .. } => "claim",
            QueueOp::ClaimBatch { .. } => "claim_batch",
            QueueOp::Renew { .. } => "renew",
            QueueOp::Owns(_) => "owns",
            QueueOp::Complete(_) => "complete",
            QueueOp::CompleteWith { .. } => "complete_with",
            QueueOp::WithOwnership { .. } => "with_ownership",
            QueueOp::Retry { .. } => "retry",
            QueueOp::Exhaust { .. } => "exhaust",
            QueueOp::MarkUnknown { .. } => "mark_unknown",
            QueueOp::Park { .. } => "park",
            QueueOp::Resume(_) => "resume",
            QueueOp::Cancel(_) => "cancel",
            QueueOp::Acknowledge(_) => "acknowledge",
            QueueOp::Replay(_) => "replay",
            QueueOp::Resolve { .. } => "resolve",
            QueueOp::Reap => "reap",
            QueueOp::Prune(_) => "prune",
            QueueOp::ExhaustionsPage(_) => "exhaustions",
            QueueOp::UnknownsPage { .. } => "unknowns",
            QueueOp::Advance(_) => "advance",
            QueueOp::ClockBack(_) => "clock_back",
            QueueOp::Reopen => "reopen",
            QueueOp::Check => "check",
        }
    }
}

/// Decodes up to [`MAX_OPS`] operations from fuzzer bytes.
pub fn decode(data: &[u8]) -> Vec<QueueOp> {
    let mut u = Unstructured::new(data);
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS && !u.is_empty() {
        match QueueOp::arbitrary(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    ops
}

// ==================================================================== the model

/// A job the model enqueues, with the fields of the [`NewJob`] built from it ([`NewJob`] keeps
/// its fields to fenceq, so the model keeps its own copy of what it asked for).
#[derive(Debug, Clone)]
struct Planned {
    queue: String,
    payload: Vec<u8>,
    key: Option<String>,
    priority: i32,
    delay: Duration,
    max_attempts: Option<u32>,
}

impl Planned {
    /// The job to enqueue.
    fn new_job(&self) -> NewJob {
        let mut job = NewJob::new(self.queue.clone(), self.payload.clone()).priority(self.priority).delay(self.delay);
        if let Some(key) = &self.key {
            job = job.key(key.clone());
        }
        if let Some(attempts) = self.max_attempts {
            job = job.max_attempts(attempts);
        }
        job
    }
}

/// One job of the model: the whole row, as `Queue::job` returns it.
pub type ModelJob = Job;

/// The reference model: every row the queue should hold, and the claims it has handed out.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Every row that should exist, by id.
    pub jobs: BTreeMap<JobId, ModelJob>,
    /// Every claim id ever issued.
    pub claim_ids: BTreeSet<ClaimId>,
    /// Every token ever issued, in claim order.
    pub issued: Vec<ClaimToken>,
    /// Every id ever assigned, in order.
    pub ever: Vec<JobId>,
    /// Ids deleted by prune.
    pub pruned: BTreeSet<JobId>,
    /// Domain rows (job, attempt) committed by `complete_with` and `with_ownership`.
    pub domain: Vec<(i64, u32)>,
    /// Rows that reached completed or cancelled, as they were then: they must never change.
    terminal: BTreeMap<JobId, ModelJob>,
    /// The exhaustion pass in progress.
    pass: Option<Pass>,
    /// Payload counter.
    seq: u64,
}

/// An exhaustion paging pass (invariant 10).
#[derive(Debug, Clone)]
struct Pass {
    cursor: Option<Cursor>,
    /// Unacknowledged exhaustions when the pass began that have stayed so since.
    stable: BTreeSet<JobId>,
    returned: BTreeSet<JobId>,
}

/// What a call did, reduced to what the model predicts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Got {
    Ok,
    Lost(LostReason),
    Stale,
    NotFound,
    InvalidState(JobState),
    InvalidInput,
    Domain,
    Nested,
    WaitExpired,
    Other(String),
}

/// The unknown outcome the engine reports for a terminal record the model reads like an
/// exhaustion's (the same row fields; its text is the evidence).
fn unknown_of(record: Exhaustion) -> UnknownOutcome {
    let Exhaustion { token, queue, key, payload, reason, at } = record;
    // The deprecated `reason` holds the evidence too, so that old code still builds.
    #[allow(deprecated)]
    UnknownOutcome { token, queue, key, payload, evidence: reason.clone(), at, reason }
}

fn got_of<T>(r: &fenceq::Result<T>) -> Got {
    match r {
        Ok(_) => Got::Ok,
        Err(e) => got_err(e),
    }
}

fn got_err(e: &Error) -> Got {
    match e {
        Error::OwnershipLost { reason, .. } => Got::Lost(*reason),
        Error::StaleIdentity { .. } => Got::Stale,
        Error::NotFound(_) => Got::NotFound,
        Error::InvalidState { state, .. } => Got::InvalidState(*state),
        Error::InvalidInput { .. } => Got::InvalidInput,
        Error::Domain(_) => Got::Domain,
        Error::NestedWrite => Got::Nested,
        Error::WaitExpired { .. } => Got::WaitExpired,
        other => Got::Other(format!("{other} ({other:?})")),
    }
}

/// Cuts a stored text as the engine does (`MAX_ERROR_LEN` bytes at a char boundary).
fn clip(text: &str) -> String {
    let mut end = text.len().min(fenceq::MAX_ERROR_LEN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

fn dur_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Model {
    fn new() -> Model {
        Model::default()
    }

    fn next_id(&self) -> i64 {
        self.ever.last().map_or(1, |id| id.0 + 1)
    }

    fn by_key(&self, queue: &str, key: &str) -> Option<JobId> {
        self.jobs.values().find(|j| j.queue == queue && j.key.as_deref() == Some(key)).map(|j| j.id)
    }

    /// The result of a token-guarded write (`owned_by_token!`), with the engine's reason.
    fn owned(&self, t: &ClaimToken, now: i64) -> Got {
        match self.jobs.get(&t.id) {
            None => Got::Lost(LostReason::Missing),
            Some(j) if j.attempt != t.attempt || j.claim_id != Some(t.claim_id) => Got::Lost(LostReason::Superseded),
            Some(j) if j.state != JobState::Running => Got::Lost(LostReason::NotRunning(j.state)),
            Some(j) if j.lease_until.is_none_or(|l| l <= now) => Got::Lost(LostReason::LeaseExpired),
            Some(_) => Got::Ok,
        }
    }

    /// The result of a write guarded by the exact identity of a job in `state`.
    fn identified(&self, t: &ClaimToken, state: JobState) -> Got {
        match self.jobs.get(&t.id) {
            None => Got::NotFound,
            Some(j) if j.attempt != t.attempt || j.claim_id != Some(t.claim_id) => Got::Stale,
            Some(j) if j.state != state => Got::InvalidState(j.state),
            Some(_) => Got::Ok,
        }
    }

    /// The result of an id-addressed transition from one of `from`.
    fn by_id(&self, id: JobId, from: &[JobState]) -> Got {
        match self.jobs.get(&id) {
            None => Got::NotFound,
            Some(j) if !from.contains(&j.state) => Got::InvalidState(j.state),
            Some(_) => Got::Ok,
        }
    }

    /// Records an unnamed operator's change on the row, as the engine does.
    fn decide(&mut self, id: JobId, action: &str, now: i64) {
        let decision = fenceq::Decision { action: action.to_string(), at: now, by: None, note: None };
        self.job_mut(id).decision = Some(decision);
    }

    fn job_mut(&mut self, id: JobId) -> &mut ModelJob {
        self.jobs.get_mut(&id).expect("the model checked the job exists")
    }

    /// What an enqueue of `spec` should return: `Duplicate(id)` while a row has its key,
    /// else `New` with an id above every id ever assigned (`None` here: SQLite picks it, and a
    /// conflicting keyed insert may burn one, so ids have gaps but never repeat).
    fn expect_insert(&self, spec: &Planned) -> Option<JobId> {
        spec.key.as_ref().and_then(|key| self.by_key(&spec.queue, key))
    }

    /// Applies an enqueue the engine answered with `got`; `Err` when it is not what the
    /// model predicts.
    fn insert(&mut self, spec: &Planned, got: Enqueued, now: i64) -> Result<(), String> {
        match (self.expect_insert(spec), got) {
            (Some(existing), Enqueued::Duplicate(id)) if id == existing => return Ok(()),
            (None, Enqueued::New(id)) if id.0 >= self.next_id() => {}
            (Some(existing), other) => {
                return Err(format!(
                    "invariant 9: enqueue of an existing key returned {other:?}, not Duplicate({existing})"
                ))
            }
            (None, other) => {
                return Err(format!(
                    "invariants 8/9: enqueue returned {other:?}; the model expected New with an id of at least {}",
                    self.next_id()
                ))
            }
        }
        let Enqueued::New(id) = got else { unreachable!("matched above") };
        self.ever.push(id);
        self.jobs.insert(
            id,
            Job {
                id,
                queue: spec.queue.clone(),
                key: spec.key.clone(),
                payload: spec.payload.clone(),
                state: JobState::Pending,
                priority: spec.priority,
                run_at: now.saturating_add(dur_ms(spec.delay)),
                attempt: 0,
                max_attempts: spec.max_attempts.unwrap_or(DEFAULT_ATTEMPTS),
                claim_id: None,
                worker: None,
                lease_until: None,
                heartbeat_at: None,
                wait_until: None,
                last_error: None,
                created_at: now,
                settled_at: None,
                exhausted_at: None,
                acknowledged_at: None,
                decision: None,
            },
        );
        Ok(())
    }

    /// The ids a claim of `limit` on `queue` takes at `now`, in claim order: due pending jobs
    /// and running jobs whose lease expired with attempts left, by priority (highest first),
    /// then run_at, then id.
    fn claimable(&self, queue: &str, limit: u32, now: i64) -> Vec<JobId> {
        let mut all: Vec<&ModelJob> = self
            .jobs
            .values()
            .filter(|j| j.queue == queue)
            .filter(|j| match j.state {
                JobState::Pending => j.run_at <= now,
                JobState::Running => j.lease_until.is_some_and(|l| l <= now) && j.attempt < j.max_attempts,
                _ => false,
            })
            .collect();
        all.sort_by_key(|j| (-i64::from(j.priority), j.run_at, j.id));
        all.into_iter().take(limit as usize).map(|j| j.id).collect()
    }

    fn settle(&mut self, id: JobId, state: JobState, now: i64) {
        let j = self.job_mut(id);
        j.state = state;
        j.lease_until = None;
        j.settled_at = Some(now);
    }

    fn exhaust(&mut self, id: JobId, error: Option<String>, now: i64) {
        let j = self.job_mut(id);
        j.state = JobState::Exhausted;
        j.lease_until = None;
        if error.is_some() {
            j.last_error = error;
        }
        j.settled_at = Some(now);
        j.exhausted_at = Some(now);
        j.acknowledged_at = None;
    }

    fn reap(&mut self, now: i64) -> fenceq::ReapReport {
        let mut report = fenceq::ReapReport::default();
        for j in self.jobs.values_mut() {
            if j.state == JobState::Running && j.lease_until.is_some_and(|l| l <= now) {
                j.last_error = Some(format!("lease expired (worker {})", j.worker.as_deref().unwrap_or("")));
                j.lease_until = None;
                if j.attempt < j.max_attempts {
                    j.state = JobState::Pending;
                    j.run_at = now;
                    j.exhausted_at = None;
                    j.settled_at = None;
                    report.requeued += 1;
                } else {
                    j.state = JobState::Exhausted;
                    j.exhausted_at = Some(now);
                    j.settled_at = Some(now);
                    report.exhausted += 1;
                }
            }
        }
        for j in self.jobs.values_mut() {
            if j.state == JobState::Waiting && j.wait_until.is_some_and(|w| w <= now) {
                j.state = JobState::Exhausted;
                j.wait_until = None;
                j.settled_at = Some(now);
                j.exhausted_at = Some(now);
                j.acknowledged_at = None;
                j.last_error = Some(format!("wait expired: {}", j.last_error.as_deref().unwrap_or("no reason given")));
                report.waits_expired += 1;
            }
        }
        report
    }

    fn prunable(&self, retention: &Retention, now: i64) -> (Vec<JobId>, Vec<JobId>) {
        let horizon = now.saturating_sub(dur_ms(retention.older_than));
        let settled = self
            .jobs
            .values()
            .filter(|j| matches!(j.state, JobState::Completed | JobState::Cancelled))
            .filter(|j| j.settled_at.is_some_and(|s| s <= horizon))
            .map(|j| j.id)
            .collect();
        let acknowledged = self
            .jobs
            .values()
            .filter(|j| j.state == JobState::Exhausted && j.acknowledged_at.is_some_and(|a| a <= horizon))
            .map(|j| j.id)
            .collect();
        (settled, acknowledged)
    }

    fn page(&self, state: JobState, after: i64, limit: u32) -> Page<Exhaustion> {
        let items: Vec<Exhaustion> = self
            .jobs
            .values()
            .filter(|j| j.id.0 > after && j.state == state)
            .filter(|j| state != JobState::Exhausted || j.acknowledged_at.is_none())
            .take(limit as usize)
            .map(|j| Exhaustion {
                token: j.token().expect("exhausted and unknown rows keep their token"),
                queue: j.queue.clone(),
                key: j.key.clone(),
                payload: j.payload.clone(),
                reason: j.last_error.clone(),
                at: if state == JobState::Exhausted { j.exhausted_at } else { j.settled_at }.unwrap_or_default(),
            })
            .collect();
        let next = (items.len() == limit as usize).then(|| Cursor(items.last().map_or(after, |i| i.token.id.0)));
        Page { items, next }
    }

    fn stats(&self, now: i64) -> Stats {
        let mut by_queue: BTreeMap<&str, QueueStats> = BTreeMap::new();
        for j in self.jobs.values() {
            let q = by_queue
                .entry(j.queue.as_str())
                .or_insert_with(|| QueueStats { queue: j.queue.clone(), ..QueueStats::default() });
            match j.state {
                JobState::Pending => {
                    q.pending += 1;
                    q.oldest_pending_run_at = Some(q.oldest_pending_run_at.map_or(j.run_at, |r| r.min(j.run_at)));
                }
                JobState::Running => {
                    q.running += 1;
                    if j.lease_until.is_some_and(|l| l <= now) {
                        q.expired_leases += 1;
                    }
                }
                JobState::Waiting => q.waiting += 1,
                JobState::Completed => q.completed += 1,
                JobState::Exhausted if j.acknowledged_at.is_some() => q.exhausted_acknowledged += 1,
                JobState::Exhausted => q.exhausted_unacknowledged += 1,
                JobState::Unknown => q.unknown += 1,
                JobState::Cancelled => q.cancelled += 1,
            }
        }
        Stats { queues: by_queue.into_values().collect() }
    }
}

// ==================================================================== the runner

/// Counts of one run (to see what a test or a corpus actually exercised).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Steps applied.
    pub steps: usize,
    /// Per operation name: (calls that succeeded, calls that returned an error).
    pub calls: BTreeMap<&'static str, (u64, u64)>,
    /// Most rows at once.
    pub max_rows: usize,
    /// Claims handed out.
    pub claims: usize,
    /// Whether the run's database outlives its handle and the ops reopen it (a file for
    /// SQLite; always so through a harness).
    pub file: bool,
}

impl RunStats {
    /// Adds another run's counts.
    pub fn merge(&mut self, other: &RunStats) {
        self.steps += other.steps;
        for (name, (ok, err)) in &other.calls {
            let entry = self.calls.entry(name).or_default();
            entry.0 += ok;
            entry.1 += err;
        }
        self.max_rows = self.max_rows.max(other.max_rows);
        self.claims += other.claims;
        self.file |= other.file;
    }
}

/// A database file in its own fresh directory under the temp directory; the directory is
/// removed on drop (a connection the pool opens late cannot recreate a file in it).
#[derive(Debug)]
pub struct TempDb {
    dir: PathBuf,
    path: PathBuf,
}

impl TempDb {
    /// A fresh, unused path.
    pub fn new(tag: &str) -> TempDb {
        // Memory-backed where the machine has it: the model checks what the queue does, not
        // what the disk keeps (tests/power_loss.rs does that), and a checkpoint's fsync on a
        // real disk cost more than the rest of a file-backed run.
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        let dir = base.join(format!("fenceq-{tag}-{}", Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("creating a temp directory");
        let path = dir.join("queue.db");
        TempDb { dir, path }
    }

    /// A fresh path holding a copy of a current-schema database (made once per thread).
    pub fn from_template() -> TempDb {
        let bytes = TEMPLATE.with(|template| {
            template
                .borrow_mut()
                .get_or_insert_with(|| {
                    let db = TempDb::new("template");
                    let queue = open_queue(&ManualClock::new(T0), Some(db.path())).expect("the template opens");
                    drop(queue);
                    std::fs::read(db.path()).expect("reading the template")
                })
                .clone()
        });
        let db = TempDb::new("model");
        std::fs::write(db.path(), bytes).expect("copying the template");
        db
    }

    /// The database path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        // A connection the reader pool opens in the background just as the queue goes can
        // create the file again between the removal of the files and of the directory.
        for _ in 0..5 {
            if std::fs::remove_dir_all(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn open_queue(clock: &ManualClock, path: Option<&Path>) -> fenceq::Result<Queue> {
    let mut builder = Queue::builder().clock(clock.clone()).max_attempts(DEFAULT_ATTEMPTS);
    if let Some(path) = path {
        builder = builder.path(path).pool_size(2);
    }
    let queue = builder.open()?;
    queue.with_connection(|c| {
        c.execute_batch(
            "CREATE TABLE IF NOT EXISTS model_domain (job INTEGER NOT NULL, attempt INTEGER NOT NULL, note TEXT)",
        )?;
        Ok(())
    })?;
    Ok(queue)
}

/// What the runner needs from the database under the queue that fenceq's public API does not
/// give: a reopen, a transaction of the caller's own for `enqueue_tx`, and the domain table
/// that `complete_with` / `with_ownership` closures write. Everything else (every call, every
/// check) is the shared runner's, whatever the store.
///
/// Two kinds: [`Harnessed`], any store through its conformance [`Harness`]; and [`Sqlite`],
/// SQLite's own fast path behind the fuzz targets (an in-memory queue reused from run to run,
/// a template file copied to /dev/shm), which is worth thousands of runs a second.
trait Backend {
    /// The store under the queue.
    type Store: Store;

    /// The database, as the divergence report names it.
    fn describe(&self) -> &'static str;

    /// The call that replays a report's ops on the same kind of database.
    fn replay_hint(&self) -> &'static str;

    /// Whether the database outlives its handle, so that `Reopen` drops the queue and opens
    /// it again (else, in memory, `Reopen` does nothing).
    fn reopens(&self) -> bool;

    /// A new handle on the same database, the old one dropped (only when [`Backend::reopens`]).
    fn reopen(&self, clock: &ManualClock) -> fenceq::Result<Queue<Self::Store>>;

    /// `queue.enqueue_tx` inside a `BEGIN IMMEDIATE` transaction of the caller's own (the
    /// outbox pattern), then its commit or rollback.
    fn enqueue_tx(&self, queue: &Queue<Self::Store>, job: NewJob, commit: bool) -> fenceq::Result<Enqueued>;

    /// A closure's domain write: one row (job, attempt, note) in the caller's transaction `tx`.
    fn write_domain(tx: &<Self::Store as Store>::Tx, job: i64, attempt: u32, note: &str) -> fenceq::Result<()>;

    /// Every domain row as (job, attempt), in insertion order.
    fn domain(&self, queue: &Queue<Self::Store>) -> fenceq::Result<Vec<(i64, i64)>>;
}

/// Any store, through its [`Harness`]: a place of its own, the queue the harness opens there
/// (and opens again on `Reopen`), its `replies` table as the domain table, and its
/// transaction of the application's own (another connection than the queue's) for
/// `enqueue_tx`.
struct Harnessed<'h, H: Harness> {
    harness: &'h H,
    place: H::Place,
}

impl<H: Harness> Backend for Harnessed<'_, H> {
    type Store = H::Store;

    fn describe(&self) -> &'static str {
        "the harness's place"
    }

    fn replay_hint(&self) -> &'static str {
        "fenceq_conformance::model::run_on(&harness, &ops)"
    }

    fn reopens(&self) -> bool {
        true
    }

    fn reopen(&self, clock: &ManualClock) -> fenceq::Result<Queue<H::Store>> {
        Ok(self.harness.open(&self.place, clock, Some(DEFAULT_ATTEMPTS)))
    }

    fn enqueue_tx(&self, queue: &Queue<H::Store>, job: NewJob, commit: bool) -> fenceq::Result<Enqueued> {
        let mut job = Some(job);
        let mut enqueued = None;
        self.harness.foreign_transaction(&self.place, commit, &mut |tx| {
            let job = job.take().expect("the harness runs the transaction's body once");
            enqueued = Some(queue.enqueue_tx(tx, job));
        });
        enqueued.expect("the harness ran the transaction's body")
    }

    fn write_domain(tx: &<H::Store as Store>::Tx, job: i64, attempt: u32, note: &str) -> fenceq::Result<()> {
        H::insert_reply(tx, job, i64::from(attempt), note)
    }

    fn domain(&self, queue: &Queue<H::Store>) -> fenceq::Result<Vec<(i64, i64)>> {
        let replies = queue.with_connection(H::replies_in)?;
        Ok(replies.into_iter().map(|(job, attempt, _)| (job, attempt)).collect())
    }
}

/// SQLite's fast path: a database file in /dev/shm copied from a template (`db`), or this
/// thread's spare in-memory queue (`db` is `None`).
struct Sqlite {
    db: Option<TempDb>,
}

impl Backend for Sqlite {
    type Store = SqliteStore;

    fn describe(&self) -> &'static str {
        if self.db.is_some() {
            "a SQLite file"
        } else {
            "SQLite in memory"
        }
    }

    fn replay_hint(&self) -> &'static str {
        "fenceq_conformance::model::run(&ops)"
    }

    fn reopens(&self) -> bool {
        self.db.is_some()
    }

    fn reopen(&self, clock: &ManualClock) -> fenceq::Result<Queue> {
        let db = self.db.as_ref().expect("only a file is reopened");
        open_queue(clock, Some(db.path()))
    }

    fn enqueue_tx(&self, queue: &Queue, job: NewJob, commit: bool) -> fenceq::Result<Enqueued> {
        queue.with_connection(|c| {
            let tx = rusqlite::Transaction::new_unchecked(c, rusqlite::TransactionBehavior::Immediate)?;
            let enqueued = queue.enqueue_tx(&tx, job)?;
            if commit {
                tx.commit()?;
            } else {
                tx.rollback()?;
            }
            Ok(enqueued)
        })
    }

    fn write_domain(tx: &rusqlite::Connection, job: i64, attempt: u32, note: &str) -> fenceq::Result<()> {
        tx.prepare_cached("INSERT INTO model_domain (job, attempt, note) VALUES (?1, ?2, ?3)")?
            .execute(rusqlite::params![job, attempt, note])?;
        Ok(())
    }

    fn domain(&self, queue: &Queue) -> fenceq::Result<Vec<(i64, i64)>> {
        queue.with_connection(|c| {
            let mut stmt = c.prepare_cached("SELECT job, attempt FROM model_domain ORDER BY rowid")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }
}

struct Runner<'a, B: Backend> {
    // Dropped in this order: the queue before its database.
    queue: Option<Queue<B::Store>>,
    backend: B,
    ops: &'a [QueueOp],
    clock: ManualClock,
    model: Model,
    step: usize,
    stats: RunStats,
}

type Check = Result<(), String>;

/// Applies `ops` to a real queue and to the model; panics at the first divergence or
/// invariant violation with the step, the operation, the model's expectation, what the engine
/// did, the ops so far and the model's rows. `FENCEQ_MODEL_TRACE=1` prints every step.
///
/// SQLite's fast path: in memory, or on a database file when the ops hold a `Reopen`.
/// [`run_on`] runs the same on any store through its harness.
pub fn run(ops: &[QueueOp]) -> RunStats {
    try_run(ops).unwrap_or_else(|e| panic!("{e}"))
}

/// Decodes fuzzer bytes with [`decode`] and runs them on an in-memory queue (`Reopen` does
/// nothing there): the `fence_invariants` target, cheap enough for thousands of runs a second.
pub fn run_bytes(data: &[u8]) -> RunStats {
    try_run_sqlite(&decode(data), false).unwrap_or_else(|e| panic!("{e}"))
}

/// Decodes fuzzer bytes and [`run`]s them, on a database file when they hold a `Reopen`: the
/// `fence_invariants_file` target, for what needs a file (a queue closed and opened again).
pub fn run_bytes_file(data: &[u8]) -> RunStats {
    run(&decode(data))
}

/// [`run`] that returns the divergence report instead of panicking (for proptest). Panics
/// that come from the engine itself still unwind.
pub fn try_run(ops: &[QueueOp]) -> Result<RunStats, String> {
    try_run_sqlite(ops, true)
}

/// [`run`] on the store of `harness`: a fresh scratch place of the harness's own
/// ([`Harness::create_scratch`]), the queue the harness opens there with [`DEFAULT_ATTEMPTS`]
/// (opened again there by every `Reopen`), the harness's `replies` table as the domain table,
/// and the harness's own transaction for `enqueue_tx`. For many runs, [`HarnessRuns`] reuses
/// the place from one run to the next.
pub fn run_on<H: Harness>(harness: &H, ops: &[QueueOp]) -> RunStats {
    HarnessRuns::new(harness).run(ops)
}

/// [`run_on`] that returns the divergence report instead of panicking.
pub fn try_run_on<H: Harness>(harness: &H, ops: &[QueueOp]) -> Result<RunStats, String> {
    HarnessRuns::new(harness).try_run(ops)
}

/// Model runs on the store of one harness, one after the other (the conformance kit's corpus
/// replay and property test): each is [`run_on`]'s, but a run that ended without a
/// divergence hands its place and open queue on to the next when the harness can empty them
/// ([`Harness::recycle`]), as opening a queue costs more than most runs. A run that diverged or
/// panicked never hands its place on.
pub struct HarnessRuns<'h, H: Harness> {
    harness: &'h H,
    spare: Option<Spare<H>>,
}

/// A place emptied for the next run, with its open queue and the queue's clock.
struct Spare<H: Harness> {
    // Dropped in this order: the queue before its place.
    queue: Queue<H::Store>,
    place: H::Place,
    clock: ManualClock,
}

impl<'h, H: Harness> HarnessRuns<'h, H> {
    /// No run yet.
    pub fn new(harness: &'h H) -> Self {
        HarnessRuns { harness, spare: None }
    }

    /// Runs `ops`; panics at the first divergence, as [`run`] does.
    pub fn run(&mut self, ops: &[QueueOp]) -> RunStats {
        self.try_run(ops).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs `ops`; returns the divergence report instead of panicking (for proptest). Panics
    /// that come from the store itself still unwind.
    pub fn try_run(&mut self, ops: &[QueueOp]) -> Result<RunStats, String> {
        let ops = bounded(ops);
        let harness = self.harness;
        let Spare { queue, place, clock } = self.spare.take().unwrap_or_else(|| {
            let place = harness.create_scratch();
            let clock = ManualClock::new(T0);
            let queue = harness.open(&place, &clock, Some(DEFAULT_ATTEMPTS));
            Spare { queue, place, clock }
        });
        clock.set(T0);
        let reopens = ops.iter().any(|op| matches!(op, QueueOp::Reopen));
        let (stats, queue, backend) = drive(ops, Harnessed { harness, place }, queue, clock.clone(), reopens)?;
        if harness.recycle(&backend.place, &queue) {
            self.spare = Some(Spare { queue, place: backend.place, clock });
        }
        Ok(stats)
    }
}

/// [`try_run`], on a database file when `file_for_reopen` and the ops hold a `Reopen`, else in
/// memory.
fn try_run_sqlite(ops: &[QueueOp], file_for_reopen: bool) -> Result<RunStats, String> {
    let ops = bounded(ops);
    let file = file_for_reopen && ops.iter().any(|op| matches!(op, QueueOp::Reopen));
    let (queue, clock, db) = if file {
        let clock = ManualClock::new(T0);
        let db = TempDb::from_template();
        let queue = open_queue(&clock, Some(db.path())).map_err(|e| format!("opening the queue: {e:?}"))?;
        (queue, clock, Some(db))
    } else {
        let (queue, clock) = spare_memory_queue().map_err(|e| format!("opening the queue: {e:?}"))?;
        (queue, clock, None)
    };
    let (stats, queue, backend) = drive(ops, Sqlite { db }, queue, clock.clone(), file)?;
    // Close the queue before the file goes; an in-memory queue serves the next run.
    match backend.db {
        Some(db) => {
            drop(queue);
            drop(db);
        }
        None => SPARE.with(|spare| *spare.borrow_mut() = Some((queue, clock))),
    }
    Ok(stats)
}

/// The runner, whatever the store: applies `ops` (at most `4 * MAX_OPS` of them) to `queue`
/// and to a fresh model, checking after every step and at the end. `file`: the database
/// outlives its handle (what [`RunStats::file`] reports). On success it hands back the queue
/// and the backend, for the caller to close or reuse; on a divergence both are dropped here.
fn drive<B: Backend>(
    ops: &[QueueOp],
    backend: B,
    queue: Queue<B::Store>,
    clock: ManualClock,
    file: bool,
) -> Result<(RunStats, Queue<B::Store>, B), String> {
    let ops = bounded(ops);
    let mut runner = Runner {
        ops,
        clock,
        backend,
        queue: Some(queue),
        model: Model::new(),
        step: 0,
        stats: RunStats { file, ..RunStats::default() },
    };
    let trace = std::env::var_os("FENCEQ_MODEL_TRACE").is_some();
    for (i, op) in ops.iter().enumerate() {
        runner.step = i;
        runner.apply(op).map_err(|e| runner.report(&e))?;
        runner.after_step().map_err(|e| runner.report(&e))?;
        runner.stats.steps += 1;
        if trace {
            eprintln!("step {i}: {op:?}\n{}", runner.rows());
        }
    }
    runner.step = ops.len();
    runner.full_check().map_err(|e| runner.report(&format!("final check: {e}")))?;
    let queue = runner.queue.take().expect("the queue is open after a run without a divergence");
    Ok((runner.stats, queue, runner.backend))
}

/// The first `4 * MAX_OPS` ops: what a run applies of a longer sequence.
fn bounded(ops: &[QueueOp]) -> &[QueueOp] {
    &ops[..ops.len().min(4 * MAX_OPS)]
}

thread_local! {
    /// The in-memory queue of this thread's last run that ended without a divergence, emptied
    /// and reused by the next one: opening a queue (its migrations, its statement caches) cost
    /// more than most runs. A run that diverged or panicked never hands its queue on.
    static SPARE: std::cell::RefCell<Option<(Queue, ManualClock)>> = const { std::cell::RefCell::new(None) };
    /// A current-schema database file (with the model's domain table), copied for every
    /// file-backed run instead of created and migrated each time.
    static TEMPLATE: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
}

/// An empty in-memory queue at `T0`: this thread's spare, reset as a fresh one would be (no
/// rows, no domain rows, ids from 1 again), or a new one.
fn spare_memory_queue() -> fenceq::Result<(Queue, ManualClock)> {
    if let Some((queue, clock)) = SPARE.with(|spare| spare.borrow_mut().take()) {
        queue.transaction(|tx| {
            Ok(tx.execute_batch("DELETE FROM fenceq_jobs; DELETE FROM model_domain; DELETE FROM sqlite_sequence;")?)
        })?;
        clock.set(T0);
        return Ok((queue, clock));
    }
    let clock = ManualClock::new(T0);
    Ok((open_queue(&clock, None)?, clock))
}

impl<B: Backend> Runner<'_, B> {
    fn q(&self) -> &Queue<B::Store> {
        self.queue.as_ref().expect("the queue is open between steps")
    }

    fn now(&self) -> i64 {
        use fenceq::Clock;
        self.clock.now_ms()
    }

    fn report(&self, what: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "fenceq model divergence at step {} of {}: {what}", self.step, self.ops.len());
        if let Some(op) = self.ops.get(self.step) {
            let _ = writeln!(s, "  operation: {op:?}");
        }
        let _ = writeln!(s, "  clock: T0{:+} ms, database: {}", self.now() - T0, self.backend.describe());
        let _ = writeln!(s, "  ops so far (replay with {}):", self.backend.replay_hint());
        let _ = writeln!(s, "  {:?}", &self.ops[..(self.step + 1).min(self.ops.len())]);
        let _ = writeln!(s, "  model rows:");
        s.push_str(&self.rows());
        s
    }

    fn rows(&self) -> String {
        let mut s = String::new();
        for j in self.model.jobs.values() {
            let _ = writeln!(
                s,
                "    {} {} {:?} attempt {}/{} claim {:?} lease_until {:?} run_at {:?} wait_until {:?}",
                j.id,
                j.queue,
                j.state,
                j.attempt,
                j.max_attempts,
                j.claim_id.map(|c| c.0.to_string()),
                j.lease_until.map(|t| t - T0),
                j.run_at - T0,
                j.wait_until.map(|t| t - T0),
            );
        }
        s
    }

    fn count(&mut self, name: &'static str, ok: bool) {
        let entry = self.stats.calls.entry(name).or_default();
        if ok {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }

    fn expect(&mut self, what: &str, expected: &Got, got: &Got) -> Check {
        if expected != got {
            return Err(format!("{what}: the model expected {expected:?}, the engine returned {got:?}"));
        }
        Ok(())
    }

    fn job_id(&self, r: JobRef) -> JobId {
        let ever = |i: u8| match self.model.ever.len() {
            0 => JobId(1_000_000),
            n => self.model.ever[i as usize % n],
        };
        match r {
            JobRef::Ever(i) => ever(i),
            JobRef::InState(state, i) => {
                let ids: Vec<JobId> =
                    self.model.jobs.values().filter(|j| j.state == state.state()).map(|j| j.id).collect();
                if ids.is_empty() {
                    ever(i)
                } else {
                    ids[i as usize % ids.len()]
                }
            }
            JobRef::Missing => JobId(1_000_000),
        }
    }

    fn issued(&self, i: u8) -> Option<ClaimToken> {
        let issued = &self.model.issued;
        (!issued.is_empty()).then(|| issued[i as usize % issued.len()])
    }

    /// A token no claim ever had: a claim id outside UUID v4 (the engine's generator).
    fn forged_claim_id(&self, salt: u64) -> ClaimId {
        ClaimId(Uuid::from_u128(
            0xF0F0_0000_0000_0000_0000_0000_0000_0000 | (u128::from(salt) << 16) | self.step as u128,
        ))
    }

    fn fallback_token(&self) -> ClaimToken {
        ClaimToken {
            id: self.model.ever.first().copied().unwrap_or(JobId(1)),
            attempt: 1,
            claim_id: self.forged_claim_id(0),
        }
    }

    fn token(&self, r: TokenRef) -> ClaimToken {
        match r {
            TokenRef::Latest => self.model.issued.last().copied().unwrap_or_else(|| self.fallback_token()),
            TokenRef::Issued(i) => self.issued(i).unwrap_or_else(|| self.fallback_token()),
            TokenRef::CurrentOf(j) => self
                .model
                .jobs
                .get(&self.job_id(j))
                .and_then(Job::token)
                .unwrap_or_else(|| self.token(TokenRef::Latest)),
            TokenRef::Forged(i, forgery) => {
                let t = self.issued(i).unwrap_or_else(|| self.fallback_token());
                match forgery {
                    Forgery::FreshClaimId => ClaimToken { claim_id: self.forged_claim_id(1), ..t },
                    Forgery::OtherClaimId(k) => {
                        ClaimToken { claim_id: self.issued(k).map_or(self.forged_claim_id(2), |o| o.claim_id), ..t }
                    }
                    Forgery::OtherJob(k) => ClaimToken { id: self.job_id(JobRef::Ever(k)), ..t },
                    Forgery::UnknownJob => ClaimToken { id: JobId(self.model.next_id() + 1000), ..t },
                    Forgery::NextAttempt => ClaimToken { attempt: t.attempt.wrapping_add(1), ..t },
                    Forgery::PrevAttempt => ClaimToken { attempt: t.attempt.wrapping_sub(1), ..t },
                    Forgery::ZeroAttempt => ClaimToken { attempt: 0, ..t },
                    Forgery::MaxAttempt => ClaimToken { attempt: u32::MAX, ..t },
                    Forgery::NilClaimId => ClaimToken { claim_id: ClaimId(Uuid::nil()), ..t },
                }
            }
        }
    }

    fn plan(&mut self, spec: &JobSpec) -> Planned {
        self.model.seq += 1;
        Planned {
            queue: spec.queue.name().to_string(),
            payload: format!("payload-{}", self.model.seq).into_bytes(),
            key: spec.key.map(|key| key.name().to_string()),
            priority: spec.priority.value(),
            delay: Duration::from_millis(spec.delay.ms() as u64),
            max_attempts: spec.attempts.value(),
        }
    }

    /// True when enqueuing `jobs` would create more rows than [`MAX_LIVE_JOBS`].
    fn too_many(&self, jobs: &[Planned]) -> bool {
        let mut keys = BTreeSet::new();
        let new = jobs
            .iter()
            .filter(|j| match &j.key {
                None => true,
                Some(k) => self.model.by_key(&j.queue, k).is_none() && keys.insert((j.queue.clone(), k.clone())),
            })
            .count();
        self.model.jobs.len() + new > MAX_LIVE_JOBS
    }

    // ------------------------------------------------------------ one step

    fn apply(&mut self, op: &QueueOp) -> Check {
        let now = self.now();
        match *op {
            QueueOp::Enqueue(spec) => {
                let job = self.plan(&spec);
                if self.too_many(std::slice::from_ref(&job)) {
                    return Ok(());
                }
                let got = self.q().enqueue(job.new_job());
                self.count("enqueue", got.is_ok());
                match got {
                    Ok(e) => self.model.insert(&job, e, now),
                    Err(e) => Err(format!("enqueue: the model expected Ok, the engine returned {e:?}")),
                }
            }
            QueueOp::EnqueueBatch { ref jobs, poison } => {
                let planned: Vec<Planned> = jobs.iter().take(MAX_BATCH_JOBS).map(|s| self.plan(s)).collect();
                if self.too_many(&planned) {
                    return Ok(());
                }
                let mut batch: Vec<NewJob> = planned.iter().map(Planned::new_job).collect();
                if poison {
                    batch.push(InvalidJob::EmptyPayload.job());
                }
                let got = self.q().enqueue_batch(batch);
                self.count("enqueue_batch", got.is_ok());
                if poison {
                    return self.expect("enqueue_batch with an invalid job", &Got::InvalidInput, &got_of(&got));
                }
                match got {
                    Ok(results) if results.len() == planned.len() => {
                        planned.iter().zip(results).try_for_each(|(job, e)| self.model.insert(job, e, now))
                    }
                    other => {
                        Err(format!("enqueue_batch: the model expected one Ok per job, the engine returned {other:?}"))
                    }
                }
            }
            QueueOp::EnqueueInvalid(bad) => {
                let got = got_of(&self.q().enqueue(bad.job()));
                self.count("enqueue_invalid", got == Got::Ok);
                self.expect("enqueue of an invalid job", &Got::InvalidInput, &got)
            }
            QueueOp::EnqueueTx { job: spec, commit } => {
                let job = self.plan(&spec);
                if self.too_many(std::slice::from_ref(&job)) {
                    return Ok(());
                }
                let got = self.backend.enqueue_tx(self.q(), job.new_job(), commit);
                self.count("enqueue_tx", got.is_ok());
                match got {
                    Ok(e) if commit => self.model.insert(&job, e, now),
                    Ok(e) => match (self.model.expect_insert(&job), e) {
                        (Some(existing), Enqueued::Duplicate(id)) if id == existing => Ok(()),
                        (None, Enqueued::New(id)) if id.0 >= self.model.next_id() => Ok(()),
                        (expected, other) => Err(format!(
                            "enqueue_tx (rolled back): returned {other:?}, the model expected {expected:?} or a new id"
                        )),
                    },
                    Err(e) => Err(format!("enqueue_tx: the model expected Ok, the engine returned {e:?}")),
                }
            }
            QueueOp::RenewAll { ref tokens, lease } => {
                let tokens: Vec<ClaimToken> = tokens.iter().take(4).map(|r| self.token(*r)).collect();
                let got = self.q().renew_all(&tokens, lease.duration());
                self.count("renew_all", got.as_ref().is_ok_and(|r| r.iter().any(Result::is_ok)));
                let Some(lease_ms) = lease.valid_ms() else {
                    return self.expect("renew_all with an invalid lease", &Got::InvalidInput, &got_of(&got));
                };
                let results =
                    got.map_err(|e| format!("renew_all: the model expected Ok, the engine returned {e:?}"))?;
                if results.len() != tokens.len() {
                    return Err(format!("renew_all returned {} results for {} tokens", results.len(), tokens.len()));
                }
                for (t, result) in tokens.iter().zip(results) {
                    self.expect(&format!("renew_all of {t:?}"), &self.model.owned(t, now), &got_of(&result))?;
                    if let Ok(until) = result {
                        if until != now + lease_ms {
                            return Err(format!("renew_all returned lease end {until}, expected {}", now + lease_ms));
                        }
                        let j = self.model.job_mut(t.id);
                        j.lease_until = Some(until);
                        j.heartbeat_at = Some(now);
                    }
                }
                Ok(())
            }
            QueueOp::CompleteAll(ref tokens) => {
                let tokens: Vec<ClaimToken> = tokens.iter().take(4).map(|r| self.token(*r)).collect();
                let got = self.q().complete_all(&tokens);
                self.count("complete_all", got.as_ref().is_ok_and(|r| r.iter().any(Result::is_ok)));
                let results =
                    got.map_err(|e| format!("complete_all: the model expected Ok, the engine returned {e:?}"))?;
                if results.len() != tokens.len() {
                    return Err(format!("complete_all returned {} results for {} tokens", results.len(), tokens.len()));
                }
                for (t, result) in tokens.iter().zip(results) {
                    let got = got_of(&result);
                    self.expect(&format!("complete_all of {t:?}"), &self.model.owned(t, now), &got)?;
                    if got == Got::Ok {
                        self.model.settle(t.id, JobState::Completed, now);
                    }
                }
                Ok(())
            }
            QueueOp::Claim { queue, worker, lease } => self.claim(queue, worker, lease, None),
            QueueOp::ClaimBatch { queue, worker, lease, limit } => self.claim(queue, worker, lease, Some(limit)),
            QueueOp::Renew { token, lease } => {
                let t = self.token(token);
                let got = self.q().renew(&t, lease.duration());
                self.count("renew", got.is_ok());
                let Some(lease_ms) = lease.valid_ms() else {
                    return self.expect("renew with an invalid lease", &Got::InvalidInput, &got_of(&got));
                };
                let expected = self.model.owned(&t, now);
                self.expect("renew", &expected, &got_of(&got))?;
                if let Ok(until) = got {
                    if until != now + lease_ms {
                        return Err(format!("renew returned lease end {until}, the model expected {}", now + lease_ms));
                    }
                    let j = self.model.job_mut(t.id);
                    j.lease_until = Some(until);
                    j.heartbeat_at = Some(now);
                }
                Ok(())
            }
            QueueOp::Owns(token) => {
                let t = self.token(token);
                let got = self.q().owns(&t);
                self.count("owns", matches!(got, Ok(true)));
                let expected = self.model.owned(&t, now) == Got::Ok;
                // `owns` inside a transaction of the caller's (for SQLite, `fenceq::owns_in`).
                let inside = self.q().with_connection(|c| <B::Store as Store>::owns(c, &t, now));
                if !matches!(inside, Ok(owns) if owns == expected) {
                    return Err(format!(
                        "owns_in({t:?}): the model expected Ok({expected}), the engine returned {inside:?}"
                    ));
                }
                match got {
                    Ok(owns) if owns == expected => Ok(()),
                    other => {
                        Err(format!("owns({t:?}): the model expected Ok({expected}), the engine returned {other:?}"))
                    }
                }
            }
            QueueOp::Complete(token) => {
                let t = self.token(token);
                let got = got_of(&self.q().complete(&t));
                self.count("complete", got == Got::Ok);
                self.expect("complete", &self.model.owned(&t, now), &got)?;
                if got == Got::Ok {
                    self.model.settle(t.id, JobState::Completed, now);
                }
                Ok(())
            }
            QueueOp::CompleteWith { token, act } => self.with_closure(token, act, true),
            QueueOp::WithOwnership { token, act } => self.with_closure(token, act, false),
            QueueOp::Retry { token, backoff, error } => {
                let t = self.token(token);
                let text = error.text("retry");
                let got = self.q().retry(&t, backoff.backoff(), &text);
                self.count("retry", got.is_ok());
                let expected = self.model.owned(&t, now);
                self.expect("retry", &expected, &got_of(&got))?;
                let Ok(retried) = got else { return Ok(()) };
                let j = self.model.jobs[&t.id].clone();
                if j.attempt >= j.max_attempts {
                    if retried != Retried::Exhausted {
                        return Err(format!("retry at the last attempt returned {retried:?}, expected Exhausted"));
                    }
                    self.model.exhaust(t.id, Some(clip(&text)), now);
                    return Ok(());
                }
                let Retried::Scheduled(at) = retried else {
                    return Err(format!("retry with attempts left returned {retried:?}, expected Scheduled"));
                };
                let (lo, hi) = match backoff.backoff() {
                    Backoff::After(d) => {
                        let at = now.saturating_add(dur_ms(d));
                        (at, at)
                    }
                    Backoff::Policy(p) => (
                        now.saturating_add(dur_ms(p.delay(t.attempt, 0.0))),
                        now.saturating_add(dur_ms(p.delay(t.attempt, 1.0))),
                    ),
                };
                if at < lo || at > hi {
                    return Err(format!(
                        "retry scheduled at T0{:+}, the model expected T0{:+}..=T0{:+}",
                        at - T0,
                        lo - T0,
                        hi - T0
                    ));
                }
                let j = self.model.job_mut(t.id);
                j.state = JobState::Pending;
                j.lease_until = None;
                j.run_at = at;
                j.last_error = Some(clip(&text));
                Ok(())
            }
            QueueOp::Exhaust { token, error } => {
                let t = self.token(token);
                let text = error.text("exhaust");
                let got = got_of(&self.q().exhaust(&t, &text));
                self.count("exhaust", got == Got::Ok);
                self.expect("exhaust", &self.model.owned(&t, now), &got)?;
                if got == Got::Ok {
                    self.model.exhaust(t.id, Some(clip(&text)), now);
                }
                Ok(())
            }
            QueueOp::MarkUnknown { token, evidence } => {
                let t = self.token(token);
                let text = evidence.text("evidence");
                let got = got_of(&self.q().mark_unknown(&t, &text));
                self.count("mark_unknown", got == Got::Ok);
                self.expect("mark_unknown", &self.model.owned(&t, now), &got)?;
                if got == Got::Ok {
                    self.model.settle(t.id, JobState::Unknown, now);
                    self.model.job_mut(t.id).last_error = Some(clip(&text));
                }
                Ok(())
            }
            QueueOp::Park { token, timeout, reason } => {
                let t = self.token(token);
                let text = reason.text("park");
                let got = got_of(&self.q().park(&t, timeout.duration(), &text));
                self.count("park", got == Got::Ok);
                if matches!(timeout, ParkSel::Zero | ParkSel::TooLong) {
                    return self.expect("park with an invalid timeout", &Got::InvalidInput, &got);
                }
                self.expect("park", &self.model.owned(&t, now), &got)?;
                if got == Got::Ok {
                    let j = self.model.job_mut(t.id);
                    j.state = JobState::Waiting;
                    j.lease_until = None;
                    j.wait_until = Some(now + dur_ms(timeout.duration()));
                    j.last_error = Some(clip(&text));
                }
                Ok(())
            }
            QueueOp::Resume(token) => {
                let t = self.token(token);
                let got = got_of(&self.q().resume(&t));
                self.count("resume", got == Got::Ok);
                let expected = match self.model.identified(&t, JobState::Waiting) {
                    // Past the deadline a resume is refused, reaped or not (the clock decides).
                    Got::Ok if self.model.jobs[&t.id].wait_until.is_some_and(|w| w <= now) => Got::WaitExpired,
                    other => other,
                };
                self.expect("resume", &expected, &got)?;
                if got == Got::Ok {
                    let j = self.model.job_mut(t.id);
                    j.state = JobState::Pending;
                    j.wait_until = None;
                    j.run_at = now;
                    j.max_attempts += 1;
                }
                Ok(())
            }
            QueueOp::Cancel(job) => {
                let id = self.job_id(job);
                let got = got_of(&self.q().cancel(id));
                self.count("cancel", got == Got::Ok);
                let from = [JobState::Pending, JobState::Waiting, JobState::Running];
                self.expect("cancel", &self.model.by_id(id, &from), &got)?;
                if got == Got::Ok {
                    self.model.settle(id, JobState::Cancelled, now);
                    self.model.job_mut(id).wait_until = None;
                    self.model.decide(id, "cancel", now);
                }
                Ok(())
            }
            QueueOp::Acknowledge(token) => {
                let t = self.token(token);
                let got = got_of(&self.q().acknowledge(&t));
                self.count("acknowledge", got == Got::Ok);
                self.expect("acknowledge", &self.model.identified(&t, JobState::Exhausted), &got)?;
                if got == Got::Ok && self.model.jobs[&t.id].acknowledged_at.is_none() {
                    // A repeat changes nothing, not even the recorded decision.
                    self.model.job_mut(t.id).acknowledged_at = Some(now);
                    self.model.decide(t.id, "acknowledge", now);
                }
                Ok(())
            }
            QueueOp::Replay(job) => {
                let id = self.job_id(job);
                let got = got_of(&self.q().replay(id));
                self.count("replay", got == Got::Ok);
                self.expect("replay", &self.model.by_id(id, &[JobState::Exhausted]), &got)?;
                if got == Got::Ok {
                    let j = self.model.job_mut(id);
                    j.state = JobState::Pending;
                    j.attempt = 0;
                    j.run_at = now;
                    j.settled_at = None;
                    j.exhausted_at = None;
                    j.acknowledged_at = None;
                    self.model.decide(id, "replay", now);
                }
                Ok(())
            }
            QueueOp::Resolve { token, resolution } => {
                let t = self.token(token);
                let r = match resolution {
                    ResolutionSel::Completed => Resolution::Complete,
                    ResolutionSel::Retry => Resolution::Retry,
                    ResolutionSel::Exhaust => Resolution::Exhaust,
                };
                let got = got_of(&self.q().resolve(&t, r));
                self.count("resolve", got == Got::Ok);
                self.expect("resolve", &self.model.identified(&t, JobState::Unknown), &got)?;
                if got == Got::Ok {
                    match r {
                        Resolution::Complete => {
                            let j = self.model.job_mut(t.id);
                            j.state = JobState::Completed;
                            j.settled_at = Some(now);
                        }
                        Resolution::Retry => {
                            let j = self.model.job_mut(t.id);
                            j.state = JobState::Pending;
                            j.run_at = now;
                            j.settled_at = None;
                            j.max_attempts = j.max_attempts.max(j.attempt + 1);
                        }
                        Resolution::Exhaust => self.model.exhaust(t.id, None, now),
                    }
                    let action = match r {
                        Resolution::Complete => "resolve complete",
                        Resolution::Retry => "resolve retry",
                        Resolution::Exhaust => "resolve exhaust",
                    };
                    self.model.decide(t.id, action, now);
                }
                Ok(())
            }
            QueueOp::Reap => {
                let waiting_before: BTreeSet<JobId> =
                    self.model.jobs.values().filter(|j| j.state == JobState::Waiting).map(|j| j.id).collect();
                let got = self.q().reap();
                self.count("reap", got.is_ok());
                let expected = self.model.reap(now);
                match got {
                    Ok(r) if r == expected => {}
                    other => {
                        return Err(format!("reap: the model expected Ok({expected:?}), the engine returned {other:?}"))
                    }
                }
                // Invariant 7: a parked job is never reclaimed as stale (only its deadline ends it).
                for id in waiting_before {
                    let j = &self.model.jobs[&id];
                    if j.state == JobState::Pending || j.state == JobState::Running {
                        return Err(format!("invariant 7: reap turned waiting job {id} into {:?}", j.state));
                    }
                }
                Ok(())
            }
            QueueOp::Prune(sel) => self.prune(sel),
            QueueOp::ExhaustionsPage(limit) => self.exhaustions_page(limit),
            QueueOp::UnknownsPage { after, limit } => {
                let cursor = after.map(|j| Cursor(self.job_id(j).0));
                let got = self.q().unknowns(cursor, limit.value());
                self.count("unknowns", got.is_ok());
                if limit == PageLimit::Zero {
                    return self.expect("unknowns with limit 0", &Got::InvalidInput, &got_of(&got));
                }
                let page = self.model.page(JobState::Unknown, cursor.map_or(0, |c| c.0), limit.value());
                let items = page.items.into_iter().map(unknown_of).collect();
                let expected = Page { items, next: page.next };
                match got {
                    Ok(page) if page == expected => Ok(()),
                    other => {
                        Err(format!("unknowns: the model expected Ok({expected:?}), the engine returned {other:?}"))
                    }
                }
            }
            QueueOp::Advance(step) => {
                self.clock.set(now + step.ms());
                Ok(())
            }
            QueueOp::ClockBack(back) => {
                self.clock.set((now - back.ms()).max(0));
                Ok(())
            }
            QueueOp::Reopen => {
                if !self.backend.reopens() {
                    return Ok(());
                }
                self.queue = None;
                let queue = self.backend.reopen(&self.clock).map_err(|e| format!("reopening the queue: {e:?}"))?;
                self.queue = Some(queue);
                self.count("reopen", true);
                Ok(())
            }
            QueueOp::Check => {
                self.count("check", true);
                self.full_check()
            }
        }
    }

    fn claim(&mut self, queue: ClaimQueue, worker: WorkerSel, lease: LeaseSel, limit: Option<BatchLimit>) -> Check {
        let now = self.now();
        let name = queue.name();
        let got = match limit {
            None => self.q().claim(&name, worker.name(), lease.duration()).map(|c| c.into_iter().collect::<Vec<_>>()),
            Some(limit) => self.q().claim_batch(&name, worker.name(), lease.duration(), limit.value()),
        };
        let op = if limit.is_some() { "claim_batch" } else { "claim" };
        self.count(op, got.as_ref().is_ok_and(|c| !c.is_empty()));
        let limit = limit.map_or(1, BatchLimit::value);
        let lease_ms = match lease.valid_ms() {
            Some(ms)
                if !matches!(queue, ClaimQueue::Empty | ClaimQueue::TooLong)
                    && worker != WorkerSel::Empty
                    && (1..=fenceq::MAX_BATCH).contains(&limit) =>
            {
                ms
            }
            _ => return self.expect(&format!("{op} with invalid input"), &Got::InvalidInput, &got_of(&got)),
        };
        let claimed: Vec<Claimed> = match got {
            Ok(c) => c,
            Err(e) => return Err(format!("{op}: the model expected Ok, the engine returned {e:?}")),
        };
        let expected = self.model.claimable(&name, limit, now);
        let ids: Vec<JobId> = claimed.iter().map(Claimed::id).collect();
        if ids != expected {
            return Err(format!("{op}: claimed {ids:?}, the model (priority, run_at, id) expected {expected:?}"));
        }
        for c in claimed {
            let before = self.model.jobs[&c.id()].clone();
            // Invariant 7: a parked job is never claimed.
            if before.state == JobState::Waiting {
                return Err(format!("invariant 7: claim handed out waiting job {}", c.id()));
            }
            // Invariant 2: a fresh claim id, attempt + 1.
            if !self.model.claim_ids.insert(c.token.claim_id) || c.token.claim_id.0.is_nil() {
                return Err(format!("invariant 2: claim of {} reused claim id {}", c.id(), c.token.claim_id));
            }
            let j = self.model.job_mut(c.id());
            j.state = JobState::Running;
            j.attempt += 1;
            j.claim_id = Some(c.token.claim_id);
            j.worker = Some(worker.name().to_string());
            j.lease_until = Some(now + lease_ms);
            j.heartbeat_at = Some(now);
            j.wait_until = None;
            let expected = Claimed {
                token: ClaimToken { id: j.id, attempt: j.attempt, claim_id: c.token.claim_id },
                queue: j.queue.clone(),
                key: j.key.clone(),
                payload: j.payload.clone(),
                priority: j.priority,
                max_attempts: j.max_attempts,
                lease_until: now + lease_ms,
                last_error: j.last_error.clone(),
            };
            if c != expected {
                return Err(format!(
                    "invariant 2 / claim record: the engine returned {c:?}, the model expected {expected:?}"
                ));
            }
            if c.token.attempt != before.attempt + 1 || c.token.attempt > c.max_attempts {
                return Err(format!("invariant 2/6: claim moved attempt {} to {}", before.attempt, c.token.attempt));
            }
            self.model.issued.push(c.token);
            self.stats.claims += 1;
        }
        Ok(())
    }

    fn with_closure(&mut self, token: TokenRef, act: ClosureAct, complete: bool) -> Check {
        let now = self.now();
        let t = self.token(token);
        let ran = Cell::new(false);
        let queue = self.q().clone();
        let write = |tx: &<B::Store as Store>::Tx| -> fenceq::Result<()> {
            ran.set(true);
            B::write_domain(tx, t.id.0, t.attempt, if complete { "complete_with" } else { "with_ownership" })?;
            match act {
                ClosureAct::Write => Ok(()),
                ClosureAct::Fail => Err(Error::domain("injected domain failure")),
                ClosureAct::Nested => {
                    queue.enqueue(NewJob::new("a", b"nested".to_vec()))?;
                    Ok(())
                }
                ClosureAct::Panic => std::panic::resume_unwind(Box::new("injected closure panic")),
            }
        };
        let name = if complete { "complete_with" } else { "with_ownership" };
        let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if complete {
                got_of(&queue.complete_with(&t, write))
            } else {
                got_of(&queue.with_ownership(&t, write))
            }
        }));
        // A panic that left the closure reaches the caller; `Got::Other` records it.
        let got = called.unwrap_or_else(|_| Got::Other("the closure's panic".into()));
        self.count(name, got == Got::Ok);
        let owned = self.model.owned(&t, now);
        if owned != Got::Ok && ran.get() {
            return Err(format!("{name}: the closure ran although the token does not own its job ({owned:?})"));
        }
        let expected = match (owned, act) {
            (Got::Ok, ClosureAct::Write) => Got::Ok,
            (Got::Ok, ClosureAct::Fail) => Got::Domain,
            (Got::Ok, ClosureAct::Nested) => Got::Nested,
            (Got::Ok, ClosureAct::Panic) => Got::Other("the closure's panic".into()),
            (lost, _) => lost,
        };
        self.expect(name, &expected, &got)?;
        if got == Got::Ok {
            self.model.domain.push((t.id.0, t.attempt));
            if complete {
                self.model.settle(t.id, JobState::Completed, now);
            } else {
                // The owned write's commit extends the lease from the commit by the length
                // the claim or last renewal granted, never shortening it.
                let j = self.model.job_mut(t.id);
                if let (Some(until), Some(granted_at)) = (j.lease_until, j.heartbeat_at) {
                    let extended = now.saturating_add(until.saturating_sub(granted_at).max(0));
                    if extended > until {
                        j.lease_until = Some(extended);
                        j.heartbeat_at = Some(now);
                    }
                }
            }
        }
        Ok(())
    }

    fn prune(&mut self, sel: RetentionSel) -> Check {
        let now = self.now();
        let retention = sel.retention();
        let got = self.q().prune(&retention);
        self.count("prune", got.as_ref().is_ok_and(|r| r.deleted() > 0));
        if matches!(sel, RetentionSel::ZeroBatch | RetentionSel::HugeBatch) {
            return self.expect("prune with an invalid batch size", &Got::InvalidInput, &got_of(&got));
        }
        let report = got.map_err(|e| format!("prune: the model expected Ok, the engine returned {e:?}"))?;
        let (settled, acknowledged) = self.model.prunable(&retention, now);
        let batch = u64::from(retention.batch_size);
        let batches = (settled.len() as u64).div_ceil(batch) + (acknowledged.len() as u64).div_ceil(batch);
        let expected =
            fenceq::PruneReport { settled: settled.len() as u64, acknowledged: acknowledged.len() as u64, batches };
        if report != expected {
            return Err(format!("prune: the engine reported {report:?}, the model expected {expected:?}"));
        }
        for id in settled.into_iter().chain(acknowledged) {
            let j = self.model.jobs.remove(&id).expect("prunable rows exist");
            // Invariant 7/8: only completed, cancelled and acknowledged exhausted rows go.
            if !(matches!(j.state, JobState::Completed | JobState::Cancelled)
                || (j.state == JobState::Exhausted && j.acknowledged_at.is_some()))
            {
                return Err(format!("invariant 7: the model pruned protected row {j:?}"));
            }
            self.model.pruned.insert(id);
            self.model.terminal.remove(&id);
        }
        Ok(())
    }

    fn exhaustions_page(&mut self, limit: PageLimit) -> Check {
        let pass = self.model.pass.get_or_insert_with(|| Pass {
            cursor: None,
            stable: self
                .model
                .jobs
                .values()
                .filter(|j| j.state == JobState::Exhausted && j.acknowledged_at.is_none())
                .map(|j| j.id)
                .collect(),
            returned: BTreeSet::new(),
        });
        let cursor = pass.cursor;
        let got = self.q().exhaustions(cursor, limit.value());
        self.count("exhaustions", got.as_ref().is_ok_and(|p| !p.items.is_empty()));
        if limit == PageLimit::Zero {
            return self.expect("exhaustions with limit 0", &Got::InvalidInput, &got_of(&got));
        }
        let expected = self.model.page(JobState::Exhausted, cursor.map_or(0, |c| c.0), limit.value());
        let page = match got {
            Ok(page) if page == expected => page,
            other => {
                return Err(format!("exhaustions: the model expected Ok({expected:?}), the engine returned {other:?}"))
            }
        };
        let pass = self.model.pass.as_mut().expect("opened above");
        for item in &page.items {
            if !pass.returned.insert(item.token.id) {
                return Err(format!("invariant 10: the exhaustion pass returned job {} twice", item.token.id));
            }
        }
        pass.cursor = page.next;
        if page.next.is_none() {
            let pass = self.model.pass.take().expect("opened above");
            let missed: Vec<&JobId> = pass.stable.difference(&pass.returned).collect();
            if !missed.is_empty() {
                return Err(format!("invariant 10: the exhaustion pass missed {missed:?}"));
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------ checks

    /// After every step: the invariants on the real table and a row-by-row comparison.
    fn after_step(&mut self) -> Check {
        if let Some(pass) = &mut self.model.pass {
            let jobs = &self.model.jobs;
            pass.stable.retain(|id| {
                jobs.get(id).is_some_and(|j| j.state == JobState::Exhausted && j.acknowledged_at.is_none())
            });
        }
        let now = self.now();
        let rows = self
            .q()
            .list(&ListFilter { limit: fenceq::MAX_BATCH, ..ListFilter::default() })
            .map_err(|e| format!("listing the table: {e:?}"))?;
        self.stats.max_rows = self.stats.max_rows.max(rows.len());
        let mut claim_ids = BTreeSet::new();
        for r in &rows {
            check_row(r)?;
            if let Some(c) = r.claim_id {
                // Invariant 2: a claim id names one claim of one row, and only ids claims issued.
                if !claim_ids.insert(c) {
                    return Err(format!("invariant 2: claim id {c} is on two rows"));
                }
                if !self.model.claim_ids.contains(&c) {
                    return Err(format!("invariant 2: row {} carries claim id {c} that no claim returned", r.id));
                }
            }
            // Invariant 4: completed (and cancelled) rows never change again.
            if let Some(t) = self.model.terminal.get(&r.id) {
                if t != r {
                    return Err(format!("invariant 4: terminal row changed from {t:?} to {r:?}"));
                }
            }
        }
        // Invariant 8: every enqueued job is in exactly one row until pruned; row by row equal.
        let real: Vec<JobId> = rows.iter().map(|r| r.id).collect();
        let model: Vec<JobId> = self.model.jobs.keys().copied().collect();
        if real != model {
            return Err(format!("invariant 8: the table holds ids {real:?}, the model {model:?}"));
        }
        for (r, m) in rows.iter().zip(self.model.jobs.values()) {
            if r != m {
                return Err(format!("row {} differs:\n    engine {r:?}\n    model  {m:?}", r.id));
            }
        }
        // Invariant 1: a job under a live lease has exactly one live claim, its row's current
        // token; every other token ever issued for it is refused.
        for r in rows.iter().filter(|r| r.state == JobState::Running && r.lease_until.is_some_and(|l| l > now)) {
            let current = r.token();
            for t in self.model.issued.iter().filter(|t| t.id == r.id) {
                let owns = self.q().owns(t).map_err(|e| format!("owns: {e:?}"))?;
                if owns != (Some(*t) == current) {
                    return Err(format!("invariant 1: owns({t:?}) is {owns} while the row's claim is {current:?}"));
                }
            }
        }
        for r in rows {
            if matches!(r.state, JobState::Completed | JobState::Cancelled) {
                self.model.terminal.entry(r.id).or_insert(r);
            }
        }
        // Domain rows: exactly those of committed `complete_with` / `with_ownership` calls.
        let domain = self.backend.domain(self.q()).map_err(|e| format!("reading the domain table: {e:?}"))?;
        if !domain.iter().copied().eq(self.model.domain.iter().map(|&(job, attempt)| (job, i64::from(attempt)))) {
            return Err(format!("domain rows {domain:?}, the model expected {:?}", self.model.domain));
        }
        Ok(())
    }

    /// `owns` for every token ever issued (invariants 1, 3 and 5), `stats`, and the previews.
    fn full_check(&mut self) -> Check {
        let now = self.now();
        let mut live: BTreeMap<JobId, ClaimToken> = BTreeMap::new();
        for t in self.model.issued.clone() {
            let owns = self.q().owns(&t).map_err(|e| format!("owns: {e:?}"))?;
            let expected = self.model.owned(&t, now) == Got::Ok;
            if owns != expected {
                let dead = match self.model.jobs.get(&t.id) {
                    None => "its job was pruned",
                    Some(j) if j.claim_id != Some(t.claim_id) || j.attempt != t.attempt => "a later claim replaced it",
                    Some(_) => "its job is not running under a live lease",
                };
                return Err(format!("invariants 3/5: owns({t:?}) is {owns}, but {dead}"));
            }
            if owns {
                if let Some(other) = live.insert(t.id, t) {
                    return Err(format!("invariant 1: job {} has two live claims {other:?} and {t:?}", t.id));
                }
            }
        }
        for &id in &self.model.ever {
            let job = self.q().job(id).map_err(|e| format!("job({id}): {e:?}"))?;
            if job.as_ref() != self.model.jobs.get(&id) {
                return Err(format!("job({id}) returned {job:?}, the model has {:?}", self.model.jobs.get(&id)));
            }
        }
        fenceq::Checkpointer::new(self.q().clone()).run_once().map_err(|e| format!("checkpoint: {e:?}"))?;
        let stats = self.q().stats().map_err(|e| format!("stats: {e:?}"))?;
        let expected = self.model.stats(now);
        if stats != expected {
            return Err(format!("stats: the engine reported {stats:?}, the model expected {expected:?}"));
        }
        let reap = self.q().reap_preview().map_err(|e| format!("reap_preview: {e:?}"))?;
        let expected = self.model.clone().reap(now);
        if reap != expected {
            return Err(format!("reap_preview: the engine reported {reap:?}, the model expected {expected:?}"));
        }
        let retention = Retention::default();
        let prune = self.q().prune_preview(&retention).map_err(|e| format!("prune_preview: {e:?}"))?;
        let (settled, acknowledged) = self.model.prunable(&retention, now);
        if (prune.settled, prune.acknowledged) != (settled.len() as u64, acknowledged.len() as u64) {
            return Err(format!(
                "prune_preview: the engine reported {prune:?}, the model {settled:?} {acknowledged:?}"
            ));
        }
        Ok(())
    }
}

/// The invariants one row must satisfy on its own (DESIGN 6 and the schema's CHECKs),
/// independent of any model.
pub fn check_row(r: &Job) -> Result<(), String> {
    let fail = |what: &str| Err(format!("{what}: {r:?}"));
    if r.attempt > r.max_attempts {
        return fail("invariant 6: attempt above max_attempts");
    }
    if r.state == JobState::Pending && r.attempt >= r.max_attempts {
        return fail("invariant 6: pending without attempts left");
    }
    if (r.state == JobState::Running) != (r.lease_until.is_some() && r.worker.is_some()) {
        return fail("a running row has a lease and a worker, and only a running row has a lease");
    }
    if (r.state == JobState::Waiting) != r.wait_until.is_some() {
        return fail("a waiting row has a deadline, and only a waiting row has one");
    }
    let keeps_claim =
        matches!(r.state, JobState::Running | JobState::Waiting | JobState::Exhausted | JobState::Unknown);
    if keeps_claim && r.claim_id.is_none() {
        return fail("a claimed row carries its claim id");
    }
    if r.acknowledged_at.is_some() && r.state != JobState::Exhausted {
        return fail("only an exhausted row is acknowledged");
    }
    if r.state == JobState::Exhausted && r.exhausted_at.is_none() {
        return fail("an exhausted row records when");
    }
    Ok(())
}

// ==================================================================== hostile input

/// Runs hostile bytes through the API: the first byte picks the mode (arbitrary calls on a
/// healthy queue, raw bytes as a database file, a valid queue file with bytes flipped, a
/// valid queue file tampered with by SQL), the rest is the input. Panics only when the engine
/// panics or mishandles the input.
pub fn hostile(bytes: &[u8]) {
    let Some((&mode, rest)) = bytes.split_first() else { return };
    match mode % 4 {
        0 => hostile_calls(rest),
        1 => hostile_raw_file(rest),
        2 => hostile_flipped_file(rest),
        _ => hostile_tampered_file(rest),
    }
}

/// A token for a hostile call: one a claim returned, or any triple.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum HToken {
    /// `issued[i % len]`
    Issued(u8),
    /// Any id, attempt and claim id.
    Raw {
        /// The id.
        id: i64,
        /// The attempt.
        attempt: u32,
        /// The claim id.
        claim: u128,
    },
}

/// A backoff for a hostile retry: (seconds, nanoseconds) pairs and any jitter.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum HBackoff {
    /// A fixed delay.
    After((u64, u32)),
    /// An exponential policy.
    Policy {
        /// Its base.
        base: (u64, u32),
        /// Its cap.
        max: (u64, u32),
        /// Its jitter (any float, NaN included).
        jitter: f64,
    },
}

/// One call with arbitrary arguments.
#[derive(Arbitrary, Debug, Clone)]
pub enum HostileCall {
    /// `enqueue`
    Enqueue {
        /// Queue name.
        queue: String,
        /// Key.
        key: Option<String>,
        /// Payload.
        payload: Vec<u8>,
        /// Priority.
        priority: i32,
        /// Delay in ms.
        delay_ms: u64,
        /// Attempt budget.
        max_attempts: Option<u32>,
    },
    /// `enqueue_batch`
    EnqueueBatch(Vec<(String, Option<String>, Vec<u8>)>),
    /// `claim_batch`
    Claim {
        /// Queue name.
        queue: String,
        /// Worker id.
        worker: String,
        /// Lease (seconds, nanoseconds).
        lease: (u64, u32),
        /// Limit.
        limit: u32,
    },
    /// `renew`
    Renew {
        /// Token.
        token: HToken,
        /// Lease (seconds, nanoseconds).
        lease: (u64, u32),
    },
    /// `owns`
    Owns(HToken),
    /// `complete`
    Complete(HToken),
    /// `retry`
    Retry {
        /// Token.
        token: HToken,
        /// Backoff.
        backoff: HBackoff,
        /// Error text.
        error: String,
    },
    /// `exhaust`
    Exhaust {
        /// Token.
        token: HToken,
        /// Error text.
        error: String,
    },
    /// `mark_unknown`
    MarkUnknown {
        /// Token.
        token: HToken,
        /// Evidence text.
        evidence: String,
    },
    /// `park`
    Park {
        /// Token.
        token: HToken,
        /// Timeout (seconds, nanoseconds).
        timeout: (u64, u32),
        /// Reason text.
        reason: String,
    },
    /// `resume`
    Resume(HToken),
    /// `acknowledge`
    Acknowledge(HToken),
    /// `resolve` (`how % 3` picks the resolution)
    Resolve {
        /// Token.
        token: HToken,
        /// Which resolution.
        how: u8,
    },
    /// `cancel`
    Cancel(i64),
    /// `replay`
    Replay(i64),
    /// `job`
    Job(i64),
    /// `exhaustions`
    Exhaustions {
        /// Cursor.
        cursor: Option<i64>,
        /// Limit.
        limit: u32,
    },
    /// `unknowns`
    Unknowns {
        /// Cursor.
        cursor: Option<i64>,
        /// Limit.
        limit: u32,
    },
    /// `list`
    List {
        /// Queue filter.
        queue: Option<String>,
        /// State filter (`JobState::ALL[i % 7]`).
        state: Option<u8>,
        /// Cursor.
        after: Option<i64>,
        /// Limit.
        limit: u32,
    },
    /// `reap`
    Reap,
    /// `prune`
    Prune {
        /// Retention age (seconds, nanoseconds).
        older_than: (u64, u32),
        /// Batch size.
        batch: u32,
    },
    /// `prune_preview`
    PrunePreview((u64, u32)),
    /// `reap_preview`
    ReapPreview,
    /// `stats`
    Stats,
    /// Sets the clock (clamped to 0..=2^47 ms).
    SetClock(i64),
    /// Advances the clock (by at most 2^40 ms).
    Advance(u64),
}

fn duration_of((secs, nanos): (u64, u32)) -> Duration {
    Duration::new(secs, nanos % 1_000_000_000)
}

const CLOCK_MAX: i64 = 1 << 47;

/// Rows as `list` shows them, to prove that a failed call changed nothing.
fn rows_of(q: &Queue) -> Vec<Job> {
    q.list(&ListFilter { limit: fenceq::MAX_BATCH, ..ListFilter::default() })
        .expect("listing a healthy in-memory queue")
}

/// A name `check_name` must refuse: empty, too long, or with a NUL byte.
fn bad_name(name: &str) -> bool {
    name.is_empty() || name.len() > fenceq::MAX_NAME_LEN || name.contains('\0')
}

/// A job intake must refuse (the name, key and payload checks).
fn bad_job(queue: &str, key: Option<&str>, payload: &[u8]) -> bool {
    bad_name(queue) || payload.is_empty() || key.is_some_and(|k| k.is_empty() || k.len() > fenceq::MAX_KEY_LEN)
}

fn hostile_calls(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let clock = ManualClock::new(T0);
    let q = Queue::builder().clock(clock.clone()).open().expect("an in-memory queue opens");
    let mut issued: Vec<ClaimToken> = Vec::new();
    for _ in 0..MAX_OPS {
        let Ok(call) = HostileCall::arbitrary(&mut u) else { break };
        let token = |h: HToken| match h {
            HToken::Issued(i) if !issued.is_empty() => issued[i as usize % issued.len()],
            HToken::Issued(i) => ClaimToken { id: JobId(i64::from(i)), attempt: 1, claim_id: ClaimId(Uuid::nil()) },
            HToken::Raw { id, attempt, claim } => {
                ClaimToken { id: JobId(id), attempt, claim_id: ClaimId(Uuid::from_u128(claim)) }
            }
        };
        let before = rows_of(&q);
        // Set for input the engine must refuse with `InvalidInput`.
        let mut invalid = false;
        let result: fenceq::Result<()> = match call.clone() {
            HostileCall::Enqueue { queue, key, payload, priority, delay_ms, max_attempts } => {
                invalid = bad_job(&queue, key.as_deref(), &payload);
                let mut job = NewJob::new(queue, payload).priority(priority).delay(Duration::from_millis(delay_ms));
                if let Some(key) = key {
                    job = job.key(key);
                }
                if let Some(n) = max_attempts {
                    job = job.max_attempts(n);
                }
                q.enqueue(job).map(drop)
            }
            HostileCall::EnqueueBatch(jobs) => {
                invalid = jobs.iter().take(8).any(|(queue, key, payload)| bad_job(queue, key.as_deref(), payload));
                q.enqueue_batch(jobs.into_iter().take(8).map(|(queue, key, payload)| {
                    let job = NewJob::new(queue, payload);
                    match key {
                        Some(key) => job.key(key),
                        None => job,
                    }
                }))
                .map(drop)
            }
            HostileCall::Claim { queue, worker, lease, limit } => {
                invalid = bad_name(&queue) || bad_name(&worker) || limit == 0 || limit > fenceq::MAX_BATCH;
                q.claim_batch(&queue, &worker, duration_of(lease), limit).map(|claimed| {
                    issued.extend(claimed.iter().map(Claimed::token));
                })
            }
            HostileCall::Renew { token: t, lease } => q.renew(&token(t), duration_of(lease)).map(drop),
            HostileCall::Owns(t) => q.owns(&token(t)).map(drop),
            HostileCall::Complete(t) => q.complete(&token(t)),
            HostileCall::Retry { token: t, backoff, error } => {
                let backoff = match backoff {
                    HBackoff::After(d) => Backoff::After(duration_of(d)),
                    HBackoff::Policy { base, max, jitter } => {
                        Backoff::Policy(RetryPolicy { base: duration_of(base), max: duration_of(max), jitter })
                    }
                };
                q.retry(&token(t), backoff, &error).map(drop)
            }
            HostileCall::Exhaust { token: t, error } => q.exhaust(&token(t), &error),
            HostileCall::MarkUnknown { token: t, evidence } => q.mark_unknown(&token(t), &evidence),
            HostileCall::Park { token: t, timeout, reason } => q.park(&token(t), duration_of(timeout), &reason),
            HostileCall::Resume(t) => q.resume(&token(t)),
            HostileCall::Acknowledge(t) => q.acknowledge(&token(t)),
            HostileCall::Resolve { token: t, how } => {
                let r = [Resolution::Complete, Resolution::Retry, Resolution::Exhaust][how as usize % 3];
                q.resolve(&token(t), r)
            }
            HostileCall::Cancel(id) => q.cancel(JobId(id)).map(drop),
            HostileCall::Replay(id) => q.replay(JobId(id)),
            HostileCall::Job(id) => q.job(JobId(id)).map(drop),
            HostileCall::Exhaustions { cursor, limit } => {
                invalid = limit == 0;
                q.exhaustions(cursor.map(Cursor), limit).map(drop)
            }
            HostileCall::Unknowns { cursor, limit } => {
                invalid = limit == 0;
                q.unknowns(cursor.map(Cursor), limit).map(drop)
            }
            HostileCall::List { queue, state, after, limit } => {
                invalid = limit == 0;
                let state = state.map(|s| JobState::ALL[s as usize % JobState::ALL.len()]);
                q.list(&ListFilter { queue, state, after: after.map(Cursor), limit }).map(drop)
            }
            HostileCall::Reap => q.reap().map(drop),
            HostileCall::Prune { older_than, batch } => {
                invalid = batch == 0;
                q.prune(&Retention { older_than: duration_of(older_than), batch_size: batch }).map(drop)
            }
            HostileCall::PrunePreview(older_than) => {
                q.prune_preview(&Retention::older_than(duration_of(older_than))).map(drop)
            }
            HostileCall::ReapPreview => q.reap_preview().map(drop),
            HostileCall::Stats => q.stats().map(drop),
            HostileCall::SetClock(ms) => {
                clock.set(ms.clamp(0, CLOCK_MAX));
                Ok(())
            }
            HostileCall::Advance(ms) => {
                use fenceq::Clock;
                clock.set(clock.now_ms().saturating_add(ms.min(1 << 40) as i64).min(CLOCK_MAX));
                Ok(())
            }
        };
        let after = rows_of(&q);
        for r in &after {
            if let Err(e) = check_row(r) {
                panic!("hostile call {call:?} left a row breaking an invariant: {e}");
            }
        }
        match result {
            Ok(()) if invalid => panic!("hostile call {call:?} succeeded although its input is invalid"),
            Ok(()) => {}
            Err(e) => {
                if after != before {
                    panic!("hostile call {call:?} failed with {e:?} but changed rows:\n  before {before:?}\n  after  {after:?}");
                }
                match e {
                    Error::InvalidInput { .. } => {}
                    _ if invalid => {
                        panic!("hostile call {call:?} with invalid input failed with {e:?}, not InvalidInput")
                    }
                    Error::OwnershipLost { .. }
                    | Error::StaleIdentity { .. }
                    | Error::NotFound(_)
                    | Error::InvalidState { .. } => {}
                    other => {
                        panic!("hostile call {call:?} on a healthy database failed with a storage error: {other:?}")
                    }
                }
            }
        }
    }
}

/// Opens `bytes` as a database file (no panic, only errors) and runs [`probe`] when it opens.
fn open_file_bytes(bytes: &[u8], setup: impl FnOnce(&Path)) {
    let db = TempDb::new("hostile");
    std::fs::write(db.path(), bytes).expect("writing a temp file");
    setup(db.path());
    let clock = ManualClock::new(T0 + HOUR_MS);
    let opened = Queue::builder().path(db.path()).clock(clock.clone()).pool_size(2).open();
    if let Ok(queue) = opened {
        probe(&queue, &clock);
    }
    // A second open of what the first left behind must not panic either.
    if let Ok(queue) = Queue::builder().path(db.path()).clock(clock.clone()).pool_size(1).open() {
        let _ = queue.stats();
        let _ = queue.exhaustions(None, 10);
    }
}

fn hostile_raw_file(bytes: &[u8]) {
    open_file_bytes(bytes, |_| {});
}

fn hostile_flipped_file(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let mut bytes = template().to_vec();
    let truncate: Option<u16> = u.arbitrary().unwrap_or(None);
    for _ in 0..64 {
        let Ok((offset, xor)) = u.arbitrary::<(u16, u8)>() else { break };
        let i = offset as usize % bytes.len();
        bytes[i] ^= xor.max(1);
    }
    if let Some(len) = truncate {
        bytes.truncate(len as usize * 8);
    }
    open_file_bytes(&bytes, |_| {});
}

/// SQL a hostile application (or a bit of corruption) may have run on a queue database.
/// (Index 0 was the defect "insert-trigger-panic", fixed in ac0020d.)
pub const TAMPERS: &[&str] = &[
    "CREATE TRIGGER hostile_ignore_insert BEFORE INSERT ON fenceq_jobs BEGIN SELECT RAISE(IGNORE); END;",
    "CREATE TRIGGER hostile_ignore_update BEFORE UPDATE ON fenceq_jobs BEGIN SELECT RAISE(IGNORE); END;",
    "CREATE TRIGGER hostile_abort_update BEFORE UPDATE ON fenceq_jobs BEGIN SELECT RAISE(ABORT, 'no'); END;",
    "CREATE TRIGGER hostile_delete_updated AFTER UPDATE ON fenceq_jobs BEGIN DELETE FROM fenceq_jobs WHERE id = NEW.id; END;",
    "CREATE TRIGGER hostile_copy_insert AFTER INSERT ON fenceq_jobs BEGIN INSERT INTO fenceq_jobs (queue, payload, run_at, max_attempts, created_at) VALUES (NEW.queue, NEW.payload, NEW.run_at, NEW.max_attempts, NEW.created_at); END;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET state = 'bogus' WHERE id % 3 = 0;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET attempt = -1 WHERE id % 2 = 0;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET attempt = max_attempts + 5;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET lease_until = NULL, worker = NULL WHERE state = 'running';",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET state = 'running', lease_until = 0, worker = NULL;",
    "UPDATE fenceq_jobs SET claim_id = x'0102' WHERE claim_id IS NOT NULL;",
    "UPDATE fenceq_jobs SET claim_id = 'not a blob' WHERE claim_id IS NOT NULL;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET claim_id = NULL;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET lease_until = 1.5e300 WHERE state = 'running';",
    "UPDATE fenceq_jobs SET lease_until = -9223372036854775808, run_at = 9223372036854775807 WHERE state = 'running';",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET attempt = 4294967295, max_attempts = 4294967295;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET max_attempts = 4294967296;",
    "UPDATE fenceq_jobs SET key = CAST(x'ff00fe' AS TEXT), queue = CAST(x'c3' AS TEXT);",
    "UPDATE fenceq_jobs SET last_error = CAST(x'ff' AS TEXT), worker = CAST(x'fe' AS TEXT);",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET state = CAST(x'ff' AS TEXT) WHERE id = 1;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET priority = 'high', run_at = 'soon';",
    "UPDATE fenceq_jobs SET payload = zeroblob(70000000) WHERE id = 1;",
    "PRAGMA user_version = 2;",
    "PRAGMA user_version = 99;",
    "PRAGMA user_version = -1;",
    "DROP INDEX fenceq_jobs_queue_key;",
    "DROP INDEX fenceq_jobs_claim; DROP INDEX fenceq_jobs_lease; DROP INDEX fenceq_jobs_exhausted;",
    "ALTER TABLE fenceq_jobs RENAME TO hostile_jobs;",
    "ALTER TABLE fenceq_jobs DROP COLUMN acknowledged_at;",
    "DROP TABLE fenceq_jobs; CREATE TABLE fenceq_jobs (id INTEGER PRIMARY KEY, payload);",
    "DROP TABLE fenceq_jobs; CREATE VIEW fenceq_jobs AS SELECT 1 AS id;",
    "UPDATE sqlite_sequence SET seq = 9223372036854775807 WHERE name = 'fenceq_jobs';",
    "DELETE FROM sqlite_sequence;",
    "INSERT INTO fenceq_jobs (id, queue, payload, run_at, max_attempts, created_at) VALUES (9223372036854775807, 'q', x'01', 0, 1, 0);",
    "INSERT INTO fenceq_jobs (id, queue, payload, run_at, max_attempts, created_at, priority) VALUES (-5, 'q', x'01', -9223372036854775808, 10000, 0, -2147483648);",
    "PRAGMA journal_mode = DELETE;",
    "PRAGMA page_size = 512; PRAGMA journal_mode = DELETE; VACUUM;",
    "PRAGMA encoding = 'UTF-16le';",
    "CREATE TABLE hostile_pad (x); INSERT INTO hostile_pad VALUES (zeroblob(100000));",
    "PRAGMA foreign_keys = ON; CREATE TABLE hostile_child (job INTEGER REFERENCES fenceq_jobs(id)); INSERT INTO hostile_child SELECT id FROM fenceq_jobs;",
];

fn hostile_tampered_file(data: &[u8]) {
    let picks: Vec<usize> = data.iter().take(6).map(|b| *b as usize % TAMPERS.len()).collect();
    open_file_bytes(template(), |path| {
        let conn = rusqlite::Connection::open(path).expect("opening the template copy");
        for i in picks {
            // Any of these may fail (e.g. after a table was dropped); what is left is the input.
            let _ = conn.execute_batch(TAMPERS[i]);
        }
    });
}

/// A queue database with a row in every state, made once per process.
pub fn template() -> &'static [u8] {
    static TEMPLATE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let db = TempDb::new("template");
        let clock = ManualClock::new(T0);
        {
            let q =
                Queue::builder().path(db.path()).clock(clock.clone()).max_attempts(2).open().expect("template open");
            let add = |payload: &str, key: Option<&str>| {
                let job = NewJob::new("q", payload.as_bytes().to_vec());
                q.enqueue(match key {
                    Some(k) => job.key(k),
                    None => job,
                })
                .expect("template enqueue")
            };
            for i in 0..9 {
                add(&format!("job {i}"), (i % 2 == 0).then_some(format!("key-{i}").as_str()));
            }
            let claimed = q.claim_batch("q", "w", LEASE, 8).expect("template claim");
            let t = |i: usize| claimed[i].token();
            q.complete(&t(0)).expect("complete");
            q.exhaust(&t(1), "exhausted").expect("exhaust");
            q.exhaust(&t(2), "acknowledged").expect("exhaust");
            q.acknowledge(&t(2)).expect("acknowledge");
            q.mark_unknown(&t(3), "unknown").expect("unknown");
            q.park(&t(4), Duration::from_secs(60), "parked").expect("park");
            q.cancel(t(5).id).expect("cancel");
            q.retry(&t(6), Duration::ZERO, "retried").expect("retry");
            // t(7) stays running; the ninth job stays pending.
            let _ = q.checkpoint();
        }
        std::fs::read(db.path()).expect("reading the template")
    })
}

/// Every kind of call on a queue opened from a hostile file; errors are fine, panics are not.
fn probe(q: &Queue, clock: &ManualClock) {
    let _ = q.schema_version();
    let _ = q.stats();
    let _ = q.list(&ListFilter::default());
    for id in 0..10 {
        let _ = q.job(JobId(id));
    }
    let _ = q.enqueue(NewJob::new("q", b"keyed".to_vec()).key("key-0"));
    let _ = q.enqueue(NewJob::new("q", b"keyed".to_vec()).key("fresh"));
    let _ = q.enqueue(NewJob::new("q", b"plain".to_vec()));
    let _ = q.enqueue_batch([NewJob::new("q", b"b1".to_vec()), NewJob::new("q", b"b2".to_vec()).key("key-2")]);
    let _ = q.reap_preview();
    let _ = q.prune_preview(&Retention::older_than(Duration::ZERO));
    if let Ok(claimed) = q.claim_batch("q", "w", LEASE, 16) {
        for (i, c) in claimed.iter().enumerate() {
            let t = c.token();
            let _ = q.owns(&t);
            let _ = q.renew(&t, LEASE);
            let _ = match i % 6 {
                0 => q.complete(&t),
                1 => q.retry(&t, RetryPolicy::default(), "again").map(drop),
                2 => q.exhaust(&t, "gave up"),
                3 => q.mark_unknown(&t, "maybe"),
                4 => q.park(&t, LEASE, "later"),
                _ => q.with_ownership(&t, |_| Ok(())),
            };
        }
    }
    let mut cursor = None;
    for _ in 0..32 {
        let Ok(page) = q.exhaustions(cursor, 3) else { break };
        for e in &page.items {
            let _ = q.acknowledge(&e.token);
            let _ = q.replay(e.token.id);
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if let Ok(page) = q.unknowns(None, 100) {
        for (i, e) in page.items.iter().enumerate() {
            let r = [Resolution::Complete, Resolution::Retry, Resolution::Exhaust][i % 3];
            let _ = q.resolve(&e.token, r);
        }
    }
    if let Ok(rows) = q.list(&ListFilter::default()) {
        for j in rows {
            if let Some(t) = j.token() {
                let _ = q.resume(&t);
            }
            let _ = q.cancel(j.id);
        }
    }
    let _ = q.reap();
    clock.set(T0 + 30 * 24 * HOUR_MS);
    let _ = q.reap();
    let _ = q.prune(&Retention::older_than(Duration::ZERO));
    let _ = q.prune(&Retention { older_than: Duration::ZERO, batch_size: 1 });
    let _ = q.checkpoint();
    let _ = q.stats();
}
