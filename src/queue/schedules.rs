//! Periodic jobs, registered by name on the queue handle (feature `schedule`): what to
//! enqueue at every tick of a [`Schedule`]. The scheduler service
//! (`maintenance/scheduler.rs`) enqueues the ticks.
//!
//! The registry lives in the handle's shared state, not in `MaintenanceConfig`: every clone
//! of the handle sees one set; a schedule can be added, replaced or removed while the
//! maintenance thread runs, without restarting it; registration checks the job against the
//! queue's own limits and clock; and a pass runs without a maintenance thread at all
//! (`Queue::enqueue_schedules`, in tests and in applications with their own loop).
//! `MaintenanceConfig` stays a plain `Copy` value of intervals. What must survive the
//! process (the latest tick enqueued per name) is in the database, not here.

use super::Queue;
use crate::error::{Error, Result};
use crate::job::NewJob;
use crate::schedule::Schedule;
use crate::store::{ScheduleDefinition, Store};
use crate::validate::{check_job, check_name};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// One registered periodic job.
#[derive(Debug)]
pub(crate) struct Periodic {
    pub(crate) name: String,
    pub(crate) schedule: Schedule,
    /// The job of every tick, without its key (the scheduler adds it).
    pub(crate) job: NewJob,
    /// The latest tick this handle knows to be recorded in the store ([`NONE_SEEN`] before
    /// the first pass): a pass whose tick is not later needs no transaction. Only a cache;
    /// the store's record decides.
    pub(crate) seen: AtomicI64,
}

/// `Periodic::seen` before anything was seen.
pub(crate) const NONE_SEEN: i64 = i64::MIN;

impl Periodic {
    pub(crate) fn seen(&self) -> Option<i64> {
        Some(self.seen.load(Ordering::SeqCst)).filter(|&t| t != NONE_SEEN)
    }

    pub(crate) fn saw(&self, tick: i64) {
        self.seen.fetch_max(tick, Ordering::SeqCst);
    }
}

/// The idempotency key of one tick's job: `schedule:{name}:{tick_ms}`.
pub(crate) fn tick_key(name: &str, tick_ms: i64) -> String {
    format!("schedule:{name}:{tick_ms}")
}

/// A schedule name: a queue-style name (1..=128 bytes, no NUL) without whitespace or control
/// characters, so that its jobs' keys and its log lines stay on one line.
fn check_schedule_name(name: &str) -> Result<()> {
    check_name("schedule name", name)?;
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid("schedule name", format!("{name:?} contains whitespace or a control character")));
    }
    Ok(())
}

