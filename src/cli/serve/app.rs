//! Routing, sign-in, and the actions. Every request first names a host this server answers
//! to (else it gets a refusal and nothing else: no page, no secret). Every page reads through
//! the library; every change is the [`fenceq::Operator`] call the CLI makes, after four
//! checks: a page of this very origin (when the browser says where the request comes from),
//! a signed-in caller (when tokens are configured), the server's CSRF secret in the form
//! (compared in constant time), and the state the page showed (its `--expect`), so that a
//! page drawn before someone else changed the job is refused instead of acting on what the
//! job has become.

use super::form::{self, same};
use super::host::Hosts;
use super::http::{Request, Response};
use super::pages::{self, Action, Listing, Page, QueueView, Refresh, FULL_PAYLOAD_LIMIT, PAGE_ROWS};
use super::problem::{cut, outage_words, Problem};
use super::snapshot::{Counts, NoCounts, Signal, Snapshots};
use super::Token;
use crate::cli::output::PAYLOAD_LIMIT;
use crate::cli::store::CliStore;
use crate::cli::{error_line, inspect::collect_pages};
use crossbeam_channel::Sender;
use fenceq::store::Store;
use fenceq::{ClaimId, ClaimToken, Cursor, Error, Job, JobId, JobState, ListFilter, Queue, Resolution, Stats};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Minutes of completions the overview charts: the last hour.
const CHART_MINUTES: u32 = 60;
/// How long a sign-in lasts.
const SESSION_LIFE: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at once (the oldest is dropped past this).
const MAX_SESSIONS: usize = 1024;
/// The session cookie's name.
const COOKIE: &str = "fenceq_session";
/// How long a page waits for a count that began after a change made through this server,
/// before it shows the older count.
const FRESH_COUNT_WAIT: Duration = Duration::from_secs(5);
/// Blocked groups a queue's page lists.
const BLOCKED_ROWS: usize = 20;
/// Groups read per page while looking for blocked ones.
const GROUPS_PAGE: u32 = 1_000;
/// Groups a queue's page looks at for blocked ones at most (the CLI lists them all).
const GROUPS_LOOKED_AT: usize = 10_000;
/// How long a page waits for the server's first count before it says to come back.
const FIRST_COUNT_WAIT: Duration = Duration::from_secs(30);

/// The dashboard: the queue, the server's secrets and its sessions.
pub struct App<'q, S: CliStore> {
    queue: &'q Queue<S>,
    read_only: bool,
    /// The CSRF secret every form carries: random per server start, never in a cookie or
    /// URL, so a page of another site cannot know it.
    csrf: String,
    tokens: Vec<Token>,
    /// The host names this server answers to.
    hosts: Hosts,
    /// Signed-in sessions: cookie value -> (index into `tokens`, when it was made).
    sessions: Mutex<HashMap<String, (usize, Instant)>>,
    /// The name recorded for a change when neither a named token nor the form gives one.
    default_by: String,
    /// `--db` as people may see it (a URL without its password).
    db: String,
    /// The counts the overview and the queue pages show (read by the counting thread).
    snapshots: &'q Snapshots,
    /// Asks the counting thread for a count now (after an action).
    refresh: Sender<Signal>,
}

/// Who is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// No tokens are configured: anyone who reaches the (loopback) address.
    Open,
    /// Signed in with this token (index into the token list).
    Token(usize),
}

type Outcome = Result<Response, Problem>;

