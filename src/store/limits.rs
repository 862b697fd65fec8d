//! A claim of a queue with limits, written once on the primitives of [`Store`] and
//! [`ClaimSteps`]: SQLite's claim hands a limited queue here (its own claim statement finds
//! no job of a queue with limits), and this runs in the claim's transaction. PostgreSQL runs
//! the same steps, in the same order, in its schema's functions (`fenceq_claim_limited`,
//! `fenceq_claim_grouped`), so that the queue's lock is held for one round trip; the kit's
//! model judges both.
//!
//! In a write transaction no other overlaps (SQLite's one writer; PostgreSQL's functions lock
//! the queue's `fenceq_queue_flow` row), so that no two claims count one window at once: the
//! running limit and the queue's rate give how many may start now; the claimable jobs are
//! read in claim order, a job whose group has spent one of its rates is passed over (and
//! deferred until that rate opens, so that later claims do not read it again); the chosen
//! jobs are claimed and their starts recorded at the claim's instant, and the job held behind
//! each in its group is deferred until the group's rates this start spent open.
//! Nothing that would break a limit is handed out: the starts recorded in the window plus
//! those of this claim never exceed a rate's count.

use super::{ClaimRequest, Claims, Store};
use crate::error::Result;
use crate::job::{Claimed, JobId};
use crate::limits::{opens_at, Limits, Rate};
use crate::report::Throttled;

/// How many more candidates than it may claim a limited claim reads, to find jobs of groups
/// whose rates are not spent behind those of groups whose rates are.
const EXTRA_CANDIDATES: u32 = 32;

/// The steps of a limited claim that only [`claim_limited`] takes, each in the claim's
/// transaction: a store whose round trips cost nothing and whose write transactions never
/// overlap (SQLite, in process, on its one writer) claims a limited queue with them;
/// PostgreSQL runs the same steps inside its schema's functions instead, under the queue's
/// row lock.
pub(crate) trait ClaimSteps: Store {
    /// The starts of `queue` recorded and not yet forgotten: how many (every window's starts
    /// are among them) and the latest, read together as a limited claim needs both.
    fn kept_starts(tx: &Self::Tx, queue: &str) -> Result<KeptStarts>;

    /// Up to `limit` claimable jobs of the queue, in claim order, with their groups (as
    /// [`Store::claim`] would choose them, limits aside; nothing is claimed).
    fn claim_candidates(tx: &Self::Tx, request: ClaimRequest<'_>) -> Result<Vec<Candidate>>;

    /// Records the attempt of each of `ids` (running jobs whose lease ran out at or before
    /// `now`, about to be claimed again) as ended by its lease at `now`
    /// ([`AttemptOutcome::LeaseExpired`](crate::AttemptOutcome::LeaseExpired)): run right
    /// before [`ClaimSteps::claim_ids`], while the rows still hold those attempts.
    fn record_expired_leases(tx: &Self::Tx, ids: &[JobId], now: i64) -> Result<()>;

    /// Claims the chosen `ids` as [`Store::claim`] claims, each only if it is still claimable.
    fn claim_ids(tx: &Self::Tx, ids: &[JobId], request: ClaimRequest<'_>) -> Result<Vec<Claimed>>;

    /// Records the start of each claimed job at `now`, and forgets the starts of the queue
    /// at or before `forget_before`.
    fn record_starts(tx: &Self::Tx, claimed: &[Claimed], now: i64, forget_before: i64) -> Result<()>;

    /// Moves a pending job's `run_at` on to `at` (never back): a head whose group's rate is
    /// spent waits out of the claim's way until the rate opens.
    fn defer_pending(tx: &Self::Tx, id: JobId, at: i64) -> Result<()>;

    /// Moves the `run_at` of the next job held behind `group`'s holder on to `at` (never
    /// back), when it is pending: a group whose claim spent its rate is next claimable when
    /// that rate opens, and waits in that order among the groups that wait.
    fn defer_group_next(tx: &Self::Tx, queue: &str, group: &str, at: i64) -> Result<()>;

    /// [`Store::window_starts`] for the starts of one group of `queue`.
    fn group_window_starts(
        tx: &Self::Tx,
        queue: &str,
        group: &str,
        since: i64,
        most: u32,
    ) -> Result<(u64, Option<i64>)>;
}

/// A job a limited claim may take ([`ClaimSteps::claim_candidates`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// The job.
    pub(crate) id: JobId,
    /// Its group, if any.
    pub(crate) group: Option<String>,
    /// Whether it is a running job whose lease ran out (its claim takes an attempt over),
    /// rather than a pending one.
    pub(crate) lapsed: bool,
}

/// The starts a queue keeps ([`ClaimSteps::kept_starts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KeptStarts {
    /// How many are recorded and not yet forgotten.
    pub(crate) count: u64,
    /// The latest of them, if any.
    pub(crate) latest: Option<i64>,
}

