//! Groups: `groups` lists the groups with live jobs (what holds each, how many wait behind it,
//! and why a blocked one cannot go on); `group-policy` shows or sets what a failed head does
//! to its queue's groups.

use super::backup::BackupOpts;
use super::output::{self, table, when};
use super::store::CliStore;
use super::{fail, plural, ChangeOpts, CliResult, Context};
use clap::{Args, ValueEnum};
use fenceq::{GroupBlock, GroupPolicy, GroupSummary, Queue, MAX_BATCH};
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

    /// Start after this queue and group, to page on from the last one shown: QUEUE/GROUP as
    /// the listing's hint prints it.
    ///
    /// In each name, `%`, `/`, whitespace, control characters and the characters a shell reads
    /// (quotes, `$`, `*`, `;`, ...) are written %XX, the hex of their UTF-8 bytes (queue
    /// `tenant/a`, group `chat 1`: `--after tenant%2Fa/chat%201`), so that the one `/` left
    /// splits the two and the hint can be pasted into a shell as it is. A plain QUEUE/GROUP
    /// whose names hold no `/` or `%` is written as it is.
    #[arg(long, value_name = "QUEUE/GROUP", allow_hyphen_values = true)]
    pub after: Option<String>,
}

impl GroupsArgs {
    /// Prints the groups.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let queue = ctx.open_read_only::<S>()?;
        let now = queue.now_ms();
        let mut after = self.after.as_deref().map(parse_after).transpose()?;
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
                summary.push_str(&format!("; more may follow: --after {}", after_arg(&last.queue, &last.group)));
            }
        }
        Ok(ctx.out.line(summary)?)
    }
}

/// `--after`'s value for a queue and group, as the paging hint prints it: each name with
/// [`escape_after_part`], joined by the one unescaped `/`.
pub(crate) fn after_arg(queue: &str, group: &str) -> String {
    format!("{}/{}", escape_after_part(queue), escape_after_part(group))
}

/// What a name of `--after QUEUE/GROUP` keeps as it is: ASCII letters, digits and `-._:@,+=`.
/// Everything else (`%`, `/`, whitespace, control characters, quotes, the rest of what a shell
/// reads, and every byte of a non-ASCII character) is written `%XX`.
const AFTER_KEEPS: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b':')
    .remove(b'@')
    .remove(b',')
    .remove(b'+')
    .remove(b'=');

/// One name of `--after QUEUE/GROUP`, percent-encoded ([`AFTER_KEEPS`]). The result holds no
/// `/`, so the two names split unambiguously, and nothing a POSIX shell expands, splits or
/// quotes, so a person can paste the hint as it is.
fn escape_after_part(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, AFTER_KEEPS).to_string()
}

/// `--after QUEUE/GROUP`: split at its one unescaped `/`, each name's `%XX` decoded (a `%`
/// not followed by two hex digits stands for itself).
fn parse_after(text: &str) -> CliResult<(String, String)> {
    let Some((queue, group)) = text.split_once('/') else {
        return Err(fail("--after takes QUEUE/GROUP, as the listing prints it"));
    };
    let shown = output::sanitize(text);
    if group.contains('/') {
        return Err(fail(format!(
            "--after {shown} holds more than one `/`: write a `/` inside a queue or group name as %2F \
             (as the listing's hint does: `--after tenant%2Fa/chat:1`)"
        )));
    }
    let decode = |part: &str| percent_encoding::percent_decode_str(part).decode_utf8().map(|name| name.into_owned());
    match (decode(queue), decode(group)) {
        (Ok(queue), Ok(group)) => Ok((queue, group)),
        _ => Err(fail(format!("--after {shown}: its %XX escapes are not UTF-8 text (%2F is `/`, %20 a space)"))),
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

    #[command(flatten)]
    pub change: ChangeOpts,

    #[command(flatten)]
    pub backup: BackupOpts,
}

impl GroupPolicyArgs {
    /// Prints or sets the queue's group policy.
    pub fn run<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        let Some(policy) = self.policy else {
            if self.change.dry_run || self.change.expect.is_some() || self.backup.backup.is_some() {
                return Err(fail(
                    "--dry-run, --expect and --backup go with a POLICY to set \
                     (`fenceq group-policy QUEUE continue --dry-run`); without one the command only prints the policy",
                ));
            }
            let queue = ctx.open_read_only::<S>()?;
            let policy = queue.group_policy(&self.queue)?;
            if ctx.json() {
                return Ok(ctx.out.document(&json!({
                    "queue": self.queue,
                    "group_policy": policy.as_str(),
                    "changed": false,
                }))?);
            }
            let name = output::sanitize(&self.queue);
            return Ok(ctx.out.line(format!(
                "queue {name}'s group policy is {}: {}",
                policy.as_str(),
                meaning(policy)
            ))?);
        };
        self.set::<S>(ctx, policy.into())
    }

    /// Sets the policy (or previews it): `--expect` counts the jobs it hands on, one of each
    /// group that a failed head stops (`continue` lets them start; `stop` hands none on).
    fn set<S: CliStore>(&self, ctx: &mut Context, policy: GroupPolicy) -> CliResult<()> {
        let dry = self.change.dry_run;
        let queue = ctx.open_for_change::<S>(&self.change)?;
        let before = queue.group_policy(&self.queue)?;
        let handed_on = match policy {
            GroupPolicy::ContinueAfterFailure => stopped_groups(&queue, &self.queue)?,
            _ => Vec::new(),
        };
        let would_change = handed_on.len() as u64;
        let policy_changes = before != policy;
        self.change.check(would_change)?;
        if !dry {
            // The checks above have passed; nothing is changed before the backup.
            self.backup.take(ctx, false)?;
            if policy_changes || would_change > 0 {
                queue.set_group_policy(&self.queue, policy)?;
            }
        }
        let after = if dry { policy } else { queue.group_policy(&self.queue)? };
        if ctx.json() {
            return Ok(ctx.change_document(json!({
                "command": "group-policy",
                "dry_run": dry,
                "queue": self.queue,
                "group_policy": after.as_str(),
                "previous_policy": before.as_str(),
                "policy_changed": policy_changes && !dry,
                "handed_on": handed_on,
                "would_change": would_change,
                "changed": if dry { 0 } else { would_change },
            }))?);
        }
        let name = output::sanitize(&self.queue);
        let (to, was, means) = (policy.as_str(), before.as_str(), meaning(policy));
        let groups = group_list(&handed_on);
        let line = match (dry, policy_changes || would_change > 0) {
            (true, true) => {
                let hand = if groups.is_empty() {
                    String::new()
                } else {
                    format!("; would hand {groups}, whose next jobs may start")
                };
                let set = format!("would set queue {name}'s group policy to {to} (it is {was})");
                format!("dry run: {set}: {means}{hand}; nothing was changed")
            }
            (false, true) => {
                let verb = if policy_changes { "is now" } else { "is" };
                let hand = if groups.is_empty() { String::new() } else { format!("; handed {groups}") };
                format!("queue {name}'s group policy {verb} {to}: {means}{hand}")
            }
            (dry, false) => {
                let prefix = if dry { "dry run: " } else { "" };
                format!("{prefix}queue {name}'s group policy is {to} already: {means}; nothing changed")
            }
        };
        Ok(ctx.out.line(line)?)
    }
}

