//! The dashboard at a million jobs: each page's server time (its `Server-Timing` header)
//! and the time a client waited for it, p50 and p99.
//!
//! Builds a 1,000,000-job SQLite file (mostly completed, some pending, exhausted, unknown;
//! two paused queues) through the library's batch intake and settle, starts
//! `fenceq serve --read-only` on it on a free loopback port, and requests every page in
//! interleaved rounds (one request of each page per round, so a slow stretch of the machine
//! touches every page alike). The overview and the queue pages' tabs show the server's counts
//! snapshot; the bench prints what the overview says of it (how old, how long one count took).
//!
//! ```text
//! cargo bench --bench dashboard                     # 1,000,000 jobs, 200 rounds
//! FENCEQ_DASHBOARD_JOBS=100000 FENCEQ_DASHBOARD_ROUNDS=50 cargo bench --bench dashboard
//! FENCEQ_DASHBOARD_DB=/tmp/dash.db cargo bench --bench dashboard   # keep (and reuse) the file
//! FENCEQ_DASHBOARD_SPREAD_HOURS=0 cargo bench --bench dashboard    # every completion in the chart's hour
//! FENCEQ_POSTGRES_URL=postgres://... cargo bench --bench dashboard --features postgres
//! ```

use fenceq::store::Store;
use fenceq::{ClaimToken, ManualClock, NewJob, Queue};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Queues the jobs spread over (the first two are paused).
const QUEUES: [&str; 8] = ["email", "billing", "telegram", "reports", "webhooks", "images", "search", "sync"];
/// Jobs per batch of intake and settle (the library's `MAX_BATCH`).
const BATCH: u64 = 10_000;
/// Of every 1,000 jobs: pending, exhausted, unknown (the rest are completed).
const PENDING_PER_MILLE: u64 = 20;
const EXHAUSTED_PER_MILLE: u64 = 1;
const UNKNOWN_PER_MILLE: u64 = 1;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn payload(i: u64) -> Vec<u8> {
    format!(
        "{{\"update_id\":{i:>12},\"message\":{{\"chat\":4711,\"text\":\"hello from the dashboard bench {i:>10}\"}}}}"
    )
    .into_bytes()
}

/// Fills `queue` with `jobs` jobs: per queue, batches enqueued, claimed and settled, the
/// clock stepped after each batch so that the settled times spread evenly over the
/// `spread_ms` up to the real now (the overview's chart counts the last hour of them).
fn fill<S: Store>(queue: &Queue<S>, clock: &ManualClock, jobs: u64, spread_ms: i64) {
    let batches = jobs.div_ceil(BATCH).max(1) as i64;
    let step = Duration::from_millis((spread_ms / batches).max(0) as u64);
    let started = Instant::now();
    let per_queue = jobs / QUEUES.len() as u64;
    let mut n = 0u64;
    for name in QUEUES {
        let mut left = per_queue;
        while left > 0 {
            let batch = left.min(BATCH);
            queue
                .enqueue_batch((0..batch).map(|i| NewJob::new(name, payload(n + i)).max_attempts(1)))
                .expect("enqueue");
            n += batch;
            left -= batch;
            let pending = batch * PENDING_PER_MILLE / 1000;
            let exhausted = batch * EXHAUSTED_PER_MILLE / 1000;
            let unknown = batch * UNKNOWN_PER_MILLE / 1000;
            let claimed =
                queue.claim_batch(name, "bench", Duration::from_secs(3600), (batch - pending) as u32).expect("claim");
            let tokens: Vec<ClaimToken> = claimed.iter().map(|c| c.token()).collect();
            let (odd, complete) = tokens.split_at((exhausted + unknown) as usize);
            // (In transactions of 1,000: PostgreSQL's statement timeout bounds one settle.)
            for chunk in complete.chunks(1_000) {
                for result in queue.complete_all(chunk).expect("complete") {
                    result.expect("complete one");
                }
            }
            for (i, token) in odd.iter().enumerate() {
                if (i as u64) < exhausted {
                    queue.exhaust(token, "the bench gave up on it").expect("exhaust");
                } else {
                    queue.mark_unknown(token, "the bench does not know").expect("unknown");
                }
            }
            clock.advance(step);
        }
    }
    for name in &QUEUES[..2] {
        queue.operator("bench").note("dashboard bench").pause(name).expect("pause");
    }
    eprintln!("filled {n} jobs in {:.1} s", started.elapsed().as_secs_f64());
}

/// `fenceq serve --read-only` on `db`, and the address it listens on.
fn serve(db: &str, more: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fenceq"))
        .args(["serve", "--db", db, "--read-only", "--listen", "127.0.0.1:0"])
        .args(more)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start fenceq serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read its first line");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string();
    (child, addr)
}

/// One GET: (status, server ms from `Server-Timing`, client ms).
fn get(addr: &str, path: &str) -> (u16, f64, f64) {
    let (status, server, client, _) = get_body(addr, path);
    (status, server, client)
}