impl<'q, S: CliStore> App<'q, S> {
    /// The dashboard over `queue`, answering to `hosts`; `db` is how pages name the database;
    /// the counts come from `snapshots`, and `refresh` asks for a new count.
    pub fn new(
        queue: &'q Queue<S>,
        read_only: bool,
        tokens: Vec<Token>,
        hosts: Hosts,
        db: String,
        snapshots: &'q Snapshots,
        refresh: Sender<Signal>,
    ) -> App<'q, S> {
        App {
            snapshots,
            refresh,
            queue,
            read_only,
            csrf: form::secret(),
            tokens,
            hosts,
            sessions: Mutex::new(HashMap::new()),
            default_by: crate::cli::decision::os_user(),
            db,
        }
    }

    /// Answers one request.
    pub fn handle(&self, request: &Request) -> Response {
        // A host this server answers to, before anything else: a refusal as plain text, never
        // a page (pages carry the CSRF secret).
        let host = match self.hosts.accept(only(request, "host").map(str::trim)) {
            Ok(host) => host,
            Err(refusal) => return secure(Response::text(421, refusal)),
        };
        if !matches!(request.method.as_str(), "GET" | "HEAD") {
            let (origin, referer) = (only(request, "origin"), only(request, "referer"));
            if let Err(refusal) = self.hosts.same_origin(&host, origin, referer, forwarded_https(request)) {
                return secure(Response::text(403, refusal));
            }
        }
        let caller = self.caller(request);
        let response = self.route(request, caller).unwrap_or_else(|problem| {
            let mut page = self.page(caller);
            // A page that reloads itself and met a problem that passes (the database out of
            // reach) goes on reloading itself: it is the page again once the problem passed.
            if problem.retry_after.is_some() {
                page.refresh = refreshing(request);
            }
            let response = Response::new(problem.status, pages::HTML, pages::problem(&page, &problem).into_string());
            match problem.retry_after {
                Some(seconds) => response.with("Retry-After", seconds.to_string()),
                None => response,
            }
        });
        secure(response)
    }

    fn route(&self, request: &Request, caller: Option<Caller>) -> Outcome {
        let method = request.method.as_str();
        let read = matches!(method, "GET" | "HEAD");
        match (request.path.as_str(), read, method == "POST") {
            ("/style.css", true, _) => return Ok(Response::new(200, "text/css; charset=utf-8", pages::CSS)),
            ("/login", true, _) => return self.login_page(caller, None),
            ("/login", _, true) => return self.login(request),
            _ => {}
        }
        let Some(caller) = caller else {
            return if read && request.path != "/metrics" {
                Ok(Response::new(303, pages::HTML, "").with("Location", "/login"))
            } else {
                Err(Problem::new(401, "Sign in first", "this server asks for a token: sign in at /login"))
            };
        };
        let query = || form::decode(&request.query).map_err(|e| Problem::bad(format!("the query string holds {e}")));
        match (request.path.as_str(), read, method == "POST") {
            ("/", true, _) => self.overview(caller, &query()?),
            ("/queue", true, _) => self.queue_page(caller, &query()?),
            ("/job", true, _) => self.job_page(caller, &query()?),
            ("/exhausted", true, _) => self.listing(caller, &query()?, Listing::Exhausted),
            ("/unknown", true, _) => self.listing(caller, &query()?, Listing::Unknown),
            ("/paused", true, _) => self.paused_page(caller),
            ("/schedules", true, _) => self.schedules_page(caller),
            ("/metrics", true, _) => {
                Ok(Response::new(200, "text/plain; version=0.0.4; charset=utf-8", self.queue.metrics_text()?))
            }
            ("/logout", _, true) => self.logout(request),
            (path, _, true) if Action::from_path(path).is_some() => {
                let action = Action::from_path(path).expect("checked by the guard");
                self.act(request, caller, action)
            }
            (
                "/" | "/queue" | "/job" | "/exhausted" | "/unknown" | "/paused" | "/schedules" | "/metrics" | "/logout"
                | "/login",
                _,
                _,
            ) => Err(Problem::new(405, "Method not allowed", format!("{method} is not taken here"))),
            (path, _, _) if Action::from_path(path).is_some() => {
                Err(Problem::new(405, "Method not allowed", "an action is a POST from its form"))
            }
            _ => Err(Problem::not_found("no such page")),
        }
    }

    // --------------------------------------------------------------------------- sign-in

    /// Who the request comes from, or `None` when tokens are configured and it carries no
    /// valid session cookie or bearer token.
    fn caller(&self, request: &Request) -> Option<Caller> {
        if self.tokens.is_empty() {
            return Some(Caller::Open);
        }
        if let Some(bearer) = request.header("authorization").and_then(|v| v.strip_prefix("Bearer ")) {
            return self.token_index(bearer.trim()).map(Caller::Token);
        }
        let cookie = request.header("cookie")?;
        let session = cookie.split(';').find_map(|c| c.trim().strip_prefix(&format!("{COOKIE}=")))?;
        let sessions = self.sessions.lock();
        // (A map lookup by the cookie: its value is 244 random bits, not guessable by timing.)
        match sessions.get(session) {
            Some((index, made)) if made.elapsed() < SESSION_LIFE => Some(Caller::Token(*index)),
            _ => None,
        }
    }

    /// The token equal to `given`, each compared in constant time (all of them, whatever
    /// matched first).
    fn token_index(&self, given: &str) -> Option<usize> {
        let mut found = None;
        for (i, token) in self.tokens.iter().enumerate() {
            if same(token.secret.as_bytes(), given.as_bytes()) && found.is_none() {
                found = Some(i);
            }
        }
        found
    }

    fn login_page(&self, caller: Option<Caller>, error: Option<&str>) -> Outcome {
        let status = if error.is_some() { 401 } else { 200 };
        let page = self.page(caller);
        Ok(Response::new(status, pages::HTML, pages::login(&page, self.tokens.is_empty(), error).into_string()))
    }

    fn login(&self, request: &Request) -> Outcome {
        let fields = self.form(request)?;
        if self.tokens.is_empty() {
            return Ok(Response::new(303, pages::HTML, "").with("Location", "/"));
        }
        let Some(index) = self.token_index(field(&fields, "token").unwrap_or_default().trim()) else {
            return self.login_page(None, Some("that token is not one of this server's"));
        };
        let session = form::secret();
        {
            let mut sessions = self.sessions.lock();
            sessions.retain(|_, (_, made)| made.elapsed() < SESSION_LIFE);
            if sessions.len() >= MAX_SESSIONS {
                if let Some(oldest) = sessions.iter().min_by_key(|(_, (_, made))| *made).map(|(k, _)| k.clone()) {
                    sessions.remove(&oldest);
                }
            }
            sessions.insert(session.clone(), (index, Instant::now()));
        }
        // Secure when a TLS proxy in front says the browser used https.
        let secure = forwarded_https(request);
        let cookie = format!(
            "{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
            SESSION_LIFE.as_secs(),
            if secure { "; Secure" } else { "" }
        );
        Ok(Response::new(303, pages::HTML, "").with("Location", "/").with("Set-Cookie", cookie))
    }

    fn logout(&self, request: &Request) -> Outcome {
        self.form(request)?;
        if let Some(cookie) = request.header("cookie") {
            if let Some(session) = cookie.split(';').find_map(|c| c.trim().strip_prefix(&format!("{COOKIE}="))) {
                self.sessions.lock().remove(session);
            }
        }
        Ok(Response::new(303, pages::HTML, "")
            .with("Location", "/login")
            .with("Set-Cookie", format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")))
    }

    /// A POST's form fields, once its CSRF token is the server's.
    fn form(&self, request: &Request) -> Result<Vec<(String, String)>, Problem> {
        let form_type = request.header("content-type").unwrap_or_default();
        if !form_type.trim().to_ascii_lowercase().starts_with("application/x-www-form-urlencoded") {
            return Err(Problem::new(415, "Not a form", "a POST here is a form (application/x-www-form-urlencoded)"));
        }
        let body = std::str::from_utf8(&request.body).map_err(|_| Problem::bad("the form is not UTF-8"))?;
        let fields = form::decode(body).map_err(|e| Problem::bad(format!("the form holds {e}")))?;
        match field(&fields, "csrf") {
            Some(token) if same(token.as_bytes(), self.csrf.as_bytes()) => Ok(fields),
            _ => Err(Problem::new(
                403,
                "Refused: missing or wrong CSRF token",
                "this form did not come from a page of this server (or the server restarted since the page was \
                 drawn); nothing was changed. Reload the page and try again.",
            )),
        }
    }

    /// What every page needs to know about the server and the caller.
    fn page(&self, caller: Option<Caller>) -> Page<'_> {
        let signed_in = match caller {
            Some(Caller::Token(i)) => Some(self.tokens[i].name.as_deref().unwrap_or("token")),
            _ => None,
        };
        Page {
            db: &self.db,
            csrf: &self.csrf,
            read_only: self.read_only,
            signed_in,
            ask_name: match caller {
                Some(Caller::Token(i)) => self.tokens[i].name.is_none(),
                _ => true,
            },
            default_by: &self.default_by,
            refresh: None,
        }
    }

    // --------------------------------------------------------------------------- pages

    fn html(&self, markup: maud::Markup) -> Outcome {
        Ok(Response::new(200, pages::HTML, markup.into_string()))
    }

    /// The latest counts, with the pauses and back-offs as they are now (cheap reads, and
    /// what the pages' pause and unpause forms must match).
    fn counts(&self) -> Result<(std::sync::Arc<Counts>, Stats, Option<String>), Problem> {
        let counts = self.snapshots.current(FIRST_COUNT_WAIT, FRESH_COUNT_WAIT).map_err(|why| match why {
            NoCounts::NotYet => Problem::passing(
                "Counting",
                "the server is still reading the first counts of the queue; reload in a moment",
            ),
            NoCounts::Failed(failure) => {
                Problem::passing("Counts failed", format!("the queue's counts could not be read: {failure}"))
            }
            NoCounts::Stopped => Problem::new(503, "Stopping", "the server is stopping"),
        })?;
        let mut stats = counts.stats.clone();
        let paused = self.queue.paused_queues()?;
        let backoffs = self.queue.queue_backoffs()?;
        for q in &mut stats.queues {
            q.paused = paused.iter().find(|p| p.queue == q.queue).cloned();
            q.backoff = backoffs.iter().find(|b| b.queue == q.queue).cloned();
        }
        for p in paused {
            if !stats.queues.iter().any(|q| q.queue == p.queue) {
                stats.queues.push(fenceq::QueueStats { queue: p.queue.clone(), paused: Some(p), ..Default::default() });
            }
        }
        for b in backoffs {
            if !stats.queues.iter().any(|q| q.queue == b.queue) {
                stats.queues.push(fenceq::QueueStats {
                    queue: b.queue.clone(),
                    backoff: Some(b),
                    ..Default::default()
                });
            }
        }
        stats.queues.sort_by(|a, b| a.queue.cmp(&b.queue));
        Ok((counts, stats, self.snapshots.failure()))
    }

    fn overview(&self, caller: Caller, query: &[(String, String)]) -> Outcome {
        let refresh = Refresh::of("/", query)?;
        let (counts, stats, failure) = self.counts()?;
        let now = self.queue.now_ms();
        let age = pages::CountsAge { taken_at: counts.taken_at, took: counts.took, failure: failure.as_deref() };
        let page = Page { refresh: Some(refresh), ..self.page(Some(caller)) };
        self.html(pages::overview(&page, &stats, &counts.per_minute, &age, now))
    }

    fn queue_page(&self, caller: Caller, query: &[(String, String)]) -> Outcome {
        let name = field(query, "name").ok_or_else(|| Problem::bad("which queue? (/queue?name=NAME)"))?;
        let refresh = Refresh::of("/queue", query)?;
        let state = match field(query, "state").filter(|s| !s.is_empty()) {
            None => None,
            Some(text) => Some(text.parse::<JobState>().map_err(|_| Problem::bad(format!("no state named {text:?}")))?),
        };
        let after = cursor(query)?;
        let (snapshot, stats, failure) = self.counts()?;
        let counted = stats.queues.iter().find(|q| q.queue == name).cloned();
        let counts = match counted {
            Some(counts) => counts,
            None => {
                // Not in the counts: a queue whose first jobs came after them has a page
                // (its tabs say 0 until the next count); one without jobs has none. (A name
                // the library would refuse gets its reason.)
                let any = ListFilter { queue: Some(name.to_string()), limit: 1, ..ListFilter::default() };
                if self.queue.list(&any)?.is_empty() {
                    return Err(Problem::not_found(format!(
                        "no queue named {name:?}: it has no jobs and is not paused"
                    )));
                }
                fenceq::QueueStats { queue: name.to_string(), ..Default::default() }
            }
        };
        let filter = ListFilter { queue: Some(name.to_string()), state, after, limit: PAGE_ROWS };
        let jobs = self.queue.list(&filter)?;
        let now = self.queue.now_ms();
        let age = pages::CountsAge { taken_at: snapshot.taken_at, took: snapshot.took, failure: failure.as_deref() };
        let limits = self.queue.limits(name)?;
        let (blocked, blocked_more) = self.blocked_groups(name, now)?;
        let view = QueueView {
            counts: &counts,
            age,
            limits: &limits,
            blocked: &blocked,
            blocked_more,
            state,
            jobs: &jobs,
            more: jobs.len() == PAGE_ROWS as usize,
            now,
        };
        let page = Page { refresh: Some(refresh), ..self.page(Some(caller)) };
        self.html(pages::queue(&page, &view))
    }

    /// The first [`BLOCKED_ROWS`] blocked groups of `queue`, as `fenceq groups --blocked`
    /// finds them, looking at no more than [`GROUPS_LOOKED_AT`] groups; and whether more may
    /// follow.
    fn blocked_groups(&self, queue: &str, now: i64) -> Result<(Vec<fenceq::GroupSummary>, bool), Problem> {
        let mut blocked = Vec::new();
        let mut after: Option<(String, String)> = None;
        let mut looked = 0;
        loop {
            let page =
                self.queue.groups(Some(queue), after.as_ref().map(|(q, g)| (q.as_str(), g.as_str())), GROUPS_PAGE)?;
            let full = page.len() == GROUPS_PAGE as usize;
            looked += page.len();
            after = page.last().map(|g| (g.queue.clone(), g.group.clone()));
            blocked.extend(page.into_iter().filter(|g| g.is_blocked(now)));
            if blocked.len() > BLOCKED_ROWS || !full || looked >= GROUPS_LOOKED_AT {
                let more = blocked.len() > BLOCKED_ROWS || full;
                blocked.truncate(BLOCKED_ROWS);
                return Ok((blocked, more));
            }
        }
    }

    fn job_page(&self, caller: Caller, query: &[(String, String)]) -> Outcome {
        let id = job_id(field(query, "id"))?;
        let job = self
            .queue
            .job(JobId(id))?
            .ok_or_else(|| Problem::not_found(format!("no job {id}: it never existed, or retention pruned it")))?;
        let full = field(query, "full") == Some("1");
        let limit = if full { FULL_PAYLOAD_LIMIT } else { PAYLOAD_LIMIT };
        let now = self.queue.now_ms();
        self.html(pages::job(&self.page(Some(caller)), &job, limit, now))
    }

    fn listing(&self, caller: Caller, query: &[(String, String)], listing: Listing) -> Outcome {
        let queue = field(query, "queue").filter(|q| !q.is_empty());
        let after = cursor(query)?.map(|c| c.0);
        let limit = u64::from(PAGE_ROWS);
        let (rows, more) = match listing {
            Listing::Exhausted => {
                let (items, more) =
                    collect_pages(|c, n| self.queue.exhaustions(c, n), |e| &e.queue, queue, after, limit)?;
                (items.into_iter().map(crate::cli::inspect::Record::from).collect::<Vec<_>>(), more)
            }
            Listing::Unknown => {
                let (items, more) = collect_pages(|c, n| self.queue.unknowns(c, n), |u| &u.queue, queue, after, limit)?;
                (items.into_iter().map(crate::cli::inspect::Record::from).collect(), more)
            }
        };
        let now = self.queue.now_ms();
        self.html(pages::listing(&self.page(Some(caller)), listing, queue, &rows, more, now))
    }

    fn paused_page(&self, caller: Caller) -> Outcome {
        let paused = self.queue.paused_queues()?;
        let now = self.queue.now_ms();
        self.html(pages::paused(&self.page(Some(caller)), &paused, now))
    }

    fn schedules_page(&self, caller: Caller) -> Outcome {
        let schedules = self.queue.schedule_records()?;
        let now = self.queue.now_ms();
        self.html(pages::schedules(&self.page(Some(caller)), &schedules, now))
    }

    // --------------------------------------------------------------------------- actions

    fn act(&self, request: &Request, caller: Caller, action: Action) -> Outcome {
        // The database out of reach: the answer says what became of the change.
        self.change(request, caller, action).map_err(Problem::for_change)
    }

    fn change(&self, request: &Request, caller: Caller, action: Action) -> Outcome {
        if self.read_only {
            return Err(Problem::new(
                403,
                "Read-only",
                "this server was started with --read-only: it changes nothing. Use the CLI, or a server without \
                 --read-only.",
            ));
        }
        let fields = self.form(request)?;
        let by = self.operator_name(caller, &fields);
        let operator = self.queue.operator(by.clone());
        let operator = match field(&fields, "note").map(str::trim).filter(|n| !n.is_empty()) {
            Some(note) => operator.note(note),
            None => operator,
        };
        let back = back(field(&fields, "back"));
        let done = match action {
            Action::Pause | Action::Unpause => {
                let name = field(&fields, "queue").ok_or_else(|| Problem::bad("the form names no queue"))?;
                self.pause_or_unpause(action, name, &fields, &operator)?
            }
            _ => {
                let id = job_id(field(&fields, "id"))?;
                let job = self.queue.job(JobId(id))?.ok_or_else(|| {
                    Problem::stale(format!("job {id} no longer exists (retention pruned it?); nothing was changed"))
                })?;
                self.expect_job(&job, &fields)?;
                self.change_job(action, &job, &fields, &operator)?
            }
        };
        // The next page should show the change: a count now (or right after the running one),
        // which pages wait for.
        self.snapshots.changed();
        let _ = self.refresh.try_send(Signal::Refresh);
        let page = self.page(Some(caller));
        Ok(Response::new(200, pages::HTML, pages::done(&page, &done, &by, &back).into_string()))
    }

    /// Who the change is recorded as: the signed-in token's name, else the form's, else the
    /// OS user running the server (as the CLI's `--by` defaults).
    fn operator_name(&self, caller: Caller, fields: &[(String, String)]) -> String {
        if let Caller::Token(i) = caller {
            if let Some(name) = &self.tokens[i].name {
                return name.clone();
            }
        }
        field(fields, "by").map(str::trim).filter(|b| !b.is_empty()).unwrap_or(&self.default_by).to_string()
    }

    /// Refuses unless the job is as the page drew it: the same state (and acknowledgement),
    /// attempt and claim.
    fn expect_job(&self, job: &Job, fields: &[(String, String)]) -> Result<(), Problem> {
        let expected_state =
            field(fields, "state").ok_or_else(|| Problem::bad("the form carries no expected state"))?;
        let expected_attempt = field(fields, "attempt").and_then(|a| a.parse::<u32>().ok());
        let expected_claim = field(fields, "claim").filter(|c| !c.is_empty());
        let found_claim = job.claim_id.map(|c| c.to_string());
        let as_drawn = pages::state_key(job) == expected_state
            && expected_attempt == Some(job.attempt)
            && expected_claim == found_claim.as_deref();
        if as_drawn {
            return Ok(());
        }
        Err(Problem::stale(format!(
            "job {} changed since this page was drawn: the page showed it {} (attempt {}), and it is now {} (attempt \
             {}{}); nothing was changed. Reload the page to see it as it is now.",
            job.id,
            pages::state_words(expected_state),
            expected_attempt.map_or_else(|| "?".to_string(), |a| a.to_string()),
            pages::state_label(job),
            job.attempt,
            job.decision.as_ref().map_or_else(String::new, |d| format!(
                ", last decision: {} by {}",
                d.action,
                d.by.as_deref().unwrap_or("an unnamed caller")
            )),
        )))
    }

    fn change_job(
        &self,
        action: Action,
        job: &Job,
        fields: &[(String, String)],
        operator: &fenceq::Operator<'_, S>,
    ) -> Result<pages::Done, Problem> {
        let id = job.id;
        let stale = |e: Error| match e {
            Error::StaleIdentity { .. } | Error::InvalidState { .. } | Error::NotFound(_) => Problem::stale(format!(
                "job {id} changed while the change was being made ({}); nothing was changed. Reload the page.",
                error_line(&e)
            )),
            e => Problem::from(e),
        };
        // The token as the page drew it (checked equal to the job's above): the statement
        // itself then refuses, atomically, a job that changed after that check.
        let token = || -> Result<ClaimToken, Problem> {
            let attempt = field(fields, "attempt").and_then(|a| a.parse::<u32>().ok());
            let claim = field(fields, "claim").and_then(|c| uuid::Uuid::parse_str(c).ok());
            match (attempt, claim) {
                (Some(attempt), Some(claim)) => Ok(ClaimToken { id, attempt, claim_id: ClaimId(claim) }),
                _ => Err(Problem::stale(format!("job {id} has no claim to act on; nothing was changed"))),
            }
        };
        let (what, effect) = match action {
            Action::Acknowledge => {
                operator.acknowledge(&token()?).map_err(stale)?;
                ("acknowledged", "it stays exhausted, acknowledged: retention may prune it now".to_string())
            }
            Action::Replay => {
                operator.replay(id).map_err(stale)?;
                ("replayed", format!("it is pending, due now, with a fresh budget of {} attempts", job.max_attempts))
            }
            Action::Cancel => {
                let was = operator.cancel(id).map_err(stale)?;
                ("cancelled", format!("it was {was}; a running owner finds out at its next renew or settle"))
            }
            Action::Resolve => {
                let (resolution, effect) = match field(fields, "outcome") {
                    Some("complete") => (Resolution::Complete, "completed: the side effect happened"),
                    Some("retry") => (Resolution::Retry, "pending again, due now: it will run again"),
                    Some("exhaust") => (Resolution::Exhaust, "an unacknowledged exhaustion: given up"),
                    _ => return Err(Problem::bad("choose an outcome: complete, retry or exhaust")),
                };
                operator.resolve(&token()?, resolution).map_err(stale)?;
                ("resolved", format!("it is {effect}"))
            }
            Action::Pause | Action::Unpause => unreachable!("queue actions are handled apart"),
        };
        Ok(pages::Done { title: format!("Job {id} {what}"), effect, job: Some(id), queue: job.queue.clone() })
    }

    fn pause_or_unpause(
        &self,
        action: Action,
        name: &str,
        fields: &[(String, String)],
        operator: &fenceq::Operator<'_, S>,
    ) -> Result<pages::Done, Problem> {
        let paused = self.queue.paused_queues()?.into_iter().find(|p| p.queue == name);
        let since = |p: &fenceq::PausedQueue| p.since.to_string();
        let as_drawn = match (action, field(fields, "since"), &paused) {
            // The page showed the queue running; pausing a paused queue would change nothing.
            (Action::Pause, Some(""), None) => true,
            // The page showed this very pause (its start), not a later one.
            (Action::Unpause, Some(shown), Some(p)) => shown == since(p),
            _ => false,
        };
        if !as_drawn {
            let now = self.queue.now_ms();
            let is = paused.as_ref().map_or_else(|| "not paused".to_string(), |p| pages::pause_words(p, now));
            return Err(Problem::stale(format!(
                "queue {name} changed since this page was drawn: it is {is}; nothing was changed. Reload the page."
            )));
        }
        let changed = match action {
            Action::Pause => operator.pause(name)?,
            _ => operator.unpause(name)?,
        };
        if !changed {
            return Err(Problem::stale(format!(
                "queue {name} was {} by someone else meanwhile; nothing was changed. Reload the page.",
                if action == Action::Pause { "paused" } else { "unpaused" }
            )));
        }
        let (title, effect) = if action == Action::Pause {
            (format!("Queue {name} paused"), "claims of it find nothing until it is unpaused; enqueues still land")
        } else {
            (format!("Queue {name} unpaused"), "its due jobs are claimable again")
        };
        Ok(pages::Done { title, effect: effect.to_string(), job: None, queue: name.to_string() })
    }
}

