//! The scheduler (feature `schedule`): for every periodic job registered on the queue, the
//! latest tick at or before the clock's now is enqueued, once.
//!
//! One transaction per schedule records the tick as the schedule's latest
//! (`Store::advance_schedule_if_later`, which refuses a tick that is not later than the
//! recorded one) and enqueues its job with the key `schedule:{name}:{tick_ms}`; both or
//! neither commit. The record is what makes a tick run once across restarts, handles,
//! processes, clock steps and pruning; the key names the tick's job, and is a second guard
//! (a duplicate key is counted, never an error).

use crate::error::Result;
use crate::job::Enqueued;
use crate::queue::intake::insert;
use crate::queue::schedules::{tick_key, Periodic};
use crate::queue::Queue;
use crate::report::ScheduleReport;
use crate::store::DefaultStore;
use crate::store::{ScheduleTick, Store};

/// The scheduler as a service: the maintenance thread runs it every
/// [`schedule_every`](crate::MaintenanceConfig::schedule_every); a test or an application's
/// own loop runs it once.
#[derive(Debug)]
pub struct Scheduler<S: Store = DefaultStore> {
    queue: Queue<S>,
}

impl<S: Store> Scheduler<S> {
    /// The scheduler of `queue` (of the schedules registered on it and its clones).
    pub fn new(queue: Queue<S>) -> Self {
        Scheduler { queue }
    }

    /// One pass now, on the calling thread: [`Queue::enqueue_schedules`].
    ///
    /// # Errors
    ///
    /// Those of [`Queue::enqueue_schedules`].
    pub fn run_once(&self) -> Result<ScheduleReport> {
        self.queue.enqueue_schedules()
    }
}

/// What one schedule's pass found.
enum Outcome {
    Enqueued,
    Duplicate,
    UpToDate { clock_behind: bool },
}

impl<S: Store> Queue<S> {
    /// For every periodic job registered on this handle ([`Queue::schedule`]), enqueues its
    /// latest tick at or before the clock's now, unless that tick or a later one was already
    /// enqueued for its name (by anyone, at any time: the database records it). After a
    /// downtime that is one job for the latest missed tick, not one per missed tick; see
    /// [`Queue::schedule`] for the whole policy. Each schedule is one transaction; a
    /// schedule whose tick is known to be enqueued costs none.
    ///
    /// # Errors
    ///
    /// No registration makes it fail (each was checked when registered), only storage
    /// errors: `Busy`, `StorageFull`, `ReadOnly`, and `NestedWrite` from inside a closure
    /// holding the queue's transaction (or an in-memory queue's `with_connection`). The
    /// schedules enqueued before the error stay enqueued; the rest are tried at the next
    /// pass.
    pub fn enqueue_schedules(&self) -> Result<ScheduleReport> {
        let now = self.store_now()?;
        let mut report = ScheduleReport::default();
        for periodic in self.registered() {
            let Some(tick) = periodic.schedule.latest_tick(now) else {
                report.not_due += 1;
                continue;
            };
            match self.enqueue_tick(&periodic, tick, now)? {
                Outcome::Enqueued => report.enqueued += 1,
                Outcome::Duplicate => report.duplicates += 1,
                Outcome::UpToDate { clock_behind } => {
                    report.up_to_date += 1;
                    if clock_behind {
                        report.clock_behind += 1;
                        tracing::warn!(
                            schedule = %periodic.name,
                            last_tick = periodic.seen(),
                            now,
                            "the clock is behind the schedule's last enqueued tick: nothing is enqueued until it passes it"
                        );
                    }
                }
            }
        }
        Ok(report)
    }

    /// Enqueues `tick` of `periodic` unless it, or a later tick, is recorded.
    fn enqueue_tick(&self, periodic: &Periodic, tick: i64, now: i64) -> Result<Outcome> {
        if let Some(seen) = periodic.seen().filter(|&seen| seen >= tick) {
            return Ok(Outcome::UpToDate { clock_behind: seen > now });
        }
        let job = periodic.job.clone().key(tick_key(&periodic.name, tick));
        // Recorded with the tick, for the processes that cannot compute it.
        let next = periodic.schedule.next_tick(now);
        let outcome = crate::queue::retry::retry_conflicts(|| {
            self.store().write(|tx| {
                if !S::advance_schedule_if_later(tx, ScheduleTick { name: &periodic.name, tick, now, next })? {
                    let recorded = S::schedule_last_tick(tx, &periodic.name)?.unwrap_or(tick);
                    return Ok((recorded, None));
                }
                insert(&self.shared, tx, &job).map(|enqueued| (tick, Some(enqueued)))
            })
        })?;
        let (recorded, enqueued) = outcome;
        periodic.saw(recorded);
        Ok(match enqueued {
            Some(Enqueued::New(_)) => {
                self.wake(&job.queue);
                Outcome::Enqueued
            }
            Some(Enqueued::Duplicate(_)) => Outcome::Duplicate,
            None => Outcome::UpToDate { clock_behind: recorded > now },
        })
    }
}
