//! Commands that change single jobs or a queue's dead letters: `enqueue`, `ack`, `replay`,
//! `resolve`, `cancel`. Each takes `--dry-run` and `--expect N` (see [`ChangeOpts`]), and
//! `--backup PATH` (see [`BackupOpts`]).

use super::backup::BackupOpts;
use super::decision::DecisionOpts;
use super::inspect::collect_pages;
use super::output::sanitize;
use super::store::CliStore;
use super::{fail, load_job, plural, BoxError, ChangeOpts, CliResult, Context, ResultExt};
use clap::builder::PossibleValuesParser;
use clap::{Args, ValueEnum};
use fenceq::{Enqueued, Error, JobId, JobState, NewJob, Queue, Resolution};
use serde_json::json;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

// ------------------------------------------------------------------------------- enqueue

/// Where `enqueue` takes the payload from: exactly one of these.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct PayloadSource {
    /// The payload, as text.
    #[arg(long, value_name = "TEXT")]
    pub payload: Option<String>,

    /// Read the payload (any bytes) from this file; `-` reads standard input.
    #[arg(long, value_name = "FILE")]
    pub payload_file: Option<PathBuf>,

    /// `-` reads the payload (any bytes) from standard input.
    #[arg(value_name = "-", value_parser = PossibleValuesParser::new(["-"]), hide_possible_values = true)]
    pub stdin: Option<String>,
}

impl PayloadSource {
    fn read(&self) -> CliResult<Vec<u8>> {
        match (&self.payload, &self.payload_file) {
            (Some(text), _) => Ok(text.clone().into_bytes()),
            (None, Some(path)) if path != Path::new("-") => {
                std::fs::read(path).context(|| format!("cannot read payload file {}", path.display()))
            }
            _ => {
                let mut bytes = Vec::new();
                std::io::stdin()
                    .lock()
                    .read_to_end(&mut bytes)
                    .context(|| "cannot read the payload from stdin".into())?;
                Ok(bytes)
            }
        }
    }
}

/// Arguments of `enqueue`.
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// The queue to add the job to.
    #[arg(long, value_name = "QUEUE")]
    pub queue: String,

    /// The idempotency key: when the queue already has a job with this key, that job's id is
    /// printed as a duplicate and nothing changes.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,

    /// The job's group (a conversation, say chat:42): one job of a group runs at a time, in
    /// the order they were added.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,

    #[command(flatten)]
    pub payload: PayloadSource,

    /// Higher priorities are claimed first.
    #[arg(long, value_name = "N", default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,

    /// Not claimable before this many seconds from now.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub delay_secs: u64,

    /// Claims allowed before the job is exhausted (default: 5).
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,

    #[command(flatten)]
    pub change: ChangeOpts,

    #[command(flatten)]
    pub backup: BackupOpts,
}

