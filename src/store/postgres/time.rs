//! Which clock a PostgreSQL queue measures time by.
//!
//! Several hosts share one database, and each host has a clock of its own. If each judged
//! leases by its own clock, a host whose clock runs ten minutes fast would see every other
//! host's live lease as expired and take its job, and a host ten minutes slow would keep
//! renewing and settling leases that ended long ago. So, on PostgreSQL, a queue whose clock
//! is the host's wall clock ([`Clock::is_host_clock`]: the default [`SystemClock`](crate::SystemClock))
//! measures every lease, `run_at`, deadline and retention horizon by **the database
//! server's clock**, for every host. An injected clock (a [`ManualClock`](crate::ManualClock),
//! tests only) is used as it is, as on SQLite, and must then be the same clock for every
//! handle on the database.
//!
//! ## How
//!
//! Every time above the seam comes from [`Store::now`](crate::store::Store::now) of the
//! transaction it is used in. A transaction reads the server's clock once, the first time it
//! needs the time ([`SERVER_NOW`]), and from then on adds the time elapsed since that read on
//! this host's monotonic clock ([`std::time::Instant`]), which no wall-clock step can move.
//! Every time the transaction's statements get, and everything computed from one (a lease's
//! end, a retry's `run_at`, the lease extension of an owned write's commit), is therefore
//! the server's clock, and the values handed back (`Claimed::lease_until`, `renew`'s new
//! end, `Job` fields) are the server's as well: nothing mixes the host's clock with the
//! server's.
//!
//! The read is `clock_timestamp()`, the instant the statement reads it, not `now()`:
//! `now()` is the start of the transaction, and a transaction can last (an owned write's
//! closure, several callers' work sharing one transaction). Judged at its start, a long
//! transaction would still find live a lease that ended while it ran, and would extend the
//! owner's lease from a moment already past. The monotonic extension keeps each later use
//! at its own instant without another round trip. The value is rounded down to the
//! millisecond, and the host's elapsed time is rounded down too, so the time fenceq uses
//! never runs ahead of the server's clock: a lease is never reclaimed before the server's
//! clock says it ended. (It may lag by the read's round trip; a write judged live in that
//! window commits as if it had been a moment earlier, as on SQLite.) The host's monotonic
//! clock may drift from the server's by its rate error (parts per million) over one
//! transaction, which statement and idle timeouts keep short.
//!
//! The cost is one round trip per transaction that needs the time, on each connection
//! (a claim, a settle, an enqueue: not per statement and not per job of a batch).
//!
//! Outside any transaction ([`Queue::now_ms`](crate::Queue::now_ms), and the advisory
//! [`Attempt::owner_lost`](crate::Attempt::owner_lost)) the store offers an estimate without
//! a round trip: the host's clock plus the offset between the server's clock and the host's
//! as last measured by any of the store's transactions.

use super::error::PgContext;
use super::PgTx;
use crate::clock::Clock;
use crate::error::Result;
use diesel::sql_types::BigInt;
use diesel::{sql_query, QueryableByName, RunQueryDsl};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The server's clock in whole ms since the epoch, rounded down: `clock_timestamp()` (the
/// instant of the read), never `now()` (the transaction's start).
pub(crate) const SERVER_NOW: &str = "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS n";

#[derive(QueryableByName)]
struct Ms {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The server time a transaction read, and when (on this host's monotonic clock).
#[derive(Debug, Default)]
pub(crate) struct ServerTime {
    read: Cell<Option<(i64, Instant)>>,
}

/// The store's estimate of the server's clock minus the host's, in ms (`None` until a
/// transaction measured it), shared by every transaction of the store.
#[derive(Debug, Default, Clone)]
pub(crate) struct Offset(Arc<AtomicI64>);

/// Marks an offset that was never measured (no real offset is this far off).
const UNMEASURED: i64 = i64::MIN;

impl Offset {
    pub(crate) fn unmeasured() -> Offset {
        Offset(Arc::new(AtomicI64::new(UNMEASURED)))
    }

    fn record(&self, server_ms: i64, host_ms: i64) {
        self.0.store(server_ms.saturating_sub(host_ms), Ordering::Relaxed);
    }

    /// The host's clock moved by the offset, or the host's clock until it was measured.
    pub(crate) fn estimate(&self, clock: &dyn Clock) -> i64 {
        let host = clock.now_ms();
        match self.0.load(Ordering::Relaxed) {
            UNMEASURED => host,
            offset => host.saturating_add(offset),
        }
    }
}

/// [`Store::now`](crate::store::Store::now) on PostgreSQL: the injected clock as it is, or
/// the server's clock (read once per transaction, then moved by the host's monotonic clock).
pub(crate) fn now(tx: &PgTx, clock: &dyn Clock) -> Result<i64> {
    if !clock.is_host_clock() {
        return Ok(clock.now_ms());
    }
    if let Some((server_ms, at)) = tx.time.read.get() {
        return Ok(server_ms.saturating_add(elapsed_ms(at)));
    }
    let server_ms = tx.with(|conn| sql_query(SERVER_NOW).get_result::<Ms>(conn).pg("SERVER_NOW"))?.n;
    // Anchored after the reply: the server read its clock before this instant, so the
    // extrapolation never runs ahead of it.
    tx.time.read.set(Some((server_ms, Instant::now())));
    if let Some(offset) = &tx.offset {
        offset.record(server_ms, clock.now_ms());
    }
    Ok(server_ms)
}

/// Whole ms elapsed since `at`, rounded down.
fn elapsed_ms(at: Instant) -> i64 {
    i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn an_unmeasured_offset_is_the_host_clock_and_a_measured_one_moves_it() {
        let clock = ManualClock::new(10_000);
        let offset = Offset::unmeasured();
        assert_eq!(offset.estimate(&clock), 10_000);
        offset.record(9_400, 10_000);
        assert_eq!(offset.estimate(&clock), 9_400);
        clock.advance(std::time::Duration::from_millis(5));
        assert_eq!(offset.estimate(&clock), 9_405);
    }
}
