//! When a periodic job is due: a cron expression read in an IANA time zone, or a fixed
//! interval counted from an anchor. Pure time arithmetic on ms since the epoch, with no clock
//! and no storage of its own: the scheduler service (`maintenance/scheduler.rs`) asks for the
//! latest tick at or before the queue clock's now and enqueues it once.
//!
//! Cron expressions are parsed and evaluated by [croner](https://docs.rs/croner) (its chrono
//! backend), time zones come from [chrono-tz](https://docs.rs/chrono-tz) (the IANA database
//! compiled into the binary, so a zone means the same on every machine, with or without
//! `/usr/share/zoneinfo`).

use crate::clock::duration_ms;
use crate::error::{Error, Result};
use chrono::TimeZone;
use chrono_tz::Tz;
use std::str::FromStr;
use std::time::Duration;

/// Longest cron expression accepted, in bytes.
const MAX_EXPRESSION_LEN: usize = 256;
/// Shortest interval of a fixed-interval schedule.
const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// Longest interval of a fixed-interval schedule.
const MAX_INTERVAL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// When a periodic job is due: every *tick* of a schedule is one job.
///
/// Two kinds:
///
/// - [`Schedule::cron`]: a cron expression (five fields, minute to weekday, or six with a
///   leading seconds field; `@daily` and the other nicknames; croner's `L`, `#` and `W`)
///   read on the wall clock of an IANA time zone.
/// - [`Schedule::every`] / [`Schedule::every_from`]: a fixed interval counted from an anchor
///   (the Unix epoch unless given), on the absolute time line: daylight saving never moves it.
///
/// ## Daylight saving time
///
/// A cron schedule follows its zone's wall clock, as croner documents it (the Open Cron
/// Pattern Specification and Vixie cron's behaviour). A *fixed-time* expression (single
/// values in the seconds, minutes and hours fields, such as `30 2 * * *`):
///
/// - on the spring-forward day (Europe/Berlin 2026-03-29, 02:00 → 03:00) its time does not
///   exist, and it ticks once, at the first valid time after the gap: 03:00 CEST;
/// - on the fall-back day (2026-10-25, 03:00 → 02:00) its time happens twice, and it ticks
///   once, at the first occurrence: 02:30 CEST, never again at 02:30 CET.
///
/// An *interval or wildcard* expression (`*` or a step in those fields, such as
/// `0 * * * *`) ticks at every matching wall-clock time that exists: it skips the times in a
/// spring-forward gap and ticks in both passes of a repeated hour (hourly stays hourly in
/// real time).
///
/// ```
/// use fenceq::Schedule;
/// let daily = Schedule::cron("30 2 * * *", "Europe/Berlin")?;
/// // 2026-10-25 02:45 CET (01:45 UTC), after the clocks went back: the day's only tick was
/// // 02:30 CEST, 00:30 UTC.
/// assert_eq!(daily.latest_tick(1_792_892_700_000), Some(1_792_888_200_000));
///
/// let hourly = Schedule::every(std::time::Duration::from_secs(3600))?;
/// assert_eq!(hourly.latest_tick(7_199_999), Some(3_600_000));
/// # Ok::<(), fenceq::Error>(())
/// ```
#[derive(Clone)]
pub struct Schedule {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Cron { cron: Box<croner::Cron>, zone: Tz },
    Every { period_ms: i64, anchor_ms: i64 },
}

impl Schedule {
    /// A cron schedule: `expression` read on the wall clock of the IANA time zone `zone`
    /// (`"Europe/Berlin"`, `"America/New_York"`, `"UTC"`). See the type's docs for the
    /// syntax and for what daylight saving changes.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the expression is empty, longer than 256 bytes or not a valid cron
    /// expression (croner's reason is in the message), or when `zone` is not an IANA time
    /// zone name (names are case-sensitive).
    pub fn cron(expression: &str, zone: &str) -> Result<Schedule> {
        if expression.len() > MAX_EXPRESSION_LEN {
            return Err(Error::invalid(
                "cron expression",
                format!("{} bytes is longer than {MAX_EXPRESSION_LEN}", expression.len()),
            ));
        }
        let cron = croner::Cron::from_str(expression.trim())
            .map_err(|e| Error::invalid("cron expression", format!("`{expression}`: {e}")))?;
        let zone = Tz::from_str(zone).map_err(|_| {
            Error::invalid(
                "time zone",
                format!("`{zone}` is not an IANA time zone name (such as Europe/Berlin or UTC)"),
            )
        })?;
        Ok(Schedule { kind: Kind::Cron { cron: Box::new(cron), zone } })
    }

    /// A tick every `period`, at whole multiples of it from the Unix epoch (an hourly
    /// schedule ticks on the hour, UTC).
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `period` is shorter than a second (zero included) or longer than
    /// a hundred years.
    pub fn every(period: Duration) -> Result<Schedule> {
        Schedule::every_from(0, period)
    }

    /// A tick every `period`, at `anchor_ms` (ms since the epoch) and whole multiples of
    /// `period` before and after it. Sub-millisecond parts of `period` are dropped.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `period` is shorter than a second (zero included) or longer than
    /// a hundred years.
    pub fn every_from(anchor_ms: i64, period: Duration) -> Result<Schedule> {
        if period < MIN_INTERVAL || period > MAX_INTERVAL {
            return Err(Error::invalid("interval", format!("{period:?} is not between 1 second and a hundred years")));
        }
        Ok(Schedule { kind: Kind::Every { period_ms: duration_ms(period), anchor_ms } })
    }

