//! The values that cross the API: ids, tokens, states, new jobs, claimed jobs, records.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;
use uuid::Uuid;

/// A job's id: assigned at intake, never reused (also after pruning).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub i64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The unique id of one claim: generated for every successful claim and stored on the row.
///
/// A UUID in the time-ordered layout of RFC 9562's version 7: the claim's instant (ms since
/// the epoch, on the store's clock) in its first 48 bits, then 74 random bits. The record of an
/// attempt that did not complete takes its start from there ([`AttemptRecord::started_at`]),
/// so that a claim stores nothing more than its id. An instant outside what 48 bits hold (before
/// the epoch, say, on a test's clock) gets a random (version 4) id, as does every claim of a
/// build before schema 19.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimId(pub Uuid);

impl ClaimId {
    /// A fresh claim id for a claim at `now` (ms since the epoch).
    pub(crate) fn generate_at(now: i64) -> Self {
        let random = Uuid::new_v4();
        match u64::try_from(now) {
            Ok(ms) if ms < 1 << 48 => {
                let mut bytes = *random.as_bytes();
                bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
                bytes[6] = 0x70 | (bytes[6] & 0x0f);
                ClaimId(Uuid::from_bytes(bytes))
            }
            _ => ClaimId(random),
        }
    }

    /// The claim's instant, when the id carries one (a version 7 id, as this build issues).
    pub(crate) fn instant(&self) -> Option<i64> {
        (self.0.get_version_num() == 7).then(|| {
            let mut ms = [0u8; 8];
            ms[2..].copy_from_slice(&self.0.as_bytes()[..6]);
            i64::from_be_bytes(ms)
        })
    }

    pub(crate) fn from_blob(bytes: &[u8]) -> Self {
        ClaimId(Uuid::from_slice(bytes).unwrap_or_else(|_| Uuid::nil()))
    }
}

impl fmt::Display for ClaimId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The full identity of one claim, `{id, attempt, claim_id}`: the capability to write for a
/// job. Every authority check compares all three fields, so neither a later attempt nor a
/// pruned and re-enqueued key can adopt an old token. It is a plain `Copy` value that can be
/// persisted and presented later (to resume a parked job, to acknowledge an exhaustion).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClaimToken {
    /// The job.
    pub id: JobId,
    /// Which claim of the job this is (1 for the first).
    pub attempt: u32,
    /// The claim's unique id.
    pub claim_id: ClaimId,
}

/// A job's state. The strings of [`JobState::as_str`] are exactly the schema's CHECK list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum JobState {
    /// Waiting to be claimed once `run_at` is due. Entered by enqueue, retry, resume,
    /// replay, reap of an expired lease, and a `Retry` resolution.
    Pending,
    /// Claimed under a lease. Left by settle, park, cancel, reap, or a reclaim after expiry.
    Running,
    /// Parked by its owner until resumed or until its deadline (then exhausted by the reaper).
    /// Never reclaimed as stale.
    Waiting,
    /// Done. Terminal: no later write of any token changes it. Pruned after retention.
    Completed,
    /// Out of attempts (or exhausted on purpose): a durable terminal record that keeps its
    /// token and must be acknowledged before it can be pruned; `replay` sends it back to pending.
    Exhausted,
    /// The outcome is ambiguous (the side effect may have happened). Never retried or pruned
    /// automatically; a reconciler or operator resolves it.
    Unknown,
    /// Cancelled by an operator. Terminal; pruned after retention.
    Cancelled,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 7] = [
        JobState::Pending,
        JobState::Running,
        JobState::Waiting,
        JobState::Completed,
        JobState::Exhausted,
        JobState::Unknown,
        JobState::Cancelled,
    ];

    /// The state's name as stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Waiting => "waiting",
            JobState::Completed => "completed",
            JobState::Exhausted => "exhausted",
            JobState::Unknown => "unknown",
            JobState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| crate::Error::invalid("state", format!("unknown job state {s:?}")))
    }
}

/// A job to enqueue.
///
/// ```
/// use fenceq::NewJob;
/// use std::time::Duration;
/// let job = NewJob::new("telegram", b"{\"update_id\":4711}".to_vec())
///     .key("update:4711")
///     .priority(5)
///     .delay(Duration::from_secs(10))
///     .max_attempts(3);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    pub(crate) queue: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) key: Option<String>,
    pub(crate) priority: i32,
    pub(crate) delay: Duration,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) group: Option<String>,
}

