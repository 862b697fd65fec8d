//! The op grammar of the reference model: [`QueueOp`], one step of a model run, and the
//! selectors its steps are made of (queues, workers, keys, priorities, delays, leases, limits,
//! job and token references with their forgeries, texts, retentions, clock moves). Each is a
//! small `Arbitrary` type, so that fuzzer bytes decode ([`decode`]) to calls worth making and
//! a few values repeat; each selector's method gives the value the runner passes to the queue.

use arbitrary::{Arbitrary, Unstructured};
use fenceq::{Backoff, BackoffScope, JobState, Limits, NewJob, Rate, Retention, RetryPolicy};
use std::time::Duration;

/// The standard lease of the model's claims.
pub const LEASE: Duration = Duration::from_secs(30);
const LEASE_MS: i64 = 30_000;
pub(super) const HOUR_MS: i64 = 3_600_000;
/// Eight days: more than the default retention (7 days).
const WEEK_MS: i64 = 8 * 24 * HOUR_MS;
/// Longest op sequence [`run_bytes`](super::run_bytes) decodes.
pub const MAX_OPS: usize = 64;

/// A queue the model's calls name.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueSel {
    /// "a"
    A,
    /// "b"
    B,
}

impl QueueSel {
    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn name(self) -> String {
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
    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn value(self) -> i32 {
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
    pub(super) fn ms(self) -> i64 {
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
    /// The queue's default ([`DEFAULT_ATTEMPTS`](super::DEFAULT_ATTEMPTS)).
    Default,
    /// 1
    One,
    /// 2
    Two,
    /// 4
    Four,
}

impl AttemptsSel {
    pub(super) fn value(self) -> Option<u32> {
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
    /// The group, if any.
    pub group: Option<GroupSel>,
}

/// One of two group names, so that histories hold groups with backlogs.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSel {
    /// "g0"
    G0,
    /// "g1"
    G1,
}

impl GroupSel {
    pub(super) fn name(self) -> &'static str {
        match self {
            GroupSel::G0 => "g0",
            GroupSel::G1 => "g1",
        }
    }
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
    pub(super) fn job(self) -> NewJob {
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
    pub(super) fn duration(self) -> Duration {
        match self {
            LeaseSel::Standard => LEASE,
            LeaseSel::OneMs => Duration::from_millis(1),
            LeaseSel::Hour => Duration::from_secs(3600),
            LeaseSel::Max => fenceq::MAX_LEASE,
            LeaseSel::Zero => Duration::ZERO,
            LeaseSel::TooLong => fenceq::MAX_LEASE + Duration::from_millis(1),
        }
    }

    pub(super) fn valid_ms(self) -> Option<i64> {
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
    pub(super) fn value(self) -> u32 {
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
    pub(super) fn value(self) -> u32 {
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
    pub(super) fn state(self) -> JobState {
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
    pub(super) fn backoff(self) -> Backoff {
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
    pub(super) fn text(self, what: &str) -> String {
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
    pub(super) fn duration(self) -> Duration {
        match self {
            ParkSel::OneMs => Duration::from_millis(1),
            ParkSel::Lease => LEASE,
            ParkSel::Hour => Duration::from_secs(3600),
            ParkSel::Zero => Duration::ZERO,
            ParkSel::TooLong => Duration::from_secs(366 * 24 * 3600),
        }
    }
}

/// A snooze's delay.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnoozeSel {
    /// Due again at once.
    Zero,
    /// 1 ms.
    OneMs,
    /// One lease.
    Lease,
    /// One hour.
    Hour,
    /// A year, the longest allowed ([`fenceq::MAX_SNOOZE`]).
    Year,
    /// One ms over a year (invalid).
    TooLong,
}

impl SnoozeSel {
    pub(super) fn duration(self) -> Duration {
        match self {
            SnoozeSel::Zero => Duration::ZERO,
            SnoozeSel::OneMs => Duration::from_millis(1),
            SnoozeSel::Lease => LEASE,
            SnoozeSel::Hour => Duration::from_secs(3600),
            SnoozeSel::Year => fenceq::MAX_SNOOZE,
            SnoozeSel::TooLong => fenceq::MAX_SNOOZE + Duration::from_millis(1),
        }
    }
}

/// How far a snooze reaches.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeSel {
    /// `BackoffScope::Job`
    Job,
    /// `BackoffScope::Group` (the model's jobs have no group: a snooze of the job)
    Group,
    /// `BackoffScope::Queue`: the queue backs off too.
    Queue,
}

impl ScopeSel {
    pub(super) fn scope(self) -> BackoffScope {
        match self {
            ScopeSel::Job => BackoffScope::Job,
            ScopeSel::Group => BackoffScope::Group,
            ScopeSel::Queue => BackoffScope::Queue,
        }
    }
}

/// A snooze's cap.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapSel {
    /// 0: the first snooze exhausts.
    Zero,
    /// 1
    One,
    /// 2
    Two,
    /// [`fenceq::DEFAULT_MAX_SNOOZES`]
    Default,
}

impl CapSel {
    pub(super) fn value(self) -> u32 {
        match self {
            CapSel::Zero => 0,
            CapSel::One => 1,
            CapSel::Two => 2,
            CapSel::Default => fenceq::DEFAULT_MAX_SNOOZES,
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
    pub(super) fn retention(self) -> Retention {
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
    pub(super) fn ms(self) -> i64 {
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
    pub(super) fn ms(self) -> i64 {
        match self {
            BackSel::OneMs => 1,
            BackSel::Lease => LEASE_MS,
            BackSel::Hour => HOUR_MS,
            BackSel::Week => WEEK_MS,
        }
    }
}

/// A queue-wide rate the model sets.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateSel {
    /// 1 per lease.
    OnePerLease,
    /// 2 per lease.
    TwoPerLease,
    /// 1 per hour.
    OnePerHour,
    /// 2 per hour.
    TwoPerHour,
}

impl RateSel {
    pub(super) fn rate(self) -> Rate {
        let hour = Duration::from_millis(HOUR_MS as u64);
        match self {
            RateSel::OnePerLease => Rate::new(1, LEASE),
            RateSel::TwoPerLease => Rate::new(2, LEASE),
            RateSel::OnePerHour => Rate::new(1, hour),
            RateSel::TwoPerHour => Rate::new(2, hour),
        }
    }
}

/// The group rates the model sets: one, or two at once (in either order; the store reads
/// them back in window order).
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupRatesSel {
    /// 1 per lease.
    OnePerLease,
    /// 2 per hour.
    TwoPerHour,
    /// 1 per lease and 2 per hour.
    Both,
    /// 2 per hour and 1 per lease (the same two, set in the other order).
    BothReversed,
}

impl GroupRatesSel {
    pub(super) fn rates(self) -> Vec<Rate> {
        let (lease, hour) = (RateSel::OnePerLease.rate(), RateSel::TwoPerHour.rate());
        match self {
            GroupRatesSel::OnePerLease => vec![lease],
            GroupRatesSel::TwoPerHour => vec![hour],
            GroupRatesSel::Both => vec![lease, hour],
            GroupRatesSel::BothReversed => vec![hour, lease],
        }
    }
}

/// A running limit the model sets.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunningSel {
    /// 1
    One,
    /// 2
    Two,
}

/// Valid limits of a queue: any combination of a queue rate, group rates and a running limit
/// (none at all clears them).
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitsSpec {
    /// The queue's rate.
    pub rate: Option<RateSel>,
    /// Its groups' rates.
    pub group_rates: Option<GroupRatesSel>,
    /// Its running limit.
    pub max_running: Option<RunningSel>,
}

impl LimitsSpec {
    pub(super) fn limits(self) -> Limits {
        Limits {
            rate: self.rate.map(RateSel::rate),
            group_rates: self.group_rates.map(GroupRatesSel::rates).unwrap_or_default(),
            max_running: self.max_running.map(|r| match r {
                RunningSel::One => 1,
                RunningSel::Two => 2,
            }),
        }
    }
}

/// Limits that `set_limits` must refuse with `InvalidInput`, storing nothing (each beside
/// valid parts, which must not be stored either).
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadLimits {
    /// A queue rate of 0 per lease.
    ZeroCount,
    /// A queue rate of 1 per 0 ms.
    ZeroWindow,
    /// A group rate over a day and 1 ms, beside a valid one.
    WindowTooLong,
    /// A queue rate of 1,000,001 per lease.
    CountTooHigh,
    /// A group rate per 1.5 ms (under a millisecond's precision).
    SubMillisecond,
    /// Two group rates with the same window.
    SameGroupWindow,
    /// A running limit of 0, beside a valid rate.
    ZeroRunning,
}

impl BadLimits {
    pub(super) fn limits(self) -> Limits {
        let valid = RateSel::OnePerLease.rate();
        let none = Limits::default();
        match self {
            BadLimits::ZeroCount => Limits { rate: Some(Rate::new(0, LEASE)), ..none },
            BadLimits::ZeroWindow => Limits { rate: Some(Rate::new(1, Duration::ZERO)), ..none },
            BadLimits::WindowTooLong => Limits {
                group_rates: vec![valid, Rate::new(1, fenceq::MAX_RATE_WINDOW + Duration::from_millis(1))],
                max_running: Some(1),
                ..none
            },
            BadLimits::CountTooHigh => Limits { rate: Some(Rate::new(fenceq::MAX_LIMIT_COUNT + 1, LEASE)), ..none },
            BadLimits::SubMillisecond => {
                Limits { group_rates: vec![Rate::new(1, Duration::from_micros(1500))], ..none }
            }
            BadLimits::SameGroupWindow => {
                Limits { rate: Some(valid), group_rates: vec![valid, Rate::new(2, LEASE)], ..none }
            }
            BadLimits::ZeroRunning => Limits { rate: Some(valid), max_running: Some(0), ..none },
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
    /// `snooze`: back to pending without spending an attempt, or exhausted past the cap; a
    /// queue-scoped one backs the job's queue off too.
    Snooze {
        /// The token presented.
        token: TokenRef,
        /// The delay.
        delay: SnoozeSel,
        /// The scope.
        scope: ScopeSel,
        /// The cap.
        cap: CapSel,
        /// The reason text.
        reason: TextSel,
    },
    /// `clear_backoff` of a queue.
    ClearBackoff(QueueSel),
    /// `set_limits` of valid limits (none at all clears them).
    SetLimits {
        /// The queue.
        queue: QueueSel,
        /// The limits.
        limits: LimitsSpec,
    },
    /// `set_limits` of bad limits: `InvalidInput`, and nothing is stored.
    SetBadLimits {
        /// The queue.
        queue: QueueSel,
        /// The bad limits.
        bad: BadLimits,
    },
    /// `clear_limits`.
    ClearLimits(QueueSel),
    /// `limits`: what the store holds for the queue, compared with the model's.
    ReadLimits(QueueSel),
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
            QueueOp::Snooze { .. } => "snooze",
            QueueOp::ClearBackoff(_) => "clear_backoff",
            QueueOp::SetLimits { .. } | QueueOp::SetBadLimits { .. } => "set_limits",
            QueueOp::ClearLimits(_) => "clear_limits",
            QueueOp::ReadLimits(_) => "limits",
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