impl EnqueueArgs {
    /// Adds the job, or reports the existing one with the same key.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let mut job = NewJob::new(self.queue.clone(), self.payload.read()?)
            .priority(self.priority)
            .delay(Duration::from_secs(self.delay_secs));
        if let Some(key) = &self.key {
            job = job.key(key.clone());
        }
        if let Some(group) = &self.group {
            job = job.group(group.clone());
        }
        if let Some(attempts) = self.max_attempts {
            job = job.max_attempts(attempts);
        }
        // No database yet (or one without a fenceq schema): the real run creates it.
        let fresh = matches!(S::version_of(ctx)?, None | Some(0));
        if self.change.dry_run || (fresh && self.change.expect.is_some_and(|n| n != 1)) {
            // A preview changes nothing: validate the job against a throwaway queue with the
            // same limits, and look its key up read-only (without a queue, it would be new).
            Queue::open_in_memory()?.enqueue(job.clone())?;
            let existing = if fresh {
                None
            } else {
                // Read-only, and refused like the real run on an older schema.
                let queue = ctx.open_read_only::<S>()?;
                match &self.key {
                    Some(key) => queue.find_by_key(&self.queue, key)?,
                    None => None,
                }
            };
            self.change.check(u64::from(existing.is_none()))?;
            return self.report(ctx, existing.map(Enqueued::Duplicate));
        }
        // The checks above have passed; nothing is created or changed before the backup.
        self.backup.take(ctx, false)?;
        let queue: Queue<S> = if fresh { ctx.open_or_create()? } else { ctx.open_existing()? };
        // The enqueue and the --expect check are one transaction on the queue's own writer:
        // a mismatch rolls the enqueue back.
        let expected = self.change.expect;
        let enqueued = self.change.guarded(queue.transaction(|tx| {
            let enqueued = queue.enqueue_tx(tx, job)?;
            let found = u64::from(!enqueued.is_duplicate());
            match expected {
                Some(expected) if expected != found => {
                    Err(Error::CountMismatch { operation: "enqueue", expected, found })
                }
                _ => Ok(enqueued),
            }
        }))?;
        self.report(ctx, Some(enqueued))
    }

    fn report(&self, ctx: &mut Context, enqueued: Option<Enqueued>) -> CliResult<()> {
        let dry = self.change.dry_run;
        let duplicate = enqueued.is_some_and(Enqueued::is_duplicate);
        let would_change = u64::from(!duplicate);
        // A dry run's new id was rolled back; it would not necessarily be the id given later.
        let id = enqueued.filter(|e| !dry || e.is_duplicate()).map(|e| e.id().0);
        if ctx.json() {
            return Ok(ctx.change_document(json!({
                "command": "enqueue",
                "dry_run": dry,
                "queue": self.queue,
                "key": self.key,
                "id": id,
                "duplicate": duplicate,
                "would_change": would_change,
                "changed": if dry { 0 } else { would_change },
            }))?);
        }
        let key = self.key.as_deref().unwrap_or_default();
        let name = sanitize(&self.queue);
        let line = match (dry, enqueued) {
            (_, Some(Enqueued::Duplicate(id))) => {
                let prefix = if dry { "dry run: " } else { "" };
                format!("{prefix}duplicate: job {id} in queue {name} already has key {key:?}; nothing changed")
            }
            (false, Some(Enqueued::New(id))) => format!("new: enqueued job {id} in queue {name}"),
            _ => format!("dry run: would enqueue a new job in queue {name}; nothing was changed"),
        };
        Ok(ctx.out.line(line)?)
    }
}

// ------------------------------------------------------------------------------- ack

/// Arguments of `ack`.
#[derive(Debug, Args)]
pub struct AckArgs {
    /// The exhausted job to acknowledge.
    #[arg(
        value_name = "ID",
        required_unless_present = "all",
        conflicts_with = "all",
        value_parser = clap::value_parser!(i64).range(1..)
    )]
    pub id: Option<i64>,

    /// Acknowledge every unacknowledged exhaustion of --queue.
    ///
    /// One transaction finds and acknowledges them, so the count that --expect checks is the
    /// count that changed (a mismatch rolls it back).
    #[arg(long, requires = "queue")]
    pub all: bool,

    /// The queue whose exhaustions --all acknowledges.
    #[arg(long, value_name = "QUEUE", requires = "all")]
    pub queue: Option<String>,

    #[command(flatten)]
    pub change: ChangeOpts,

    #[command(flatten)]
    pub backup: BackupOpts,

    #[command(flatten)]
    pub decision: DecisionOpts,
}

