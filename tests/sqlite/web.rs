//! `fenceq serve`, the operator's web dashboard, run as the real binary: an operator's
//! scenario in headless Chromium over WebDriver (overview, queue, job; acknowledge an
//! exhaustion, resolve an unknown outcome with a note, pause and unpause a queue), each step
//! checked in the database through the library; the dashboard reached under another host
//! name (DNS rebinding), in the browser too; then what a browser would not send, over plain
//! HTTP: forged and stale actions, foreign `Host`, `Origin` and `Referer` headers, read-only
//! servers, sign-in, bad input and slow clients.
//!
//! The browser tests say they skipped without chromium and chromedriver (under CI=true they
//! fail). Screenshots of every page go to `target/tmp/web/<test>/`.

use crate::web_support::{exchange, forms, get, get_with, post, post_with, serve_page, with, without, Browser, Server};
use fenceq::store::Store;
use fenceq::{JobId, JobState, NewJob, Queue};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(600);
const XSS: &str = "<script>alert(1)</script>";

/// The jobs of the scenario: queue `mail` with work in every interesting state, queue
/// `reports` paused by carol.
struct Fixture {
    completed: JobId,
    exhausted: JobId,
    exhausted2: JobId,
    unknown: JobId,
    xss: JobId,
    json: JobId,
}

