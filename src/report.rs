//! What maintenance passes and `stats` report.

/// What one `reap` pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Expired leases returned to pending (attempts left).
    pub requeued: u64,
    /// Expired leases exhausted (no attempts left).
    pub exhausted: u64,
    /// Parked jobs exhausted because their deadline passed.
    pub waits_expired: u64,
}

impl ReapReport {
    /// Jobs changed in all.
    pub fn total(&self) -> u64 {
        self.requeued + self.exhausted + self.waits_expired
    }
}

/// What one `prune` pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Completed and cancelled rows deleted.
    pub settled: u64,
    /// Acknowledged exhaustions deleted.
    pub acknowledged: u64,
    /// Delete transactions that deleted rows (0 when nothing was pruned; a pass also looks
    /// once more and finds nothing, which is not counted).
    pub batches: u64,
}

impl PruneReport {
    /// Rows deleted in all.
    pub fn deleted(&self) -> u64 {
        self.settled + self.acknowledged
    }
}

/// What one pass of the periodic-job scheduler did (feature `schedule`; always zero without
/// it). Each registered schedule counts once, in exactly one of the first four fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScheduleReport {
    /// Schedules whose latest tick was enqueued as a new job.
    pub enqueued: u64,
    /// Schedules whose latest tick was recorded now, but a job with its key already existed
    /// (enqueued by hand, or before the record was lost): nothing new was added.
    pub duplicates: u64,
    /// Schedules whose latest tick, or a later one, had already been enqueued (by this
    /// handle, another handle or process, or before a restart): the normal case.
    pub up_to_date: u64,
    /// Schedules with no tick at or before the clock's now.
    pub not_due: u64,
    /// Of `up_to_date`, the schedules whose recorded tick is later than the clock's now: the
    /// clock stepped back, and they enqueue nothing until it passes that tick again.
    pub clock_behind: u64,
}

/// Counts for one queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// The queue's name.
    pub queue: String,
    /// Jobs waiting to be claimed (due or scheduled).
    pub pending: u64,
    /// Jobs under a lease (live or expired).
    pub running: u64,
    /// Running jobs whose lease has expired at the clock's now.
    pub expired_leases: u64,
    /// Parked jobs.
    pub waiting: u64,
    /// Completed jobs not yet pruned.
    pub completed: u64,
    /// Exhaustions awaiting acknowledgement.
    pub exhausted_unacknowledged: u64,
    /// Acknowledged exhaustions not yet pruned.
    pub exhausted_acknowledged: u64,
    /// Ambiguous outcomes awaiting resolution.
    pub unknown: u64,
    /// Cancelled jobs not yet pruned.
    pub cancelled: u64,
    /// The earliest `run_at` among pending jobs (ms since the epoch).
    pub oldest_pending_run_at: Option<i64>,
    /// The queue's pause, while it is paused: claims of it find nothing (see
    /// [`Queue::pause`](crate::Queue::pause)).
    pub paused: Option<PausedQueue>,
    /// The queue's back-off, while it lasts: claims of it find nothing before its end (see
    /// [`Queue::queue_backoff`](crate::Queue::queue_backoff)).
    pub backoff: Option<QueueBackoff>,
    /// While a queue-wide limit (its rate, or its running limit) holds its due jobs back:
    /// how many and until when (see [`Queue::set_limits`](crate::Queue::set_limits)).
    pub throttled: Option<Throttled>,
}

/// Jobs of a queue a limit holds back ([`QueueStats::throttled`]): pending, spending no
/// attempt, claimable once the limit opens.
///
/// Two kinds: due jobs a queue-wide limit (the rate, the running limit) holds back, and the
/// heads of groups whose group rate is spent. A claim defers such a head to the instant its
/// group's rate opens (its `run_at`, so that later claims pass it by), so it is pending and
/// not yet due; it is counted here while its group's rate is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    /// Due pending jobs a queue-wide limit holds back.
    pub due: u64,
    /// When the queue's rate opens again (the store's clock), or `None` when the running
    /// limit holds them (they go as running attempts settle), or when no queue-wide limit
    /// holds any.
    pub opens_at: Option<i64>,
    /// Heads of groups whose group rate is spent, waiting (deferred) for it to open.
    pub group_heads: u64,
    /// When the first of those heads is due again (the store's clock).
    pub group_heads_open_at: Option<i64>,
}