impl AckArgs {
    /// Acknowledges one exhaustion or a queue's exhaustions.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let queue = ctx.open_for_change::<S>(&self.change)?;
        match (self.id, &self.queue) {
            (Some(id), _) => self.ack_one(ctx, &queue, id),
            (None, Some(name)) => self.ack_all(ctx, &queue, name),
            (None, None) => Err(fail("give a job id, or --all --queue QUEUE")),
        }
    }

    fn ack_one<S: CliStore>(&self, ctx: &mut Context, queue: &Queue<S>, id: i64) -> CliResult<()> {
        let dry = self.change.dry_run;
        let preview = if dry || self.backup.wanted(dry) {
            // A preview, or the guards before a backup (the statement checks them again).
            let job = load_job(queue, id)?;
            if job.state != JobState::Exhausted {
                return Err(fail(format!("job {id} is {}; ack needs an exhausted job", job.state)));
            }
            let would_change = job.acknowledged_at.is_none();
            self.change.check(u64::from(would_change))?;
            Some(would_change)
        } else {
            None
        };
        let changed = if let (true, Some(would_change)) = (dry, preview) {
            would_change
        } else {
            self.backup.take(ctx, dry)?;
            // The statement decides, and checks --expect in its own transaction.
            let acknowledged = self.decision.operator(queue).acknowledge_job(JobId(id), self.change.expect);
            self.change.guarded(acknowledged).map_err(|e| explain(e, id, "ack needs an exhausted job"))?
        };
        let changed = u64::from(changed);
        if ctx.json() {
            return Ok(ctx.change_document(json!({
                "command": "ack",
                "dry_run": dry,
                "ids": [id],
                "skipped": [],
                "would_change": changed,
                "changed": if dry { 0 } else { changed },
            }))?);
        }
        let queue_name = queue_of(queue, id);
        let line = match (changed, dry) {
            (0, _) => format!("job {id} was already acknowledged; nothing to do"),
            (_, true) => format!("dry run: would acknowledge job {id} (queue {queue_name}); nothing was changed"),
            (_, false) => format!("acknowledged job {id} (queue {queue_name})"),
        };
        Ok(ctx.out.line(line)?)
    }

    fn ack_all<S: CliStore>(&self, ctx: &mut Context, queue: &Queue<S>, name: &str) -> CliResult<()> {
        let dry = self.change.dry_run;
        let preview: Option<Vec<i64>> = if dry || (self.backup.wanted(dry) && self.change.expect.is_some()) {
            // A preview, or --expect checked before a backup (and again by the change).
            let fetch = |cursor, limit| queue.exhaustions(cursor, limit);
            let (items, _) = collect_pages(fetch, |e: &fenceq::Exhaustion| &e.queue, Some(name), None, u64::MAX)?;
            self.change.check(items.len() as u64)?;
            Some(items.iter().map(|item| item.token.id.0).collect())
        } else {
            None
        };
        let ids: Vec<i64> = if let (true, Some(ids)) = (dry, preview) {
            ids
        } else {
            self.backup.take(ctx, dry)?;
            // One transaction finds and acknowledges them (and checks --expect), so nothing
            // can change between the count and the change.
            let operator = self.decision.operator(queue);
            let acknowledged = self.change.guarded(operator.acknowledge_all(name, self.change.expect))?;
            acknowledged.iter().map(|id| id.0).collect()
        };
        let n = ids.len() as u64;
        if ctx.json() {
            return Ok(ctx.change_document(json!({
                "command": "ack",
                "dry_run": dry,
                "queue": name,
                "ids": ids,
                "skipped": [],
                "would_change": n,
                "changed": if dry { 0 } else { n },
            }))?);
        }
        let noun = plural(n, "exhaustion", "exhaustions");
        let list = id_list(&ids);
        let name = sanitize(name);
        let line = if dry {
            format!("dry run: would acknowledge {n} {noun} of queue {name}{list}; nothing was changed")
        } else {
            format!("acknowledged {n} {noun} of queue {name}{list}")
        };
        Ok(ctx.out.line(line)?)
    }
}

/// The queue of job `id` for a message (a queue name never changes), escaped for a line
/// ([`sanitize`]), or `?` when the row is gone.
fn queue_of<S: CliStore>(queue: &Queue<S>, id: i64) -> String {
    queue.job(JobId(id)).ok().flatten().map_or_else(|| "?".to_string(), |job| sanitize(&job.queue))
}