fn fixture<S: Store>(queue: &Queue<S>) -> Fixture {
    let claimed = |payload: &str| {
        let id = queue.enqueue(NewJob::new("mail", payload.as_bytes().to_vec())).unwrap().id();
        let claim = queue.claim("mail", "worker-1", LEASE).unwrap().expect("a due job");
        assert_eq!(claim.id(), id, "the queue held only this due job");
        claim
    };
    let c = claimed("welcome mail to ann");
    queue.complete(&c.token()).unwrap();
    let e = claimed("newsletter to bob");
    queue.exhaust(&e.token(), "smtp 550: mailbox unavailable").unwrap();
    let e2 = claimed("newsletter to cid");
    queue.exhaust(&e2.token(), "smtp 552: quota <b>exceeded</b>").unwrap();
    let u = claimed("invoice 42 to dan");
    queue.mark_unknown(&u.token(), "timeout after the provider accepted the request").unwrap();
    let xss = queue.enqueue(NewJob::new("mail", XSS.as_bytes().to_vec()).key("k<img src=x>")).unwrap().id();
    let json =
        queue.enqueue(NewJob::new("mail", br#"{"to":"eve@example.org","items":[1,2,3]}"#.to_vec())).unwrap().id();
    queue.enqueue(NewJob::new("reports", b"monthly".to_vec())).unwrap();
    queue.operator("carol").note("month-end freeze").pause("reports").unwrap();
    Fixture { completed: c.id(), exhausted: e.id(), exhausted2: e2.id(), unknown: u.id(), xss, json }
}

fn sqlite() -> (tempfile::TempDir, Queue, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    let queue = Queue::open(&path).unwrap();
    let args = vec!["--db".to_string(), path.display().to_string()];
    (dir, queue, args)
}

fn job<S: Store>(queue: &Queue<S>, id: JobId) -> fenceq::Job {
    queue.job(id).unwrap().expect("the job exists")
}

fn screenshots(test: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("web").join(test)
}

// ------------------------------------------------------------------------------- in a browser

/// The operator's scenario, in a browser, on any store.
fn browser_scenario<S: Store>(queue: &Queue<S>, db_args: &[String], test: &str) {
    let Some(browser) = Browser::start(&screenshots(test)) else { return };
    let f = fixture(queue);
    let mut server = Server::start(db_args, &[]);

    // The overview: both queues, their counts, the pause with who and why.
    browser.goto(&server.url("/"));
    let text = browser.wait_for_heading("Queues");
    browser.screenshot("1-overview");
    assert!(text.contains("mail") && text.contains("reports"), "{text}");
    assert!(text.contains("2 exhaustions awaiting acknowledgement"), "{text}");
    assert!(text.contains("1 unknown outcomes awaiting a decision"), "{text}");
    assert!(text.contains("by carol: month-end freeze"), "{text}");
    assert_eq!(browser.alert(), None);

    // The queue: its jobs, the script payload and the key shown as text.
    browser.click(&browser.find("a[href='/queue?name=mail']"));
    let text = browser.wait_for_heading("Queue mail");
    browser.screenshot("2-queue");
    assert!(text.contains(XSS), "the payload shows as text: {text}");
    assert!(text.contains("k<img src=x>"), "the key shows as text: {text}");
    assert_eq!(browser.alert(), None, "no script of the database ran");
    assert!(browser.find_all("main img").is_empty(), "no element came from the database");

    // A job: every field, the reason, the actions its state allows.
    browser.click(&browser.find(&format!("a[href='/job?id={}']", f.exhausted)));
    let text = browser.wait_for_heading(&format!("Job {}", f.exhausted));
    browser.screenshot("3-job-exhausted");
    assert!(text.contains("smtp 550: mailbox unavailable"), "{text}");
    assert!(text.contains("newsletter to bob"), "{text}");
    assert!(text.contains("No operator or reconciler has decided"), "{text}");

    // Acknowledge it, as alice, with a note.
    let form = browser.find("form[action='/act/acknowledge']");
    browser.type_into(&browser.find_in(&form, "input[name=by]"), "alice");
    browser.type_into(&browser.find_in(&form, "input[name=note]"), "bounced: the address is gone");
    browser.click(&browser.find_in(&form, "button"));
    let text = browser.wait_for_heading(&format!("Job {} acknowledged", f.exhausted));
    browser.screenshot("4-acknowledged");
    assert!(text.contains("Recorded as done by alice"), "{text}");
    let acked = job(queue, f.exhausted);
    assert_eq!(acked.state, JobState::Exhausted);
    assert!(acked.acknowledged_at.is_some(), "acknowledged in the database");
    let decision = acked.decision.expect("the decision is recorded");
    assert_eq!(
        (decision.action.as_str(), decision.by.as_deref(), decision.note.as_deref()),
        ("acknowledge", Some("alice"), Some("bounced: the address is gone"))
    );
    // The job's page now shows the decision.
    browser.goto(&server.url(&format!("/job?id={}", f.exhausted)));
    let text = browser.wait_for_heading(&format!("Job {}", f.exhausted));
    assert!(text.contains("acknowledge by alice") && text.contains("Note: bounced: the address is gone"), "{text}");
    assert!(browser.find_all("form[action='/act/acknowledge']").is_empty(), "no second acknowledgement offered");

    // The unknown outcomes; resolve one as complete, with a note.
    browser.goto(&server.url("/unknown"));
    let text = browser.wait_for_heading("Unknown outcomes");
    browser.screenshot("5-unknown");
    assert!(text.contains("timeout after the provider accepted the request"), "{text}");
    let form = browser.find("form[action='/act/resolve']");
    browser.click(&browser.find_in(&form, "option[value=complete]"));
    browser.type_into(&browser.find_in(&form, "input[name=by]"), "alice");
    browser.type_into(&browser.find_in(&form, "input[name=note]"), "the provider's log shows it delivered");
    browser.click(&browser.find_in(&form, "button"));
    let text = browser.wait_for_heading(&format!("Job {} resolved", f.unknown));
    browser.screenshot("6-resolved");
    assert!(text.contains("completed: the side effect happened"), "{text}");
    let resolved = job(queue, f.unknown);
    assert_eq!(resolved.state, JobState::Completed);
    let decision = resolved.decision.expect("the decision is recorded");
    assert_eq!(
        (decision.action.as_str(), decision.by.as_deref(), decision.note.as_deref()),
        ("resolve complete", Some("alice"), Some("the provider's log shows it delivered"))
    );

    // Pause the queue, then unpause it.
    browser.goto(&server.url("/queue?name=mail"));
    browser.wait_for_heading("Queue mail");
    let form = browser.find("form[action='/act/pause']");
    browser.type_into(&browser.find_in(&form, "input[name=by]"), "alice");
    browser.type_into(&browser.find_in(&form, "input[name=note]"), "provider outage");
    browser.click(&browser.find_in(&form, "button"));
    browser.wait_for_heading("Queue mail paused");
    browser.screenshot("7-paused");
    assert!(queue.is_paused("mail").unwrap());
    let pause = queue.paused_queues().unwrap().into_iter().find(|p| p.queue == "mail").expect("paused");
    assert_eq!((pause.by.as_deref(), pause.note.as_deref()), (Some("alice"), Some("provider outage")));
    assert!(queue.claim("mail", "w", LEASE).unwrap().is_none(), "claims of a paused queue find nothing");

    browser.goto(&server.url("/queue?name=mail"));
    let text = browser.wait_for_heading("Queue mail");
    browser.screenshot("8-queue-paused");
    assert!(text.contains("by alice: provider outage"), "{text}");
    let form = browser.find("form[action='/act/unpause']");
    browser.type_into(&browser.find_in(&form, "input[name=note]"), "provider back");
    browser.click(&browser.find_in(&form, "button"));
    browser.wait_for_heading("Queue mail unpaused");
    assert!(!queue.is_paused("mail").unwrap());
    assert!(queue.is_paused("reports").unwrap(), "the other queue stays paused");

    // The script payload's own page: text, and still no alert.
    browser.goto(&server.url(&format!("/job?id={}", f.xss)));
    browser.wait_for_heading(&format!("Job {}", f.xss));
    browser.screenshot("9-job-script-payload");
    assert_eq!(browser.text_of("pre.payload"), XSS);
    assert_eq!(browser.alert(), None, "the script payload did not run");
    // A JSON payload is pretty-printed.
    browser.goto(&server.url(&format!("/job?id={}", f.json)));
    browser.wait_for_heading(&format!("Job {}", f.json));
    assert!(browser.text_of("pre.payload").contains("\"to\": \"eve@example.org\""));
    // Untouched by all of it.
    assert_eq!(job(queue, f.completed).state, JobState::Completed);
    assert_eq!(job(queue, f.exhausted2).acknowledged_at, None);
    server.assert_healthy();
}

#[test]
fn an_operator_works_the_dashboard_in_a_browser() {
    let (_dir, queue, args) = sqlite();
    browser_scenario(&queue, &args, "sqlite");
}

/// DNS rebinding, in a browser. Chromium resolves `rebind.test` (another site's name, which
/// its owner pointed at 127.0.0.1), `evil.test` (another site) and `dash.test` (a name given
/// by `--allow-host`) to 127.0.0.1. Under `rebind.test` the dashboard is refused: no page, no
/// form, no secret. A page of `evil.test` holding a form with the server's secret (leaked)
/// is refused by its origin. Under the listen address, and under `dash.test` once it is
/// allowed, the pages and their forms work.
#[test]
fn a_browser_that_reaches_the_dashboard_under_another_name_is_refused() {
    let rules = "--host-resolver-rules=MAP rebind.test 127.0.0.1, MAP evil.test 127.0.0.1, MAP dash.test 127.0.0.1";
    let Some(browser) = Browser::start_with(&screenshots("rebinding"), &[rules]) else { return };
    let (_dir, queue, args) = sqlite();
    fixture(&queue);
    let mut server = Server::start(&args, &[]);
    let port = server.port();

    browser.goto(&format!("http://rebind.test:{port}/queue?name=mail"));
    let text = browser.wait_for_text("--allow-host");
    browser.screenshot("1-refused-under-another-name");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "it says which names it takes: {text}");
    assert!(!text.contains(XSS) && !text.contains("eve@example.org"), "no payload: {text}");
    assert!(browser.find_all("form").is_empty() && browser.find_all("input").is_empty(), "no form, no secret");

    // Under the listen address: the page, and its pause works.
    browser.goto(&server.url("/queue?name=mail"));
    let text = browser.wait_for_heading("Queue mail");
    assert!(text.contains(XSS), "{text}");
    let form = browser.find("form[action='/act/pause']");
    browser.type_into(&browser.find_in(&form, "input[name=note]"), "provider outage");
    browser.click(&browser.find_in(&form, "button"));
    browser.wait_for_heading("Queue mail paused");
    browser.screenshot("2-paused");
    assert!(queue.is_paused("mail").unwrap());

    // A page of another site, with the unpause form and the server's secret in it.
    let page = server.get("/queue?name=mail");
    let unpause = forms(&page.body, "/act/unpause").into_iter().next().expect("an unpause form");
    let attr = |v: &str| v.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;");
    let hidden: String = unpause
        .iter()
        .map(|(n, v)| format!("<input type=\"hidden\" name=\"{}\" value=\"{}\">", attr(n), attr(v)))
        .collect();
    let evil = serve_page(format!(
        "<!doctype html><title>elsewhere</title><h1>Another site</h1>\
         <form method=\"post\" action=\"http://127.0.0.1:{port}/act/unpause\">{hidden}<button>go</button></form>"
    ));
    browser.goto(&format!("http://evil.test:{evil}/"));
    browser.wait_for_heading("Another site");
    browser.click(&browser.find("button"));
    let text = browser.wait_for_text("nothing was changed");
    browser.screenshot("3-refused-from-another-site");
    assert!(text.contains(&format!("evil.test:{evil}")), "it names the origin it refused: {text}");
    assert!(queue.is_paused("mail").unwrap(), "the other site's form did not unpause the queue");
    server.assert_healthy();
    drop(server);

    // A name given by --allow-host: its pages and forms work.
    let mut server = Server::start(&args, &["--allow-host", "dash.test"]);
    let port = server.port();
    browser.goto(&format!("http://dash.test:{port}/queue?name=mail"));
    let text = browser.wait_for_heading("Queue mail");
    browser.screenshot("4-under-an-allowed-name");
    assert!(text.contains("by server-user: provider outage"), "{text}");
    let form = browser.find("form[action='/act/unpause']");
    browser.click(&browser.find_in(&form, "button"));
    browser.wait_for_heading("Queue mail unpaused");
    assert!(!queue.is_paused("mail").unwrap());
    server.assert_healthy();
}

#[cfg(feature = "postgres")]
use crate::pg_support;

#[cfg(feature = "postgres")]
#[test]
fn an_operator_works_the_dashboard_in_a_browser_on_postgres() {
    let Some(scratch) = pg_support::Scratch::new() else { return };
    let queue = scratch.open();
    let args = vec!["--db".to_string(), scratch.url.clone(), "--schema".to_string(), scratch.schema.clone()];
    browser_scenario(&queue, &args, "postgres");
}

/// A refreshing overview, in a browser: the operator turns it on with the page's own link;
/// a job enqueued afterwards (in a queue the page never showed) appears on it without the
/// test reloading it (the page's `<meta http-equiv="refresh">` does); and it stops with the
/// page's other link.
fn refreshing_overview<S: Store>(queue: &Queue<S>, db_args: &[String], test: &str) {
    let Some(browser) = Browser::start(&screenshots(test)) else { return };
    queue.enqueue(NewJob::new("mail", b"before".to_vec())).unwrap();
    let mut server = Server::start(db_args, &[]);
    browser.goto(&server.url("/"));
    let text = browser.wait_for_heading("Queues");
    assert!(!text.contains("late-arrivals"), "{text}");
    browser.click(&browser.find("a[href='/?refresh=5']"));
    browser.wait_for_text("Refreshing every 5 s");
    assert_eq!(browser.url(), server.url("/?refresh=5"));
    browser.screenshot("1-refreshing");

    queue.enqueue(NewJob::new("late-arrivals", b"after the page loaded".to_vec())).unwrap();
    // The counts are read again within seconds, and the page reloads itself every 5 s.
    let text = browser.wait_for_text_within("late-arrivals", Duration::from_secs(60));
    browser.screenshot("2-refreshed");
    assert!(text.contains("Refreshing every 5 s"), "still refreshing: {text}");
    assert_eq!(browser.url(), server.url("/?refresh=5"), "the page reloaded itself, at its own address");
    assert_eq!(browser.alert(), None);

    // Its queue's page, from the refreshing overview, refreshes too; stopping there keeps the
    // queue and offers the pause form again.
    browser.click(&browser.find("a[href='/queue?name=late-arrivals&refresh=5']"));
    let text = browser.wait_for_heading("Queue late-arrivals");
    assert!(text.contains("Refreshing every 5 s") && text.contains("after the page loaded"), "{text}");
    assert!(browser.find_all("form[action='/act/pause']").is_empty(), "no form on a page that reloads itself");
    browser.click(&browser.find("a[href='/queue?name=late-arrivals']"));
    let text = browser.wait_for_text("Refresh: every 5 s");
    assert_eq!(browser.url(), server.url("/queue?name=late-arrivals"));
    assert!(!text.contains("Refreshing every"), "{text}");
    browser.find("form[action='/act/pause']");
    browser.screenshot("3-stopped");
    server.assert_healthy();
}

#[test]
fn a_refreshing_overview_shows_a_job_enqueued_after_it_loaded() {
    let (_dir, queue, args) = sqlite();
    refreshing_overview(&queue, &args, "refresh-sqlite");
}

#[cfg(feature = "postgres")]
#[test]
fn a_refreshing_overview_shows_a_job_enqueued_after_it_loaded_on_postgres() {
    let Some(scratch) = pg_support::Scratch::new() else { return };
    let queue = scratch.open();
    let args = vec!["--db".to_string(), scratch.url.clone(), "--schema".to_string(), scratch.schema.clone()];
    refreshing_overview(&queue, &args, "refresh-postgres");
}

// ------------------------------------------------------------------------------- forged and stale actions

/// The acknowledge form of the job's page, as the page drew it.
fn ack_form(server: &Server, id: JobId) -> Vec<(String, String)> {
    let page = server.get(&format!("/job?id={id}"));
    assert_eq!(page.status, 200, "{}", page.body);
    forms(&page.body, "/act/acknowledge").into_iter().next().expect("an acknowledge form")
}

#[test]
fn a_post_without_the_csrf_token_or_with_a_wrong_one_changes_nothing() {
    let (_dir, queue, args) = sqlite();
    let f = fixture(&queue);
    let mut server = Server::start(&args, &[]);
    let form = with(&ack_form(&server, f.exhausted), "note", "forged");
    for forged in [without(&form, "csrf"), with(&form, "csrf", "0".repeat(64).as_str()), with(&form, "csrf", "")] {
        let reply = post(&server.addr, "/act/acknowledge", &forged, None);
        assert_eq!(reply.status, 403, "{}", reply.body);
        assert!(reply.body.contains("CSRF token") && reply.body.contains("nothing was changed"), "{}", reply.body);
        let j = job(&queue, f.exhausted);
        assert_eq!((j.acknowledged_at, j.decision), (None, None), "nothing changed");
    }
    // A JSON or multipart body is no form: refused the same way, before anything is read.
    let raw = format!(
        "POST /act/acknowledge HTTP/1.1\r\nHost: {}\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi",
        server.addr
    );
    assert_eq!(exchange(&server.addr, raw.as_bytes()).status, 415);
    // The page's own form does it (the check is not refusing everything).
    let reply = post(&server.addr, "/act/acknowledge", &form, None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(job(&queue, f.exhausted).acknowledged_at.is_some());
    // The server's secret is per start: a form of another server is refused.
    let other = Server::start(&args, &[]);
    let stale_secret = ack_form(&server, f.exhausted2);
    let reply = post(&other.addr, "/act/acknowledge", &stale_secret, None);
    assert_eq!(reply.status, 403, "{}", reply.body);
    server.assert_healthy();
}

#[test]
fn a_stale_pages_action_is_refused_with_a_message_saying_so() {
    let (_dir, queue, args) = sqlite();
    let f = fixture(&queue);
    let mut server = Server::start(&args, &[]);

    // The page is drawn; then someone replays the job, and a worker exhausts it again (the
    // only due job once the pending ones are cancelled).
    let form = with(&ack_form(&server, f.exhausted), "by", "alice");
    queue.cancel(f.xss).unwrap();
    queue.cancel(f.json).unwrap();
    queue.operator("bob").note("retry after fix").replay(f.exhausted).unwrap();
    let again = queue.claim("mail", "worker-2", LEASE).unwrap().expect("the replayed job");
    assert_eq!(again.id(), f.exhausted);
    queue.exhaust(&again.token(), "smtp 550 again").unwrap();
    let reply = post(&server.addr, "/act/acknowledge", &form, None);
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert!(reply.body.contains("changed since this page was drawn"), "{}", reply.body);
    assert!(reply.body.contains("nothing was changed"), "{}", reply.body);
    let j = job(&queue, f.exhausted);
    assert_eq!(j.acknowledged_at, None, "the new exhaustion was not acknowledged by the old page");

    // A resolve form of an outcome someone resolved meanwhile.
    let page = server.get("/unknown");
    let resolve = forms(&page.body, "/act/resolve").into_iter().next().expect("a resolve form");
    queue.operator("bob").resolve(&job(&queue, f.unknown).token().unwrap(), fenceq::Resolution::Retry).unwrap();
    let reply = post(&server.addr, "/act/resolve", &with(&resolve, "outcome", "complete"), None);
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert!(reply.body.contains("changed since this page was drawn"), "{}", reply.body);
    let j = job(&queue, f.unknown);
    assert_eq!(j.state, JobState::Pending, "bob's retry stands");
    assert_eq!(j.decision.unwrap().by.as_deref(), Some("bob"));

    // A pause form of a queue someone paused meanwhile: carol's record stays.
    let page = server.get("/queue?name=mail");
    let pause = forms(&page.body, "/act/pause").into_iter().next().expect("a pause form");
    queue.operator("carol").note("first").pause("mail").unwrap();
    let reply = post(&server.addr, "/act/pause", &with(&pause, "note", "second"), None);
    assert_eq!(reply.status, 409, "{}", reply.body);
    let record = queue.paused_queues().unwrap().into_iter().find(|p| p.queue == "mail").unwrap();
    assert_eq!(record.note.as_deref(), Some("first"));
    // And an unpause form of a pause someone ended meanwhile.
    let page = server.get("/queue?name=mail");
    let unpause = forms(&page.body, "/act/unpause").into_iter().next().expect("an unpause form");
    queue.operator("carol").unpause("mail").unwrap();
    let reply = post(&server.addr, "/act/unpause", &unpause, None);
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert!(!queue.is_paused("mail").unwrap());
    server.assert_healthy();
}

#[test]
fn read_only_offers_no_action_and_refuses_posts() {
    let (_dir, queue, args) = sqlite();
    let f = fixture(&queue);
    let writable = Server::start(&args, &[]);
    let form = ack_form(&writable, f.exhausted);
    drop(writable);
    let mut server = Server::start(&args, &["--read-only"]);
    for path in [
        format!("/job?id={}", f.exhausted),
        format!("/job?id={}", f.unknown),
        format!("/job?id={}", f.xss),
        "/exhausted".to_string(),
        "/unknown".to_string(),
        "/queue?name=mail".to_string(),
        "/queue?name=reports".to_string(),
        "/".to_string(),
    ] {
        let page = server.get(&path);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(!page.body.contains("<form"), "{path} offers a form: {}", page.body);
        assert!(page.body.contains("read-only"), "{path} says it is read-only");
    }
    for action in ["acknowledge", "replay", "cancel", "resolve", "pause", "unpause"] {
        let reply = post(&server.addr, &format!("/act/{action}"), &form, None);
        assert_eq!(reply.status, 403, "{action}: {}", reply.body);
        assert!(reply.body.contains("--read-only"), "{}", reply.body);
    }
    let j = job(&queue, f.exhausted);
    assert_eq!((j.acknowledged_at, j.decision), (None, None));
    server.assert_healthy();
}

// ------------------------------------------------------------------------------- access

fn serve_cmd(args: &[String], extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fenceq"))
        .args(args)
        .arg("serve")
        .args(extra)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_non_loopback_address_without_a_token_refuses_to_start() {
    let (_dir, _queue, args) = sqlite();
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let out = serve_cmd(&args, &["--listen", listen]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("refusing to listen") && stderr.contains("--token-file"), "{stderr}");
        assert!(out.stdout.is_empty(), "it never served");
    }
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "ops short\n").unwrap();
    let out = serve_cmd(&args, &["--listen", "0.0.0.0:0", "--token-file", tokens.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("at least 16 characters") && !stderr.contains("short"), "{stderr}");
}

#[test]
fn a_token_signs_in_and_names_the_operator() {
    let (_dir, queue, args) = sqlite();
    let f = fixture(&queue);
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let secret = "7f3c9a1e5b2d8f4a6c0e1b3d5f7a9c2e";
    std::fs::write(&tokens, format!("# operators\nalice {secret}\n")).unwrap();
    let mut server = Server::start(&args, &["--token-file", tokens.to_str().unwrap()]);

    // Nothing without signing in.
    let page = server.get("/");
    assert_eq!((page.status, page.header("location")), (303, Some("/login")));
    assert!(!page.body.contains("mail"));
    assert_eq!(server.get("/metrics").status, 401);
    assert_eq!(server.get(&format!("/job?id={}", f.xss)).status, 303);
    let login = server.get("/login");
    let fields = forms(&login.body, "/login").into_iter().next().expect("a sign-in form");

    let wrong = post(&server.addr, "/login", &with(&fields, "token", "7f3c9a1e5b2d8f4a6c0e1b3d5f7a9c2f"), None);
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    let signed = post(&server.addr, "/login", &with(&fields, "token", secret), None);
    assert_eq!(signed.status, 303, "{}", signed.body);
    let cookie = signed.header("set-cookie").expect("a session cookie");
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(!cookie.contains(secret), "the cookie is a session, not the token");
    let session = cookie.split(';').next().unwrap();
    let page = get(&server.addr, "/", Some(session));
    assert_eq!(page.status, 200);
    assert!(page.body.contains("signed in: alice"));

    // A scraper with the token.
    let metrics = exchange(
        &server.addr,
        format!("GET /metrics HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {secret}\r\n\r\n", server.addr).as_bytes(),
    );
    assert_eq!(metrics.status, 200);
    assert!(metrics.body.contains("fenceq_queue_paused{queue=\"reports\"} 1"), "{}", metrics.body);

    // A change made with a named token records the token's name, whatever the form says.
    let page = get(&server.addr, &format!("/job?id={}", f.exhausted), Some(session));
    let form = forms(&page.body, "/act/acknowledge").into_iter().next().expect("an acknowledge form");
    assert!(!page.body.contains("name=\"by\""), "a named token is not asked its name");
    let reply = post(&server.addr, "/act/acknowledge", &with(&form, "by", "mallory"), Some(session));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(job(&queue, f.exhausted).decision.unwrap().by.as_deref(), Some("alice"));
    // Without the session, the same form is refused.
    let reply = post(&server.addr, "/act/acknowledge", &ack_form_of(&page.body), None);
    assert_eq!(reply.status, 401);

    // Signing out ends the session.
    let logout = forms(&page.body, "/logout").into_iter().next().expect("a sign-out form");
    assert_eq!(post(&server.addr, "/logout", &logout, Some(session)).status, 303);
    assert_eq!(get(&server.addr, "/", Some(session)).status, 303);
    server.assert_healthy();
}

fn ack_form_of(html: &str) -> Vec<(String, String)> {
    forms(html, "/act/acknowledge").into_iter().next().expect("an acknowledge form")
}

// ------------------------------------------------------------------------------- host names and origins

/// The pause form of the queue's page, as the page drew it.
fn pause_form(server: &Server) -> Vec<(String, String)> {
    let page = server.get("/queue?name=mail");
    assert_eq!(page.status, 200, "{}", page.body);
    forms(&page.body, "/act/pause").into_iter().next().expect("a pause form")
}

fn value_of<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no field {name}"))
}

/// A page of another site whose name its owner rebinds to 127.0.0.1 (DNS rebinding) reaches
/// the server with that name in `Host`: it is refused, and never gets a page, a payload or
/// the forms' CSRF secret; a request naming no host is refused alike.
#[test]
fn a_request_naming_another_host_gets_neither_a_page_nor_the_csrf_token() {
    let (_dir, queue, args) = sqlite();
    let f = fixture(&queue);
    let mut server = Server::start(&args, &[]);
    let port = server.port();
    let csrf = value_of(&pause_form(&server), "csrf").to_string();
    let foreign = [
        format!("rebind.attacker.example:{port}"),
        "rebind.attacker.example".to_string(),
        format!("localhost.attacker.example:{port}"),
        format!("127.0.0.1.attacker.example:{port}"),
        format!("localhost.:{port}"),
        format!("127.0.0.1:{}", if port == 65535 { 1 } else { port + 1 }),
        // No port is port 80 (HTTP's default): not this server's.
        "127.0.0.1".to_string(),
        "localhost".to_string(),
        format!("127.0.0.1:{port}:{port}"),
        format!("[::1]:{port}"),
        String::new(),
    ];
    let paths = ["/", "/queue?name=mail", &format!("/job?id={}", f.xss), "/exhausted", "/metrics", "/login"];
    for host in &foreign {
        for path in paths {
            let reply = get_with(&server.addr, path, &[("Host", host)]);
            assert_eq!(reply.status, 421, "Host {host:?} {path}: {}", reply.body);
            assert!(reply.body.contains("--allow-host"), "the refusal says how to add a name: {}", reply.body);
            assert!(reply.body.contains(&format!("127.0.0.1:{port}")), "and which it takes: {}", reply.body);
            assert!(!reply.body.contains(&csrf), "Host {host:?} {path}: the CSRF secret: {}", reply.body);
            assert!(!reply.body.contains(XSS_SHOWN) && !reply.body.contains(XSS), "a payload: {}", reply.body);
            assert!(!reply.body.contains("eve@example.org") && !reply.body.contains("<form"), "{}", reply.body);
        }
    }
    // No Host at all: HTTP/1.1 and HTTP/1.0 alike.
    let reply = get_with(&server.addr, "/queue?name=mail", &[]);
    assert_eq!(reply.status, 421, "{}", reply.body);
    let reply = exchange(&server.addr, b"GET /queue?name=mail HTTP/1.0\r\n\r\n");
    assert_eq!(reply.status, 421, "{}", reply.body);
    assert!(!reply.body.contains(&csrf) && !reply.body.contains(XSS_SHOWN), "{}", reply.body);
    // A change under the foreign name, with the right token, changes nothing either.
    let rebound = format!("rebind.attacker.example:{port}");
    let origin = format!("http://{rebound}");
    let reply = post_with(&server.addr, "/act/pause", &pause_form(&server), &[("Host", &rebound), ("Origin", &origin)]);
    assert_eq!(reply.status, 421, "{}", reply.body);
    assert!(!queue.is_paused("mail").unwrap(), "the queue was not paused");

    // The names it was started for (case does not matter): the page, as before.
    for host in [server.addr.clone(), format!("localhost:{port}"), format!("LocalHost:{port}")] {
        let reply = get_with(&server.addr, "/queue?name=mail", &[("Host", &host)]);
        assert_eq!(reply.status, 200, "Host {host:?}: {}", reply.body);
        assert!(reply.body.contains(&csrf) && reply.body.contains(XSS_SHOWN), "{}", reply.body);
    }
    server.assert_healthy();
}

/// A POST with the page's own CSRF secret, from a page of another origin (a token leaked, or
/// a rebound name that reached the server another way), is refused by its `Origin`, or its
/// `Referer` when it sends no `Origin`, and changes nothing; the page's own origin, or a
/// client that sends neither (curl, a script), is let through to the CSRF check as before.
#[test]
fn a_post_from_another_origin_is_refused_and_changes_nothing() {
    let (_dir, queue, args) = sqlite();
    fixture(&queue);
    let mut server = Server::start(&args, &[]);
    let port = server.port();
    let host = server.addr.clone();
    let form = with(&pause_form(&server), "note", "forged");
    // (With `no-referrer` a browser would send `Origin: null` on the pages' own forms.)
    assert_eq!(server.get("/").header("referrer-policy"), Some("same-origin"));
    let other_port = if port == 65535 { 1 } else { port + 1 };
    let refused: Vec<(&str, String)> = vec![
        ("Origin", format!("http://rebind.attacker.example:{port}")),
        ("Origin", "http://rebind.attacker.example".to_string()),
        ("Origin", format!("http://127.0.0.1:{other_port}")),
        ("Origin", format!("https://127.0.0.1:{port}")),
        ("Origin", format!("http://localhost:{port}")),
        ("Origin", format!("http://127.0.0.1:{port}.attacker.example")),
        ("Origin", format!("http://127.0.0.1:{port}/")),
        // A page that sends no referrer (or a sandboxed frame) sends `null`: no origin to trust.
        ("Origin", "null".to_string()),
        ("Origin", String::new()),
        ("Referer", format!("http://rebind.attacker.example:{port}/queue?name=mail")),
        ("Referer", format!("http://127.0.0.1:{port}.attacker.example/")),
        ("Referer", format!("http://127.0.0.1:{port}@rebind.attacker.example/")),
        ("Referer", format!("https://127.0.0.1:{port}/queue?name=mail")),
        ("Referer", "/queue?name=mail".to_string()),
    ];
    for (name, value) in &refused {
        let reply = post_with(&server.addr, "/act/pause", &form, &[("Host", &host), (name, value)]);
        assert_eq!(reply.status, 403, "{name}: {value:?}: {}", reply.body);
        assert!(reply.body.contains("nothing was changed"), "{name}: {value:?}: {}", reply.body);
        assert!(reply.body.contains(&format!("http://127.0.0.1:{port}")), "it names its origin: {}", reply.body);
        assert!(!queue.is_paused("mail").unwrap(), "{name}: {value:?} paused the queue");
    }
    // Sign-in and sign-out are POSTs too.
    let reply =
        post_with(&server.addr, "/login", &[], &[("Host", &host), ("Origin", "http://rebind.attacker.example")]);
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert!(reply.body.contains(&format!("http://127.0.0.1:{port}")), "refused for its origin: {}", reply.body);

    // The page's own origin: paused. (`Origin` is what counts when both are sent.)
    let own = format!("http://{host}");
    let foreign_referer = "http://rebind.attacker.example/";
    let headers = [("Host", host.as_str()), ("Origin", own.as_str()), ("Referer", foreign_referer)];
    let reply = post_with(&server.addr, "/act/pause", &form, &headers);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(queue.is_paused("mail").unwrap());
    // A `Referer` of the page's own origin, and no `Origin`: unpaused.
    let page = server.get("/queue?name=mail");
    let unpause = forms(&page.body, "/act/unpause").into_iter().next().expect("an unpause form");
    let referer = format!("http://{host}/queue?name=mail");
    let reply = post_with(&server.addr, "/act/unpause", &unpause, &[("Host", &host), ("Referer", &referer)]);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(!queue.is_paused("mail").unwrap());
    // The CSRF check stands behind it: the right origin without the token is refused.
    let reply = post_with(
        &server.addr,
        "/act/pause",
        &without(&pause_form(&server), "csrf"),
        &[("Host", &host), ("Origin", &own)],
    );
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert!(reply.body.contains("CSRF token"), "{}", reply.body);
    assert!(!queue.is_paused("mail").unwrap());
    server.assert_healthy();
}

/// `--allow-host NAME` adds a name the server answers to (with its port, or with none, as a
/// reverse proxy in front sends it), and a change from a page under it is taken; other names
/// stay refused, and a value that is not a host name keeps the server from starting.
#[test]
fn allow_host_adds_a_name_the_server_answers_to() {
    let (_dir, queue, args) = sqlite();
    fixture(&queue);
    let mut server = Server::start(&args, &["--allow-host", "dash.example", "--allow-host", "Proxy.Example:8443"]);
    let port = server.port();
    for host in [
        format!("dash.example:{port}"),
        "DASH.example".to_string(),
        "proxy.example:8443".to_string(),
        server.addr.clone(),
        format!("localhost:{port}"),
    ] {
        let reply = get_with(&server.addr, "/queue?name=mail", &[("Host", &host)]);
        assert_eq!(reply.status, 200, "Host {host:?}: {}", reply.body);
    }
    for host in [
        format!("dash.example:{}", if port == 65535 { 1 } else { port + 1 }),
        "proxy.example".to_string(),
        format!("proxy.example:{port}"),
        format!("other.example:{port}"),
        format!("sub.dash.example:{port}"),
    ] {
        let reply = get_with(&server.addr, "/queue?name=mail", &[("Host", &host)]);
        assert_eq!(reply.status, 421, "Host {host:?}: {}", reply.body);
        assert!(reply.body.contains("dash.example") && reply.body.contains("proxy.example:8443"), "{}", reply.body);
    }
    // A change from a page under the added name, directly and behind a TLS proxy.
    let named = format!("dash.example:{port}");
    let origin = format!("http://{named}");
    let reply = post_with(&server.addr, "/act/pause", &pause_form(&server), &[("Host", &named), ("Origin", &origin)]);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(queue.is_paused("mail").unwrap());
    let page = server.get("/queue?name=mail");
    let unpause = forms(&page.body, "/act/unpause").into_iter().next().expect("an unpause form");
    let proxied = |origin: &str| {
        let headers = [("Host", "dash.example"), ("X-Forwarded-Proto", "https"), ("Origin", origin)];
        post_with(&server.addr, "/act/unpause", &unpause, &headers)
    };
    // (The proxy says the browser used https: an http page of that name is another origin.)
    assert_eq!(proxied("http://dash.example").status, 403);
    assert!(queue.is_paused("mail").unwrap());
    let reply = proxied("https://dash.example");
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(!queue.is_paused("mail").unwrap());
    server.assert_healthy();

    for bad in ["", "http://dash.example/", "dash example", "dash.example:99999", "dash.example:", "*.example"] {
        let out = serve_cmd(&args, &["--listen", "127.0.0.1:0", "--allow-host", bad]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{bad:?}: {stderr}");
        assert!(stderr.contains("--allow-host"), "{bad:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{bad:?}: it never served");
    }
}

/// On IPv6 loopback the listen address is the bracketed literal (any spelling of it), and
/// `localhost`; on all addresses (0.0.0.0), the loopback names and `--allow-host`'s only.
#[test]
fn the_names_taken_on_ipv6_loopback_and_on_all_addresses() {
    let (_dir, queue, args) = sqlite();
    fixture(&queue);
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let mut server = Server::start_on(&args, "[::1]:0", &[]);
        let port = server.port();
        assert_eq!(server.addr, format!("[::1]:{port}"));
        for (host, status) in [
            (format!("[::1]:{port}"), 200),
            (format!("[0:0:0:0:0:0:0:1]:{port}"), 200),
            (format!("localhost:{port}"), 200),
            (format!("::1:{port}"), 421),
            ("[::1]".to_string(), 421),
            (format!("127.0.0.1:{port}"), 421),
            (format!("[::2]:{port}"), 421),
        ] {
            let reply = get_with(&server.addr, "/", &[("Host", &host)]);
            assert_eq!(reply.status, status, "Host {host:?}: {}", reply.body);
        }
        let own = format!("http://[::1]:{port}");
        let reply =
            post_with(&server.addr, "/act/pause", &pause_form(&server), &[("Host", &server.addr), ("Origin", &own)]);
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(queue.is_paused("mail").unwrap());
        server.assert_healthy();
    } else {
        eprintln!("skipped the IPv6 half: no IPv6 loopback here");
    }

    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice 7f3c9a1e5b2d8f4a6c0e1b3d5f7a9c2e\n").unwrap();
    let tokens = tokens.to_str().unwrap();
    let mut server = Server::start_on(&args, "0.0.0.0:0", &["--token-file", tokens, "--allow-host", "queue.lan"]);
    let port = server.port();
    let addr = format!("127.0.0.1:{port}");
    for (host, status) in [
        (format!("127.0.0.1:{port}"), 303),
        (format!("localhost:{port}"), 303),
        (format!("[::1]:{port}"), 303),
        (format!("queue.lan:{port}"), 303),
        (format!("0.0.0.0:{port}"), 421),
        (format!("rebind.attacker.example:{port}"), 421),
    ] {
        let reply = get_with(&addr, "/", &[("Host", &host)]);
        assert_eq!(reply.status, status, "Host {host:?}: {}", reply.body);
    }
    server.assert_healthy();
}

/// `/paused` lists who paused each queue, when and why, with its unpause (which works from
/// there); every answer, an error page too, says the server's time in `Server-Timing`.
#[test]
fn the_paused_page_names_who_paused_and_every_answer_carries_its_server_time() {
    let (_dir, queue, args) = sqlite();
    fixture(&queue);
    let mut server = Server::start(&args, &[]);
    let page = server.get("/paused");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("reports") && page.body.contains("carol"), "{}", page.body);
    assert!(page.body.contains("month-end freeze"), "{}", page.body);
    for path in ["/", "/paused", "/queue?name=mail", "/metrics", "/job?id=999999", "/queue?name=mail&after=x"] {
        let reply = server.get(path);
        let timing = reply.header("server-timing").unwrap_or_else(|| panic!("{path}: no Server-Timing"));
        let ms: f64 = timing.strip_prefix("app;dur=").and_then(|v| v.parse().ok()).expect(timing);
        assert!((0.0..10_000.0).contains(&ms), "{path}: {timing}");
    }
    let unpause = forms(&page.body, "/act/unpause").into_iter().next().expect("an unpause form");
    let reply = post(&server.addr, "/act/unpause", &with(&unpause, "by", "dave"), None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(queue.paused_queues().unwrap().is_empty());
    assert!(server.get("/paused").body.contains("No queue is paused"));
    server.assert_healthy();
}

/// `/schedules` shows what the database records of every periodic job (read-only, linked
/// from every page's header): the registered one with its definition and queue, one whose
/// process stopped (overdue), and text from the database escaped.
#[cfg(feature = "schedule")]
#[test]
fn the_schedules_page_shows_the_recorded_schedules_escaped_and_read_only() {
    let (dir, queue, args) = sqlite();
    let mut server = Server::start(&args, &[]);
    assert!(server.get("/schedules").body.contains("No schedule is recorded"));
    let hourly = fenceq::Schedule::cron("0 * * * *", "UTC").unwrap();
    queue.schedule("hourly", hourly, NewJob::new("reports", b"r".to_vec())).unwrap();
    queue.enqueue_schedules().unwrap();
    let conn = fenceq::rusqlite::Connection::open(dir.path().join("queue.db")).unwrap();
    conn.execute(
        "INSERT INTO fenceq_schedules (name, definition, queue, next_tick, recorded_at) VALUES ('stopped', ?1, ?1, 60000, 1000)",
        [XSS],
    )
    .unwrap();

    let page = server.get("/schedules");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("cron &quot;0 * * * *&quot; in UTC"), "{}", page.body);
    assert!(page.body.contains("href=\"/queue?name=reports\""), "{}", page.body);
    assert_eq!(page.body.matches("overdue</span>").count(), 1, "only the stopped one: {}", page.body);
    assert!(!page.body.contains(XSS) && page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{}", page.body);
    assert!(!page.body.contains("<form"), "read-only: no action: {}", page.body);
    assert!(server.get("/").body.contains("href=\"/schedules\""), "the header links it");
    let raw = format!("POST /schedules HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\n\r\n", server.addr);
    let post = exchange(&server.addr, raw.as_bytes());
    assert_eq!(post.status, 405, "{}", post.body);
    server.assert_healthy();
}

// ------------------------------------------------------------------------------- bad input

#[test]
fn bad_input_gets_a_clear_4xx_and_the_server_keeps_serving() {
    let (_dir, queue, args) = sqlite();
    let f = fixture(&queue);
    let mut server = Server::start(&args, &[]);
    let cases: Vec<(String, u16, &str)> = vec![
        ("/job?id=999999".into(), 404, "no job 999999"),
        ("/job?id=abc".into(), 400, "is not a job id"),
        ("/job?id=-3".into(), 400, "is not a job id"),
        ("/job?id=99999999999999999999999".into(), 400, "is not a job id"),
        ("/job".into(), 400, "which job?"),
        ("/queue?name=nope".into(), 404, "no queue named"),
        ("/queue?name=".into(), 400, "invalid queue name"),
        ("/queue".into(), 400, "which queue?"),
        ("/queue?name=mail&after=xyz".into(), 400, "malformed cursor"),
        ("/queue?name=mail&after=-1".into(), 400, "malformed cursor"),
        ("/queue?name=mail&state=bogus".into(), 400, "no state named"),
        ("/exhausted?after=1e9".into(), 400, "malformed cursor"),
        ("/unknown?after=%zz".into(), 400, "malformed %-escape"),
        ("/queue?name=%ff".into(), 400, "not UTF-8"),
        ("/no/such/page".into(), 404, "no such page"),
        ("/act/acknowledge".into(), 405, "POST"),
        (format!("/job?id={}&junk=<script>", f.xss), 200, XSS_SHOWN),
    ];
    for (path, status, says) in &cases {
        let reply = server.get(path);
        assert_eq!(reply.status, *status, "{path}: {}", reply.body);
        assert!(reply.body.contains(says), "{path} says {says:?}: {}", reply.body);
    }
    // A huge query string: refused before it is read whole.
    let huge = format!("/queue?name=mail&after={}", "9".repeat(100_000));
    let reply = server.get(&huge);
    assert_eq!(reply.status, 414, "{}", reply.body);
    // Huge headers, a huge body, a body sent in chunks, a request that is not HTTP, other methods.
    let headers = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(20_000));
    assert_eq!(exchange(&server.addr, headers.as_bytes()).status, 431);
    let body = "note=".to_string() + &"x".repeat(200_000);
    let raw = format!(
        "POST /act/pause HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(exchange(&server.addr, raw.as_bytes()).status, 413);
    let chunked = "POST /act/pause HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert_eq!(exchange(&server.addr, chunked.as_bytes()).status, 501);
    assert_eq!(exchange(&server.addr, b"HELLO THERE\r\n\r\n").status, 400);
    let delete = format!("DELETE / HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    assert_eq!(exchange(&server.addr, delete.as_bytes()).status, 405);
    // A note past the library's limit is its clear refusal, and changes nothing.
    let form = ack_form(&server, f.exhausted);
    let reply = post(&server.addr, "/act/acknowledge", &with(&form, "note", &"n".repeat(5000)), None);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.body.contains("invalid decision note"), "{}", reply.body);
    assert_eq!(job(&queue, f.exhausted).acknowledged_at, None);
    // An action on a job that does not exist, or with a mangled expectation.
    assert_eq!(post(&server.addr, "/act/acknowledge", &with(&form, "id", "999999"), None).status, 409);
    assert_eq!(post(&server.addr, "/act/acknowledge", &with(&form, "id", "x"), None).status, 400);
    assert_eq!(post(&server.addr, "/act/acknowledge", &without(&form, "state"), None).status, 400);
    assert_eq!(post(&server.addr, "/act/acknowledge", &with(&form, "attempt", "zz"), None).status, 409);
    assert_eq!(job(&queue, f.exhausted).acknowledged_at, None);
    // Still serving, and never a panic.
    assert_eq!(server.get("/").status, 200);
    server.assert_healthy();
}

/// How the script payload appears in a page's source: escaped.
const XSS_SHOWN: &str = "&lt;script&gt;alert(1)&lt;/script&gt;";

#[test]
fn a_slow_client_holds_a_worker_only_until_its_deadline() {
    let (_dir, queue, args) = sqlite();
    fixture(&queue);
    // One worker, a deadline of one second: a client that sends half a request and waits.
    let mut server = Server::start(&args, &["--workers", "1", "--request-timeout", "1s"]);
    let mut slow = std::net::TcpStream::connect(&server.addr).unwrap();
    std::io::Write::write_all(&mut slow, b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let started = Instant::now();
    // The next client is answered once the slow one's deadline has passed, not never.
    let reply = server.get("/");
    assert_eq!(reply.status, 200);
    assert!(started.elapsed() < Duration::from_secs(30), "answered after {:?}", started.elapsed());
    // The slow client got 408 and a closed connection.
    slow.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut answer = Vec::new();
    let _ = std::io::Read::read_to_end(&mut slow, &mut answer);
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 408"), "{:?}", String::from_utf8_lossy(&answer));
    server.assert_healthy();
}

#[test]
fn metrics_are_the_prometheus_text_of_the_library() {
    let (_dir, queue, args) = sqlite();
    fixture(&queue);
    let server = Server::start(&args, &["--read-only"]);
    let reply = server.get("/metrics");
    assert_eq!(reply.status, 200);
    assert!(reply.header("content-type").unwrap().starts_with("text/plain; version=0.0.4"));
    let lines = |text: &str| -> Vec<String> {
        // The pending age moves with the clock between the two readings; the rest must match.
        text.lines().filter(|l| !l.starts_with("fenceq_oldest_pending_age_seconds{")).map(str::to_string).collect()
    };
    assert_eq!(lines(&reply.body), lines(&queue.metrics_text().unwrap()));
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_password_never_shows_on_a_page() {
    let Some(scratch) = pg_support::Scratch::new() else { return };
    let queue = scratch.open();
    fixture(&queue);
    // The test server trusts local logins: the password is carried, never checked.
    let url = scratch.url.replacen("postgres://postgres@", "postgres://postgres:s3cret-pw@", 1);
    assert!(url.contains("s3cret-pw"), "the URL names the user: {url}");
    let args = vec!["--db".to_string(), url, "--schema".to_string(), scratch.schema.clone()];
    let mut server = Server::start(&args, &["--read-only"]);
    for path in ["/", "/queue?name=mail", "/exhausted", "/unknown", "/job?id=999999", "/nope"] {
        let page = server.get(path);
        assert!(!page.body.contains("s3cret-pw"), "{path}: {}", page.body);
        if path == "/" {
            assert!(page.body.contains("postgres:***@"), "{}", page.body);
        }
    }
    server.assert_healthy();
}

// ------------------------------------------------------------------ completions per minute

/// One bar of the overview's completions chart: its minute, count and drawn height.
#[derive(Debug, PartialEq)]
struct Bar {
    minute: i64,
    count: u64,
    height: u64,
}

fn bars(html: &str) -> Vec<Bar> {
    let attr = |rect: &str, name: &str| -> String {
        let start = rect.find(&format!(" {name}=\"")).unwrap_or_else(|| panic!("{name} in {rect}")) + name.len() + 3;
        rect[start..].split('"').next().unwrap().to_string()
    };
    html.split("<rect ")
        .skip(1)
        .map(|rest| {
            let rect = &rest[..rest.find('>').unwrap()];
            Bar {
                minute: attr(rect, "data-minute").parse().unwrap(),
                count: attr(rect, "data-count").parse().unwrap(),
                height: attr(rect, "height").parse().unwrap(),
            }
        })
        .collect()
}

/// Completions made at known instants (a manual clock, through the library) are the bars of
/// the overview's chart: each in the minute of its settling, scaled to the busiest minute;
/// a completion older than the hour and a cancelled job are not counted. The served page is
/// drawn on the system clock, so the bars are matched by their minute, not their position
/// (the hour may move on by a minute between the test's reading and the server's).
fn completions_chart<S: Store>(queue: &Queue<S>, clock: &fenceq::ManualClock, db_args: &[String]) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let minute = |ago: i64| (now.div_euclid(60_000) - ago) * 60_000;
    let complete_at = |at: i64| {
        clock.set(at);
        queue.enqueue(NewJob::new("chart", b"x".to_vec())).unwrap();
        let claim = queue.claim("chart", "worker-1", LEASE).unwrap().expect("a due job");
        queue.complete(&claim.token()).unwrap();
    };
    complete_at(minute(120) + 1);
    for second in [5_000, 20_000, 59_999] {
        complete_at(minute(10) + second);
    }
    complete_at(minute(3));
    let cancelled = queue.enqueue(NewJob::new("chart", b"x".to_vec())).unwrap().id();
    queue.cancel(cancelled).unwrap();

    let mut server = Server::start(db_args, &["--read-only"]);
    let page = server.get("/");
    assert_eq!(page.status, 200);
    let bars = bars(&page.body);
    assert_eq!(bars.len(), 60, "one bar a minute for the hour");
    assert!(bars.windows(2).all(|w| w[1].minute == w[0].minute + 60_000), "consecutive minutes, oldest first");
    let at = |m: i64| bars.iter().find(|b| b.minute == m).unwrap_or_else(|| panic!("no bar for {m}: {bars:?}"));
    assert_eq!(at(minute(10)), &Bar { minute: minute(10), count: 3, height: 60 });
    assert_eq!(at(minute(3)), &Bar { minute: minute(3), count: 1, height: 20 });
    let others: Vec<&Bar> = bars.iter().filter(|b| b.minute != minute(10) && b.minute != minute(3)).collect();
    assert!(others.iter().all(|b| b.count == 0 && b.height == 0), "{others:?}");
    assert!(page.body.contains("4 completed in the last 60 minutes; at most 3 in one minute."), "{}", page.body);
    assert_eq!(
        queue.completions_per_minute(60).unwrap().iter().map(|m| m.1).sum::<u64>(),
        4,
        "the library counts the same"
    );
    server.assert_healthy();
}

#[test]
fn the_overview_charts_completions_per_minute() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    let clock = fenceq::ManualClock::new(0);
    let queue = Queue::builder().path(&path).clock(clock.clone()).open().unwrap();
    let args = vec!["--db".to_string(), path.display().to_string()];
    completions_chart(&queue, &clock, &args);
}

#[cfg(feature = "postgres")]
#[test]
fn the_overview_charts_completions_per_minute_on_postgres() {
    let Some(scratch) = pg_support::Scratch::new() else { return };
    let clock = fenceq::ManualClock::new(0);
    let queue = scratch.builder().clock(clock.clone()).open_postgres().unwrap();
    let args = vec!["--db".to_string(), scratch.url.clone(), "--schema".to_string(), scratch.schema.clone()];
    completions_chart(&queue, &clock, &args);
}

#[test]
fn a_queue_backing_off_shows_on_the_overview_and_on_its_page() {
    let (_dir, queue, args) = sqlite();
    queue.enqueue(NewJob::new("telegram", b"update".to_vec())).unwrap();
    let token = queue.claim("telegram", "w", Duration::from_secs(30)).unwrap().expect("due").token();
    let snooze = fenceq::Snooze::new(Duration::from_secs(3600))
        .scope(fenceq::BackoffScope::Queue)
        .reason("429 from the provider");
    queue.snooze(&token, snooze).unwrap();
    let mut server = Server::start(&args, &["--read-only"]);
    let page = server.get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("backs off 59m") && page.body.contains("429 from the provider"), "{}", page.body);
    let page = server.get("/queue?name=telegram");
    assert!(page.body.contains("backing off") && page.body.contains("429 from the provider"), "{}", page.body);
    server.assert_healthy();
}

