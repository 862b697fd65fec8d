//! The counts snapshot: the overview's counts and chart, and the queue pages' tabs, read by
//! one named thread of the server (`fenceq-counts`) and shared by every request, instead of
//! counted by every request.
//!
//! Why: counting is a pass over every row of the jobs table (the schema has no index that
//! would make it cheaper, since such an index would make every claim and settle dearer), so
//! a page that counted would cost a core for as long as that pass takes, and a few open
//! overviews would keep the database busy counting. Here the count runs once per interval,
//! whatever the number of pages drawn, and the pages say how old it is.
//!
//! The interval adapts to the count's cost: [`next_interval`] is ten times the last count's
//! duration, but never less than the floor, so a slow count takes at most about a tenth of a
//! core. A [`Signal::Refresh`] (sent after an action of this server) starts a count at once;
//! dropping the [`Sender`] stops the thread (the server drops it when it stops serving).

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use fenceq::Stats;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shortest interval between two counts of the thread.
pub const FLOOR: Duration = Duration::from_secs(3);
/// How many times its own duration a count waits before the next one.
const COST_FACTOR: u32 = 10;
/// The thread's name.
pub const THREAD: &str = "fenceq-counts";

/// One count: what the pages show, and when and how fast it was read.
#[derive(Debug)]
pub struct Counts {
    /// Counts per queue and state (with pauses, back-offs and throttles as read then).
    pub stats: Stats,
    /// Completions per minute of the chart, oldest first.
    pub per_minute: Vec<(i64, u64)>,
    /// The queue's clock when the count began (ms since the epoch).
    pub taken_at: i64,
    /// How long the count took.
    pub took: Duration,
}

/// What the counting thread asks of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Count now (a change was made through this server).
    Refresh,
}

/// The latest count, shared by the requests and the counting thread.
#[derive(Debug, Default)]
pub struct Snapshots {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    latest: Option<Arc<Counts>>,
    /// Counts begun: the number of the one running, or of the last one.
    started: u64,
    /// Counts finished (a failed one included): a waiter compares it to see a newer one.
    /// Counts run one after the other, so this is also the number of the last one finished.
    finished: u64,
    /// The first count that begins after the latest change made through this server:
    /// pages wait for it (bounded), so that the page after an action shows its effect.
    wanted: u64,
    /// The last count's failure, while no later count succeeded.
    failure: Option<String>,
    /// The thread has ended: nothing newer comes.
    stopped: bool,
}

/// Why no count could be given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoCounts {
    /// None within the bound: the first count is still running.
    NotYet,
    /// The counts failed (and none succeeded before): the error.
    Failed(String),
    /// The counting thread has stopped.
    Stopped,
}

impl Snapshots {
    #[cfg(test)]
    /// The latest successful count, if any.
    pub fn latest(&self) -> Option<Arc<Counts>> {
        self.state.lock().latest.clone()
    }

    /// The latest count's failure, while no later count succeeded.
    pub fn failure(&self) -> Option<String> {
        self.state.lock().failure.clone()
    }

    #[cfg(test)]
    /// Counts finished so far (successful or not).
    pub fn finished(&self) -> u64 {
        self.state.lock().finished
    }

    /// Notes that a change was just made: the next count to begin will see it, and pages
    /// wait for that one (see [`Snapshots::current`]).
    pub fn changed(&self) {
        let mut state = self.state.lock();
        state.wanted = state.wanted.max(state.started + 1);
    }

    /// The latest count, waiting at most `bound` for the first one; and, after a change made
    /// through this server ([`Snapshots::changed`]), at most `fresh` for the first count
    /// that began after it (past that, the older count).
    ///
    /// # Errors
    ///
    /// No count within `bound` ([`NoCounts::NotYet`]), the first counts failed, or the
    /// thread stopped before any count.
    pub fn current(&self, bound: Duration, fresh: Duration) -> Result<Arc<Counts>, NoCounts> {
        let started = Instant::now();
        let mut state = self.state.lock();
        let fresh_until = started + fresh;
        while state.finished < state.wanted && !state.stopped {
            if self.changed.wait_until(&mut state, fresh_until).timed_out() {
                break;
            }
        }
        let deadline = started + bound;
        loop {
            if let Some(latest) = &state.latest {
                return Ok(Arc::clone(latest));
            }
            if let Some(failure) = &state.failure {
                return Err(NoCounts::Failed(failure.clone()));
            }
            if state.stopped {
                return Err(NoCounts::Stopped);
            }
            if self.changed.wait_until(&mut state, deadline).timed_out() {
                return Err(NoCounts::NotYet);
            }
        }
    }

