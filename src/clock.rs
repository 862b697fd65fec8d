//! Time as the engine sees it: integer milliseconds since the Unix epoch, from an injectable
//! clock so that tests pin time instead of sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time in milliseconds since the Unix epoch.
///
/// On SQLite every lease, deadline and retention decision reads this clock, never SQLite's
/// own, so a [`ManualClock`] makes all of them deterministic. A store shared by several
/// hosts has one clock of its own that every host can read: on PostgreSQL, a queue whose
/// clock is the host's wall clock ([`Clock::is_host_clock`], the default [`SystemClock`])
/// judges time by the database server's clock instead, so that hosts whose clocks disagree
/// still agree on every lease. Any other clock (a [`ManualClock`] in tests) is used as it
/// is, on every store.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// True when this clock is the host's own wall clock ([`SystemClock`]): a store with a
    /// clock shared by every host (PostgreSQL's server) then measures time by that instead.
    /// False by default: an injected clock (tests) drives every store directly.
    fn is_host_clock(&self) -> bool {
        false
    }
}

/// The wall clock of this host. On PostgreSQL it stands for "the database server's clock"
/// (see [`Clock`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    }

    fn is_host_clock(&self) -> bool {
        true
    }
}

/// A clock that moves only when told to; clones share the same time.
///
/// ```
/// use fenceq::{Clock, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now_ms(), 3_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        ManualClock(Arc::new(AtomicI64::new(now_ms)))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(duration_ms(by), Ordering::SeqCst);
    }

    /// Sets the clock to `now_ms` (it may move backwards, as a wall clock can).
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A duration in whole milliseconds, saturating instead of overflowing.
pub(crate) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