/// The CLI's wording for a refused change of job `id`: `needs` says what the command needs.
fn explain(error: BoxError, id: i64, needs: &str) -> BoxError {
    match error.downcast_ref::<Error>() {
        Some(Error::NotFound(_)) => fail(format!("job {id} not found")),
        Some(Error::InvalidState { state, .. }) => fail(format!("job {id} is {state}; {needs}")),
        Some(Error::StaleIdentity { .. }) => {
            fail(format!("job {id} changed while the command ran (it has a new claim); nothing was changed"))
        }
        _ => error,
    }
}

/// ` (ids 1, 2, 3)`, at most 20 of them, or nothing for no ids.
fn id_list(ids: &[i64]) -> String {
    if ids.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = ids.iter().take(20).map(i64::to_string).collect();
    let more = if ids.len() > 20 { format!(" and {} more", ids.len() - 20) } else { String::new() };
    format!(" (ids {}{more})", shown.join(", "))
}

// ------------------------------------------------------------------------------- replay, resolve, cancel

/// Prints the result of a command that changes one job.
fn report_one(ctx: &mut Context, change: &ChangeOpts, command: &str, id: i64, what: String) -> CliResult<()> {
    let dry = change.dry_run;
    if ctx.json() {
        return Ok(ctx.change_document(json!({
            "command": command,
            "dry_run": dry,
            "id": id,
            "would_change": 1,
            "changed": if dry { 0 } else { 1 },
        }))?);
    }
    let line = if dry { format!("dry run: would {what}; nothing was changed") } else { what };
    Ok(ctx.out.line(line)?)
}

/// Arguments of `replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The exhausted job to send back to pending.
    #[arg(value_name = "ID", value_parser = clap::value_parser!(i64).range(1..))]
    pub id: i64,

    #[command(flatten)]
    pub change: ChangeOpts,

    #[command(flatten)]
    pub backup: BackupOpts,

    #[command(flatten)]
    pub decision: DecisionOpts,
}

impl ReplayArgs {
    /// Replays the job.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        const NEEDS: &str = "replay needs an exhausted job";
        let queue = ctx.open_for_change::<S>(&self.change)?;
        // A preview, or an --expect that one job's change can never meet: nothing changes.
        let preview = self.change.dry_run || self.change.expect.is_some_and(|n| n != 1);
        if preview || self.backup.wanted(self.change.dry_run) {
            // (Also the guards before a backup; the statement checks them again.)
            let job = load_job(&queue, self.id)?;
            if job.state != JobState::Exhausted {
                return Err(fail(format!("job {} is {}; {NEEDS}", self.id, job.state)));
            }
            self.change.check(1)?;
        }
        if !preview {
            // The statement decides (its state guard), in its own transaction.
            self.backup.take(ctx, false)?;
            let operator = self.decision.operator(&queue);
            operator.replay(JobId(self.id)).map_err(|e| explain(e.into(), self.id, NEEDS))?;
        }
        let job = load_job(&queue, self.id)?;
        let verb = if self.change.dry_run { "replay" } else { "replayed" };
        let what = format!(
            "{verb} job {} (queue {}): pending, due now, with a fresh budget of {} attempts",
            self.id,
            sanitize(&job.queue),
            job.max_attempts
        );
        report_one(ctx, &self.change, "replay", self.id, what)
    }
}

/// How an operator resolves an unknown outcome (spelled like the library's `Resolution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Outcome {
    /// The side effect happened: the job is completed.
    #[value(alias = "completed")]
    Complete,
    /// The side effect did not happen: pending again, due now.
    Retry,
    /// Give up: the job becomes an unacknowledged exhaustion.
    #[value(alias = "exhausted")]
    Exhaust,
}

