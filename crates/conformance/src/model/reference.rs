//! The reference model: [`Model`], every row the queue should hold and every claim it has
//! handed out, and its transitions (insert, claim order, settle, exhaust, reap, prune, pages,
//! stats), with what it predicts a call returns (`Got`). It knows nothing of the op grammar
//! nor of any store: the runner drives it.

use fenceq::{
    AttemptOutcome, AttemptRecord, ClaimId, ClaimToken, Cursor, Enqueued, Exhaustion, Job, JobId, JobState, LostReason,
    NewJob, Page, QueueStats, Retention, Stats,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Attempt budget of the model's queue when a job does not set one.
pub const DEFAULT_ATTEMPTS: u32 = 3;

/// A job the model enqueues, with the fields of the [`NewJob`] built from it ([`NewJob`] keeps
/// its fields to fenceq, so the model keeps its own copy of what it asked for).
#[derive(Debug, Clone)]
pub(super) struct Planned {
    pub(super) queue: String,
    pub(super) payload: Vec<u8>,
    pub(super) key: Option<String>,
    pub(super) priority: i32,
    pub(super) delay: Duration,
    pub(super) max_attempts: Option<u32>,
    pub(super) group: Option<String>,
}

impl Planned {
    /// The job to enqueue.
    pub(super) fn new_job(&self) -> NewJob {
        let mut job = NewJob::new(self.queue.clone(), self.payload.clone()).priority(self.priority).delay(self.delay);
        if let Some(key) = &self.key {
            job = job.key(key.clone());
        }
        if let Some(attempts) = self.max_attempts {
            job = job.max_attempts(attempts);
        }
        if let Some(group) = &self.group {
            job = job.group(group.clone());
        }
        job
    }
}

/// One job of the model: the whole row, as `Queue::job` returns it.
pub type ModelJob = Job;

/// The reference model: every row the queue should hold, and the claims it has handed out.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Every row that should exist, by id.
    pub jobs: BTreeMap<JobId, ModelJob>,
    /// Every claim id ever issued.
    pub claim_ids: BTreeSet<ClaimId>,
    /// Every token ever issued, in claim order.
    pub issued: Vec<ClaimToken>,
    /// Every id ever assigned, in order.
    pub ever: Vec<JobId>,
    /// Ids deleted by prune.
    pub pruned: BTreeSet<JobId>,
    /// Domain rows (job, attempt) committed by `complete_with` and `with_ownership`.
    pub domain: Vec<(i64, u32)>,
    /// Rows that reached completed or cancelled, as they were then: they must never change.
    pub(super) terminal: BTreeMap<JobId, ModelJob>,
    /// The exhaustion pass in progress.
    pub(super) pass: Option<Pass>,
    /// Payload counter.
    pub(super) seq: u64,
    /// Each queue's stored back-off: (until, reason, since); ended ones stay until replaced.
    pub backoffs: BTreeMap<String, (i64, String, i64)>,
    /// Each queue's limits and the starts they count (`limits.rs`).
    pub limits: super::limits::LimitsModel,
    /// Each job's records of attempts that did not complete, oldest first (`Queue::attempts`
    /// returns them newest first): what the store must hold, compared job by job.
    pub attempts: BTreeMap<JobId, Vec<AttemptRecord>>,
    /// Each job's latest claim's instant (`Claimed::claimed_at`), a record's start.
    pub claimed_at: BTreeMap<JobId, i64>,
    /// The jobs whose records the current step changed (the runner checks them after it).
    pub(super) recorded: BTreeSet<JobId>,
}

/// An exhaustion paging pass (invariant 10).
#[derive(Debug, Clone)]
pub(super) struct Pass {
    pub(super) cursor: Option<Cursor>,
    /// Unacknowledged exhaustions when the pass began that have stayed so since.
    pub(super) stable: BTreeSet<JobId>,
    pub(super) returned: BTreeSet<JobId>,
}

