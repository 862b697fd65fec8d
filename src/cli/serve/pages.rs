//! The pages, as maud templates: compiled into the binary, and every `(value)` spliced into
//! them HTML-escaped. Nothing here wraps a text from the database (names, keys, payloads,
//! errors, notes) in `PreEscaped`, so none of it can become markup: a payload of
//! `<script>…</script>` is shown as those characters. The pages carry no JavaScript at all:
//! the overview and a queue's page reload themselves, when their query asks, by the
//! browser's own `<meta http-equiv="refresh">` (see [`Refresh`]).

use super::form::encode;
use super::problem::{cut, Problem};
use crate::cli::inspect::Record;
use crate::cli::output::{human_duration, relative, timestamp, PayloadView};
use fenceq::{
    ClaimToken, GroupSummary, Job, JobId, JobState, Limits, PausedQueue, QueueBackoff, QueueStats, ScheduleRecord,
    Stats,
};
use maud::{html, Markup, DOCTYPE};

/// Rows per page of a listing.
pub const PAGE_ROWS: u32 = 50;
/// Payload bytes a job's page shows with "show all".
pub const FULL_PAYLOAD_LIMIT: usize = 1024 * 1024;

/// The content type of every page.
pub const HTML: &str = "text/html; charset=utf-8";

/// The one stylesheet (served at /style.css: the pages' policy allows no inline style).
pub const CSS: &str = "\
:root{--fg:#1d2433;--muted:#5f6b7a;--line:#d9dee6;--bg:#f6f7f9;--accent:#2456a6;--warn:#a15c00;--bad:#b3261e;--ok:#1f7a3d}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;gap:1.5em;align-items:center;padding:.6em 1.2em;background:#1d2433;color:#fff;flex-wrap:wrap}
header a{color:#dfe7f5;text-decoration:none}header a:hover{text-decoration:underline}
header .brand{font-weight:700;font-size:1.1em;color:#fff}
header .db{color:#aab4c3;font-family:ui-monospace,monospace;font-size:.9em}
header .who{margin-left:auto;color:#aab4c3}
header form{display:inline;margin:0}
main{padding:1em 1.2em;max-width:1400px}
h1{font-size:1.35em;margin:.2em 0 .6em}h2{font-size:1.1em;margin:1.4em 0 .5em}
table{border-collapse:collapse;background:#fff;border:1px solid var(--line);width:100%}
th,td{padding:.35em .6em;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600;white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
td.zero{color:#b5bcc6}th.pause,td.pause{min-width:18em}
a{color:var(--accent)}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.92em}
pre{background:#fff;border:1px solid var(--line);padding:.7em;white-space:pre-wrap;word-break:break-all;max-height:40em;overflow:auto}
.badge{display:inline-block;padding:0 .45em;border-radius:3px;font-size:.85em;font-weight:600;background:#e4e8ee}
.s-pending{background:#e3ecfa}.s-running{background:#dff3e6}.s-waiting{background:#efe6fa}
.s-completed{background:#e4e8ee}.s-exhausted{background:#fbe3e1;color:var(--bad)}.s-unknown{background:#fdf0d9;color:var(--warn)}
.s-cancelled{background:#eceff3;color:var(--muted)}.paused,.overdue{background:#fdf0d9;color:var(--warn)}
.chart{display:block;background:#fff;border:1px solid var(--line);margin-bottom:.3em}.chart rect{fill:var(--ok)}
.attention{background:#fff8ec;border:1px solid #f0d9ae;padding:.6em .8em;margin-bottom:1em}
.notice{padding:.8em 1em;border:1px solid var(--line);background:#fff;margin-bottom:1em}
.notice.ok{border-color:#a9d8b8;background:#f0faf3}.notice.bad{border-color:#efb8b3;background:#fdf2f1}
.muted{color:var(--muted)}
.tabs{display:flex;gap:.3em;flex-wrap:wrap;margin-bottom:.8em}
.tabs a{padding:.25em .7em;border:1px solid var(--line);border-radius:3px;background:#fff;text-decoration:none}
.tabs a.on{background:var(--accent);color:#fff;border-color:var(--accent)}
form.act{display:flex;gap:.4em;align-items:center;flex-wrap:wrap;margin:.3em 0}
form.act input[type=text]{padding:.25em .4em;border:1px solid var(--line);border-radius:3px;min-width:14em}
button{padding:.3em .8em;border:1px solid var(--accent);background:var(--accent);color:#fff;border-radius:3px;cursor:pointer;font:inherit}
button.danger{background:var(--bad);border-color:var(--bad)}button.plain{background:#fff;color:var(--accent)}
.box{background:#fff;border:1px solid var(--line);padding:.8em 1em;margin:.6em 0}
.box p{margin:.2em 0 .5em}
dl.fields{display:grid;grid-template-columns:max-content 1fr;gap:.25em 1.2em;background:#fff;border:1px solid var(--line);padding:.8em 1em;margin:0}
dl.fields dt{color:var(--muted)}dl.fields dd{margin:0;word-break:break-all}
";

/// The shortest interval a page may ask to reload itself at (`refresh=N`, seconds).
pub const REFRESH_MIN: u32 = 2;
/// The longest.
pub const REFRESH_MAX: u32 = 300;
/// The intervals the pages' links offer.
const REFRESH_OFFERED: [u32; 2] = [5, 30];

/// How a page that may reload itself (the overview, a queue's page) does: every `every`
/// seconds when its query says `refresh=N`, by a `<meta http-equiv="refresh">` the browser
/// honours without a script; and its address without that parameter, from which the links
/// that turn it on and off are made (they keep the page's other parameters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refresh {
    /// Seconds between reloads, when the page reloads itself.
    pub every: Option<u32>,
    /// The page's path and query without `refresh`.
    pub base: String,
}

impl Refresh {
    /// The page's refresh as its `path` and decoded `query` ask.
    ///
    /// # Errors
    ///
    /// `refresh` is not a whole number of seconds from [`REFRESH_MIN`] to [`REFRESH_MAX`] (an
    /// empty value asks for nothing).
    pub fn of(path: &str, query: &[(String, String)]) -> Result<Refresh, Problem> {
        let asked = query.iter().find(|(n, _)| n == "refresh").map(|(_, v)| v.as_str()).filter(|v| !v.is_empty());
        let every = match asked {
            None => None,
            Some(text) => match text.parse::<u32>() {
                Ok(n) if (REFRESH_MIN..=REFRESH_MAX).contains(&n) => Some(n),
                _ => {
                    return Err(Problem::bad(format!(
                        "refresh={:?}: refresh is the seconds between the page's reloads, a whole number from \
                         {REFRESH_MIN} to {REFRESH_MAX} (refresh=5); leave it out for a page that stays",
                        cut(text, 20)
                    )))
                }
            },
        };
        let kept: Vec<String> =
            query.iter().filter(|(n, _)| n != "refresh").map(|(n, v)| format!("{}={}", encode(n), encode(v))).collect();
        let base = if kept.is_empty() { path.to_string() } else { format!("{path}?{}", kept.join("&")) };
        Ok(Refresh { every, base })
    }

    /// The page's address, reloading itself every `every` seconds.
    pub fn url(&self, every: u32) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}refresh={every}", self.base)
    }

    /// What a link to the other page that may reload itself adds to its query, so that it
    /// reloads itself too: `&refresh=N`, or nothing.
    pub fn carry(&self) -> String {
        self.every.map_or_else(String::new, |n| format!("&refresh={n}"))
    }
}

/// What every page needs to know about the server and its caller.
pub struct Page<'a> {
    /// The database as people may see it.
    pub db: &'a str,
    /// The CSRF secret for the forms.
    pub csrf: &'a str,
    /// No actions.
    pub read_only: bool,
    /// The signed-in token's name (`token` for an unnamed one).
    pub signed_in: Option<&'a str>,
    /// Forms ask for the operator's name (no named token says it).
    pub ask_name: bool,
    /// The name recorded when the form leaves it empty.
    pub default_by: &'a str,
    /// The page's refresh: `None` on a page that never reloads itself (a job's, the
    /// listings', whose purpose is their forms).
    pub refresh: Option<Refresh>,
}

impl Page<'_> {
    /// Seconds between the page's reloads, when it reloads itself.
    fn refreshing(&self) -> Option<u32> {
        self.refresh.as_ref().and_then(|r| r.every)
    }

    /// What links to the pages that may reload themselves add to their query: `&refresh=N`
    /// on a page that reloads itself.
    fn carry(&self) -> String {
        self.refresh.as_ref().map(Refresh::carry).unwrap_or_default()
    }
}

/// A change the dashboard offers, each at its own POST path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Acknowledge an exhaustion.
    Acknowledge,
    /// Send an exhausted job back to pending.
    Replay,
    /// Cancel a pending, waiting or running job.
    Cancel,
    /// Settle an unknown outcome.
    Resolve,
    /// Pause a queue.
    Pause,
    /// Unpause a queue.
    Unpause,
}

impl Action {
    const ALL: [Action; 6] =
        [Action::Acknowledge, Action::Replay, Action::Cancel, Action::Resolve, Action::Pause, Action::Unpause];

    /// The action a POST path names.
    pub fn from_path(path: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.path() == path)
    }

    /// Its POST path.
    pub fn path(self) -> &'static str {
        match self {
            Action::Acknowledge => "/act/acknowledge",
            Action::Replay => "/act/replay",
            Action::Cancel => "/act/cancel",
            Action::Resolve => "/act/resolve",
            Action::Pause => "/act/pause",
            Action::Unpause => "/act/unpause",
        }
    }
}

/// Which records a listing page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// Exhaustions awaiting acknowledgement.
    Exhausted,
    /// Unknown outcomes awaiting a decision.
    Unknown,
}

/// How old the counts a page shows are, and whether the latest count failed.
pub struct CountsAge<'a> {
    /// The queue's clock when they were read.
    pub taken_at: i64,
    /// How long reading them took.
    pub took: std::time::Duration,
    /// The failure of a later count, while none succeeded since.
    pub failure: Option<&'a str>,
}

/// `counts as of 3s ago (read in 2ms)`, with the exact instant on hover.
fn counts_age(age: &CountsAge<'_>, now: i64) -> Markup {
    html! {
        p.muted.age {
            "Counts as of " span title=(timestamp(age.taken_at)) { (relative(age.taken_at, now)) }
            " (read in " (count_time(age.took)) "; read again every few seconds, \
            more seldom on a large queue)."
            @if let Some(failure) = age.failure { " The latest count failed: " (failure) "." }
        }
    }
}

/// A count's duration: `850ms`, `3.2s`, `2m 5s`.
fn count_time(took: std::time::Duration) -> String {
    match took.as_millis() {
        ms @ 0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", took.as_secs_f64()),
        ms => human_duration(u64::try_from(ms).unwrap_or(u64::MAX)),
    }
}

/// A queue's page: its counts, the state chosen and one page of its jobs.
pub struct QueueView<'a> {
    /// The queue's counts and pause.
    pub counts: &'a QueueStats,
    /// How old the counts are.
    pub age: CountsAge<'a>,
    /// The queue's limits (`fenceq limit show`).
    pub limits: &'a Limits,
    /// Its blocked groups (`fenceq groups --blocked`), the first few.
    pub blocked: &'a [GroupSummary],
    /// More blocked groups may follow those.
    pub blocked_more: bool,
    /// The state chosen (all when `None`).
    pub state: Option<JobState>,
    /// The page of jobs.
    pub jobs: &'a [Job],
    /// A full page: more may follow.
    pub more: bool,
    /// The queue's now.
    pub now: i64,
}

/// What an action did.
pub struct Done {
    /// `Job 5 acknowledged`.
    pub title: String,
    /// What follows from it.
    pub effect: String,
    /// The job it changed.
    pub job: Option<JobId>,
    /// Its queue.
    pub queue: String,
}

/// The job's state as a form carries it: `exhausted-acked` apart from `exhausted`, since an
/// acknowledgement changes what may be done.
pub fn state_key(job: &Job) -> &'static str {
    match (job.state, job.acknowledged_at) {
        (JobState::Exhausted, Some(_)) => "exhausted-acked",
        (state, _) => state.as_str(),
    }
}

/// A `state_key` for people.
pub fn state_words(key: &str) -> String {
    match key {
        "exhausted-acked" => "exhausted (acknowledged)".to_string(),
        other => cut(other, 40),
    }
}

/// The state with its acknowledgement, for people.
pub fn state_label(job: &Job) -> String {
    state_words(state_key(job))
}

/// `backs off 30s more: 429 from the provider`.
pub fn backoff_words(backoff: &QueueBackoff, now: i64) -> String {
    format!(
        "backs off {} more: {}",
        human_duration(backoff.until.saturating_sub(now).max(0).unsigned_abs()),
        backoff.reason
    )
}

/// `paused 5m ago by alice: deploy`.
pub fn pause_words(pause: &PausedQueue, now: i64) -> String {
    let mut text =
        format!("paused {} by {}", relative(pause.since, now), pause.by.as_deref().unwrap_or("an unnamed caller"));
    if let Some(note) = &pause.note {
        text.push_str(&format!(": {note}"));
    }
    text
}

fn layout(page: &Page<'_>, title: &str, body: Markup) -> Markup {
    let overview = page.refreshing().map_or_else(|| "/".to_string(), |n| format!("/?refresh={n}"));
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(n) = page.refreshing() { meta http-equiv="refresh" content=(n); }
                title { (title) " · fenceq" }
                link rel="stylesheet" href="/style.css";
            }
            body {
                header {
                    a.brand href=(overview) { "fenceq" }
                    a href=(overview) { "Overview" }
                    a href="/exhausted" { "Exhausted" }
                    a href="/unknown" { "Unknown" }
                    a href="/paused" { "Paused" }
                    a href="/schedules" { "Schedules" }
                    a href="/metrics" { "Metrics" }
                    span.db title="database" { (page.db) }
                    @if page.read_only { span.badge { "read-only" } }
                    span.who {
                        @if let Some(name) = page.signed_in {
                            "signed in: " (name) " "
                            form method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(page.csrf);
                                button.plain type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

fn badge(job: &Job) -> Markup {
    html! { span class={ "badge s-" (job.state.as_str()) } { (state_label(job)) } }
}

/// A time: relative to now, the exact instant on hover.
fn at(ms: i64, now: i64) -> Markup {
    html! { span title=(timestamp(ms)) { (relative(ms, now)) } }
}

fn count(n: u64, href: Option<String>) -> Markup {
    html! {
        @if n == 0 { td.num.zero { "0" } }
        @else if let Some(href) = href { td.num { a href=(href) { (n) } } }
        @else { td.num { (n) } }
    }
}

/// The links that make the page reload itself, or stop: `Refresh: every 5 s · every 30 s`
/// (with `note` after them), or `Refreshing every 5 s. Stop refreshing`.
fn refresh_control(refresh: &Refresh, note: &str) -> Markup {
    html! {
        p.refresh {
            @match refresh.every {
                None => {
                    "Refresh: "
                    @for (i, n) in REFRESH_OFFERED.iter().enumerate() {
                        @if i > 0 { " · " }
                        a href=(refresh.url(*n)) { "every " (n) " s" }
                    }
                    span.muted { " (" (note) ")" }
                }
                Some(n) => {
                    "Refreshing every " (n) " s. " a.stop href=(refresh.base) { "Stop refreshing" }
                }
            }
        }
    }
}

/// An action's form: the CSRF secret, where to come back to, the expected state in hidden
/// fields, the name (unless a named token says it) and the note.
fn action_form(
    page: &Page<'_>,
    action: Action,
    hidden: &[(&str, String)],
    back: &str,
    extra: Markup,
    button: &str,
    danger: bool,
) -> Markup {
    html! {
        form.act method="post" action=(action.path()) {
            input type="hidden" name="csrf" value=(page.csrf);
            input type="hidden" name="back" value=(back);
            @for (name, value) in hidden { input type="hidden" name=(name) value=(value); }
            (extra)
            @if page.ask_name {
                input type="text" name="by" placeholder=(format!("your name (default {})", page.default_by))
                    aria-label="operator name" maxlength="128";
            }
            input type="text" name="note" placeholder="note: why" aria-label="note" maxlength="4096";
            button class=[danger.then_some("danger")] type="submit" { (button) }
        }
    }
}

/// The hidden fields that say what state the page showed the job in.
fn expect_job(id: JobId, state: &str, attempt: u32, claim: Option<String>) -> Vec<(&'static str, String)> {
    vec![
        ("id", id.to_string()),
        ("state", state.to_string()),
        ("attempt", attempt.to_string()),
        ("claim", claim.unwrap_or_default()),
    ]
}

fn expect_token(token: &ClaimToken, state: &str) -> Vec<(&'static str, String)> {
    expect_job(token.id, state, token.attempt, Some(token.claim_id.to_string()))
}

fn resolve_choice() -> Markup {
    html! {
        select name="outcome" aria-label="outcome" {
            option value="" { "decide…" }
            option value="complete" { "complete: it happened" }
            option value="retry" { "retry: run it again" }
            option value="exhaust" { "exhaust: give up" }
        }
    }
}

/// An error page.
pub fn problem(page: &Page<'_>, problem: &Problem) -> Markup {
    let body = html! {
        h1 { (problem.title) }
        div.notice.bad { p { (problem.message) } }
        p { a href="/" { "Back to the overview" } }
    };
    layout(page, problem.title, body)
}

/// The sign-in page.
pub fn login(page: &Page<'_>, open: bool, error: Option<&str>) -> Markup {
    let body = html! {
        h1 { "Sign in" }
        @if open {
            p { "This server asks for no token. " a href="/" { "Go to the overview" } }
        } @else {
            @if let Some(error) = error { div.notice.bad { (error) } }
            form.act method="post" action="/login" {
                input type="hidden" name="csrf" value=(page.csrf);
                input type="password" name="token" placeholder="access token" aria-label="access token"
                    autocomplete="current-password" autofocus;
                button type="submit" { "Sign in" }
            }
            p.muted { "Tokens are in the server's --token-file." }
        }
    };
    layout(page, "Sign in", body)
}

/// The overview: every queue's counts, oldest due age and pause.
pub fn overview(page: &Page<'_>, stats: &Stats, per_minute: &[(i64, u64)], age: &CountsAge<'_>, now: i64) -> Markup {
    let unacked: u64 = stats.queues.iter().map(|q| q.exhausted_unacknowledged).sum();
    let unknown: u64 = stats.queues.iter().map(|q| q.unknown).sum();
    let expired: u64 = stats.queues.iter().map(|q| q.expired_leases).sum();
    let paused = stats.queues.iter().filter(|q| q.paused.is_some()).count();
    let carry = page.carry();
    let qs = |q: &QueueStats, state: &str| Some(format!("/queue?name={}&state={state}{carry}", encode(&q.queue)));
    let body = html! {
        h1 { "Queues" }
        @if let Some(refresh) = &page.refresh { (refresh_control(refresh, "the browser reloads the page, no script")) }
        (counts_age(age, now))
        (completions_chart(per_minute))
        @if unacked + unknown + expired > 0 || paused > 0 {
            div.attention {
                strong { "Needs attention: " }
                @if unacked > 0 { a href="/exhausted" { (unacked) " exhaustions awaiting acknowledgement" } ". " }
                @if unknown > 0 { a href="/unknown" { (unknown) " unknown outcomes awaiting a decision" } ". " }
                @if expired > 0 { (expired) " running jobs with an expired lease (the reaper returns them). " }
                @if paused > 0 { (paused) " paused queues." }
            }
        }
        @if stats.queues.is_empty() {
            p.muted { "No jobs, no paused queue." }
        } @else {
            table {
                thead { tr {
                    th { "Queue" }
                    th.num { "Pending" } th { "Oldest due" } th.num { "Running" }
                    th.num title="running jobs whose lease has expired" { "Expired" }
                    th.num { "Waiting" } th.num { "Completed" }
                    th.num title="exhaustions awaiting acknowledgement" { "Exhausted" }
                    th.num title="acknowledged exhaustions" { "Acked" }
                    th.num title="unknown outcomes awaiting a decision" { "Unknown" }
                    th.num { "Cancelled" } th.num { "Total" }
                    th.pause { "Paused" }
                } }
                tbody {
                    @for q in &stats.queues {
                        tr {
                            td { a href=(format!("/queue?name={}{carry}", encode(&q.queue))) { (q.queue) } }
                            (count(q.pending, qs(q, "pending")))
                            td { @match q.oldest_due_age_ms(now) {
                                Some(age) => { (human_duration(age)) }
                                None => { span.muted { "-" } }
                            } }
                            (count(q.running, qs(q, "running")))
                            (count(q.expired_leases, None))
                            (count(q.waiting, qs(q, "waiting")))
                            (count(q.completed, qs(q, "completed")))
                            (count(q.exhausted_unacknowledged, Some(format!("/exhausted?queue={}", encode(&q.queue)))))
                            (count(q.exhausted_acknowledged, None))
                            (count(q.unknown, Some(format!("/unknown?queue={}", encode(&q.queue)))))
                            (count(q.cancelled, qs(q, "cancelled")))
                            td.num { (q.total()) }
                            td.pause {
                                @if let Some(p) = &q.paused { span.badge.paused { (pause_words(p, now)) } }
                                @if let Some(b) = &q.backoff { " " span.badge.paused { (backoff_words(b, now)) } }
                            }
                        }
                    }
                }
            }
        }
    };
    layout(page, "Overview", body)
}

/// Paused queues: who paused each, when and why, with its unpause.
pub fn paused(page: &Page<'_>, paused: &[PausedQueue], now: i64) -> Markup {
    let body = html! {
        h1 { "Paused queues" }
        @if paused.is_empty() {
            p.muted { "No queue is paused: claims of every queue proceed." }
        } @else {
            p.muted { "Claims of a paused queue find nothing, in every process; enqueues still land." }
            table {
                thead { tr { th { "Queue" } th { "Paused" } th { "By" } th { "Why" } th {} } }
                tbody { @for p in paused { tr {
                    td { a href=(format!("/queue?name={}", encode(&p.queue))) { (p.queue) } }
                    td { (at(p.since, now)) }
                    td { (p.by.as_deref().unwrap_or("an unnamed caller")) }
                    td { (p.note.as_deref().unwrap_or_default()) }
                    td { @if !page.read_only {
                        (action_form(page, Action::Unpause, &[("queue", p.queue.clone()), ("since", p.since.to_string())],
                            "/paused", html! {}, "Unpause", false))
                    } }
                } } }
            }
        }
    };
    layout(page, "Paused queues", body)
}

/// Periodic jobs as the database records them (read-only: a schedule is changed by the
/// application that registers it, not here): what each is, where its ticks go, its latest
/// and next tick, and whether the next one is overdue (no process runs its scheduler).
pub fn schedules(page: &Page<'_>, schedules: &[ScheduleRecord], now: i64) -> Markup {
    let body = html! {
        h1 { "Schedules" }
        @if schedules.is_empty() {
            p.muted { "No schedule is recorded: no process has registered a periodic job on this database." }
        } @else {
            p.muted { "Registered by the application's processes (Queue::schedule); each records what its schedule is and when it next ticks. An overdue next tick means no process with the schedule registered has run its scheduler since it came due." }
            table {
                thead { tr { th { "Name" } th { "Schedule" } th { "Queue" } th { "Last tick" } th { "Next tick" } th { "Recorded" } } }
                tbody { @for s in schedules { tr {
                    td { (s.name) }
                    td { @match &s.definition { Some(d) => { code { (d) } } None => { span.muted { "recorded by an older build" } } } }
                    td { @match &s.queue {
                        Some(q) => { a href=(format!("/queue?name={}", encode(q))) { (q) } }
                        None => { span.muted { "-" } }
                    } }
                    td { @match s.last_tick { Some(t) => { (at(t, now)) } None => { span.muted { "none yet" } } } }
                    td {
                        @match (s.next_tick, &s.definition) {
                            (Some(t), _) => {
                                (at(t, now))
                                @if crate::cli::schedules::is_overdue(s, now) { " " span.badge.overdue { "overdue" } }
                            }
                            (None, Some(_)) => { "never" }
                            (None, None) => { span.muted { "-" } }
                        }
                    }
                    td { @match s.recorded_at { Some(t) => { (at(t, now)) } None => { span.muted { "-" } } } }
                } } }
            }
        }
    };
    layout(page, "Schedules", body)
}

/// Height of the completions chart's plot, in SVG units (a bar at the busiest minute).
const CHART_HEIGHT: u64 = 60;
/// Width of one minute's slot in the chart (its bar is one unit narrower).
const CHART_SLOT: usize = 6;

/// Completions per minute as an inline SVG bar chart, one bar a minute, oldest on the left,
/// scaled to the busiest minute (a minute with any completion gets at least one unit). Drawn
/// on the server: the pages run no script. Each bar carries its count (`data-count`, and a
/// `title` a browser shows on hover).
fn completions_chart(per_minute: &[(i64, u64)]) -> Markup {
    let total: u64 = per_minute.iter().map(|m| m.1).sum();
    let busiest = per_minute.iter().map(|m| m.1).max().unwrap_or(0);
    let width = per_minute.len() * CHART_SLOT;
    let height = |n: u64| if n == 0 { 0 } else { (n * CHART_HEIGHT).div_ceil(busiest).max(1) };
    html! {
        h2 { "Completions per minute, last " (per_minute.len()) " minutes" }
        svg.chart xmlns="http://www.w3.org/2000/svg" role="img" width=(width) height=(CHART_HEIGHT)
            viewBox=(format!("0 0 {width} {CHART_HEIGHT}"))
            aria-label=(format!("{total} jobs completed in the last {} minutes", per_minute.len())) {
            @for (i, (minute, n)) in per_minute.iter().enumerate() {
                rect x=(i * CHART_SLOT) y=(CHART_HEIGHT - height(*n)) width=(CHART_SLOT - 1) height=(height(*n))
                    data-minute=(minute) data-count=(n) {
                    title { (timestamp(*minute)) ": " (n) " completed" }
                }
            }
        }
        p.muted { (total) " completed in the last " (per_minute.len()) " minutes; at most " (busiest) " in one minute." }
    }
}

/// A queue: its pause, its counts as tabs, one page of its jobs.
pub fn queue(page: &Page<'_>, view: &QueueView<'_>) -> Markup {
    let q = view.counts;
    let name = encode(&q.queue);
    let state_param = view.state.map_or("", |s| s.as_str());
    let back = format!("/queue?name={name}&state={state_param}");
    let carry = page.carry();
    // A page that reloads itself offers no form: a reload would lose what is typed in it.
    let stop = page.refresh.as_ref().filter(|r| r.every.is_some()).map(|r| r.base.as_str());
    let no_form = |stop: &str| {
        html! {
            p.muted.refreshing { a href=(stop) { "Stop refreshing" } " to pause or unpause it: a page that reloads \
                itself offers no form, since a reload would lose what is typed in it." }
        }
    };
    let tabs: [(Option<JobState>, u64); 8] = [
        (None, q.total()),
        (Some(JobState::Pending), q.pending),
        (Some(JobState::Running), q.running),
        (Some(JobState::Waiting), q.waiting),
        (Some(JobState::Completed), q.completed),
        (Some(JobState::Exhausted), q.exhausted_unacknowledged + q.exhausted_acknowledged),
        (Some(JobState::Unknown), q.unknown),
        (Some(JobState::Cancelled), q.cancelled),
    ];
    let body = html! {
        h1 { "Queue " span.mono { (q.queue) } }
        @if let Some(refresh) = &page.refresh {
            (refresh_control(refresh, if page.read_only {
                "the browser reloads the page, no script"
            } else {
                "the browser reloads the page, no script; meanwhile it offers no pause form"
            }))
        }
        div.box {
            @if let Some(b) = &q.backoff {
                p { span.badge.paused { "backing off" } " " (backoff_words(b, view.now))
                    ". Claims of it find nothing until then (fenceq backoff clear lifts it)." }
            }
            @if let Some(p) = &q.paused {
                p { span.badge.paused { "paused" } " " (pause_words(p, view.now)) ". Claims of it find nothing; enqueues still land." }
                @if !page.read_only {
                    p.muted { "Unpausing makes its " (q.pending) " pending jobs claimable again." }
                    @if let Some(stop) = stop { (no_form(stop)) } @else {
                        (action_form(page, Action::Unpause, &[("queue", q.queue.clone()), ("since", p.since.to_string())],
                            &back, html! {}, "Unpause", false))
                    }
                }
            } @else {
                p { "Running: claims of it proceed. "
                    @if let Some(age) = q.oldest_due_age_ms(view.now) { "Oldest due job waiting " (human_duration(age)) "." } }
                @if !page.read_only {
                    p.muted { "Pausing holds its " (q.pending) " pending jobs in every process until it is unpaused; running attempts finish." }
                    @if let Some(stop) = stop { (no_form(stop)) } @else {
                        (action_form(page, Action::Pause, &[("queue", q.queue.clone()), ("since", String::new())],
                            &back, html! {}, "Pause", true))
                    }
                }
            }
        }
        (flow(view))
        (counts_age(&view.age, view.now))
        div.tabs {
            @for (state, n) in tabs {
                a class=[(state == view.state).then_some("on")]
                    href=(format!("/queue?name={name}&state={}{carry}", state.map_or("", |s| s.as_str()))) {
                    (state.map_or("all", |s| s.as_str())) " (" (n) ")"
                }
            }
        }
        @if view.jobs.is_empty() {
            p.muted { "No jobs here." }
        } @else {
            table {
                thead { tr {
                    th.num { "ID" } th { "Key" } th { "State" } th.num { "Attempt" } th.num { "Priority" }
                    th { "Run at" } th { "Last error" } th { "Payload" }
                } }
                tbody { @for job in view.jobs { tr {
                    td.num { a href=(format!("/job?id={}", job.id)) { (job.id) } }
                    td.mono { (job.key.as_deref().map(|k| cut(k, 32)).unwrap_or_default()) }
                    td { (badge(job)) }
                    td.num { (job.attempt) "/" (job.max_attempts) }
                    td.num { (job.priority) }
                    td { (at(job.run_at, view.now)) }
                    td { (job.last_error.as_deref().map(|e| cut(e, 60)).unwrap_or_default()) }
                    td.mono { (preview(&job.payload)) }
                } } }
            }
            @if view.more {
                @let last = view.jobs.last().map_or(0, |j| j.id.0);
                p { a href=(format!("{back}&after={last}{carry}")) { "Next " (PAGE_ROWS) " →" } }
            }
        }
    };
    layout(page, &format!("Queue {}", q.queue), body)
}

/// A queue's flow control: its limits, the jobs they hold back (from the counts) and the
/// groups that cannot go on, and why.
fn flow(view: &QueueView<'_>) -> Markup {
    let limits = view.limits;
    let now = view.now;
    let throttled = view.counts.throttled;
    html! {
        h2 { "Flow control" }
        div.box.flow {
            @if limits.is_empty() {
                p.limits { "No limits: claims of it are held back by nothing but pauses, back-offs and groups "
                    span.muted { "(fenceq limit set sets some)" } "." }
            } @else {
                dl.fields.limits {
                    dt { "rate" } dd { @match limits.rate { Some(rate) => { "at most " (rate) " claims" } None => { span.muted { "-" } } } }
                    dt { "group rates" } dd {
                        @if limits.group_rates.is_empty() { span.muted { "-" } }
                        @for (i, rate) in limits.group_rates.iter().enumerate() {
                            @if i > 0 { "; " } "at most " (rate) " claims of one group"
                        }
                    }
                    dt { "concurrency" } dd { @match limits.max_running { Some(n) => { "at most " (n) " running, across every process" } None => { span.muted { "-" } } } }
                }
            }
            @match throttled {
                Some(t) => {
                    @if t.due > 0 {
                        p.throttled { span.badge.paused { "throttled" } " " (t.due) " due jobs held back "
                            @match t.opens_at {
                                Some(at) => { "by the queue's rate until " (at_text(at, now)) "." }
                                None => { "by its running limit: they go as running attempts settle." }
                            }
                        }
                    }
                    @if t.group_heads > 0 {
                        p.throttled { span.badge.paused { "throttled" } " " (t.group_heads) " group heads wait for their group's rate"
                            @if let Some(at) = t.group_heads_open_at { ", the first due again " (at_text(at, now)) }
                            "." }
                    }
                    p.muted { "(Held back as of the counts below.)" }
                }
                None => { @if !limits.is_empty() { p.muted { "No job was held back by a limit as of the counts below." } } }
            }
        }
        h3 { "Blocked groups" }
        @if view.blocked.is_empty() {
            p.muted.blocked { "No group of this queue is blocked." }
        } @else {
            table.blocked {
                thead { tr { th { "Group" } th.num { "Head" } th { "Head state" } th.num { "Waiting behind" } th { "Blocked because" } } }
                tbody { @for g in view.blocked { tr {
                    td.mono { (cut(&g.group, 48)) }
                    td.num { @match g.head { Some(h) => { a href=(format!("/job?id={}", h.id)) { (h.id) } } None => { "-" } } }
                    td { @match g.head { Some(h) => { (h.state.as_str()) } None => { "-" } } }
                    td.num { (g.held) }
                    td { (crate::cli::groups::reason(g.blocked(now), now)) }
                } } }
            }
            @if view.blocked_more { p.muted { "More may follow: fenceq groups --blocked --queue " (view.counts.queue) " lists them all." } }
        }
    }
}

/// An instant as `in 3s (2026-12-03 07:00:03.000)`.
fn at_text(ms: i64, now: i64) -> Markup {
    html! { span title=(timestamp(ms)) { (relative(ms, now)) } }
}

/// A payload on one line of a listing.
fn preview(payload: &[u8]) -> String {
    let view = PayloadView::new(payload, Some(256));
    let text: String = view.text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    cut(&text, 48)
}

/// A job: every field, the last decision, the payload (as text, JSON pretty-printed, or hex;
/// cut at `limit` bytes), and the actions its state allows.
pub fn job(page: &Page<'_>, job: &Job, limit: usize, now: i64) -> Markup {
    let back = format!("/job?id={}", job.id);
    let opt = |ms: Option<i64>| html! { @match ms { Some(ms) => { (at(ms, now)) " " span.muted { (timestamp(ms)) } } None => { span.muted { "-" } } } };
    let text = |t: Option<&str>| html! { @match t { Some(t) => { (t) } None => { span.muted { "-" } } } };
    let pretty = std::str::from_utf8(&job.payload)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
        .filter(|v| v.is_object() || v.is_array())
        .and_then(|v| serde_json::to_string_pretty(&v).ok());
    let (encoding, view) = match &pretty {
        Some(json) => ("JSON, pretty-printed", PayloadView::new(json.as_bytes(), Some(limit))),
        None => {
            let view = PayloadView::new(&job.payload, Some(limit));
            (if view.encoding == "hex" { "bytes, as hex" } else { "text" }, view)
        }
    };
    let state = state_key(job);
    let body = html! {
        h1 { "Job " (job.id) " " (badge(job)) }
        dl.fields {
            dt { "queue" } dd { a href=(format!("/queue?name={}", encode(&job.queue))) { (job.queue) } }
            dt { "key" } dd.mono { (text(job.key.as_deref())) }
            dt { "group" } dd.mono.group { (text(job.group.as_deref())) }
            dt { "state" } dd { (state_label(job)) }
            dt { "priority" } dd { (job.priority) }
            dt { "run at" } dd { (opt(Some(job.run_at))) }
            dt { "attempt" } dd { (job.attempt) " of " (job.max_attempts) }
            dt { "claim id" } dd.mono { (text(job.claim_id.map(|c| c.to_string()).as_deref())) }
            dt { "worker" } dd { (text(job.worker.as_deref())) }
            dt { "lease until" } dd { (opt(job.lease_until))
                @if job.lease_until.is_some_and(|until| until <= now) { " " span.badge.s-exhausted { "expired" } } }
            dt { "heartbeat at" } dd { (opt(job.heartbeat_at)) }
            dt { "wait until" } dd { (opt(job.wait_until)) }
            dt { "last error" } dd { (text(job.last_error.as_deref())) }
            dt { "created at" } dd { (opt(Some(job.created_at))) }
            dt { "settled at" } dd { (opt(job.settled_at)) }
            dt { "exhausted at" } dd { (opt(job.exhausted_at)) }
            dt { "acknowledged at" } dd { (opt(job.acknowledged_at)) }
        }
        h2 { "Decision" }
        @match &job.decision {
            Some(d) => {
                div.box.decision {
                    strong { (d.action) } " by " strong { (d.by.as_deref().unwrap_or("an unnamed caller")) } ", " (at(d.at, now))
                    " " span.muted { (timestamp(d.at)) }
                    @if let Some(note) = &d.note { p { "Note: " (note) } }
                }
            }
            None => { p.muted { "No operator or reconciler has decided anything about this job." } }
        }
        @if !page.read_only {
            @let actions = job_actions(page, job, state, &back);
            @if !actions.0.is_empty() { h2 { "Actions" } (actions) }
        }
        h2 { "Payload " span.muted { "(" (encoding) ", " (job.payload.len()) " bytes)" } }
        pre.payload { (view.text) }
        @if view.truncated() {
            p.muted {
                "Showing the first " (view.shown) " of " (view.total) " bytes. "
                @if limit < FULL_PAYLOAD_LIMIT { a href=(format!("/job?id={}&full=1", job.id)) { "Show all" } }
            }
        }
    };
    layout(page, &format!("Job {}", job.id), body)
}

fn job_actions(page: &Page<'_>, job: &Job, state: &str, back: &str) -> Markup {
    let hidden = expect_job(job.id, state, job.attempt, job.claim_id.map(|c| c.to_string()));
    html! {
        @match (job.state, job.acknowledged_at) {
            (JobState::Exhausted, None) => {
                div.box {
                    p { strong { "Acknowledge" } ": the job stays exhausted and is marked seen; retention may then prune it." }
                    (action_form(page, Action::Acknowledge, &hidden, back, html! {}, "Acknowledge", false))
                }
                (replay_box(page, job, &hidden, back))
            }
            (JobState::Exhausted, Some(_)) => { (replay_box(page, job, &hidden, back)) }
            (JobState::Unknown, _) => {
                div.box {
                    p { strong { "Resolve" } ": the attempt's side effect may or may not have happened. Complete if it did, retry if it did not, exhaust to give up." }
                    (action_form(page, Action::Resolve, &hidden, back, resolve_choice(), "Resolve", false))
                }
            }
            (JobState::Pending | JobState::Waiting | JobState::Running, _) => {
                div.box {
                    p { strong { "Cancel" } ": the job becomes cancelled and never runs again; a running owner finds out at its next renew or settle." }
                    (action_form(page, Action::Cancel, &hidden, back, html! {}, "Cancel job", true))
                }
            }
            _ => {}
        }
    }
}

fn replay_box(page: &Page<'_>, job: &Job, hidden: &[(&str, String)], back: &str) -> Markup {
    html! {
        div.box {
            p { strong { "Replay" } ": the job goes back to pending, due now, with a fresh budget of " (job.max_attempts) " attempts." }
            (action_form(page, Action::Replay, hidden, back, html! {}, "Replay", false))
        }
    }
}

/// Exhaustions awaiting acknowledgement, or unknown outcomes awaiting a decision, with
/// their actions.
pub fn listing(
    page: &Page<'_>,
    listing: Listing,
    queue: Option<&str>,
    rows: &[Record],
    more: bool,
    now: i64,
) -> Markup {
    let (title, path, text_header, none) = match listing {
        Listing::Exhausted => {
            ("Exhaustions awaiting acknowledgement", "/exhausted", "Reason", "No exhaustion awaits acknowledgement.")
        }
        Listing::Unknown => {
            ("Unknown outcomes awaiting a decision", "/unknown", "Evidence", "No unknown outcome awaits a decision.")
        }
    };
    let filter = queue.map_or_else(String::new, |q| format!("queue={}", encode(q)));
    let back = format!("{path}?{filter}");
    let body = html! {
        h1 { (title) @if let Some(q) = queue { " in " span.mono { (q) } } }
        @if queue.is_some() { p { a href=(path) { "All queues" } } }
        @if rows.is_empty() {
            p.muted { (none) }
        } @else {
            table {
                thead { tr {
                    th.num { "ID" } th { "Queue" } th { "Key" } th.num { "Attempt" }
                    th { @if listing == Listing::Exhausted { "Exhausted" } @else { "Recorded" } }
                    th { (text_header) } th { "Payload" }
                    @if !page.read_only { th { "Action" } }
                } }
                tbody { @for row in rows { tr {
                    td.num { a href=(format!("/job?id={}", row.token.id)) { (row.token.id) } }
                    td { a href=(format!("/queue?name={}", encode(&row.queue))) { (row.queue) } }
                    td.mono { (row.key.as_deref().map(|k| cut(k, 32)).unwrap_or_default()) }
                    td.num { (row.token.attempt) }
                    td { (at(row.at, now)) }
                    td { (row.text.as_deref().map(|t| cut(t, 80)).unwrap_or_default()) }
                    td.mono { (preview(&row.payload)) }
                    @if !page.read_only { td {
                        @match listing {
                            Listing::Exhausted => {
                                @let hidden = expect_token(&row.token, "exhausted");
                                (action_form(page, Action::Acknowledge, &hidden, &back, html! {}, "Acknowledge", false))
                                (action_form(page, Action::Replay, &hidden, &back, html! {}, "Replay", false))
                            }
                            Listing::Unknown => {
                                @let hidden = expect_token(&row.token, "unknown");
                                (action_form(page, Action::Resolve, &hidden, &back, resolve_choice(), "Resolve", false))
                            }
                        }
                    } }
                } } }
            }
            @if more {
                @let last = rows.last().map_or(0, |r| r.token.id.0);
                @let sep = if filter.is_empty() { "" } else { "&" };
                p { a href=(format!("{path}?{filter}{sep}after={last}")) { "Next " (PAGE_ROWS) " →" } }
            }
        }
    };
    layout(page, title, body)
}

/// What an action did, and where to go next.
pub fn done(page: &Page<'_>, done: &Done, by: &str, back: &str) -> Markup {
    let body = html! {
        h1 { (done.title) }
        div.notice.ok {
            p { (done.title) " (queue " span.mono { (done.queue) } "): " (done.effect) "." }
            p.muted { "Recorded as done by " (by) "." }
        }
        p {
            a href=(back) { "← Back" }
            @if let Some(id) = done.job { " · " a href=(format!("/job?id={id}")) { "Job " (id) } }
            " · " a href="/" { "Overview" }
        }
    };
    layout(page, &done.title, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::serve::form::decode;

    fn refresh(path: &str, query: &str) -> Result<Refresh, Problem> {
        Refresh::of(path, &decode(query).unwrap())
    }

    #[test]
    fn a_refresh_is_taken_from_2_to_300_seconds_and_its_links_keep_the_other_parameters() {
        let page = refresh("/queue", "name=mail%2Fout&state=pending&refresh=10&after=7").unwrap();
        assert_eq!(page.every, Some(10));
        assert_eq!(page.base, "/queue?name=mail%2Fout&state=pending&after=7");
        assert_eq!(page.url(5), "/queue?name=mail%2Fout&state=pending&after=7&refresh=5");
        assert_eq!(page.carry(), "&refresh=10");
        let overview = refresh("/", "").unwrap();
        assert_eq!((overview.every, overview.base.as_str(), overview.carry()), (None, "/", String::new()));
        assert_eq!(overview.url(30), "/?refresh=30");
        assert_eq!(refresh("/", "refresh=").unwrap().every, None, "an empty value asks for nothing");
        assert_eq!(refresh("/", "refresh=2").unwrap().every, Some(REFRESH_MIN));
        assert_eq!(refresh("/", "refresh=300").unwrap().every, Some(REFRESH_MAX));
        for refused in ["1", "0", "301", "-2", "2.5", "five", "4294967297"] {
            let problem = refresh("/", &format!("refresh={refused}")).unwrap_err();
            assert_eq!(problem.status, 400, "{refused}");
            assert!(problem.message.contains("from 2 to 300"), "{refused}: {}", problem.message);
        }
    }
}
