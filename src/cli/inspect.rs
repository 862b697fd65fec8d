//! Reading commands: `stats`, `list`, `show`, `exhausted`, `unknown`. None of them changes a
//! row, and none creates a missing database.

use super::output::{self, cell, payload_preview, relative, table, when, PayloadView, PAYLOAD_LIMIT};
use super::store::CliStore;
use super::{load_job, plural, CliResult, Context, StateArg};
use clap::{Args, ValueEnum};
use fenceq::{AttemptRecord, Cursor, Exhaustion, Job, JobState, ListFilter, Page, QueueStats, MAX_BATCH};
use serde_json::{json, Value};

/// Arguments of `stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// What to print: `text` (a table; the default), `json` (one document, as --json) or
    /// `prometheus` (the text exposition format 0.0.4, for node-exporter's textfile
    /// collector or any scraper).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<StatsFormat>,

    /// Count the settled jobs again from their rows before printing, and keep those counts
    /// (`Queue::recount_settled`): the repair after a process of a fenceq older than schema 13
    /// settled jobs on an upgraded database. A count of the whole table; settles wait for it.
    #[arg(long)]
    pub recount: bool,
}

/// How `stats` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatsFormat {
    /// A table for people, and a line on what needs attention.
    Text,
    /// One JSON document (the same as --json).
    Json,
    /// Prometheus' text exposition format 0.0.4: gauges per queue and state.
    Prometheus,
}