/// What a policy does, for people.
fn meaning(policy: GroupPolicy) -> &'static str {
    match policy {
        GroupPolicy::StopOnFailure => "a failed head (unknown, or exhausted and not acknowledged) stops its group",
        GroupPolicy::ContinueAfterFailure => "a failed head no longer blocks its group",
    }
}

/// The groups of `name` that a failed head stops (unknown, or exhausted and not
/// acknowledged, with jobs held behind it): what `continue` hands on, one job of each.
fn stopped_groups<S: CliStore>(queue: &Queue<S>, name: &str) -> CliResult<Vec<String>> {
    let now = queue.now_ms();
    let mut stopped = Vec::new();
    let mut after: Option<(String, String)> = None;
    loop {
        let page = queue.groups(Some(name), after.as_ref().map(|(q, g)| (q.as_str(), g.as_str())), MAX_BATCH)?;
        let full = page.len() == MAX_BATCH as usize;
        after = page.last().map(|g| (g.queue.clone(), g.group.clone()));
        let failed =
            |g: &GroupSummary| matches!(g.blocked(now), Some(GroupBlock::HeadUnknown | GroupBlock::HeadExhausted));
        stopped.extend(page.iter().filter(|g| failed(g)).map(|g| g.group.clone()));
        if !full {
            return Ok(stopped);
        }
    }
}

/// `2 groups on (chat:1, chat:2)`, the first 10 names escaped, or nothing for none.
fn group_list(groups: &[String]) -> String {
    if groups.is_empty() {
        return String::new();
    }
    let n = groups.len() as u64;
    let shown: Vec<String> = groups.iter().take(10).map(|g| output::one_line(g, 48)).collect();
    let more = if groups.len() > 10 { format!(" and {} more", groups.len() - 10) } else { String::new() };
    format!("{n} {} on ({}{more})", plural(n, "group", "groups"), shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_hints_escape_what_would_split_or_reach_a_shell_and_read_back() {
        assert_eq!(after_arg("tenant/a", "g1"), "tenant%2Fa/g1");
        assert_eq!(after_arg("q", "chat:1"), "q/chat:1");
        assert_eq!(after_arg("q 100%", "a/b c\nd"), "q%20100%25/a%2Fb%20c%0Ad");
        assert_eq!(after_arg("-x", "it's $(x)"), "-x/it%27s%20%24%28x%29");
        assert_eq!(after_arg("чат", "~\u{1b}"), "%D1%87%D0%B0%D1%82/%7E%1B");
        assert_eq!(after_arg("q", "\u{a0}\u{202e}"), "q/%C2%A0%E2%80%AE");
        for (queue, group) in
            [("tenant/a", "g1"), ("tenant", "a/g1"), ("q 100%", "%2F"), ("a", "tab\there ✓ \"x\" \\ `y` ;&|*?#!")]
        {
            assert_eq!(parse_after(&after_arg(queue, group)).unwrap(), (queue.to_string(), group.to_string()));
        }
        // A plain QUEUE/GROUP reads as it is; lower-case hex too.
        assert_eq!(parse_after("q/chat:1").unwrap(), ("q".to_string(), "chat:1".to_string()));
        assert_eq!(parse_after("a%2fb/c").unwrap(), ("a/b".to_string(), "c".to_string()));
        // A `%` that starts no escape stands for itself.
        assert_eq!(parse_after("q/50%").unwrap(), ("q".to_string(), "50%".to_string()));
        for bad in ["no-slash", "tenant/a/g1", "q/%FF", "%C3/g"] {
            assert!(parse_after(bad).is_err(), "{bad}");
        }
    }
}