impl Outcome {
    fn resolution(self) -> Resolution {
        match self {
            Outcome::Complete => Resolution::Complete,
            Outcome::Retry => Resolution::Retry,
            Outcome::Exhaust => Resolution::Exhaust,
        }
    }

    fn effect(self) -> &'static str {
        match self {
            Outcome::Complete => "the job is completed (the side effect happened)",
            Outcome::Retry => "the job is pending again, due now",
            Outcome::Exhaust => "the job is an unacknowledged exhaustion",
        }
    }
}

/// Arguments of `resolve`.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The job with the unknown outcome.
    #[arg(value_name = "ID", value_parser = clap::value_parser!(i64).range(1..))]
    pub id: i64,

    /// The decision.
    #[arg(long = "as", value_enum, value_name = "OUTCOME")]
    pub outcome: Outcome,

    #[command(flatten)]
    pub change: ChangeOpts,

    #[command(flatten)]
    pub backup: BackupOpts,

    #[command(flatten)]
    pub decision: DecisionOpts,
}

impl ResolveArgs {
    /// Resolves the job with its current token.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        const NEEDS: &str = "resolve needs a job in state unknown";
        let queue = ctx.open_for_change::<S>(&self.change)?;
        let job = load_job(&queue, self.id)?;
        if job.state != JobState::Unknown {
            return Err(fail(format!("job {} is {}; {NEEDS}", self.id, job.state)));
        }
        let token = job.token().ok_or_else(|| fail(format!("job {} has no claim to resolve", self.id)))?;
        self.change.check(1)?;
        if !self.change.dry_run {
            // The exact token read above: if the job changed since, the statement refuses.
            self.backup.take(ctx, false)?;
            let operator = self.decision.operator(&queue);
            operator.resolve(&token, self.outcome.resolution()).map_err(|e| explain(e.into(), self.id, NEEDS))?;
        }
        let verb = if self.change.dry_run { "resolve" } else { "resolved" };
        let name = self.outcome.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default();
        let what =
            format!("{verb} job {} (queue {}) as {name}: {}", self.id, sanitize(&job.queue), self.outcome.effect());
        report_one(ctx, &self.change, "resolve", self.id, what)
    }
}

/// Arguments of `cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The pending, waiting or running job to cancel.
    #[arg(value_name = "ID", value_parser = clap::value_parser!(i64).range(1..))]
    pub id: i64,

    #[command(flatten)]
    pub change: ChangeOpts,

    #[command(flatten)]
    pub backup: BackupOpts,

    #[command(flatten)]
    pub decision: DecisionOpts,
}

impl CancelArgs {
    /// Cancels the job.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        const NEEDS: &str = "cancel needs a pending, waiting or running job";
        let queue = ctx.open_for_change::<S>(&self.change)?;
        // A preview, or an --expect that one job's change can never meet: nothing changes.
        let preview = self.change.dry_run || self.change.expect.is_some_and(|n| n != 1);
        let checked = if preview || self.backup.wanted(self.change.dry_run) {
            // (Also the guards before a backup; the statement checks them again.)
            let job = load_job(&queue, self.id)?;
            if !matches!(job.state, JobState::Pending | JobState::Waiting | JobState::Running) {
                return Err(fail(format!("job {} is {}; {NEEDS}", self.id, job.state)));
            }
            self.change.check(1)?;
            Some(job.state)
        } else {
            None
        };
        let was = if let (true, Some(state)) = (preview, checked) {
            state
        } else {
            // The statement decides and says what the job was, in one transaction.
            self.backup.take(ctx, false)?;
            self.decision.operator(&queue).cancel(JobId(self.id)).map_err(|e| explain(e.into(), self.id, NEEDS))?
        };
        let verb = if self.change.dry_run { "cancel" } else { "cancelled" };
        let what = format!("{verb} job {} (queue {}, was {was})", self.id, queue_of(&queue, self.id));
        report_one(ctx, &self.change, "cancel", self.id, what)
    }
}