/// Claims up to `request.limit` jobs of a queue with `limits`, breaking none.
pub(crate) fn claim_limited<S: ClaimSteps>(tx: &S::Tx, request: ClaimRequest<'_>, limits: &Limits) -> Result<Claims> {
    let kept = match limits.counts_starts() {
        true => S::kept_starts(tx, request.queue)?,
        false => KeptStarts::default(),
    };
    let request = not_before(request, kept.latest);
    let ClaimRequest { queue, now, .. } = request;
    let mut allowed = request.limit;
    let mut opens: Option<i64> = None;
    if let Some(max) = limits.max_running {
        let running = S::running_count(tx, queue)?;
        allowed = allowed.min(u32::try_from(u64::from(max).saturating_sub(running)).unwrap_or(u32::MAX));
    }
    // While the queue keeps fewer starts than a rate's count leaves room for this claim, no
    // window of the rate can stop it: no window need be counted.
    if let Some(rate) = limits.rate.filter(|rate| kept.count + u64::from(allowed) > u64::from(rate.count)) {
        let (starts, opens_then) = window::<S>(tx, queue, rate, now)?;
        let room = u64::from(rate.count).saturating_sub(starts);
        allowed = allowed.min(u32::try_from(room).unwrap_or(u32::MAX));
        opens = opens_then;
    }
    if allowed == 0 {
        return Ok(Claims { jobs: Vec::new(), limit_opens_at: opens });
    }
    // Extra candidates only where a group's spent rate can pass one over.
    let extra = if limits.group_rates.is_empty() { 0 } else { EXTRA_CANDIDATES };
    let wanted = ClaimRequest { limit: allowed.saturating_add(extra), ..request };
    let mut chosen: Vec<JobId> = Vec::new();
    let mut lapsed: Vec<JobId> = Vec::new();
    let mut group_opens: Option<i64> = None;
    for Candidate { id, group, lapsed: expired } in S::claim_candidates(tx, wanted)? {
        if chosen.len() == allowed as usize {
            break;
        }
        let spent = match (&group, limits.group_rates.is_empty()) {
            (Some(group), false) => group_opens_at::<S>(tx, queue, group, now, limits)?,
            _ => None,
        };
        match spent {
            None => {
                chosen.push(id);
                if expired {
                    lapsed.push(id);
                }
            }
            Some(at) => {
                S::defer_pending(tx, id, at)?;
                group_opens = Some(group_opens.map_or(at, |g| g.min(at)));
            }
        }
    }
    S::record_expired_leases(tx, &lapsed, now)?;
    let jobs = S::claim_ids(tx, &chosen, request)?;
    if limits.counts_starts() && !jobs.is_empty() {
        S::record_starts(tx, &jobs, now, now.saturating_sub(limits.longest_window_ms()))?;
    }
    // Claims read heads in (priority, run_at, id) order. A head released at its enqueue
    // instant would sort before every head a claim deferred, so groups served recently would
    // keep passing groups that waited longer. Deferring each claimed group's next job here, by
    // the rates this start spent, queues the heads of spent groups in the order their groups
    // last started.
    if !limits.group_rates.is_empty() {
        for group in jobs.iter().filter_map(|job| job.group.as_deref()) {
            if let Some(at) = group_opens_at::<S>(tx, queue, group, now, limits)? {
                S::defer_group_next(tx, queue, group, at)?;
            }
        }
    }
    let limit_opens_at = if jobs.is_empty() { opens.or(group_opens) } else { None };
    Ok(Claims { jobs, limit_opens_at })
}