impl StatsArgs {
    /// Prints the counts per queue and state.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let format = match (self.format, ctx.json()) {
            (None, false) => StatsFormat::Text,
            (None, true) | (Some(StatsFormat::Json), _) => StatsFormat::Json,
            (Some(format), false) => format,
            (Some(format), true) => {
                let name = format.to_possible_value().map_or_else(String::new, |v| v.get_name().to_string());
                let message = format!("--json asks for JSON but --format asks for {name}; give one of them");
                clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, format!("{message}\n")).exit()
            }
        };
        let queue = if self.recount {
            let queue = ctx.open_existing::<S>()?;
            queue.recount_settled()?;
            queue
        } else {
            ctx.open_read_only::<S>()?
        };
        if format == StatsFormat::Prometheus {
            // The library's own rendering: stats and the pending age at one reading of the clock.
            return Ok(ctx.out.text(&queue.metrics_text()?)?);
        }
        let stats = queue.stats()?;
        let now = queue.now_ms();
        let mut totals = QueueStats { queue: "TOTAL".to_string(), ..QueueStats::default() };
        for q in &stats.queues {
            totals.pending += q.pending;
            totals.running += q.running;
            totals.expired_leases += q.expired_leases;
            totals.waiting += q.waiting;
            totals.completed += q.completed;
            totals.exhausted_unacknowledged += q.exhausted_unacknowledged;
            totals.exhausted_acknowledged += q.exhausted_acknowledged;
            totals.unknown += q.unknown;
            totals.cancelled += q.cancelled;
            totals.oldest_pending_run_at = match (totals.oldest_pending_run_at, q.oldest_pending_run_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        if format == StatsFormat::Json {
            let queues: Vec<Value> = stats.queues.iter().map(|q| stats_json(q, now)).collect();
            let mut totals = stats_json(&totals, now);
            if let Some(object) = totals.as_object_mut() {
                object.remove("queue");
                object.remove("paused");
                object.remove("backoff");
                object.remove("throttled");
            }
            let paused: Vec<&str> =
                stats.queues.iter().filter(|q| q.paused.is_some()).map(|q| q.queue.as_str()).collect();
            let backing_off: Vec<&str> =
                stats.queues.iter().filter(|q| q.backoff.is_some()).map(|q| q.queue.as_str()).collect();
            return Ok(ctx.out.document(&json!({
                "now": now,
                "queues": queues,
                "totals": totals,
                "paused_queues": paused,
                "backoff_queues": backing_off,
            }))?);
        }
        if stats.queues.is_empty() {
            return Ok(ctx.out.line(format!("no jobs in {}", output::sanitize(&ctx.db_display())))?);
        }
        let mut t = table(&[
            "QUEUE",
            "PENDING",
            "OLDEST DUE",
            "NEXT DUE",
            "RUNNING",
            "EXPIRED LEASES",
            "WAITING",
            "COMPLETED",
            "EXHAUSTED UNACKED",
            "EXHAUSTED ACKED",
            "UNKNOWN",
            "CANCELLED",
            "TOTAL",
        ]);
        let rows = stats.queues.iter().chain((stats.queues.len() > 1).then_some(&totals));
        for q in rows {
            t.add_row(vec![
                match (q.paused.is_some(), q.backoff.is_some(), q.throttled.is_some()) {
                    (true, _, _) => format!("{} (paused)", output::sanitize(&q.queue)),
                    (false, true, _) => format!("{} (backing off)", output::sanitize(&q.queue)),
                    (false, false, true) => format!("{} (throttled)", output::sanitize(&q.queue)),
                    (false, false, false) => output::sanitize(&q.queue),
                },
                q.pending.to_string(),
                q.oldest_due_age_ms(now).map_or_else(|| "-".to_string(), output::human_duration),
                q.next_due_at(now).map_or_else(|| "-".to_string(), |at| relative(at, now)),
                q.running.to_string(),
                q.expired_leases.to_string(),
                q.waiting.to_string(),
                q.completed.to_string(),
                q.exhausted_unacknowledged.to_string(),
                q.exhausted_acknowledged.to_string(),
                q.unknown.to_string(),
                q.cancelled.to_string(),
                q.total().to_string(),
            ]);
        }
        ctx.out.table(&t)?;
        let mut attention = Vec::new();
        if totals.exhausted_unacknowledged > 0 {
            let n = totals.exhausted_unacknowledged;
            attention.push(format!(
                "{n} {} awaiting acknowledgement (fenceq exhausted)",
                plural(n, "exhaustion", "exhaustions")
            ));
        }
        if totals.unknown > 0 {
            let n = totals.unknown;
            attention
                .push(format!("{n} unknown {} awaiting resolution (fenceq unknown)", plural(n, "outcome", "outcomes")));
        }
        if totals.expired_leases > 0 {
            let n = totals.expired_leases;
            attention.push(format!("{n} running {} with an expired lease (fenceq reap)", plural(n, "job", "jobs")));
        }
        for q in &stats.queues {
            if let Some(pause) = &q.paused {
                let by = pause.by.as_deref().map_or_else(String::new, |by| format!(" by {}", output::sanitize(by)));
                let note = pause.note.as_deref().map_or_else(String::new, |n| format!(": {}", output::sanitize(n)));
                attention.push(format!(
                    "queue {name} is paused ({}{by}{note}): its claims find nothing (fenceq unpause {name})",
                    relative(pause.since, now),
                    name = output::sanitize(&q.queue),
                ));
            }
        }
        for q in &stats.queues {
            if let Some(backoff) = &q.backoff {
                attention.push(format!(
                    "queue {name} backs off until {} ({}): its claims find nothing until then (fenceq backoff clear {name})",
                    when(Some(backoff.until), now),
                    output::sanitize(&backoff.reason),
                    name = output::sanitize(&q.queue),
                ));
            }
        }
        for q in &stats.queues {
            if let Some(throttled) = q.throttled.filter(|t| t.group_heads > 0) {
                attention.push(format!(
                    "queue {}: {} {} of groups whose rate is spent wait until {} (fenceq limit show {})",
                    output::sanitize(&q.queue),
                    throttled.group_heads,
                    plural(throttled.group_heads, "head", "heads"),
                    when(throttled.group_heads_open_at, now),
                    output::sanitize(&q.queue),
                ));
            }
            if let Some(throttled) = q.throttled.filter(|t| t.due > 0 || t.opens_at.is_some()) {
                let until = throttled.opens_at.map_or_else(
                    || "until a running attempt settles (its running limit)".to_string(),
                    |at| format!("until {} (its rate)", when(Some(at), now)),
                );
                attention.push(format!(
                    "queue {} is throttled: {} due {} held back {until} (fenceq limit show {})",
                    output::sanitize(&q.queue),
                    throttled.due,
                    plural(throttled.due, "job", "jobs"),
                    output::sanitize(&q.queue),
                ));
            }
        }
        if !attention.is_empty() {
            ctx.out.line(format!("attention: {}", attention.join("; ")))?;
        }
        Ok(())
    }
}