impl NewJob {
    /// A job for `queue` carrying `payload`, with no key, priority 0, due now, and the
    /// queue's default attempt budget.
    pub fn new(queue: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        NewJob {
            queue: queue.into(),
            payload: payload.into(),
            key: None,
            priority: 0,
            delay: Duration::ZERO,
            max_attempts: None,
            group: None,
        }
    }

    /// The idempotency key (for example the provider's event id): a second enqueue with the
    /// same queue and key returns the existing job while its row exists.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Higher priorities are claimed first. Defaults to 0.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Not claimable before `delay` from now. Defaults to zero.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// How many claims the job may have before it is exhausted. Defaults to the queue's
    /// builder setting (5).
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// The job's group (a conversation, say `chat:42`): within one queue and group at most
    /// one job runs at any instant, across every pool, handle and process, and the group's
    /// jobs start in the order they were enqueued, whatever their priority (priority still
    /// orders across groups). The group's next job waits while its head is pending with a
    /// backoff, running or waiting, and, under the queue's default [`GroupPolicy`], while
    /// the head is `unknown` or exhausted and not yet acknowledged. A name of 1..=512 bytes
    /// without a NUL byte, as a key. No group by default.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }
}

/// What a failed head does to its group: the queue's choice, stored in the database
/// ([`Queue::set_group_policy`](crate::Queue::set_group_policy)) so that every process obeys it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum GroupPolicy {
    /// A head that is `unknown`, or exhausted and not yet acknowledged, stops its group until
    /// a person decides (resolves, acknowledges, replays or cancels it): the conversation
    /// does not go on past a message whose fate is not known. The default.
    #[default]
    StopOnFailure,
    /// A head that is `unknown` or exhausted no longer blocks: the group's next job may start
    /// (still one at a time, still in order). A replayed or retried head waits behind the
    /// job that holds the group then.
    ContinueAfterFailure,
}

impl GroupPolicy {
    /// The name stored in the database and printed by the CLI: `stop` or `continue`.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupPolicy::StopOnFailure => "stop",
            GroupPolicy::ContinueAfterFailure => "continue",
        }
    }

    /// The policy of a stored or typed name.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for a name other than `stop` or
    /// `continue`.
    pub fn parse(name: &str) -> crate::Result<GroupPolicy> {
        match name {
            "stop" => Ok(GroupPolicy::StopOnFailure),
            "continue" => Ok(GroupPolicy::ContinueAfterFailure),
            other => Err(crate::Error::invalid("group policy", format!("{other:?} is not `stop` or `continue`"))),
        }
    }
}

/// The result of an enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new row was created.
    New(JobId),
    /// A row with the same queue and key exists; nothing was changed.
    Duplicate(JobId),
}

impl Enqueued {
    /// The job's id, new or existing.
    pub fn id(self) -> JobId {
        match self {
            Enqueued::New(id) | Enqueued::Duplicate(id) => id,
        }
    }

    /// True when the enqueue found an existing job.
    pub fn is_duplicate(self) -> bool {
        matches!(self, Enqueued::Duplicate(_))
    }
}

/// A job handed out by `claim`: its data and the token that fences every write for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The claim's identity.
    pub token: ClaimToken,
    /// The queue.
    pub queue: String,
    /// The idempotency key, if any.
    pub key: Option<String>,
    /// The payload.
    pub payload: Vec<u8>,
    /// The job's priority.
    pub priority: i32,
    /// The job's attempt budget.
    pub max_attempts: u32,
    /// When the lease runs out (ms since the epoch) unless renewed.
    pub lease_until: i64,
    /// The error recorded by the previous attempt, if any.
    pub last_error: Option<String>,
    /// The job's group ([`NewJob::group`]), if any.
    pub group: Option<String>,
    /// The claim's instant (ms since the epoch) on the store's clock (the queue's clock; on
    /// PostgreSQL with the system clock, the server's): the instant every rate limit of the
    /// queue ([`Limits`](crate::Limits)) counted this attempt's start at. A handler that
    /// calls a rate-limited provider later than this by some delay sends later by as much;
    /// the guide's section on limits says what headroom to leave.
    pub claimed_at: i64,
}