/// One count for the snapshot: the counts per queue and state and the chart, through the
/// queue's read path, and how long they took.
///
/// # Errors
///
/// The queue's read failed: its message, or, when the database cannot be reached right now,
/// a sentence that says so without the store's details.
pub fn count<S: Store>(queue: &Queue<S>) -> Result<Counts, String> {
    let started = Instant::now();
    let taken_at = queue.now_ms();
    let read = || -> fenceq::Result<_> { Ok((queue.stats()?, queue.completions_per_minute(CHART_MINUTES)?)) };
    let (stats, per_minute) = read().map_err(|e| outage_words(&e).unwrap_or_else(|| error_line(&e)))?;
    Ok(Counts { stats, per_minute, taken_at, took: started.elapsed() })
}

/// The refresh of a request for a page that may reload itself and asks to (`None` for any
/// other, and for a query the page would refuse).
fn refreshing(request: &Request) -> Option<Refresh> {
    if !matches!(request.method.as_str(), "GET" | "HEAD") || !matches!(request.path.as_str(), "/" | "/queue") {
        return None;
    }
    let query = form::decode(&request.query).ok()?;
    Refresh::of(&request.path, &query).ok().filter(|r| r.every.is_some())
}

/// The first value of `name` in decoded pairs.
pub fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// A job id from a query or form.
fn job_id(text: Option<&str>) -> Result<i64, Problem> {
    let text = text.ok_or_else(|| Problem::bad("which job? (an id is missing)"))?;
    match text.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(Problem::bad(format!("{:?} is not a job id (a positive whole number)", cut(text, 40)))),
    }
}