impl QueueStats {
    /// How long the most overdue pending job has been due at `now` (ms since the epoch, the
    /// clock's now), in ms; `None` when no pending job is due (none at all, or only delayed
    /// ones: see [`QueueStats::next_due_at`]). Never negative. The Prometheus gauge
    /// `fenceq_oldest_pending_age_seconds`, the CLI's `OLDEST DUE` column and its JSON
    /// `oldest_pending_age_ms` all show this one figure.
    pub fn oldest_due_age_ms(&self, now: i64) -> Option<u64> {
        self.oldest_pending_run_at.filter(|&run_at| run_at <= now).map(|run_at| now.abs_diff(run_at))
    }

    /// While no pending job is due at `now`, when the first delayed one becomes due (ms
    /// since the epoch); `None` when a job is due already or nothing is pending.
    pub fn next_due_at(&self, now: i64) -> Option<i64> {
        self.oldest_pending_run_at.filter(|&run_at| run_at > now)
    }

    /// Rows of this queue in all.
    pub fn total(&self) -> u64 {
        self.pending
            + self.running
            + self.waiting
            + self.completed
            + self.exhausted_unacknowledged
            + self.exhausted_acknowledged
            + self.unknown
            + self.cancelled
    }
}

/// Counts per queue, as `Queue::stats` returns them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// One entry per queue that has rows, is paused or backs off, by name.
    pub queues: Vec<QueueStats>,
}

impl Stats {
    /// The counts of one queue (all zero, and not paused, when it has no entry).
    pub fn queue(&self, name: &str) -> QueueStats {
        self.queues
            .iter()
            .find(|q| q.queue == name)
            .cloned()
            .unwrap_or_else(|| QueueStats { queue: name.to_string(), ..QueueStats::default() })
    }
}

/// A paused queue, as [`Queue::paused_queues`](crate::Queue::paused_queues) and
/// [`QueueStats::paused`] report it: who paused it, when and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PausedQueue {
    /// The queue's name.
    pub queue: String,
    /// When it was paused, ms since the epoch (the queue's clock).
    pub since: i64,
    /// Who paused it: the name given to [`Queue::operator`](crate::Queue::operator) (the
    /// CLI's `--by`, defaulting to the OS user), `None` for the plain [`Queue::pause`](crate::Queue::pause).
    pub by: Option<String>,
    /// Why, when a note was given.
    pub note: Option<String>,
}

/// A periodic job as the database records it, as
/// [`Queue::schedule_records`](crate::Queue::schedule_records) lists it: readable by every
/// process and build (the CLI, `fenceq serve`), including those without the `schedule`
/// feature, which cannot parse the definition but can show it. The definition and the next
/// tick are written by the process that registered the schedule, when it registered it and
/// whenever its scheduler enqueued a tick; they are `None` on a row an older build wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRecord {
    /// The schedule's name.
    pub name: String,
    /// The schedule as registered, as it displays itself: `cron "0 9 * * MON-FRI" in
    /// Europe/Berlin`, `every 60000 ms from 0`. The latest registration under the name wins.
    pub definition: Option<String>,
    /// The queue its ticks are enqueued into.
    pub queue: Option<String>,
    /// The latest tick enqueued, ms since the epoch; `None` before the first.
    pub last_tick: Option<i64>,
    /// The next tick the registering process will enqueue, ms since the epoch, as computed
    /// when it was recorded: one in the past means no scheduler has run since it came due
    /// (no process with the schedule registered runs its maintenance). `None` when it never
    /// ticks again.
    pub next_tick: Option<i64>,
    /// When the definition or the next tick was last written, ms since the epoch (the
    /// writing process's queue clock).
    pub recorded_at: Option<i64>,
}

/// A group with live jobs, as [`Queue::groups`](crate::Queue::groups) lists it: its head and
/// how many jobs wait behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    /// The queue.
    pub queue: String,
    /// The group's name.
    pub group: String,
    /// Pending jobs held back until the head lets go of the group.
    pub held: u64,
    /// The group's head: the job that holds it, or (under
    /// [`GroupPolicy::ContinueAfterFailure`](crate::GroupPolicy::ContinueAfterFailure), when
    /// none does) its oldest failed job. `None` only while a release is under way.
    pub head: Option<GroupHead>,
}

/// The head of a group ([`GroupSummary::head`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupHead {
    /// Its id.
    pub id: crate::JobId,
    /// Its state.
    pub state: crate::JobState,
    /// When it is (or was) due.
    pub run_at: i64,
    /// Its deadline while waiting.
    pub wait_until: Option<i64>,
    /// Whether its exhaustion was acknowledged (then it no longer holds the group).
    pub acknowledged: bool,
}