fn stats_json(q: &QueueStats, now: i64) -> Value {
    json!({
        "queue": q.queue,
        "pending": q.pending,
        "running": q.running,
        "expired_leases": q.expired_leases,
        "waiting": q.waiting,
        "completed": q.completed,
        "exhausted_unacknowledged": q.exhausted_unacknowledged,
        "exhausted_acknowledged": q.exhausted_acknowledged,
        "unknown": q.unknown,
        "cancelled": q.cancelled,
        "total": q.total(),
        "oldest_pending_run_at": q.oldest_pending_run_at,
        "oldest_pending_age_ms": q.oldest_due_age_ms(now),
        "next_due_at": q.next_due_at(now),
        "paused": super::pause::pause_json(q.paused.as_ref(), now),
        "backoff": q.backoff.as_ref().map(|b| super::backoff::backoff_json(b, now)),
        "throttled": q.throttled.map(|t| json!({
            "due": t.due,
            "opens_at": t.opens_at,
            "group_heads": t.group_heads,
            "group_heads_open_at": t.group_heads_open_at,
        })),
    })
}

/// Arguments of `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only jobs of this queue.
    #[arg(long, value_name = "QUEUE")]
    pub queue: Option<String>,

    /// Only jobs in this state.
    #[arg(long, value_enum, value_name = "STATE")]
    pub state: Option<StateArg>,

    /// At most this many jobs (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_BATCH)))]
    pub limit: u32,

    /// Start after this job id (to page on from the last id shown).
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(i64).range(0..))]
    pub after: Option<i64>,
}

impl ListArgs {
    /// Prints the jobs.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let queue = ctx.open_read_only::<S>()?;
        let filter = ListFilter {
            queue: self.queue.clone(),
            state: self.state.map(JobState::from),
            after: self.after.map(Cursor),
            limit: self.limit,
        };
        let jobs = queue.list(&filter)?;
        let now = queue.now_ms();
        if ctx.json() {
            for job in &jobs {
                ctx.out.record(&job_json(job, Some(PAYLOAD_LIMIT)))?;
            }
            return Ok(());
        }
        if jobs.is_empty() {
            return Ok(ctx.out.line("no jobs match")?);
        }
        let mut t = table(&["ID", "QUEUE", "KEY", "STATE", "ATTEMPT", "PRIORITY", "RUN AT", "LAST ERROR", "PAYLOAD"]);
        for job in &jobs {
            t.add_row(vec![
                job.id.to_string(),
                output::sanitize(&job.queue),
                cell(job.key.as_deref(), 24),
                state_label(job),
                format!("{}/{}", job.attempt, job.max_attempts),
                job.priority.to_string(),
                relative(job.run_at, now),
                cell(job.last_error.as_deref(), 32),
                payload_preview(&job.payload, 32),
            ]);
        }
        ctx.out.table(&t)?;
        let n = jobs.len() as u64;
        let mut summary = format!("{n} {}", plural(n, "job", "jobs"));
        if jobs.len() == self.limit as usize {
            let last = jobs.last().map_or(0, |job| job.id.0);
            summary.push_str(&format!("; more may follow: --after {last}"));
        }
        Ok(ctx.out.line(summary)?)
    }
}

/// The job's group, and whether the group holds it back, for people.
fn group_line(job: &Job) -> String {
    match (&job.group, job.held_by_group) {
        (None, _) => "-".to_string(),
        (Some(group), false) => cell(Some(group), 512),
        (Some(group), true) => format!("{} (held: an earlier job of the group holds it)", cell(Some(group), 512)),
    }
}

/// The state with its acknowledgement, for people.
fn state_label(job: &Job) -> String {
    match (job.state, job.acknowledged_at) {
        (JobState::Exhausted, Some(_)) => "exhausted (acked)".to_string(),
        (state, _) => state.to_string(),
    }
}