/// The listing cursor `after` (the last id of the previous page).
fn cursor(query: &[(String, String)]) -> Result<Option<Cursor>, Problem> {
    match field(query, "after").filter(|a| !a.is_empty()) {
        None => Ok(None),
        Some(text) => match text.parse::<i64>() {
            Ok(id) if id >= 0 => Ok(Some(Cursor(id))),
            _ => Err(Problem::bad(format!(
                "malformed cursor {:?}: `after` is the last job id of the previous page",
                cut(text, 40)
            ))),
        },
    }
}

/// Where to return after an action: a path of this server, else the overview.
fn back(text: Option<&str>) -> String {
    match text {
        Some(path) if path.starts_with('/') && !path.starts_with("//") && !path.contains('\\') => path.to_string(),
        _ => "/".to_string(),
    }
}

/// The header `name` when the request carries it once (`None` when it carries it twice or
/// more: which one the client meant is not guessed).
fn only<'r>(request: &'r Request, name: &str) -> Option<&'r str> {
    let mut values = request.headers.iter().filter(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let first = values.next();
    if values.next().is_some() {
        return None;
    }
    first
}

/// True when a TLS proxy in front says the browser used https (`X-Forwarded-Proto: https`,
/// the first of a list a chain of proxies made). A browser cannot set this header on a
/// request of another site's page (a form sets no header; a script's would need a CORS
/// preflight, which this server never grants).
fn forwarded_https(request: &Request) -> bool {
    request
        .header("x-forwarded-proto")
        .is_some_and(|p| p.split(',').next().unwrap_or_default().trim().eq_ignore_ascii_case("https"))
}

/// The headers every answer carries: no scripts at all (the pages have none), styles from
/// this server only, no framing, no caching of queue data, no referrer sent to another site
/// (`same-origin`: the browser names the page's origin on the pages' own forms, which is
/// what [`Hosts::same_origin`] checks; `no-referrer` would make it send `Origin: null`).
fn secure(response: Response) -> Response {
    response
        .with(
            "Content-Security-Policy",
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; \
             base-uri 'none'",
        )
        .with("X-Content-Type-Options", "nosniff")
        .with("X-Frame-Options", "DENY")
        .with("Referrer-Policy", "same-origin")
        .with("Cache-Control", "no-store")
}