    #[cfg(test)]
    /// Waits at most `bound` for a count to finish after the `finished`-th one; true when one
    /// did.
    pub fn wait_past(&self, finished: u64, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        let mut state = self.state.lock();
        while state.finished <= finished && !state.stopped {
            if self.changed.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
        state.finished > finished
    }

    #[cfg(test)]
    /// Whether the counting thread has ended.
    pub fn stopped(&self) -> bool {
        self.state.lock().stopped
    }

    fn begin(&self) {
        self.state.lock().started += 1;
    }

    fn publish(&self, result: Result<Counts, String>) {
        let mut state = self.state.lock();
        match result {
            Ok(counts) => {
                state.latest = Some(Arc::new(counts));
                state.failure = None;
            }
            Err(failure) => state.failure = Some(failure),
        }
        state.finished += 1;
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.state.lock().stopped = true;
        self.changed.notify_all();
    }
}

/// How long to wait after a count that took `took`: `COST_FACTOR` times that, at least
/// `floor`.
pub fn next_interval(floor: Duration, took: Duration) -> Duration {
    took.saturating_mul(COST_FACTOR).max(floor)
}

/// The counting loop: counts, publishes, waits [`next_interval`] or for a
/// [`Signal::Refresh`], and again, until `signals` is disconnected (every sender dropped).
/// A failed count is published as the failure (pages keep the last good one and say so);
/// the next one is tried after `floor`.
pub fn run(
    snapshots: &Snapshots,
    signals: &Receiver<Signal>,
    floor: Duration,
    count: &mut dyn FnMut() -> Result<Counts, String>,
) {
    loop {
        snapshots.begin();
        let started = Instant::now();
        let result = count();
        let took = started.elapsed();
        let wait = match &result {
            Ok(counts) => next_interval(floor, counts.took.max(took)),
            Err(_) => next_interval(floor, took),
        };
        snapshots.publish(result);
        match signals.recv_timeout(wait) {
            Ok(Signal::Refresh) | Err(RecvTimeoutError::Timeout) => {
                // Several refreshes asked during one count need one more count, not several.
                while signals.try_recv().is_ok() {}
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    snapshots.stop();
}

/// Starts the counting thread in `scope`; it runs until the returned sender (and every clone
/// of it) is dropped.
///
/// # Errors
///
/// The thread could not be spawned.
pub fn spawn<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    snapshots: &'env Snapshots,
    floor: Duration,
    mut count: impl FnMut() -> Result<Counts, String> + Send + 'scope,
) -> std::io::Result<(Sender<Signal>, std::thread::ScopedJoinHandle<'scope, ()>)> {
    // Room for one refresh: more asked while one waits add nothing.
    let (sender, receiver) = crossbeam_channel::bounded(1);
    let handle = std::thread::Builder::new()
        .name(THREAD.to_string())
        .spawn_scoped(scope, move || run(snapshots, &receiver, floor, &mut count))?;
    Ok((sender, handle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::serve::app::count;
    use fenceq::{NewJob, Queue};

    /// Long enough that no test sees a count it did not ask for: every count here is
    /// triggered.
    const NEVER: Duration = Duration::from_secs(3600);
    const BOUND: Duration = Duration::from_secs(60);

    #[test]
    fn the_interval_is_ten_counts_but_never_under_the_floor() {
        assert_eq!(next_interval(FLOOR, Duration::from_millis(10)), FLOOR);
        assert_eq!(next_interval(FLOOR, Duration::from_secs(2)), Duration::from_secs(20));
        assert_eq!(next_interval(FLOOR, Duration::MAX), Duration::MAX);
    }

    #[test]
    fn a_refresh_picks_up_a_change_and_the_thread_stops_with_its_sender() {
        let queue = Queue::open_in_memory().unwrap();
        queue.enqueue(NewJob::new("mail", b"a".to_vec())).unwrap();
        let snapshots = Snapshots::default();
        std::thread::scope(|scope| {
            let (refresh, handle) = spawn(scope, &snapshots, NEVER, || count(&queue)).unwrap();
            assert_eq!(handle.thread().name(), Some(THREAD));
            let first = snapshots.current(BOUND, BOUND).expect("the first count");
            assert_eq!(first.stats.queues[0].pending, 1);

            queue.enqueue(NewJob::new("mail", b"b".to_vec())).unwrap();
            let done = snapshots.finished();
            assert_eq!(snapshots.latest().unwrap().stats.queues[0].pending, 1, "no count without a refresh");
            refresh.send(Signal::Refresh).unwrap();
            assert!(snapshots.wait_past(done, BOUND), "the refresh counted");
            assert_eq!(snapshots.latest().unwrap().stats.queues[0].pending, 2, "the new job is counted");

            drop(refresh);
            handle.join().expect("the thread ends without panicking");
            assert!(snapshots.stopped(), "the thread ended when its sender was dropped");
        });
    }

    #[test]
    fn after_a_change_a_page_waits_for_a_count_that_began_after_it() {
        let queue = Queue::open_in_memory().unwrap();
        let snapshots = Snapshots::default();
        std::thread::scope(|scope| {
            let (refresh, handle) = spawn(scope, &snapshots, NEVER, || count(&queue)).unwrap();
            assert!(snapshots.current(BOUND, BOUND).unwrap().stats.queues.is_empty());
            queue.enqueue(NewJob::new("mail", b"a".to_vec())).unwrap();
            // Without a refresh nothing newer comes: the page takes the old count at once.
            snapshots.changed();
            let stale = snapshots.current(BOUND, Duration::ZERO).unwrap();
            assert!(stale.stats.queues.is_empty(), "a bound of zero does not wait");
            refresh.send(Signal::Refresh).unwrap();
            let fresh = snapshots.current(BOUND, BOUND).unwrap();
            assert_eq!(fresh.stats.queues[0].pending, 1, "the page waited for the count after the change");
            drop(refresh);
            handle.join().unwrap();
        });
    }

    #[test]
    fn a_failed_count_keeps_the_last_good_one_and_says_why() {
        let snapshots = Snapshots::default();
        let mut results = vec![
            Err("database busy".to_string()),
            Ok(Counts { stats: Stats::default(), per_minute: vec![], taken_at: 7, took: Duration::ZERO }),
            Err("database busy again".to_string()),
        ]
        .into_iter();
        std::thread::scope(|scope| {
            let (refresh, handle) = spawn(scope, &snapshots, NEVER, move || results.next().unwrap()).unwrap();
            assert!(snapshots.wait_past(0, BOUND));
            assert_eq!(snapshots.current(BOUND, BOUND).unwrap_err(), NoCounts::Failed("database busy".to_string()));
            refresh.send(Signal::Refresh).unwrap();
            assert!(snapshots.wait_past(1, BOUND));
            assert_eq!(snapshots.current(BOUND, BOUND).unwrap().taken_at, 7);
            assert_eq!(snapshots.failure(), None);
            refresh.send(Signal::Refresh).unwrap();
            assert!(snapshots.wait_past(2, BOUND));
            assert_eq!(snapshots.current(BOUND, BOUND).unwrap().taken_at, 7, "the last good count stays");
            assert_eq!(snapshots.failure().as_deref(), Some("database busy again"));
            drop(refresh);
            handle.join().unwrap();
        });
    }

    #[test]
    fn a_waiter_for_the_first_count_is_bounded_and_told_when_the_thread_stopped() {
        let snapshots = Snapshots::default();
        assert_eq!(snapshots.current(Duration::from_millis(1), Duration::ZERO).unwrap_err(), NoCounts::NotYet);
        snapshots.stop();
        assert_eq!(snapshots.current(BOUND, BOUND).unwrap_err(), NoCounts::Stopped);
        assert!(!snapshots.wait_past(0, BOUND), "nothing newer comes from a stopped thread");
    }
}