/// A job as JSON: every field of the row, times in ms, the payload cut to `limit` bytes.
pub fn job_json(job: &Job, limit: Option<usize>) -> Value {
    json!({
        "id": job.id.0,
        "queue": job.queue,
        "key": job.key,
        "state": job.state.as_str(),
        "priority": job.priority,
        "run_at": job.run_at,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "claim_id": job.claim_id.map(|c| c.to_string()),
        "worker": job.worker,
        "lease_until": job.lease_until,
        "heartbeat_at": job.heartbeat_at,
        "wait_until": job.wait_until,
        "last_error": job.last_error,
        "created_at": job.created_at,
        "settled_at": job.settled_at,
        "exhausted_at": job.exhausted_at,
        "acknowledged_at": job.acknowledged_at,
        "decision": job.decision.as_ref().map(|d| json!({
            "action": d.action,
            "at": d.at,
            "by": d.by,
            "note": d.note,
        })),
        "group": job.group,
        "held_by_group": job.held_by_group,
        "payload": PayloadView::new(&job.payload, limit).json(),
    })
}

/// Arguments of `show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The job's id.
    #[arg(value_name = "ID", value_parser = clap::value_parser!(i64).range(1..))]
    pub id: i64,

    /// Print the whole payload instead of its first 4 KiB.
    #[arg(long)]
    pub full: bool,

    /// List at most this many of the job's attempts that did not complete, newest first.
    #[arg(long, value_name = "N", default_value_t = SHOW_ATTEMPTS,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_BATCH)))]
    pub attempts: u32,
}

/// How many records of attempts `show` lists unless told otherwise.
pub const SHOW_ATTEMPTS: u32 = 100;

impl ShowArgs {
    /// Prints one job's record.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let queue = ctx.open_read_only::<S>()?;
        let job = load_job(&queue, self.id)?;
        let limit = (!self.full).then_some(PAYLOAD_LIMIT);
        // One more than shown, to know whether older ones were left out.
        let mut attempts = queue.attempts(job.id, self.attempts.saturating_add(1).min(MAX_BATCH))?;
        let more = attempts.len() > self.attempts as usize;
        attempts.truncate(self.attempts as usize);
        if ctx.json() {
            let mut document = job_json(&job, limit);
            document["attempts"] = Value::Array(attempts.iter().map(attempt_json).collect());
            document["attempts_truncated"] = Value::Bool(more);
            return Ok(ctx.out.document(&document)?);
        }
        let now = queue.now_ms();
        let lease = job.lease_until.map(|until| {
            let state = if until <= now { "expired" } else { "live" };
            format!("{} ({state}, {})", output::timestamp(until), relative(until, now))
        });
        let mut t = table(&["FIELD", "VALUE"]);
        let rows: Vec<(&str, String)> = vec![
            ("id", job.id.to_string()),
            ("queue", output::sanitize(&job.queue)),
            ("key", cell(job.key.as_deref(), 512)),
            ("group", group_line(&job)),
            ("state", state_label(&job)),
            ("priority", job.priority.to_string()),
            ("run at", when(Some(job.run_at), now)),
            ("attempt", format!("{} of {}", job.attempt, job.max_attempts)),
            ("claim id", job.claim_id.map_or_else(|| "-".to_string(), |c| c.to_string())),
            ("worker", cell(job.worker.as_deref(), 128)),
            ("lease until", lease.unwrap_or_else(|| "-".to_string())),
            ("heartbeat at", when(job.heartbeat_at, now)),
            ("wait until", when(job.wait_until, now)),
            ("last error", job.last_error.as_deref().map_or_else(|| "-".to_string(), output::sanitize)),
            ("created at", when(Some(job.created_at), now)),
            ("settled at", when(job.settled_at, now)),
            ("exhausted at", when(job.exhausted_at, now)),
            ("acknowledged at", when(job.acknowledged_at, now)),
            ("decision", decision_line(job.decision.as_ref(), now)),
        ];
        for (field, value) in rows {
            t.add_row(vec![field.to_string(), value]);
        }
        ctx.out.table(&t)?;
        if attempts.is_empty() {
            ctx.out.line("attempts that did not complete: none")?;
        } else {
            let shown = if more { format!("the {} newest", attempts.len()) } else { attempts.len().to_string() };
            ctx.out.line(format!("attempts that did not complete ({shown}, newest first):"))?;
            for record in &attempts {
                ctx.out.line(attempt_line(record, now))?;
            }
            if more {
                ctx.out.line(format!("(older records not shown; --attempts {MAX_BATCH} shows more)"))?;
            }
        }
        let view = PayloadView::new(&job.payload, limit);
        ctx.out.line(format!("payload ({}, {} bytes):", view.encoding, view.total))?;
        ctx.out.line(view.for_terminal())?;
        if let Some(note) = view.note() {
            ctx.out.line(note)?;
        }
        Ok(())
    }
}