#[test]
fn the_overview_and_a_queue_page_say_how_old_their_counts_are() {
    let (_dir, queue, args) = sqlite();
    queue.enqueue(NewJob::new("mail", b"hello".to_vec())).unwrap();
    let mut server = Server::start(&args, &["--read-only"]);
    for path in ["/", "/queue?name=mail"] {
        let page = server.get(path);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(page.body.contains("Counts as of "), "{path} says how old its counts are: {}", page.body);
        assert!(page.body.contains(" (read in "), "{path} says how long they took to read: {}", page.body);
    }
    assert!(server.get("/").body.contains("href=\"/queue?name=mail&amp;state=pending\">1</a>"), "the counts");
    // A queue whose first job came after the counts has its page all the same.
    queue.enqueue(NewJob::new("late", b"x".to_vec())).unwrap();
    let page = server.get("/queue?name=late");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Queue <span class=\"mono\">late</span>"), "{}", page.body);
    assert_eq!(server.get("/queue?name=never").status, 404);
    // /metrics stays live: the late job is in it at once.
    let metrics = server.get("/metrics").body;
    assert!(metrics.lines().any(|l| l.contains("queue=\"late\"") && l.contains("state=\"pending\"")), "{metrics}");
    server.assert_healthy();
}

// ------------------------------------------------------------------------------- refreshing pages

