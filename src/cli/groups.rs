//! Groups: `groups` lists the groups with live jobs (what holds each, how many wait behind it,
//! and why a blocked one cannot go on); `group-policy` shows or sets what a failed head does
//! to its queue's groups.

use super::output::{self, table, when};
use super::store::CliStore;
use super::{plural, CliResult, Context};
use clap::{Args, ValueEnum};
use fenceq::{GroupBlock, GroupPolicy, GroupSummary, MAX_BATCH};
use serde_json::{json, Value};

/// Arguments of `groups`.
#[derive(Debug, Args)]
pub struct GroupsArgs {
    /// Only the groups of this queue.
    #[arg(long, value_name = "QUEUE")]
    pub queue: Option<String>,

    /// Only groups that cannot go on without time passing or a person deciding (a head that
    /// is unknown, exhausted, waiting, or pending with a backoff).
    #[arg(long)]
    pub blocked: bool,

    /// At most this many groups (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_BATCH)))]
    pub limit: u32,

    /// Start after this queue and group (`QUEUE/GROUP`, to page on from the last one shown).
    #[arg(long, value_name = "QUEUE/GROUP")]
    pub after: Option<String>,
}

impl GroupsArgs {
    /// Prints the groups.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let queue = ctx.open_read_only::<S>()?;
        let now = queue.now_ms();
        let mut after = match &self.after {
            None => None,
            Some(text) => Some(
                text.split_once('/')
                    .map(|(q, g)| (q.to_string(), g.to_string()))
                    .ok_or_else(|| super::fail("--after takes QUEUE/GROUP, as the listing prints it"))?,
            ),
        };
        // With --blocked, pages are read until `limit` blocked groups are found or none are left.
        let mut shown: Vec<GroupSummary> = Vec::new();
        let more;
        loop {
            let page = queue.groups(
                self.queue.as_deref(),
                after.as_ref().map(|(q, g)| (q.as_str(), g.as_str())),
                self.limit,
            )?;
            let full = page.len() == self.limit as usize;
            after = page.last().map(|g| (g.queue.clone(), g.group.clone()));
            shown.extend(page.into_iter().filter(|g| !self.blocked || g.is_blocked(now)));
            if shown.len() >= self.limit as usize || !full {
                more = full || shown.len() > self.limit as usize;
                shown.truncate(self.limit as usize);
                break;
            }
        }
        if ctx.json() {
            for group in &shown {
                ctx.out.record(&group_json(group, now))?;
            }
            return Ok(());
        }
        if shown.is_empty() {
            let what = if self.blocked { "no blocked groups" } else { "no groups with live jobs" };
            return Ok(ctx.out.line(what)?);
        }
        let mut t = table(&["QUEUE", "GROUP", "HEAD", "HEAD STATE", "WAITING", "BLOCKED BECAUSE"]);
        for group in &shown {
            let head = group.head.map_or_else(|| "-".to_string(), |h| h.id.to_string());
            let state = group.head.map_or_else(|| "-".to_string(), |h| h.state.to_string());
            t.add_row(vec![
                output::sanitize(&group.queue),
                output::cell(Some(&group.group), 48),
                head,
                state,
                group.held.to_string(),
                reason(group.blocked(now), now),
            ]);
        }
        ctx.out.table(&t)?;
        let n = shown.len() as u64;
        let mut summary = format!("{n} {}", plural(n, "group", "groups"));
        if more {
            if let Some(last) = shown.last() {
                summary.push_str(&format!("; more may follow: --after {}/{}", last.queue, last.group));
            }
        }
        Ok(ctx.out.line(summary)?)
    }
}

/// Why a group waits, for people ("-" when it can go on).
pub(crate) fn reason(block: Option<GroupBlock>, now: i64) -> String {
    match block {
        None => "-".to_string(),
        Some(GroupBlock::Running) => "- (its head is running)".to_string(),
        Some(GroupBlock::HeadDueAt(at)) => format!("its head retries {}", when(Some(at), now)),
        Some(GroupBlock::HeadWaiting(until)) => format!("its head waits (parked) until {}", when(Some(until), now)),
        Some(GroupBlock::HeadUnknown) => "its head's outcome is unknown: `fenceq resolve`".to_string(),
        Some(GroupBlock::HeadExhausted) => "its head is exhausted: `fenceq ack` or `fenceq replay`".to_string(),
    }
}

fn group_json(group: &GroupSummary, now: i64) -> Value {
    let block = group.blocked(now);
    json!({
        "queue": group.queue,
        "group": group.group,
        "held": group.held,
        "head": group.head.map(|h| json!({
            "id": h.id.0,
            "state": h.state.as_str(),
            "run_at": h.run_at,
            "wait_until": h.wait_until,
            "acknowledged": h.acknowledged,
        })),
        "blocked": group.is_blocked(now),
        "reason": block.map(|b| match b {
            GroupBlock::Running => "running",
            GroupBlock::HeadDueAt(_) => "head_backing_off",
            GroupBlock::HeadWaiting(_) => "head_waiting",
            GroupBlock::HeadUnknown => "head_unknown",
            GroupBlock::HeadExhausted => "head_exhausted",
        }),
    })
}

/// A group policy on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PolicyArg {
    /// A failed head (unknown, or exhausted and not acknowledged) stops its group until a
    /// person decides (the default).
    Stop,
    /// A failed head no longer blocks: the group's next job may start.
    Continue,
}

impl From<PolicyArg> for GroupPolicy {
    fn from(arg: PolicyArg) -> GroupPolicy {
        match arg {
            PolicyArg::Stop => GroupPolicy::StopOnFailure,
            PolicyArg::Continue => GroupPolicy::ContinueAfterFailure,
        }
    }
}

/// Arguments of `group-policy`.
#[derive(Debug, Args)]
pub struct GroupPolicyArgs {
    /// The queue.
    #[arg(value_name = "QUEUE")]
    pub queue: String,

    /// The policy to set; without it, prints the queue's policy.
    #[arg(value_enum, value_name = "POLICY")]
    pub policy: Option<PolicyArg>,
}

impl GroupPolicyArgs {
    /// Prints or sets the queue's group policy.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let (queue, changed) = match self.policy {
            None => (ctx.open_read_only::<S>()?, false),
            Some(policy) => {
                let queue = ctx.open_existing::<S>()?;
                queue.set_group_policy(&self.queue, policy.into())?;
                (queue, true)
            }
        };
        let policy = queue.group_policy(&self.queue)?;
        if ctx.json() {
            return Ok(ctx.out.document(&json!({
                "queue": self.queue,
                "group_policy": policy.as_str(),
                "changed": changed,
            }))?);
        }
        let meaning = match policy {
            GroupPolicy::StopOnFailure => "a failed head (unknown, or exhausted and not acknowledged) stops its group",
            GroupPolicy::ContinueAfterFailure => "a failed head no longer blocks its group",
        };
        let verb = if changed { "is now" } else { "is" };
        Ok(ctx.out.line(format!(
            "queue {}'s group policy {verb} {}: {meaning}",
            output::sanitize(&self.queue),
            policy.as_str()
        ))?)
    }
}