impl Claimed {
    /// The claim's token (`Copy`): present it to renew and settle.
    pub fn token(&self) -> ClaimToken {
        self.token
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.token.id
    }
}

/// The result of `retry` and of `snooze`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retried {
    /// Back to pending, claimable from this time (ms since the epoch).
    Scheduled(i64),
    /// No attempts were left (a retry), or the job had been snoozed as often as the cap
    /// allows (a snooze): the job is now an unacknowledged exhaustion.
    Exhausted,
}

/// A reconciler's or operator's decision about an `unknown` job. Spelled like the handler's
/// [`Outcome`](crate::Outcome)s (and the CLI's `resolve --as complete|retry|exhaust`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// The side effect happened: the job is completed.
    Complete,
    /// The side effect did not happen: run it again (pending, due now). Grants one more
    /// attempt when none are left.
    Retry,
    /// Give up: the job becomes an unacknowledged exhaustion.
    Exhaust,
}

#[allow(non_upper_case_globals)]
impl Resolution {
    /// The old spelling of [`Resolution::Complete`].
    #[deprecated(since = "0.1.0", note = "spelled like the other resolutions now: use `Resolution::Complete`")]
    pub const Completed: Resolution = Resolution::Complete;

    /// The decision's name on the job's row (`Job::decision`): `resolve complete`, ...
    pub(crate) fn decision(self) -> &'static str {
        match self {
            Resolution::Complete => "resolve complete",
            Resolution::Retry => "resolve retry",
            Resolution::Exhaust => "resolve exhaust",
        }
    }
}

/// The last operator or reconciler change of a job (resolve, replay, cancel, acknowledge),
/// as recorded on its row: what was done, when, by whom, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What was done: `acknowledge`, `replay`, `cancel`, `resolve complete`,
    /// `resolve retry` or `resolve exhaust`.
    pub action: String,
    /// When, ms since the epoch (the queue's clock).
    pub at: i64,
    /// Who: the name given to [`Queue::operator`](crate::Queue::operator) (the CLI's `--by`,
    /// defaulting to the OS user), `None` for the plain `Queue` methods.
    pub by: Option<String>,
    /// Why, when a note was given.
    pub note: Option<String>,
}

/// An unknown outcome awaiting resolution: the side effect may or may not have happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownOutcome {
    /// The identity to resolve with.
    pub token: ClaimToken,
    /// The queue.
    pub queue: String,
    /// The idempotency key.
    pub key: Option<String>,
    /// The payload.
    pub payload: Vec<u8>,
    /// What the handler knew when it could not tell (`Outcome::Unknown`'s text).
    pub evidence: Option<String>,
    /// When the outcome was recorded (ms since the epoch).
    pub at: i64,
    /// The old name of [`UnknownOutcome::evidence`], holding the same text, so that code
    /// written against it still builds.
    #[deprecated(since = "0.1.0", note = "renamed: use `evidence` (the same text)")]
    pub reason: Option<String>,
}

impl UnknownOutcome {
    /// The unknown outcome of a terminal record read like an exhaustion's (the same row
    /// fields; its text is the evidence).
    pub(crate) fn from_record(record: Exhaustion) -> UnknownOutcome {
        let Exhaustion { token, queue, key, payload, reason, at } = record;
        #[allow(deprecated)]
        UnknownOutcome { token, queue, key, payload, evidence: reason.clone(), at, reason }
    }
}

/// Delay before a retried job runs again: an exponential policy or a fixed delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Backoff {
    /// Exponential backoff with jitter, by attempt number.
    Policy(RetryPolicy),
    /// Exactly this delay.
    After(Duration),
}

impl From<Duration> for Backoff {
    fn from(d: Duration) -> Self {
        Backoff::After(d)
    }
}

impl From<RetryPolicy> for Backoff {
    fn from(p: RetryPolicy) -> Self {
        Backoff::Policy(p)
    }
}