/// One record of an attempt on one line: `attempt 2: retry, worker w1, started …, ended … (3m
/// ago): provider answered 502`. The worker and the error are escaped (`cell`), so that no
/// text can forge a line.
fn attempt_line(record: &AttemptRecord, now: i64) -> String {
    let started = record.started_at.map_or_else(|| "-".to_string(), output::timestamp);
    format!(
        "  attempt {}: {}, worker {}, started {started}, ended {}: {}",
        record.attempt,
        record.outcome,
        cell(record.worker.as_deref(), 128),
        when(Some(record.ended_at), now),
        cell(record.error.as_deref(), 512),
    )
}

/// A record of an attempt as JSON: times in ms.
fn attempt_json(record: &AttemptRecord) -> Value {
    json!({
        "attempt": record.attempt,
        "claim_id": record.claim_id.to_string(),
        "outcome": record.outcome.as_str(),
        "worker": record.worker,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "error": record.error,
    })
}

/// The last operator or reconciler change: `resolve complete by alice 5 min ago: note`.
fn decision_line(decision: Option<&fenceq::Decision>, now: i64) -> String {
    let Some(d) = decision else { return "-".to_string() };
    let by = d.by.as_deref().map_or_else(|| "an unnamed caller".to_string(), output::sanitize);
    let mut line = format!("{} by {by}, {}", output::sanitize(&d.action), when(Some(d.at), now));
    if let Some(note) = &d.note {
        line.push_str(&format!(": {}", output::sanitize(note)));
    }
    line
}

/// Which records of a paged listing to show (`exhausted`, `unknown`).
#[derive(Debug, Args)]
pub struct PagedArgs {
    /// Only records of this queue.
    #[arg(long, value_name = "QUEUE")]
    pub queue: Option<String>,

    /// At most this many records.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: u64,

    /// Start after this job id (to page on from the last id shown).
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(i64).range(0..))]
    pub after: Option<i64>,
}

/// Arguments of `exhausted`.
#[derive(Debug, Args)]
pub struct ExhaustedArgs {
    #[command(flatten)]
    list: PagedArgs,
}

impl ExhaustedArgs {
    /// Prints the unacknowledged exhaustions.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let queue = ctx.open_read_only::<S>()?;
        let (items, more) = self.list.collect(|cursor, limit| queue.exhaustions(cursor, limit), |e| &e.queue)?;
        let records: Vec<Record> = items.into_iter().map(Record::from).collect();
        let hint = "acknowledge with `fenceq ack ID` or `fenceq ack --all --queue Q`; redrive with `fenceq replay ID`";
        let what = ("unacknowledged exhaustion", "unacknowledged exhaustions");
        print_records(ctx, &records, more, queue.now_ms(), ("EXHAUSTED", "REASON", "reason"), what, hint)
    }
}

/// Arguments of `unknown`.
#[derive(Debug, Args)]
pub struct UnknownArgs {
    #[command(flatten)]
    list: PagedArgs,
}

impl UnknownArgs {
    /// Prints the unknown outcomes.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let queue = ctx.open_read_only::<S>()?;
        let (items, more) = self.list.collect(|cursor, limit| queue.unknowns(cursor, limit), |u| &u.queue)?;
        let records: Vec<Record> = items.into_iter().map(Record::from).collect();
        let hint = "resolve with `fenceq resolve ID --as complete|retry|exhaust`";
        let what = ("unknown outcome", "unknown outcomes");
        print_records(ctx, &records, more, queue.now_ms(), ("RECORDED", "EVIDENCE", "evidence"), what, hint)
    }
}

impl PagedArgs {
    fn collect<T>(
        &self,
        fetch: impl Fn(Option<Cursor>, u32) -> fenceq::Result<Page<T>>,
        queue_of: impl Fn(&T) -> &str,
    ) -> CliResult<(Vec<T>, bool)> {
        collect_pages(fetch, queue_of, self.queue.as_deref(), self.after, self.limit)
    }
}