    /// The latest tick at or before `now_ms` (ms since the epoch): what the scheduler
    /// enqueues. `None` when there is none: a cron expression that never matched at or
    /// before `now_ms` (such as one for a year still ahead). An interval always has one.
    pub fn latest_tick(&self, now_ms: i64) -> Option<i64> {
        match &self.kind {
            Kind::Cron { cron, zone } => {
                let now = zone.timestamp_millis_opt(now_ms).single()?;
                cron.find_previous_occurrence(&now, true).ok().map(|t| t.timestamp_millis())
            }
            Kind::Every { period_ms, anchor_ms } => {
                let since = i128::from(now_ms) - i128::from(*anchor_ms);
                let tick = i128::from(*anchor_ms) + since.div_euclid(i128::from(*period_ms)) * i128::from(*period_ms);
                i64::try_from(tick).ok()
            }
        }
    }

    /// The first tick strictly after `after_ms` (ms since the epoch). `None` when there is
    /// none (a cron expression that never matches again, such as one for a past year).
    pub fn next_tick(&self, after_ms: i64) -> Option<i64> {
        match &self.kind {
            Kind::Cron { cron, zone } => {
                let after = zone.timestamp_millis_opt(after_ms).single()?;
                let next = cron.find_next_occurrence(&after, false).ok()?.timestamp_millis();
                // croner searches whole seconds: from 09:00:00.500 it may answer 09:00:00.
                if next > after_ms {
                    Some(next)
                } else {
                    let later = zone.timestamp_millis_opt(next.checked_add(1000)?).single()?;
                    cron.find_next_occurrence(&later, true).ok().map(|t| t.timestamp_millis())
                }
            }
            Kind::Every { period_ms, .. } => {
                let latest = self.latest_tick(after_ms)?;
                latest.checked_add(*period_ms)
            }
        }
    }
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// `cron "30 2 * * *" in Europe/Berlin`, or `every 3600000 ms from 0`.
impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Cron { cron, zone } => write!(f, "cron \"{}\" in {}", cron.as_str(), zone.name()),
            Kind::Every { period_ms, anchor_ms } => write!(f, "every {period_ms} ms from {anchor_ms}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-06-01 09:00:00 UTC.
    const JUNE_9: i64 = 1_780_304_400_000;

    #[test]
    fn a_cron_tick_at_exactly_now_is_the_latest() {
        let s = Schedule::cron("0 9 * * *", "UTC").unwrap();
        assert_eq!(s.latest_tick(JUNE_9), Some(JUNE_9));
        assert_eq!(s.latest_tick(JUNE_9 + 500), Some(JUNE_9));
        assert_eq!(s.latest_tick(JUNE_9 - 1), Some(JUNE_9 - 86_400_000));
    }

    #[test]
    fn the_next_cron_tick_is_strictly_later() {
        let s = Schedule::cron("0 9 * * *", "UTC").unwrap();
        assert_eq!(s.next_tick(JUNE_9 - 1), Some(JUNE_9));
        assert_eq!(s.next_tick(JUNE_9), Some(JUNE_9 + 86_400_000));
        assert_eq!(s.next_tick(JUNE_9 + 500), Some(JUNE_9 + 86_400_000));
    }

    #[test]
    fn a_zone_moves_the_wall_clock() {
        // 09:00 in Berlin in June is 07:00 UTC (CEST, UTC+2).
        let s = Schedule::cron("0 9 * * *", "Europe/Berlin").unwrap();
        assert_eq!(s.latest_tick(JUNE_9), Some(JUNE_9 - 2 * 3_600_000));
    }

    #[test]
    fn intervals_count_from_their_anchor() {
        let s = Schedule::every_from(1_000, Duration::from_secs(10)).unwrap();
        assert_eq!(s.latest_tick(1_000), Some(1_000));
        assert_eq!(s.latest_tick(10_999), Some(1_000));
        assert_eq!(s.latest_tick(11_000), Some(11_000));
        // Before the anchor: the multiples before it (the anchor is a phase, not a start).
        assert_eq!(s.latest_tick(999), Some(-9_000));
        assert_eq!(s.next_tick(1_000), Some(11_000));
        assert_eq!(s.next_tick(10_999), Some(11_000));
    }

    #[test]
    fn extreme_times_do_not_overflow() {
        let s = Schedule::every_from(i64::MIN, Duration::from_secs(1)).unwrap();
        assert!(s.latest_tick(i64::MAX).is_some());
        assert_eq!(s.next_tick(i64::MAX), None);
        let c = Schedule::cron("0 9 * * *", "UTC").unwrap();
        assert_eq!(c.latest_tick(i64::MIN), None);
        assert_eq!(c.next_tick(i64::MAX), None);
    }

    #[test]
    fn bad_schedules_are_invalid_input() {
        let invalid = |r: Result<Schedule>| matches!(r, Err(Error::InvalidInput { .. }));
        for expression in ["", "* * * *", "61 * * * *", "*/0 * * * *", "not cron", &"1 ".repeat(200)] {
            assert!(invalid(Schedule::cron(expression, "UTC")), "{expression:?}");
        }
        for zone in ["", "Mars/Olympus", "europe/berlin", "CEST+2"] {
            assert!(invalid(Schedule::cron("0 9 * * *", zone)), "{zone:?}");
        }
        for period in [Duration::ZERO, Duration::from_millis(999), Duration::from_secs(101 * 365 * 24 * 3600)] {
            assert!(invalid(Schedule::every(period)), "{period:?}");
        }
    }

    #[test]
    fn a_schedule_displays_what_it_is() {
        assert_eq!(
            Schedule::cron("30 2 * * *", "Europe/Berlin").unwrap().to_string(),
            "cron \"30 2 * * *\" in Europe/Berlin"
        );
        assert_eq!(Schedule::every(Duration::from_secs(60)).unwrap().to_string(), "every 60000 ms from 0");
    }
}
