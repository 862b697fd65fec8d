//! Inspection: counts, listings and single jobs (reads only).

use super::Queue;
use crate::error::Result;
use crate::job::{AttemptRecord, Cursor, Job, JobId, JobState};
use crate::report::{QueueStats, ScheduleRecord, Stats};
use crate::store::{PageRequest, StatsRow, Store};
use crate::validate::{check_key, check_limit, check_name};

/// A minute in ms.
const MINUTE_MS: i64 = 60_000;
/// The longest window of [`Queue::completions_per_minute`].
const MAX_MINUTES: u32 = 1_440;

impl<S: Store> Queue<S> {
    /// Counts per queue and state, each queue's pause ([`QueueStats::paused`]) and back-off
    /// ([`QueueStats::backoff`]): one entry per queue that has rows, is paused or backs off,
    /// by name.
    ///
    /// Cheap enough to poll: the live states are counted from their rows, each through an
    /// index of its own, and the settled ones (completed, cancelled, acknowledged
    /// exhaustions, which retention keeps for days) are read from counts that every settle
    /// keeps in step, in its own transaction. See [`Queue::recount_settled`] for when those
    /// counts need a repair.
    ///
    /// # Errors
    ///
    /// Only read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn stats(&self) -> Result<Stats> {
        self.stats_now().map(|(stats, _)| stats)
    }

    /// Counts the settled jobs again from their rows and keeps those counts, which
    /// [`Queue::stats`] reads: the repair after a process of a fenceq older than schema 13
    /// (which keeps no counts) settled jobs on a database a newer one had upgraded, which
    /// leaves the counts short. Stop such processes first. A count of the whole table, in
    /// one write transaction: settles wait for it. Returns how many settled jobs it counted.
    ///
    /// # Errors
    ///
    /// Storage errors: `Busy`, `StorageFull`, `ReadOnly` (a read-only handle); `NestedWrite`
    /// from inside a closure holding the queue's transaction.
    pub fn recount_settled(&self) -> Result<u64> {
        self.store().write(|tx| S::recount_settled(tx))
    }

    /// The counts with expired leases judged at the store's now, which it also returns (one
    /// reading of the clock for callers that also need it, as [`Queue::metrics_text`] does
    /// for the pending age), and which queues are paused.
    pub(crate) fn stats_now(&self) -> Result<(Stats, i64)> {
        let (rows, paused, backoffs, throttles, now) = self.store().read(|tx| {
            let now = self.shared.now_in(tx)?;
            let mut throttles = Vec::new();
            for (queue, limits) in S::all_limits(tx)? {
                if let Some(throttled) = crate::store::limits::throttled::<S>(tx, &queue, &limits, now)? {
                    throttles.push((queue, throttled));
                }
            }
            Ok((S::stats(tx, now)?, S::paused_queues(tx)?, S::queue_backoffs(tx, now)?, throttles, now))
        })?;
        let mut queues = fold_stats(rows);
        for pause in paused {
            // Both are in queue order (byte order, as SQLite's BINARY collation sorts).
            match queues.binary_search_by(|q| q.queue.as_str().cmp(pause.queue.as_str())) {
                Ok(at) => queues[at].paused = Some(pause),
                Err(at) => {
                    let queue = pause.queue.clone();
                    queues.insert(at, QueueStats { queue, paused: Some(pause), ..QueueStats::default() });
                }
            }
        }
        for backoff in backoffs {
            match queues.binary_search_by(|q| q.queue.as_str().cmp(backoff.queue.as_str())) {
                Ok(at) => queues[at].backoff = Some(backoff),
                Err(at) => {
                    let queue = backoff.queue.clone();
                    queues.insert(at, QueueStats { queue, backoff: Some(backoff), ..QueueStats::default() });
                }
            }
        }
        for (queue, throttled) in throttles {
            if let Ok(at) = queues.binary_search_by(|q| q.queue.as_str().cmp(queue.as_str())) {
                queues[at].throttled = Some(throttled);
            }
        }
        Ok((Stats { queues }, now))
    }

    /// Jobs completed in each of the last `minutes` whole minutes of the store's clock,
    /// oldest first: `(minute_start_ms, count)` for every minute, zeros included, the last
    /// one the minute now is in (still counting). A job counts in the minute of its
    /// `settled_at`; cancelled jobs do not count, and neither do completions already pruned.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `minutes` is not in 1..=1,440 (a day). Read errors: `Pool` (no
    /// pooled connection came free in time), `Busy`; on an in-memory queue, `NestedWrite`
    /// from inside a closure holding its transaction or connection.
    pub fn completions_per_minute(&self, minutes: u32) -> Result<Vec<(i64, u64)>> {
        if !(1..=MAX_MINUTES).contains(&minutes) {
            return Err(crate::error::Error::invalid(
                "minutes",
                format!("{minutes} is not between 1 and {MAX_MINUTES}"),
            ));
        }
        let (now, counted) = self.store().read(|tx| {
            let now = self.shared.now_in(tx)?;
            let last = now.div_euclid(MINUTE_MS);
            let from = (last - i64::from(minutes) + 1) * MINUTE_MS;
            Ok((now, S::completions_per_minute(tx, from, (last + 1) * MINUTE_MS)?))
        })?;
        let last = now.div_euclid(MINUTE_MS);
        let first = last - i64::from(minutes) + 1;
        let mut out: Vec<(i64, u64)> = (first..=last).map(|m| (m * MINUTE_MS, 0)).collect();
        for (minute, n) in counted {
            if let Some(slot) = usize::try_from(minute - first).ok().and_then(|at| out.get_mut(at)) {
                slot.1 = n;
            }
        }
        Ok(out)
    }

    /// Jobs in id order after `filter.after`, optionally of one queue and one state.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `filter.limit` is not in 1..=10,000 ([`MAX_BATCH`](crate::MAX_BATCH)) or
    /// `filter.queue` is not a valid queue name (an unknown queue lists nothing). Read
    /// errors: `Pool`
    /// (no pooled connection came free in time), `Busy`; on an in-memory queue,
    /// `NestedWrite` from inside a closure holding its transaction or connection.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<Job>> {
        check_limit(filter.limit)?;
        if let Some(queue) = &filter.queue {
            check_name("queue name", queue)?;
        }
        let after = filter.after.map_or(0, |c| c.0);
        self.store()
            .read(|tx| S::list(tx, filter.queue.as_deref(), filter.state, PageRequest { after, limit: filter.limit }))
    }

    /// Due pending and running jobs of `queue` (for `WorkerPool::wait_idle`).
    pub(crate) fn due_or_running(&self, queue: &str) -> Result<u64> {
        self.store().read(|tx| S::due_or_running(tx, queue, self.shared.now_in(tx)?))
    }

    /// The id of the job of `queue` whose idempotency key is `key`, while its row exists.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the queue name is empty, longer than 128 bytes or contains a NUL
    /// byte, or the key is empty or longer than 512 bytes. Read errors: `Pool` (no pooled
    /// connection came free in time), `Busy`; on an in-memory queue, `NestedWrite` from
    /// inside a closure holding its transaction or connection.
    pub fn find_by_key(&self, queue: &str, key: &str) -> Result<Option<JobId>> {
        check_name("queue name", queue)?;
        check_key(key)?;
        self.store().read(|tx| S::find_by_key(tx, queue, key))
    }

    /// Every periodic job recorded in the database, by name: what each one is, where its
    /// ticks go, its latest and next tick, as the processes that registered them recorded
    /// them. Registrations live in the memory of the process that made them
    /// (`Queue::schedule`, feature `schedule`); this is how any other process, of any build
    /// (the CLI, `fenceq serve`), sees them. A name whose
    /// registration is gone keeps its row (its latest tick guards against a repeat), so a
    /// row is not proof that a process still runs it: a next tick well in the past says
    /// that no scheduler has run it since.
    ///
    /// # Errors
    ///
    /// Only read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn schedule_records(&self) -> Result<Vec<ScheduleRecord>> {
        self.store().read(S::schedules)
    }

    /// One job's whole record, or `None` when no row has this id.
    ///
    /// # Errors
    ///
    /// No row with this id is `Ok(None)`, not `NotFound`. Read errors: `Pool` (no pooled
    /// connection came free in time), `Busy`; on an in-memory queue, `NestedWrite` from
    /// inside a closure holding its transaction or connection.
    pub fn job(&self, id: JobId) -> Result<Option<Job>> {
        self.store().read(|tx| S::job(tx, id))
    }

    /// The latest `limit` records of job `id`'s attempts that did not complete, newest first:
    /// each retry, snooze, back-off, exhaustion, unknown outcome and park, each lease that ran
    /// out (reaped or reclaimed), and a park's passed deadline, with its attempt, worker,
    /// start, end and error ([`AttemptRecord`]). Empty for a job that never failed (a
    /// completion records nothing), and for an id with no row: records are pruned with
    /// their job, and kept as long as it is, across replays and resolutions.
    ///
    /// A call of its own rather than a field of [`Job`]: [`Queue::job`] and [`Queue::list`]
    /// are polled (waits for a state, dashboards, the model's checks after every step), and
    /// a history read with every row would cost them a second read each, however few jobs
    /// ever failed.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `limit` is not in 1..=10,000 ([`MAX_BATCH`](crate::MAX_BATCH)).
    /// Read errors: `Pool` (no pooled connection came free in time), `Busy`; on an in-memory
    /// queue, `NestedWrite` from inside a closure holding its transaction or connection.
    pub fn attempts(&self, id: JobId, limit: u32) -> Result<Vec<AttemptRecord>> {
        check_limit(limit)?;
        self.store().read(|tx| S::attempts(tx, id, limit))
    }
}