impl<S: Store> Queue<S> {
    /// Registers the periodic job `name`: at every tick of `schedule`, the scheduler service
    /// (run by the maintenance thread every
    /// [`schedule_every`](crate::MaintenanceConfig::schedule_every), or once by
    /// [`Queue::enqueue_schedules`]) enqueues `job` with the key `schedule:{name}:{tick_ms}`.
    /// A second registration under the same name replaces the first. Registrations belong
    /// to this handle and its clones, for the life of the process: register at start-up.
    /// What the schedule is, where its ticks go and when it next ticks are recorded in the
    /// database, for the other processes ([`Queue::schedule_records`], `fenceq schedules`);
    /// where several processes register one name differently, the latest registration's
    /// record is shown.
    ///
    /// **Missed ticks.** A pass enqueues only the latest tick at or before the clock's now,
    /// and only when it is later than the latest tick ever enqueued for `name` (recorded in
    /// the database with the job, in one transaction). After a downtime the schedule runs
    /// once, for the latest missed tick, not once per missed tick; the first pass after the
    /// first registration runs the latest tick at once (a daily 09:00 job registered at
    /// 10:30 runs for today's 09:00). The same record makes a restart, a second handle or
    /// maintenance thread, and several processes on one database enqueue each tick once, as
    /// does a tick whose job row has been pruned. Ticks are never enqueued ahead of the
    /// clock.
    ///
    /// **Clock steps.** A clock that jumps forward enqueues only the latest tick at or
    /// before its new time. A clock that steps back enqueues nothing until it passes the
    /// latest tick recorded (a warning is logged meanwhile): ticks at or before that one
    /// counted as enqueued.
    ///
    /// ```
    /// use fenceq::{NewJob, Queue, Schedule};
    /// let queue = Queue::open_in_memory()?;
    /// queue.schedule(
    ///     "digest",
    ///     Schedule::cron("0 9 * * MON-FRI", "Europe/Berlin")?,
    ///     NewJob::new("emails", b"daily digest".to_vec()).priority(5).max_attempts(3),
    /// )?;
    /// queue.enqueue_schedules()?; // what the maintenance thread does every few seconds
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidInput`, with nothing registered, when the name is empty, longer than 128
    /// bytes, or contains a NUL byte, whitespace or a control character; when `job` would be
    /// refused by [`Queue::enqueue`] (queue name, payload over the queue's limit, attempt
    /// budget, delay) or carries a key of its own (the scheduler keys every tick); or when
    /// the schedule never ticks after the clock's now (a cron expression for a past year).
    /// Bad expressions, unknown time zones and bad intervals are refused earlier, by
    /// [`Schedule::cron`] and [`Schedule::every`].
    ///
    /// The registration is recorded in the database (its definition, queue and next tick,
    /// read by [`Queue::schedule_records`] in any process), so storage errors refuse it too,
    /// with nothing registered: `Busy`, `StorageFull`, `ReadOnly`, `Pool`, and `NestedWrite`
    /// from inside a closure holding the queue's transaction (or an in-memory queue's
    /// `with_connection`).
    pub fn schedule(&self, name: &str, schedule: Schedule, job: NewJob) -> Result<()> {
        check_schedule_name(name)?;
        check_job(&job, self.shared.max_payload)?;
        if job.key.is_some() {
            return Err(Error::invalid(
                "scheduled job",
                "has a key of its own: the scheduler keys every tick as schedule:{name}:{tick_ms}",
            ));
        }
        if schedule.next_tick(self.shared.now()).is_none() {
            return Err(Error::invalid("schedule", format!("{schedule} never ticks after now")));
        }
        self.record(name, &schedule, &job.queue)?;
        let periodic = Periodic { name: name.to_string(), schedule, job, seen: AtomicI64::new(NONE_SEEN) };
        self.shared.schedules.lock().insert(name.to_string(), Arc::new(periodic));
        Ok(())
    }

    /// Records what `schedule` is in the database, with its next tick, for the processes that
    /// cannot see this one's registrations ([`Queue::schedule_records`]). The next tick is the
    /// one the next pass enqueues: the latest tick at or before now when it is later than the
    /// recorded one (a first registration runs it at once), else the first after now.
    fn record(&self, name: &str, schedule: &Schedule, queue: &str) -> Result<()> {
        let definition = schedule.to_string();
        crate::queue::retry::retry_conflicts(|| {
            self.store().write(|tx| {
                let now = self.shared.now_in(tx)?;
                let last = S::schedule_last_tick(tx, name)?;
                let next = match schedule.latest_tick(now) {
                    Some(due) if last.is_none_or(|last| due > last) => Some(due),
                    _ => schedule.next_tick(now.max(last.unwrap_or(now))),
                };
                S::record_schedule(tx, ScheduleDefinition { name, definition: &definition, queue, next, now })
            })
        })
    }

    /// Removes the registration `name` from this handle and its clones; true when there was
    /// one. The database keeps its latest tick, so a later registration under the same name
    /// does not enqueue that tick again.
    pub fn unschedule(&self, name: &str) -> bool {
        self.shared.schedules.lock().remove(name).is_some()
    }

    /// The names registered on this handle, in order, each with its schedule.
    pub fn schedules(&self) -> Vec<(String, Schedule)> {
        self.shared.schedules.lock().values().map(|p| (p.name.clone(), p.schedule.clone())).collect()
    }

    /// The latest tick (ms since the epoch) enqueued for the schedule `name` by any handle
    /// or process on this database, whether or not it is registered here; `None` before its
    /// first.
    ///
    /// # Errors
    ///
    /// Only read errors: `Pool` (no pooled connection came free in time), `Busy`; on an
    /// in-memory queue, `NestedWrite` from inside a closure holding its transaction or
    /// connection.
    pub fn last_tick(&self, name: &str) -> Result<Option<i64>> {
        self.store().read(|tx| S::schedule_last_tick(tx, name))
    }

    /// This handle's registrations, for one pass (no lock is held while it runs).
    pub(crate) fn registered(&self) -> Vec<Arc<Periodic>> {
        self.shared.schedules.lock().values().cloned().collect()
    }
}