/// The seconds of a page's `<meta http-equiv="refresh">`, if it has one.
fn meta_refresh(html: &str) -> Option<String> {
    let tag = "<meta http-equiv=\"refresh\" content=\"";
    let at = html.find(tag)?;
    let rest = &html[at + tag.len()..];
    Some(rest[..rest.find('"').unwrap()].to_string())
}

/// The page's policy, as it was before pages could refresh themselves: no script at all.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; \
                   base-uri 'none'";

/// The overview and a queue's page reload themselves only when their query asks
/// (`refresh=N`, 2 to 300 seconds; anything else is refused), with links that turn it on and
/// off keeping the page's other query parameters; links to the other refreshing page carry
/// it, and a refreshing page offers no form (a reload would lose what is typed in it). The
/// policy stays the same: no script.
#[test]
fn a_page_refreshes_itself_only_when_its_query_asks_within_bounds() {
    let (_dir, queue, args) = sqlite();
    let f = fixture(&queue);
    let mut server = Server::start(&args, &[]);

    // Not asked: no refresh, and links that ask for one.
    let page = server.get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(meta_refresh(&page.body), None, "{}", page.body);
    assert!(page.body.contains("Refresh: <a href=\"/?refresh=5\">every 5 s</a>"), "{}", page.body);
    assert!(page.body.contains("<a href=\"/?refresh=30\">every 30 s</a>"), "{}", page.body);
    assert!(page.body.contains("href=\"/queue?name=mail\""), "{}", page.body);

    // Asked: the tag, a link that stops, and the links to the queues' pages carry it.
    let page = server.get("/?refresh=5");
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(meta_refresh(&page.body).as_deref(), Some("5"), "{}", page.body);
    assert_eq!(page.body.matches("http-equiv").count(), 1, "{}", page.body);
    assert!(page.body.contains("Refreshing every 5 s."), "{}", page.body);
    assert!(page.body.contains("href=\"/\">Stop refreshing</a>"), "{}", page.body);
    assert!(page.body.contains("href=\"/queue?name=mail&amp;refresh=5\""), "{}", page.body);
    assert!(page.body.contains("href=\"/queue?name=mail&amp;state=pending&amp;refresh=5\""), "{}", page.body);
    assert!(page.body.contains("<a href=\"/?refresh=5\">Overview</a>"), "the header's overview: {}", page.body);
    // Not the pages whose purpose is a form.
    assert!(page.body.contains("href=\"/exhausted?queue=mail\""), "{}", page.body);
    assert_eq!(page.header("content-security-policy"), Some(CSP));

    // A queue's page: its query kept, whatever the order, the cursor included.
    let page = server.get("/queue?name=mail&state=pending");
    assert_eq!(meta_refresh(&page.body), None);
    assert!(
        page.body.contains("href=\"/queue?name=mail&amp;state=pending&amp;refresh=5\">every 5 s</a>"),
        "{}",
        page.body
    );
    assert!(!forms(&page.body, "/act/pause").is_empty(), "the pause form, on a page that stays");
    for (path, stop) in [
        ("/queue?name=mail&state=pending&refresh=10", "/queue?name=mail&amp;state=pending"),
        ("/queue?refresh=10&name=mail&state=pending", "/queue?name=mail&amp;state=pending"),
        ("/queue?name=mail&after=2&refresh=10", "/queue?name=mail&amp;after=2"),
    ] {
        let page = server.get(path);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert_eq!(meta_refresh(&page.body).as_deref(), Some("10"), "{path}: {}", page.body);
        assert!(page.body.contains(&format!("href=\"{stop}\">Stop refreshing</a>")), "{path}: {}", page.body);
        assert!(
            page.body.contains("href=\"/queue?name=mail&amp;state=running&amp;refresh=10\""),
            "the tabs: {}",
            page.body
        );
        assert!(page.body.contains(">Stop refreshing</a> to pause or unpause it"), "{path}: {}", page.body);
        assert!(forms(&page.body, "/act/pause").is_empty(), "{path}: a form on a page that reloads itself");
        assert_eq!(page.header("content-security-policy"), Some(CSP));
    }
    let paused = server.get("/queue?name=reports&refresh=10");
    assert!(forms(&paused.body, "/act/unpause").is_empty(), "{}", paused.body);
    assert!(paused.body.contains("by carol: month-end freeze"), "{}", paused.body);
    // The page after stopping has its form, with the server's secret, and it works.
    let page = server.get("/queue?name=mail&state=pending");
    let pause = forms(&page.body, "/act/pause").into_iter().next().expect("a pause form");
    assert_eq!(value_of(&pause, "back"), "/queue?name=mail&state=pending", "back to the page, not refreshing");
    assert_eq!(post(&server.addr, "/act/pause", &pause, None).status, 200);
    assert!(queue.is_paused("mail").unwrap());

    // Bounded: 2 to 300 seconds, a whole number; anything else is refused, with the range.
    for (path, seconds) in [("/?refresh=2", "2"), ("/?refresh=300", "300"), ("/queue?name=mail&refresh=2", "2")] {
        let page = server.get(path);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert_eq!(meta_refresh(&page.body).as_deref(), Some(seconds), "{path}");
    }
    for path in [
        "/?refresh=1",
        "/?refresh=0",
        "/?refresh=301",
        "/?refresh=-5",
        "/?refresh=5.5",
        "/?refresh=abc",
        "/?refresh=99999999999999999999",
        "/queue?name=mail&refresh=1000",
    ] {
        let page = server.get(path);
        assert_eq!(page.status, 400, "{path}: {}", page.body);
        assert!(page.body.contains("from 2 to 300"), "{path}: {}", page.body);
        assert_eq!(meta_refresh(&page.body), None, "{path}: a refused page does not reload itself");
    }
    // An empty value asks for nothing.
    assert_eq!(meta_refresh(&server.get("/?refresh=").body), None);

    // The other pages never refresh: their purpose is a form, or a record read once.
    for path in [
        format!("/job?id={}&refresh=5", f.exhausted),
        "/exhausted?refresh=5".to_string(),
        "/unknown?refresh=5".to_string(),
        "/paused?refresh=5".to_string(),
    ] {
        let page = server.get(&path);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert_eq!(meta_refresh(&page.body), None, "{path}: {}", page.body);
        assert!(!page.body.contains("Stop refreshing") && !page.body.contains("refresh=5"), "{path}: {}", page.body);
    }
    server.assert_healthy();
}