/// The store's groups, in queue order, as one `QueueStats` per queue.
fn fold_stats(rows: Vec<StatsRow>) -> Vec<QueueStats> {
    let mut out: Vec<QueueStats> = Vec::new();
    for row in rows {
        if out.last().is_none_or(|q| q.queue != row.queue) {
            out.push(QueueStats { queue: row.queue.clone(), ..QueueStats::default() });
        }
        let q = out.last_mut().expect("pushed above");
        let count = row.count;
        match row.state {
            JobState::Pending => {
                q.pending += count;
                q.oldest_pending_run_at = row.min_run_at;
            }
            JobState::Running => {
                q.running += count;
                q.expired_leases += row.expired;
            }
            JobState::Waiting => q.waiting += count,
            JobState::Completed => q.completed += count,
            JobState::Exhausted if row.acknowledged => q.exhausted_acknowledged += count,
            JobState::Exhausted => q.exhausted_unacknowledged += count,
            JobState::Unknown => q.unknown += count,
            JobState::Cancelled => q.cancelled += count,
        }
    }
    out
}

/// A filter for [`Queue::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this state.
    pub state: Option<JobState>,
    /// Start after this id (`None` for the first page).
    pub after: Option<Cursor>,
    /// At most this many jobs. Defaults to 100.
    pub limit: u32,
}

impl Default for ListFilter {
    fn default() -> Self {
        ListFilter { queue: None, state: None, after: None, limit: 100 }
    }
}