/// How far a provider's "retry after" reaches ([`Outcome::RetryAfter`](crate::Outcome::RetryAfter),
/// [`Snooze::scope`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BackoffScope {
    /// This job only: exactly a snooze of it.
    #[default]
    Job,
    /// The job's group. A grouped job's snooze already closes its group: the job stays the
    /// group's head while it is pending, and no other job of the group is claimable before
    /// it settles, so the group is closed until the snooze's instant by the snooze itself.
    /// A job without a group behaves as [`BackoffScope::Job`].
    Group,
    /// The whole queue: the job's snooze, and in the same transaction the queue's back-off
    /// until the same instant (a later back-off already stored is kept): no claim of the
    /// queue, in any process or handle, hands out anything before it (see
    /// [`Queue::queue_backoff`](crate::Queue::queue_backoff)).
    Queue,
}

impl BackoffScope {
    /// `"job"`, `"group"` or `"queue"`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackoffScope::Job => "job",
            BackoffScope::Group => "group",
            BackoffScope::Queue => "queue",
        }
    }
}

impl std::fmt::Display for BackoffScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Snoozes a job may take before the next one exhausts it, by default
/// ([`WorkerPoolBuilder::max_snoozes`](crate::WorkerPoolBuilder::max_snoozes), [`Snooze::max_snoozes`]).
pub const DEFAULT_MAX_SNOOZES: u32 = 100;

/// The longest snooze or back-off: a year, as for a park.
pub const MAX_SNOOZE: Duration = Duration::from_secs(365 * 24 * 3600);

/// A claim put back for later without spending an attempt ([`Queue::snooze`](crate::Queue::snooze)):
/// the job is pending again at `now + delay`, its attempt given back (the next claim is a new
/// attempt with a fresh claim id, so the snoozed token is dead), and its snooze count raised.
/// Past [`Snooze::max_snoozes`] the job is exhausted instead.
///
/// ```
/// # use fenceq::{BackoffScope, Snooze};
/// # use std::time::Duration;
/// let snooze = Snooze::new(Duration::from_secs(30)).scope(BackoffScope::Queue).reason("429 from the provider");
/// # let _ = snooze;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snooze {
    pub(crate) delay: Duration,
    pub(crate) scope: BackoffScope,
    pub(crate) reason: String,
    pub(crate) max_snoozes: u32,
}

impl Snooze {
    /// A snooze of the job alone for `delay` (0 ..= [`MAX_SNOOZE`], a year), with the reason
    /// `"snoozed"` and the cap [`DEFAULT_MAX_SNOOZES`].
    pub fn new(delay: Duration) -> Snooze {
        Snooze { delay, scope: BackoffScope::Job, reason: "snoozed".to_string(), max_snoozes: DEFAULT_MAX_SNOOZES }
    }

    /// How far it reaches ([`BackoffScope`]). Defaults to the job alone.
    pub fn scope(mut self, scope: BackoffScope) -> Snooze {
        self.scope = scope;
        self
    }

    /// Why: stored as the job's last error (and, for [`BackoffScope::Queue`], as the queue's
    /// back-off reason). Cut at [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN) bytes like every stored text.
    pub fn reason(mut self, reason: impl Into<String>) -> Snooze {
        self.reason = reason.into();
        self
    }

    /// How many snoozes the job may have taken before this one: a job snoozed that many times
    /// already is exhausted instead, with an error that says so. Defaults to
    /// [`DEFAULT_MAX_SNOOZES`]; 0 exhausts at the first snooze.
    pub fn max_snoozes(mut self, max_snoozes: u32) -> Snooze {
        self.max_snoozes = max_snoozes;
        self
    }
}

/// Exponential backoff: `base * 2^(attempt-1)`, capped at `max`, then spread by up to
/// `jitter` (a fraction, 0.0–1.0) in either direction so that retries of many jobs that failed
/// together do not arrive together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Delay after the first attempt. Defaults to 1 second.
    pub base: Duration,
    /// Longest delay. Defaults to 1 hour.
    pub max: Duration,
    /// Relative spread. Defaults to 0.2 (±20%).
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { base: Duration::from_secs(1), max: Duration::from_secs(3600), jitter: 0.2 }
    }
}