/// An exhaustion or an unknown outcome, as the listings print it (the CLI's and the
/// dashboard's).
pub struct Record {
    /// The identity to act with.
    pub token: fenceq::ClaimToken,
    /// The queue.
    pub queue: String,
    /// The idempotency key.
    pub key: Option<String>,
    /// The payload.
    pub payload: Vec<u8>,
    /// The exhaustion's reason, or the unknown outcome's evidence.
    pub text: Option<String>,
    /// When it was recorded (ms since the epoch).
    pub at: i64,
}

impl From<Exhaustion> for Record {
    fn from(e: Exhaustion) -> Record {
        Record { token: e.token, queue: e.queue, key: e.key, payload: e.payload, text: e.reason, at: e.at }
    }
}

impl From<fenceq::UnknownOutcome> for Record {
    fn from(u: fenceq::UnknownOutcome) -> Record {
        Record { token: u.token, queue: u.queue, key: u.key, payload: u.payload, text: u.evidence, at: u.at }
    }
}

/// Page size for walking exhaustion and unknown pages.
const PAGE: u32 = 500;

/// Walks the pages of `fetch` from after `after`, keeping the items of `queue` (all when
/// `None`), until `limit` items are kept or the pages end. Returns the items and whether
/// more may follow.
pub fn collect_pages<T>(
    fetch: impl Fn(Option<Cursor>, u32) -> fenceq::Result<Page<T>>,
    queue_of: impl Fn(&T) -> &str,
    queue: Option<&str>,
    after: Option<i64>,
    limit: u64,
) -> CliResult<(Vec<T>, bool)> {
    let mut cursor = after.map(Cursor);
    let mut items = Vec::new();
    loop {
        let page = fetch(cursor, PAGE)?;
        for item in page.items {
            if queue.is_none_or(|q| queue_of(&item) == q) {
                if items.len() as u64 == limit {
                    return Ok((items, true));
                }
                items.push(item);
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok((items, false)),
        }
    }
}

/// An exhaustion or unknown outcome as JSON (`at`: when it was exhausted or recorded; the
/// text under `text_key`: `reason` or `evidence`).
fn record_json(item: &Record, text_key: &str) -> Value {
    let mut value = json!({
        "id": item.token.id.0,
        "queue": item.queue,
        "key": item.key,
        "attempt": item.token.attempt,
        "claim_id": item.token.claim_id.to_string(),
        "at": item.at,
        "payload": PayloadView::new(&item.payload, Some(PAYLOAD_LIMIT)).json(),
    });
    value[text_key] = json!(item.text);
    value
}

/// Prints a listing: `headers` are the time column's and the text column's headers and the
/// text's JSON key; `what` names one record and many.
fn print_records(
    ctx: &mut Context,
    items: &[Record],
    more: bool,
    now: i64,
    headers: (&str, &str, &str),
    what: (&'static str, &'static str),
    hint: &str,
) -> CliResult<()> {
    let (at_header, text_header, text_key) = headers;
    if ctx.json() {
        for item in items {
            ctx.out.record(&record_json(item, text_key))?;
        }
        return Ok(());
    }
    if items.is_empty() {
        return Ok(ctx.out.line(format!("no {}", what.1))?);
    }
    let mut t = table(&["ID", "QUEUE", "KEY", "ATTEMPT", at_header, text_header, "PAYLOAD"]);
    for item in items {
        t.add_row(vec![
            item.token.id.to_string(),
            output::sanitize(&item.queue),
            cell(item.key.as_deref(), 24),
            item.token.attempt.to_string(),
            relative(item.at, now),
            cell(item.text.as_deref(), 40),
            payload_preview(&item.payload, 32),
        ]);
    }
    ctx.out.table(&t)?;
    let n = items.len() as u64;
    let mut summary = format!("{n} {}", plural(n, what.0, what.1));
    if more {
        let last = items.last().map_or(0, |item| item.token.id.0);
        summary.push_str(&format!("; more may follow: --after {last}"));
    }
    ctx.out.line(summary)?;
    Ok(ctx.out.line(hint)?)
}