/// `request` at the latest recorded start if its own instant is earlier, its lease moved on
/// as much.
///
/// A claim reads its instant before it waits for the queue's limit lock (on PostgreSQL, the
/// server's clock, read by the claim's first statement), so a claim that waited may hold an
/// instant earlier than a start recorded meanwhile by a claim that took the lock first. Both
/// its count and its forgetting must not go back behind that start: a claim at an earlier
/// instant counts the starts after its instant less the window, and the claim before it may
/// already have forgotten some of those (it forgot up to its own, later instant less the
/// window). Starting no earlier than the latest recorded start keeps the recorded starts in
/// lock order, so every window a claim counts is whole.
fn not_before(request: ClaimRequest<'_>, latest: Option<i64>) -> ClaimRequest<'_> {
    match latest {
        Some(latest) if latest > request.now => {
            let moved = latest - request.now;
            ClaimRequest { now: latest, lease_until: request.lease_until.saturating_add(moved), ..request }
        }
        _ => request,
    }
}

/// Whether a queue-wide limit of `limits` holds `queue`'s due jobs back at `now`, and if so
/// how many and until when (for `stats`; advisory: the claim decides under its own lock).
pub(crate) fn throttled<S: Store>(tx: &S::Tx, queue: &str, limits: &Limits, now: i64) -> Result<Option<Throttled>> {
    let running = S::running_count(tx, queue)?;
    let by_running = limits.max_running.is_some_and(|max| running >= u64::from(max));
    let by_rate = match limits.rate {
        Some(rate) => window::<S>(tx, queue, rate, now)?.1,
        None => None,
    };
    let mut spent: Vec<String> = Vec::new();
    for rate in &limits.group_rates {
        spent.extend(S::spent_groups(tx, queue, now.saturating_sub(rate.window_ms()), rate.count)?);
    }
    spent.sort_unstable();
    spent.dedup();
    let (group_heads, group_heads_open_at) =
        if spent.is_empty() { (0, None) } else { S::deferred_heads(tx, queue, &spent, now)? };
    if !by_running && by_rate.is_none() && group_heads == 0 {
        return Ok(None);
    }
    let due = match by_running || by_rate.is_some() {
        true => S::due_or_running(tx, queue, now)?.saturating_sub(running),
        false => 0,
    };
    let opens_at = if by_running { None } else { by_rate };
    Ok(Some(Throttled { due, opens_at, group_heads, group_heads_open_at }))
}

/// When the queue's full `rate` window opens again, or `None` while it has room (read outside
/// the limit lock: advisory, for a claim that has already decided). Only a store that decides
/// its claims elsewhere (PostgreSQL's function) asks.
#[cfg(feature = "postgres")]
pub(crate) fn rate_opens_at<S: Store>(tx: &S::Tx, queue: &str, rate: Rate, now: i64) -> Result<Option<i64>> {
    Ok(window::<S>(tx, queue, rate, now)?.1)
}

/// When the group's spent rate opens again, or `None` when every group rate has room.
fn group_opens_at<S: ClaimSteps>(
    tx: &S::Tx,
    queue: &str,
    group: &str,
    now: i64,
    limits: &Limits,
) -> Result<Option<i64>> {
    let mut latest: Option<i64> = None;
    for rate in &limits.group_rates {
        let (starts, countth) =
            S::group_window_starts(tx, queue, group, now.saturating_sub(rate.window_ms()), rate.count)?;
        if let Some(at) = opens_at(starts, countth, *rate) {
            latest = Some(latest.map_or(at, |l| l.max(at)));
        }
    }
    Ok(latest)
}

/// The window of the queue's `rate` ending at `now`: how many starts it holds (counted up to
/// the rate's count), and when it opens again if it is full.
fn window<S: Store>(tx: &S::Tx, queue: &str, rate: Rate, now: i64) -> Result<(u64, Option<i64>)> {
    let (starts, countth) = S::window_starts(tx, queue, now.saturating_sub(rate.window_ms()), rate.count)?;
    Ok((starts, opens_at(starts, countth, rate)))
}

/// The rows of `fenceq_limits` that say `limits`: (scope, window ms, count).
pub(crate) fn limit_rows(limits: &Limits) -> Vec<(&'static str, i64, i64)> {
    let mut rows = Vec::new();
    if let Some(rate) = limits.rate {
        rows.push(("rate", rate.window_ms(), i64::from(rate.count)));
    }
    for rate in &limits.group_rates {
        rows.push(("group_rate", rate.window_ms(), i64::from(rate.count)));
    }
    if let Some(n) = limits.max_running {
        rows.push(("running", 0, i64::from(n)));
    }
    rows
}

/// The limits the rows of one queue say (rows of a scope this build does not know are
/// ignored).
pub(crate) fn limits_of(rows: impl IntoIterator<Item = (String, i64, i64)>) -> Limits {
    let mut limits = Limits::default();
    for (scope, window_ms, count) in rows {
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        let rate = Rate::new(count, std::time::Duration::from_millis(u64::try_from(window_ms).unwrap_or(0)));
        match scope.as_str() {
            "rate" => limits.rate = Some(rate),
            "group_rate" => limits.group_rates.push(rate),
            "running" => limits.max_running = Some(count),
            _ => {}
        }
    }
    limits
}

/// Every queue's limits from rows ordered by queue.
pub(crate) fn limits_by_queue(rows: Vec<(String, String, i64, i64)>) -> Vec<(String, Limits)> {
    type LimitRows = Vec<(String, i64, i64)>;
    let mut out: Vec<(String, LimitRows)> = Vec::new();
    for (queue, scope, window_ms, count) in rows {
        match out.last_mut() {
            Some((q, rows)) if *q == queue => rows.push((scope, window_ms, count)),
            _ => out.push((queue, vec![(scope, window_ms, count)])),
        }
    }
    out.into_iter().map(|(queue, rows)| (queue, limits_of(rows))).collect()
}