impl RetryPolicy {
    /// The delay after attempt number `attempt` (1-based), with `unit` in `[0, 1)` choosing
    /// the point in the jitter range (0.5 is the middle, no jitter).
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let doublings = attempt.saturating_sub(1).min(62);
        let raw = self.base.saturating_mul(1u32 << doublings.min(31));
        let raw = if doublings > 31 { self.max } else { raw.min(self.max) };
        let jitter = if self.jitter.is_nan() { 0.0 } else { self.jitter.clamp(0.0, 1.0) };
        let unit = if unit.is_nan() { 0.5 } else { unit.clamp(0.0, 1.0) };
        let factor = 1.0 + jitter * (2.0 * unit - 1.0);
        // In f64 seconds, so that a delay near `Duration::MAX` saturates instead of panicking.
        Duration::try_from_secs_f64(raw.as_secs_f64() * factor.max(0.0)).unwrap_or(self.max).min(self.max)
    }

    /// The delay after `attempt` with fresh random jitter.
    pub fn next_delay(&self, attempt: u32) -> Duration {
        // uuid's v4 generator is already a dependency; its random bits serve as jitter.
        let bits = (Uuid::new_v4().as_u128() >> 75) as u64; // 53 random bits
        self.delay(attempt, bits as f64 / (1u64 << 53) as f64)
    }
}

/// One job's whole record, as `Queue::job` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The job's id.
    pub id: JobId,
    /// The queue.
    pub queue: String,
    /// The idempotency key.
    pub key: Option<String>,
    /// The payload.
    pub payload: Vec<u8>,
    /// The state.
    pub state: JobState,
    /// The priority.
    pub priority: i32,
    /// When the job is (or was) due, ms since the epoch.
    pub run_at: i64,
    /// Claims so far.
    pub attempt: u32,
    /// Attempt budget.
    pub max_attempts: u32,
    /// The latest claim's id (kept after settling, so exact acknowledgement is possible).
    pub claim_id: Option<ClaimId>,
    /// The latest claim's worker.
    pub worker: Option<String>,
    /// The lease's end while running.
    pub lease_until: Option<i64>,
    /// The last renewal or claim while running.
    pub heartbeat_at: Option<i64>,
    /// The deadline while waiting.
    pub wait_until: Option<i64>,
    /// The last error, exhaustion reason or unknown-outcome evidence.
    pub last_error: Option<String>,
    /// When the job was enqueued.
    pub created_at: i64,
    /// When the job last reached completed, cancelled, exhausted or unknown.
    pub settled_at: Option<i64>,
    /// When the job was exhausted.
    pub exhausted_at: Option<i64>,
    /// When its exhaustion was acknowledged.
    pub acknowledged_at: Option<i64>,
    /// The last operator or reconciler change of the job, if any.
    pub decision: Option<Decision>,
    /// The job's group ([`NewJob::group`]), if any.
    pub group: Option<String>,
    /// Pending, but held back by its group: an earlier job of the group holds it.
    pub held_by_group: bool,
    /// How often the job was put back without spending an attempt (a snooze, or a
    /// provider's back-off: [`Outcome::Snooze`](crate::Outcome::Snooze),
    /// [`Outcome::RetryAfter`](crate::Outcome::RetryAfter), [`Queue::snooze`](crate::Queue::snooze)).
    /// A replay starts it again from 0.
    pub snoozes: u32,
}

impl Job {
    /// The latest claim's token, when the job has been claimed.
    pub fn token(&self) -> Option<ClaimToken> {
        self.claim_id.map(|claim_id| ClaimToken { id: self.id, attempt: self.attempt, claim_id })
    }
}

/// A cursor into an ordered listing (exhaustions, unknowns): the last id returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cursor(pub i64);

/// One page of an ordered listing; `next` is `None` after the last page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The items, in ascending id order.
    pub items: Vec<T>,
    /// Where the next page starts, if there may be one.
    pub next: Option<Cursor>,
}

/// An unacknowledged exhaustion: the durable terminal record and the exact token that
/// acknowledges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhaustion {
    /// The identity to acknowledge with.
    pub token: ClaimToken,
    /// The queue.
    pub queue: String,
    /// The idempotency key.
    pub key: Option<String>,
    /// The payload.
    pub payload: Vec<u8>,
    /// Why it was exhausted.
    pub reason: Option<String>,
    /// When (ms since the epoch).
    pub at: i64,
}