/// What a call did, reduced to what the model predicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Got {
    Ok,
    Lost(LostReason),
    Stale,
    NotFound,
    InvalidState(JobState),
    InvalidInput,
    Domain,
    Nested,
    WaitExpired,
    Other(String),
}

pub(super) fn dur_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Model {
    pub(super) fn new() -> Model {
        Model::default()
    }

    pub(super) fn next_id(&self) -> i64 {
        self.ever.last().map_or(1, |id| id.0 + 1)
    }

    pub(super) fn by_key(&self, queue: &str, key: &str) -> Option<JobId> {
        self.jobs.values().find(|j| j.queue == queue && j.key.as_deref() == Some(key)).map(|j| j.id)
    }

    /// The result of a token-guarded write (`owned_by_token!`), with the engine's reason.
    pub(super) fn owned(&self, t: &ClaimToken, now: i64) -> Got {
        match self.jobs.get(&t.id) {
            None => Got::Lost(LostReason::Missing),
            Some(j) if j.attempt != t.attempt || j.claim_id != Some(t.claim_id) => Got::Lost(LostReason::Superseded),
            Some(j) if j.state != JobState::Running => Got::Lost(LostReason::NotRunning(j.state)),
            Some(j) if j.lease_until.is_none_or(|l| l <= now) => Got::Lost(LostReason::LeaseExpired),
            Some(_) => Got::Ok,
        }
    }

    /// The result of a write guarded by the exact identity of a job in `state`.
    pub(super) fn identified(&self, t: &ClaimToken, state: JobState) -> Got {
        match self.jobs.get(&t.id) {
            None => Got::NotFound,
            Some(j) if j.attempt != t.attempt || j.claim_id != Some(t.claim_id) => Got::Stale,
            Some(j) if j.state != state => Got::InvalidState(j.state),
            Some(_) => Got::Ok,
        }
    }

    /// The result of an id-addressed transition from one of `from`.
    pub(super) fn by_id(&self, id: JobId, from: &[JobState]) -> Got {
        match self.jobs.get(&id) {
            None => Got::NotFound,
            Some(j) if !from.contains(&j.state) => Got::InvalidState(j.state),
            Some(_) => Got::Ok,
        }
    }

    /// Records an unnamed operator's change on the row, as the engine does.
    pub(super) fn decide(&mut self, id: JobId, action: &str, now: i64) {
        let decision = fenceq::Decision { action: action.to_string(), at: now, by: None, note: None };
        self.job_mut(id).decision = Some(decision);
    }

    pub(super) fn job_mut(&mut self, id: JobId) -> &mut ModelJob {
        self.jobs.get_mut(&id).expect("the model checked the job exists")
    }

    /// What an enqueue of `spec` should return: `Duplicate(id)` while a row has its key,
    /// else `New` with an id above every id ever assigned (`None` here: SQLite picks it, and a
    /// conflicting keyed insert may burn one, so ids have gaps but never repeat).
    pub(super) fn expect_insert(&self, spec: &Planned) -> Option<JobId> {
        spec.key.as_ref().and_then(|key| self.by_key(&spec.queue, key))
    }

    /// Applies an enqueue the engine answered with `got`; `Err` when it is not what the
    /// model predicts.
    pub(super) fn insert(&mut self, spec: &Planned, got: Enqueued, now: i64) -> Result<(), String> {
        match (self.expect_insert(spec), got) {
            (Some(existing), Enqueued::Duplicate(id)) if id == existing => return Ok(()),
            (None, Enqueued::New(id)) if id.0 >= self.next_id() => {}
            (Some(existing), other) => {
                return Err(format!(
                    "invariant 9: enqueue of an existing key returned {other:?}, not Duplicate({existing})"
                ))
            }
            (None, other) => {
                return Err(format!(
                    "invariants 8/9: enqueue returned {other:?}; the model expected New with an id of at least {}",
                    self.next_id()
                ))
            }
        }
        let Enqueued::New(id) = got else { unreachable!("matched above") };
        self.ever.push(id);
        let held = spec.group.as_ref().is_some_and(|g| self.group_holder(&spec.queue, g).is_some());
        self.jobs.insert(
            id,
            Job {
                id,
                queue: spec.queue.clone(),
                key: spec.key.clone(),
                payload: spec.payload.clone(),
                state: JobState::Pending,
                priority: spec.priority,
                run_at: now.saturating_add(dur_ms(spec.delay)),
                attempt: 0,
                max_attempts: spec.max_attempts.unwrap_or(DEFAULT_ATTEMPTS),
                claim_id: None,
                worker: None,
                lease_until: None,
                heartbeat_at: None,
                wait_until: None,
                last_error: None,
                created_at: now,
                settled_at: None,
                exhausted_at: None,
                acknowledged_at: None,
                decision: None,
                group: spec.group.clone(),
                held_by_group: held,
                snoozes: 0,
            },
        );
        Ok(())
    }

    /// The ids a claim of `limit` on `queue` takes at `now`, in claim order: due pending jobs
    /// and running jobs whose lease expired with attempts left, by priority (highest first),
    /// then run_at, then id.
    pub(super) fn claimable(&self, queue: &str, limit: u32, now: i64) -> Vec<JobId> {
        if self.backoff(queue, now).is_some() {
            return Vec::new();
        }
        let mut all: Vec<&ModelJob> = self
            .jobs
            .values()
            .filter(|j| j.queue == queue && !j.held_by_group)
            .filter(|j| match j.state {
                JobState::Pending => j.run_at <= now,
                JobState::Running => j.lease_until.is_some_and(|l| l <= now) && j.attempt < j.max_attempts,
                _ => false,
            })
            .collect();
        all.sort_by_key(|j| (-i64::from(j.priority), j.run_at, j.id));
        all.into_iter().take(limit as usize).map(|j| j.id).collect()
    }

    /// The job that holds `group` of `queue`, if one does: not held back, and pending,
    /// running, waiting, `unknown` or exhausted and unacknowledged (the default policy, which
    /// the model's histories keep).
    pub(super) fn group_holder(&self, queue: &str, group: &str) -> Option<JobId> {
        self.jobs
            .values()
            .filter(|j| j.queue == queue && j.group.as_deref() == Some(group) && !j.held_by_group)
            .find(|j| match j.state {
                JobState::Pending | JobState::Running | JobState::Waiting | JobState::Unknown => true,
                JobState::Exhausted => j.acknowledged_at.is_none(),
                JobState::Completed | JobState::Cancelled => false,
            })
            .map(|j| j.id)
    }

    /// Hands every group that nothing holds to its held job with the smallest id: what the
    /// store does after each transition that can end a hold (the model does it after each step).
    pub(super) fn release_groups(&mut self) {
        let groups: BTreeSet<(String, String)> =
            self.jobs.values().filter_map(|j| Some((j.queue.clone(), j.group.clone()?))).collect();
        for (queue, group) in groups {
            if self.group_holder(&queue, &group).is_some() {
                continue;
            }
            let next = self
                .jobs
                .values()
                .find(|j| j.queue == queue && j.group.as_deref() == Some(group.as_str()) && j.held_by_group)
                .map(|j| j.id);
            if let Some(id) = next {
                self.job_mut(id).held_by_group = false;
            }
        }
    }

    /// The back-off of `queue` that lasts at `now`.
    pub(super) fn backoff(&self, queue: &str, now: i64) -> Option<fenceq::QueueBackoff> {
        let (until, reason, since) = self.backoffs.get(queue).filter(|(until, _, _)| *until > now)?;
        Some(fenceq::QueueBackoff { queue: queue.to_string(), until: *until, reason: reason.clone(), since: *since })
    }

    /// Backs `queue` off until `until`, unless a back-off stored ends as late or later.
    pub(super) fn back_off(&mut self, queue: &str, until: i64, reason: String, now: i64) {
        if self.backoffs.get(queue).is_none_or(|(stored, _, _)| *stored < until) {
            self.backoffs.insert(queue.to_string(), (until, reason, now));
        }
    }

    /// Records the attempt of job `id` that a transition at `now` just ended with `outcome`, as
    /// the store does: from the row as the transition left it (its attempt, claim, worker, and
    /// the error it stored as `last_error`) and the claim's instant.
    pub(super) fn record(&mut self, id: JobId, outcome: AttemptOutcome, now: i64) {
        let error = self.jobs[&id].last_error.clone();
        self.record_with(id, outcome, now, error);
    }

    /// Records the attempt of running job `id` that a claim at `now` takes over, before the
    /// claim changes its row: its lease ran out, in the reaper's words.
    pub(super) fn record_reclaimed(&mut self, id: JobId, now: i64) {
        let error = format!("lease expired (worker {})", self.jobs[&id].worker.as_deref().unwrap_or(""));
        self.record_with(id, AttemptOutcome::LeaseExpired, now, Some(error));
    }

    fn record_with(&mut self, id: JobId, outcome: AttemptOutcome, now: i64, error: Option<String>) {
        let j = &self.jobs[&id];
        let record = AttemptRecord {
            attempt: j.attempt,
            claim_id: j.claim_id.expect("an attempt that ends was claimed"),
            outcome,
            worker: j.worker.clone(),
            started_at: self.claimed_at.get(&id).copied(),
            ended_at: now,
            error,
        };
        self.attempts.entry(id).or_default().push(record);
        self.recorded.insert(id);
    }

    /// The records of job `id`, newest first, as `Queue::attempts` returns them.
    pub(super) fn records_of(&self, id: JobId) -> Vec<AttemptRecord> {
        self.attempts.get(&id).map(|records| records.iter().rev().cloned().collect()).unwrap_or_default()
    }

    pub(super) fn settle(&mut self, id: JobId, state: JobState, now: i64) {
        let j = self.job_mut(id);
        j.state = state;
        j.lease_until = None;
        j.settled_at = Some(now);
    }

    /// An exhaustion of the exact live claim: the row, and the attempt's record.
    pub(super) fn exhaust_claim(&mut self, id: JobId, error: String, now: i64) {
        self.exhaust(id, Some(error), now);
        self.record(id, AttemptOutcome::Exhausted, now);
    }

    pub(super) fn exhaust(&mut self, id: JobId, error: Option<String>, now: i64) {
        let j = self.job_mut(id);
        j.state = JobState::Exhausted;
        j.lease_until = None;
        if error.is_some() {
            j.last_error = error;
        }
        j.settled_at = Some(now);
        j.exhausted_at = Some(now);
        j.acknowledged_at = None;
    }

    /// The reaper's pass at `now`, each job it takes over recorded.
    pub(super) fn reap(&mut self, now: i64) -> fenceq::ReapReport {
        let mut report = fenceq::ReapReport::default();
        let mut ended = Vec::new();
        for j in self.jobs.values_mut() {
            if j.state == JobState::Running && j.lease_until.is_some_and(|l| l <= now) {
                ended.push((j.id, AttemptOutcome::LeaseExpired));
                j.last_error = Some(format!("lease expired (worker {})", j.worker.as_deref().unwrap_or("")));
                j.lease_until = None;
                if j.attempt < j.max_attempts {
                    j.state = JobState::Pending;
                    j.run_at = now;
                    j.exhausted_at = None;
                    j.settled_at = None;
                    report.requeued += 1;
                } else {
                    j.state = JobState::Exhausted;
                    j.exhausted_at = Some(now);
                    j.settled_at = Some(now);
                    report.exhausted += 1;
                }
            }
        }
        for j in self.jobs.values_mut() {
            if j.state == JobState::Waiting && j.wait_until.is_some_and(|w| w <= now) {
                ended.push((j.id, AttemptOutcome::WaitExpired));
                j.state = JobState::Exhausted;
                j.wait_until = None;
                j.settled_at = Some(now);
                j.exhausted_at = Some(now);
                j.acknowledged_at = None;
                j.last_error = Some(format!("wait expired: {}", j.last_error.as_deref().unwrap_or("no reason given")));
                report.waits_expired += 1;
            }
        }
        for (id, outcome) in ended {
            self.record(id, outcome, now);
        }
        report
    }

    pub(super) fn prunable(&self, retention: &Retention, now: i64) -> (Vec<JobId>, Vec<JobId>) {
        let horizon = now.saturating_sub(dur_ms(retention.older_than));
        let settled = self
            .jobs
            .values()
            .filter(|j| matches!(j.state, JobState::Completed | JobState::Cancelled))
            .filter(|j| j.settled_at.is_some_and(|s| s <= horizon))
            .map(|j| j.id)
            .collect();
        let acknowledged = self
            .jobs
            .values()
            .filter(|j| j.state == JobState::Exhausted && j.acknowledged_at.is_some_and(|a| a <= horizon))
            .map(|j| j.id)
            .collect();
        (settled, acknowledged)
    }

    pub(super) fn page(&self, state: JobState, after: i64, limit: u32) -> Page<Exhaustion> {
        let items: Vec<Exhaustion> = self
            .jobs
            .values()
            .filter(|j| j.id.0 > after && j.state == state)
            .filter(|j| state != JobState::Exhausted || j.acknowledged_at.is_none())
            .take(limit as usize)
            .map(|j| Exhaustion {
                token: j.token().expect("exhausted and unknown rows keep their token"),
                queue: j.queue.clone(),
                key: j.key.clone(),
                payload: j.payload.clone(),
                reason: j.last_error.clone(),
                at: if state == JobState::Exhausted { j.exhausted_at } else { j.settled_at }.unwrap_or_default(),
            })
            .collect();
        let next = (items.len() == limit as usize).then(|| Cursor(items.last().map_or(after, |i| i.token.id.0)));
        Page { items, next }
    }

    pub(super) fn stats(&self, now: i64) -> Stats {
        let mut by_queue: BTreeMap<&str, QueueStats> = BTreeMap::new();
        for j in self.jobs.values() {
            let q = by_queue
                .entry(j.queue.as_str())
                .or_insert_with(|| QueueStats { queue: j.queue.clone(), ..QueueStats::default() });
            match j.state {
                JobState::Pending => {
                    q.pending += 1;
                    q.oldest_pending_run_at = Some(q.oldest_pending_run_at.map_or(j.run_at, |r| r.min(j.run_at)));
                }
                JobState::Running => {
                    q.running += 1;
                    if j.lease_until.is_some_and(|l| l <= now) {
                        q.expired_leases += 1;
                    }
                }
                JobState::Waiting => q.waiting += 1,
                JobState::Completed => q.completed += 1,
                JobState::Exhausted if j.acknowledged_at.is_some() => q.exhausted_acknowledged += 1,
                JobState::Exhausted => q.exhausted_unacknowledged += 1,
                JobState::Unknown => q.unknown += 1,
                JobState::Cancelled => q.cancelled += 1,
            }
        }
        for queue in self.backoffs.keys() {
            if let Some(backoff) = self.backoff(queue, now) {
                by_queue
                    .entry(queue.as_str())
                    .or_insert_with(|| QueueStats { queue: queue.clone(), ..QueueStats::default() })
                    .backoff = Some(backoff);
            }
        }
        // Only a queue `stats` lists for its rows, pause or back-off shows its throttle.
        for (queue, q) in &mut by_queue {
            q.throttled = self.throttled(queue, now);
        }
        Stats { queues: by_queue.into_values().collect() }
    }
}