/// One GET: (status, server ms from `Server-Timing`, client ms, body).
fn get_body(addr: &str, path: &str) -> (u16, f64, f64, String) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).expect("connect");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send");
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).expect("read");
    let client = started.elapsed().as_secs_f64() * 1000.0;
    let text = String::from_utf8_lossy(&bytes);
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let server = head
        .lines()
        .find_map(|l| l.strip_prefix("Server-Timing: app;dur="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN);
    let body = text.split_once("\r\n\r\n").map_or_else(String::new, |(_, body)| body.to_string());
    (status, server, client, body)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Requests every page `rounds` times, interleaved, and prints the table.
fn measure(addr: &str, pages: &[(&str, String)], rounds: usize) {
    for (_, path) in pages {
        let (status, _, _) = get(addr, path);
        assert_eq!(status, 200, "{path} answered {status}");
    }
    let mut server = vec![Vec::with_capacity(rounds); pages.len()];
    let mut client = vec![Vec::with_capacity(rounds); pages.len()];
    for _ in 0..rounds {
        for (i, (_, path)) in pages.iter().enumerate() {
            let (status, s, c) = get(addr, path);
            assert_eq!(status, 200, "{path} answered {status}");
            server[i].push(s);
            client[i].push(c);
        }
    }
    // The pages' counts are the server's snapshot: what one count took, as the overview says.
    let (_, _, _, body) = get_body(addr, "/");
    if let Some(age) = body.split("<p class=\"muted age\">").nth(1).and_then(|rest| rest.split("</p>").next()) {
        let text: String = age.split('<').map(|part| part.split_once('>').map_or(part, |(_, t)| t)).collect();
        println!("overview: {text}");
    }
    println!("{:<24} {:>12} {:>12} {:>12} {:>12}", "page", "server p50", "server p99", "client p50", "client p99");
    for (i, (name, _)) in pages.iter().enumerate() {
        server[i].sort_by(f64::total_cmp);
        client[i].sort_by(f64::total_cmp);
        println!(
            "{:<24} {:>9.2} ms {:>9.2} ms {:>9.2} ms {:>9.2} ms",
            name,
            percentile(&server[i], 50.0),
            percentile(&server[i], 99.0),
            percentile(&client[i], 50.0),
            percentile(&client[i], 99.0)
        );
    }
}

/// The pages measured, with a job id and a cursor from the middle of the file.
fn pages(jobs: u64) -> Vec<(&'static str, String)> {
    let middle = (jobs / 2).max(1);
    vec![
        ("overview", "/".to_string()),
        ("queue, first page", format!("/queue?name={}", QUEUES[2])),
        ("queue, later page", format!("/queue?name={}&after={middle}", QUEUES[2])),
        ("queue, pending", format!("/queue?name={}&state=pending", QUEUES[2])),
        ("job", format!("/job?id={middle}")),
        ("exhausted", "/exhausted".to_string()),
        ("unknown", "/unknown".to_string()),
        ("paused", "/paused".to_string()),
        ("metrics", "/metrics".to_string()),
    ]
}

/// The real now, ms since the Unix epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("a clock after 1970").as_millis() as i64
}

fn main() {
    // `cargo bench` passes `--bench`; this bench takes no filter.
    let jobs = env_u64("FENCEQ_DASHBOARD_JOBS", 1_000_000);
    let rounds = env_u64("FENCEQ_DASHBOARD_ROUNDS", 200) as usize;
    // Hours the completions spread over, up to now: 24 puts 1/24 of them in the chart's hour;
    // 0 puts them all in the last minute (the chart's worst case).
    let spread_ms = env_u64("FENCEQ_DASHBOARD_SPREAD_HOURS", 24) as i64 * 3_600_000;
    let clock = ManualClock::new(now_ms() - spread_ms);
    let pages = pages(jobs);

    #[cfg(feature = "postgres")]
    if let Ok(url) = std::env::var("FENCEQ_POSTGRES_URL") {
        // A scratch schema of this run's own (the server is a test server: scripts/postgres).
        let schema = format!("dashboard_bench_{}", std::process::id());
        let queue =
            Queue::builder().url(&url).schema(&schema).clock(clock.clone()).open_postgres().expect("open PostgreSQL");
        fill(&queue, &clock, jobs, spread_ms);
        drop(queue);
        println!("PostgreSQL, schema {schema}, {jobs} jobs, {rounds} rounds");
        let (mut child, addr) = serve(&url, &["--schema", &schema]);
        measure(&addr, &pages, rounds);
        let _ = child.kill();
        let _ = child.wait();
        return;
    }

    let keep = std::env::var("FENCEQ_DASHBOARD_DB").ok().map(PathBuf::from);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = keep.clone().unwrap_or_else(|| dir.path().join("dashboard.db"));
    if !path.exists() {
        let queue = Queue::builder().path(&path).pool_size(4).clock(clock.clone()).open().expect("open");
        fill(&queue, &clock, jobs, spread_ms);
    }
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!("SQLite {}, {jobs} jobs ({:.0} MB), {rounds} rounds", path.display(), size as f64 / 1e6);
    let (mut child, addr) = serve(&path.to_string_lossy(), &[]);
    measure(&addr, &pages, rounds);
    let _ = child.kill();
    let _ = child.wait();
}