/// How an attempt that did not complete ended: the closed set of outcomes an
/// [`AttemptRecord`] carries. The strings of [`AttemptOutcome::as_str`] are exactly the
/// schema's CHECK list (`fenceq_attempts.outcome`).
///
/// A completion leaves no record (a successful attempt costs what it cost before the history
/// existed), nor does a claim handed back unstarted (a pool's prefetched job at shutdown, or
/// one started too late: no attempt ran), nor a cancel (the job's [`Decision`] says who
/// cancelled it and when).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AttemptOutcome {
    /// Sent back to pending with a back-off, the attempt spent ([`Queue::retry`](crate::Queue::retry),
    /// [`Outcome::Retry`](crate::Outcome::Retry), a handler's panic).
    Retry,
    /// Put back without spending the attempt, for this job only ([`Queue::snooze`](crate::Queue::snooze)
    /// with [`BackoffScope::Job`], [`Outcome::Snooze`](crate::Outcome::Snooze)).
    Snooze,
    /// A provider's back-off of the job's group or whole queue: put back without spending the
    /// attempt, and the scope closed until the same instant ([`BackoffScope::Group`],
    /// [`BackoffScope::Queue`]; [`Outcome::RetryAfter`](crate::Outcome::RetryAfter)).
    Backoff,
    /// The job was exhausted by this attempt: the handler gave up, a retry found no attempt
    /// left, or a snooze was past its cap.
    Exhausted,
    /// The outcome is ambiguous ([`Queue::mark_unknown`](crate::Queue::mark_unknown)): the
    /// side effect may have happened.
    Unknown,
    /// The job was parked ([`Queue::park`](crate::Queue::park)) with the attempt's reason.
    Parked,
    /// The lease ran out before the owner settled: the reaper took the job back (to pending,
    /// or exhausted when no attempt was left), or a claim reclaimed it.
    LeaseExpired,
    /// A parked job's deadline passed and the reaper exhausted it: the second record of the
    /// attempt that parked it.
    WaitExpired,
}

impl AttemptOutcome {
    /// Every outcome, in the order of the variants.
    pub const ALL: [AttemptOutcome; 8] = [
        AttemptOutcome::Retry,
        AttemptOutcome::Snooze,
        AttemptOutcome::Backoff,
        AttemptOutcome::Exhausted,
        AttemptOutcome::Unknown,
        AttemptOutcome::Parked,
        AttemptOutcome::LeaseExpired,
        AttemptOutcome::WaitExpired,
    ];

    /// The outcome's name as stored in the database (`retry`, `snooze`, `backoff`,
    /// `exhausted`, `unknown`, `parked`, `lease_expired`, `wait_expired`).
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Retry => "retry",
            AttemptOutcome::Snooze => "snooze",
            AttemptOutcome::Backoff => "backoff",
            AttemptOutcome::Exhausted => "exhausted",
            AttemptOutcome::Unknown => "unknown",
            AttemptOutcome::Parked => "parked",
            AttemptOutcome::LeaseExpired => "lease_expired",
            AttemptOutcome::WaitExpired => "wait_expired",
        }
    }

    /// The outcome of a snooze of `scope`: [`AttemptOutcome::Snooze`] for the job alone,
    /// [`AttemptOutcome::Backoff`] for its group or queue.
    pub(crate) fn of_snooze(scope: BackoffScope) -> AttemptOutcome {
        match scope {
            BackoffScope::Job => AttemptOutcome::Snooze,
            BackoffScope::Group | BackoffScope::Queue => AttemptOutcome::Backoff,
        }
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AttemptOutcome {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AttemptOutcome::ALL
            .into_iter()
            .find(|outcome| outcome.as_str() == s)
            .ok_or_else(|| crate::Error::invalid("attempt outcome", format!("unknown attempt outcome {s:?}")))
    }
}