/// Why a group's next job cannot start ([`GroupSummary::blocked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBlock {
    /// The head is running: the group is busy, not stuck.
    Running,
    /// The head is pending but not due before this instant (a retry's backoff, a snooze).
    HeadDueAt(i64),
    /// The head waits (parked) until at most this instant.
    HeadWaiting(i64),
    /// The head's outcome is unknown: a person must resolve it.
    HeadUnknown,
    /// The head is exhausted: a person must acknowledge, replay or cancel it.
    HeadExhausted,
}

impl GroupSummary {
    /// Why the group's next job cannot start at `now`, or `None` when the group can make
    /// progress (its head is due, or nothing holds it).
    pub fn blocked(&self, now: i64) -> Option<GroupBlock> {
        let head = self.head?;
        match head.state {
            crate::JobState::Running => Some(GroupBlock::Running),
            crate::JobState::Pending if head.run_at > now => Some(GroupBlock::HeadDueAt(head.run_at)),
            crate::JobState::Waiting => Some(GroupBlock::HeadWaiting(head.wait_until.unwrap_or(head.run_at))),
            crate::JobState::Unknown if self.held > 0 => Some(GroupBlock::HeadUnknown),
            crate::JobState::Exhausted if self.held > 0 && !head.acknowledged => Some(GroupBlock::HeadExhausted),
            _ => None,
        }
    }

    /// True when the group cannot make progress without time passing or a person deciding
    /// (a running head is busy, not blocked).
    pub fn is_blocked(&self, now: i64) -> bool {
        !matches!(self.blocked(now), None | Some(GroupBlock::Running))
    }
}

/// A queue's back-off, as [`Queue::queue_backoff`](crate::Queue::queue_backoff) and
/// [`QueueStats::backoff`] report it: a provider's "retry after" for the whole queue
/// ([`BackoffScope::Queue`](crate::BackoffScope::Queue)). No claim of the queue, in any
/// process or handle, hands out anything before `until`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueBackoff {
    /// The queue's name.
    pub queue: String,
    /// When it ends, ms since the epoch (the store's clock: PostgreSQL's server clock).
    pub until: i64,
    /// Why (the snooze's reason that set it).
    pub reason: String,
    /// When it was last set, ms since the epoch.
    pub since: i64,
}

/// The last lift of a queue's back-off before it ended ([`Queue::last_backoff_lift`](crate::Queue::last_backoff_lift)):
/// who lifted it, when and why, and what the lifted back-off was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackoffLift {
    /// The queue's name.
    pub queue: String,
    /// When it was lifted, ms since the epoch (the store's clock).
    pub at: i64,
    /// Who lifted it ([`Queue::operator`](crate::Queue::operator)), if named.
    pub by: Option<String>,
    /// Why, if given ([`Operator::note`](crate::Operator::note)).
    pub note: Option<String>,
    /// The reason of the back-off it lifted.
    pub reason: String,
}

/// What one WAL checkpoint did (`PRAGMA wal_checkpoint(TRUNCATE)`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointReport {
    /// False when readers or a writer kept the checkpoint from finishing within its short
    /// wait; the WAL then keeps growing until a later checkpoint completes.
    pub completed: bool,
    /// Pages in the WAL when the checkpoint ran (-1 when the database is not in WAL mode).
    pub wal_pages: i64,
    /// Pages copied back into the database.
    pub checkpointed_pages: i64,
}

/// How this handle's writes were grouped into transactions (see [`Queue::commit_stats`](crate::Queue::commit_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Write transactions committed since the queue was opened.
    pub transactions: u64,
    /// Write requests (enqueue, claim, settle, ...) those transactions carried.
    pub requests: u64,
    /// Syncs of the WAL the writer made itself (at `Synchronous::Full`, where one sync
    /// covers every commit that finished before it; 0 at `Normal`).
    pub wal_syncs: u64,
}

impl CommitStats {
    /// Requests per transaction: 1.0 without concurrency, more when group commit combines
    /// concurrent writers.
    pub fn requests_per_transaction(&self) -> f64 {
        if self.transactions == 0 {
            0.0
        } else {
            self.requests as f64 / self.transactions as f64
        }
    }
}

/// What one backup wrote (see [`Queue::backup`](crate::Queue::backup)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// The backup file: a complete SQLite database, owner-only (mode 0600), synced.
    pub path: std::path::PathBuf,
    /// Database pages copied (the database's size in pages at the backup's instant).
    pub pages: u64,
    /// Size of the backup file in bytes.
    pub bytes: u64,
    /// Copy steps taken (each copies at most
    /// [`pages_per_step`](crate::BackupOptions::pages_per_step) pages).
    pub steps: u64,
    /// How long the backup took, from the first check to the synced directory entry.
    pub elapsed: std::time::Duration,
}