// ------------------------------------------------------------------------------- the database out of reach

/// The text of an error page's message (what it tells the operator).
fn notice(html: &str) -> &str {
    let start = html.find("<div class=\"notice bad\">").unwrap_or_else(|| panic!("no notice: {html}"));
    let rest = &html[start..];
    &rest[..rest.find("</div>").unwrap()]
}

/// The `Retry-After` of a 503, in seconds: a few.
fn retry_after(reply: &crate::web_support::Reply) -> u64 {
    let value = reply.header("retry-after").unwrap_or_else(|| panic!("no Retry-After: {:?}", reply.headers));
    let seconds: u64 = value.parse().unwrap_or_else(|_| panic!("Retry-After {value:?}"));
    assert!((1..=30).contains(&seconds), "Retry-After {seconds}");
    seconds
}

/// Another connection holds SQLite's write lock past the server's busy timeout: the pages
/// still read (WAL), and an action answers `503 Service Unavailable` with `Retry-After` and a
/// sentence that says the database cannot be reached right now and nothing was changed (not
/// the store's error); once the lock is gone, the same form works.
#[test]
fn an_action_while_another_connection_holds_the_write_lock_is_503_and_changes_nothing() {
    let (_dir, queue, args) = sqlite();
    fixture(&queue);
    let mut server = Server::start(&args, &[]);
    let form = with(&pause_form(&server), "note", "during the lock");
    let mut holder = fenceq::rusqlite::Connection::open(&args[1]).unwrap();
    let lock = holder.transaction_with_behavior(fenceq::rusqlite::TransactionBehavior::Immediate).unwrap();
    assert_eq!(server.get("/queue?name=mail").status, 200, "readers go on beside the writer");

    let reply = post(&server.addr, "/act/pause", &form, None);
    assert_eq!(reply.status, 503, "{}", reply.body);
    retry_after(&reply);
    let says = notice(&reply.body);
    assert!(says.contains("cannot be reached right now"), "{says}");
    assert!(says.contains("Nothing was changed"), "{says}");
    assert!(!says.contains("busy in") && !says.contains("retry later"), "not the store's error: {says}");
    assert!(reply.body.contains("<h1>Database unavailable</h1>"), "{}", reply.body);
    drop(lock);
    assert!(!queue.is_paused("mail").unwrap(), "nothing was changed");

    let reply = post(&server.addr, "/act/pause", &form, None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(queue.is_paused("mail").unwrap());
    server.assert_healthy();
}

/// The dashboard's server goes away (a proxy in front of it taken down: what a dashboard sees
/// of a server restarting or failing over): every page answers `503` with `Retry-After` and
/// a sentence saying the database cannot be reached right now and the page will work again
/// when it can, never the connection's details or its password; a refreshing page keeps
/// reloading itself; an action says nothing was changed. Once the server is back, the pages
/// and the same form work, without restarting the dashboard.
#[cfg(feature = "postgres")]
#[test]
fn while_postgres_cannot_be_reached_the_pages_answer_503_and_work_again_after() {
    use crate::pg_support::Proxy;
    let Some(scratch) = pg_support::Scratch::new() else { return };
    let queue = scratch.open();
    let f = fixture(&queue);
    let mut proxy = Proxy::new(&scratch.url);
    // The test server trusts local logins: the password is carried, never checked.
    let url = proxy.url(&scratch.url).replacen("postgres://postgres@", "postgres://postgres:s3cret-pw@", 1);
    assert!(url.contains("s3cret-pw"), "{url}");
    let url = format!("{url}?connect_timeout=2");
    let args = vec!["--db".to_string(), url, "--schema".to_string(), scratch.schema.clone()];
    let mut server = Server::start(&args, &[]);
    assert_eq!(server.get("/").status, 200);
    let form = ack_form(&server, f.exhausted);

    proxy.down();
    let paths = [
        "/".to_string(),
        "/?refresh=5".to_string(),
        "/queue?name=mail".to_string(),
        format!("/job?id={}", f.exhausted),
    ];
    // (Each waits out the store's busy timeout: all at once.)
    let (pages, action) = std::thread::scope(|s| {
        let pages: Vec<_> = paths.iter().map(|path| s.spawn(|| server.get(path))).collect();
        let action = s.spawn(|| post(&server.addr, "/act/acknowledge", &form, None));
        (pages.into_iter().map(|p| p.join().unwrap()).collect::<Vec<_>>(), action.join().unwrap())
    });
    for (path, page) in paths.iter().zip(&pages) {
        assert_eq!(page.status, 503, "{path}: {}", page.body);
        retry_after(page);
        let says = notice(&page.body);
        assert!(says.contains("cannot be reached right now"), "{path}: {says}");
        assert!(says.contains("will work again when it can"), "{path}: {says}");
        for detail in ["s3cret-pw", "postgres://", "127.0.0.1", "refused", "connection to server", "statement"] {
            assert!(!says.contains(detail), "{path}: {detail:?} in {says}");
        }
        assert!(!page.body.contains("s3cret-pw"), "{path}: {}", page.body);
    }
    assert_eq!(meta_refresh(&pages[1].body).as_deref(), Some("5"), "a refreshing page keeps trying: {}", pages[1].body);
    assert_eq!(meta_refresh(&pages[0].body), None, "{}", pages[0].body);
    assert_eq!(action.status, 503, "{}", action.body);
    retry_after(&action);
    assert!(notice(&action.body).contains("Nothing was changed"), "{}", action.body);

    proxy.start();
    let give_up = Instant::now() + Duration::from_secs(60);
    while server.get("/").status != 200 {
        assert!(Instant::now() < give_up, "the dashboard never came back after the server did");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(job(&queue, f.exhausted).acknowledged_at, None, "nothing was changed during the outage");
    let reply = post(&server.addr, "/act/acknowledge", &form, None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(job(&queue, f.exhausted).acknowledged_at.is_some());
    server.assert_healthy();
}

/// A queue with limits, one spent rate, a group whose head is exhausted.
fn flow_fixture<S: Store>(queue: &Queue<S>) -> (JobId, JobId) {
    let limits = fenceq::Limits {
        rate: Some(fenceq::Rate::new(2, Duration::from_secs(3600))),
        group_rates: vec![fenceq::Rate::new(1, Duration::from_secs(60))],
        max_running: Some(5),
    };
    queue.set_limits("sms", &limits).unwrap();
    let head = queue.enqueue(NewJob::new("sms", b"to ann 1".to_vec()).group("chat-<ann>")).unwrap().id();
    let behind = queue.enqueue(NewJob::new("sms", b"to ann 2".to_vec()).group("chat-<ann>")).unwrap().id();
    for n in 0..3 {
        queue.enqueue(NewJob::new("sms", format!("to bob {n}").into_bytes())).unwrap();
    }
    let first = queue.claim("sms", "w", LEASE).unwrap().expect("a due job");
    assert_eq!(first.id(), head);
    queue.exhaust(&first.token(), "the number is gone").unwrap();
    let second = queue.claim("sms", "w", LEASE).unwrap().expect("a due job");
    queue.complete(&second.token()).unwrap();
    assert!(queue.claim("sms", "w", LEASE).unwrap().is_none(), "the rate is spent");
    (head, behind)
}

#[test]
fn a_queue_page_shows_its_limits_its_throttled_jobs_and_its_blocked_groups() {
    let (_dir, queue, args) = sqlite();
    let (head, behind) = flow_fixture(&queue);
    queue.enqueue(NewJob::new("free", b"x".to_vec())).unwrap();
    let mut server = Server::start(&args, &["--read-only"]);

    let page = server.get("/queue?name=sms");
    assert_eq!(page.status, 200, "{}", page.body);
    let body = &page.body;
    assert!(body.contains("<h2>Flow control</h2>"), "{body}");
    assert!(body.contains("at most 2/1h claims"), "the queue's rate: {body}");
    assert!(body.contains("at most 1/1m claims of one group"), "the group rate: {body}");
    assert!(body.contains("at most 5 running, across every process"), "the concurrency: {body}");
    // The rate is spent: its due jobs are held back until its window opens, within the hour.
    let until = body.split("held back by the queue's rate until ").nth(1).expect("held back by the rate");
    assert!(until.starts_with("<span title=\"") && until.contains(">in 59m"), "{body}");
    // The group behind the exhausted head, and what to do about it.
    assert!(body.contains("chat-&lt;ann&gt;"), "the group, as text: {body}");
    assert!(body.contains(&format!("<a href=\"/job?id={head}\">{head}</a>")), "its head: {body}");
    assert!(body.contains("its head is exhausted: `fenceq ack` or `fenceq replay`"), "why: {body}");
    let library = queue.stats().unwrap().queues.into_iter().find(|q| q.queue == "sms").unwrap();
    let throttled = library.throttled.expect("the library says it is throttled");
    assert!(body.contains(&format!("{} due jobs held back", throttled.due)), "as stats says: {body}");

    // A queue without limits says so, and has no blocked group.
    let page = server.get("/queue?name=free");
    assert!(page.body.contains("No limits"), "{}", page.body);
    assert!(page.body.contains("No group of this queue is blocked."), "{}", page.body);

    // A job's page names its group.
    let page = server.get(&format!("/job?id={behind}"));
    assert!(page.body.contains("<dt>group</dt><dd class=\"mono group\">chat-&lt;ann&gt;</dd>"), "{}", page.body);
    server.assert_healthy();
}

#[test]
fn the_page_after_an_action_shows_its_effect_in_the_counts() {
    let (_dir, queue, args) = sqlite();
    let f = fixture(&queue);
    let mut server = Server::start(&args, &[]);
    let page = server.get("/");
    assert!(page.body.contains("2 exhaustions awaiting acknowledgement"), "{}", page.body);
    let reply = post(&server.addr, "/act/acknowledge", &ack_form(&server, f.exhausted), None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    // The action asked for a count, and the next page waited for it.
    let page = server.get("/");
    assert!(page.body.contains("1 exhaustions awaiting acknowledgement"), "{}", page.body);
    let page = server.get("/queue?name=mail");
    assert!(page.body.contains("state=exhausted\">exhausted (2)</a>"), "acknowledged, still exhausted: {}", page.body);
    server.assert_healthy();
}