/// One attempt of a job that did not complete, as the store recorded it when the attempt
/// ended ([`Queue::attempts`](crate::Queue::attempts), newest first): why a job failed three
/// times before it was exhausted, after `last_error` kept only the third reason.
///
/// Written in the transaction of the settle or reap that ended the attempt (a retry,
/// snooze, back-off, exhaustion, unknown outcome, park; the reaper's or a reclaiming claim's
/// take-over of an expired lease; the reaper's exhaustion of a parked job past its deadline),
/// never by a completion, and never by a settle that was refused. Kept while the job's row
/// exists, across `replay` and `resolve`, and pruned with the row.
///
/// A job has one record per attempt, except a parked attempt whose deadline passed, which
/// has two ([`AttemptOutcome::Parked`], then [`AttemptOutcome::WaitExpired`]); and as a
/// replay starts the attempt counter again, records of different lives of a job may share an
/// attempt number (their claim ids differ).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// Which claim of the job it was (1 for the first).
    pub attempt: u32,
    /// The claim's id: with the job's id and `attempt`, the attempt's [`ClaimToken`].
    pub claim_id: ClaimId,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The worker that held the claim.
    pub worker: Option<String>,
    /// The claim's instant, ms since the epoch (the store's clock, as
    /// [`Claimed::claimed_at`]), which its claim id carries ([`ClaimId`]). `None` for an
    /// attempt claimed by a build before schema 19 (before the upgrade, or during a rolling
    /// upgrade by a process of an older build), whose claim ids carry no instant.
    pub started_at: Option<i64>,
    /// When the settle or reap that ended it ran, ms since the epoch (the store's clock).
    pub ended_at: i64,
    /// The error, reason or evidence it ended with, as stored in the job's `last_error`
    /// then (cut to [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN) bytes, a NUL byte shown as
    /// [`NUL_SHOWN_AS`](crate::NUL_SHOWN_AS)); the reaper's own text for an expired lease or
    /// wait.
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_id_carries_its_instant_and_stays_random() {
        for now in [0, 1, 1_700_000_000_123, (1 << 48) - 1] {
            let (a, b) = (ClaimId::generate_at(now), ClaimId::generate_at(now));
            assert_ne!(a, b, "at {now}");
            assert_eq!((a.instant(), a.0.get_version_num()), (Some(now), 7), "at {now}");
            assert_eq!(a.0.get_variant(), uuid::Variant::RFC4122);
        }
        for now in [-1, 1 << 48, i64::MAX, i64::MIN] {
            let id = ClaimId::generate_at(now);
            assert_eq!((id.instant(), id.0.get_version_num()), (None, 4), "at {now}");
        }
        assert_eq!(ClaimId(Uuid::new_v4()).instant(), None, "an older build's random id carries none");
    }

    #[test]
    fn attempt_outcome_round_trips() {
        for outcome in AttemptOutcome::ALL {
            assert_eq!(outcome.as_str().parse::<AttemptOutcome>().unwrap(), outcome);
        }
        assert!("completed".parse::<AttemptOutcome>().is_err());
    }

    #[test]
    fn job_state_round_trips() {
        for state in JobState::ALL {
            assert_eq!(state.as_str().parse::<JobState>().unwrap(), state);
        }
        assert!("done".parse::<JobState>().is_err());
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy { base: Duration::from_secs(1), max: Duration::from_secs(60), jitter: 0.2 };
        assert_eq!(p.delay(1, 0.5), Duration::from_secs(1));
        assert_eq!(p.delay(2, 0.5), Duration::from_secs(2));
        assert_eq!(p.delay(4, 0.5), Duration::from_secs(8));
        assert_eq!(p.delay(40, 0.5), Duration::from_secs(60));
        assert_eq!(p.delay(u32::MAX, 0.0), Duration::from_secs(48));
        assert_eq!(p.delay(3, 0.0), Duration::from_millis(3200));
        assert_eq!(p.delay(3, 1.0), Duration::from_millis(4800));
        let uncapped = RetryPolicy { base: Duration::MAX, max: Duration::MAX, jitter: 0.2 };
        for unit in [0.0, 0.5, 1.0, f64::NAN] {
            assert!(uncapped.delay(1, unit) <= Duration::MAX);
            assert_eq!(uncapped.delay(70, unit).max(Duration::from_secs(1)), uncapped.delay(70, unit));
        }
        for attempt in 1..20 {
            let d = p.next_delay(attempt);
            assert!(d <= Duration::from_secs(60));
            assert!(d >= p.delay(attempt, 0.0));
        }
    }
}
