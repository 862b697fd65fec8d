//! Metrics a person can scrape: `Stats::to_prometheus` on counts built by hand, and
//! `fenceq stats --format text|json|prometheus` run as a process (the store-generic rules,
//! a queue in every state under a manual clock and the escaping of queue names, are in the
//! conformance kit: `cargo test --test conformance -- prometheus`).
//!
//! The CLI reads the system clock, so the CLI tests keep every number independent of it: the
//! only pending jobs are scheduled an hour ahead (age 0) and leases are 30 s long.

use fenceq::{QueueStats, Stats};

const NOW: i64 = 1_700_000_000_000;

#[test]
fn to_prometheus_of_hand_built_stats_is_exact() {
    let stats = Stats {
        queues: vec![
            QueueStats {
                queue: "alerts".into(),
                pending: 3,
                running: 2,
                expired_leases: 1,
                waiting: 4,
                completed: 5,
                exhausted_unacknowledged: 6,
                exhausted_acknowledged: 7,
                unknown: 8,
                cancelled: 9,
                oldest_pending_run_at: Some(NOW - 1),
                paused: None,
                backoff: None,
                throttled: None,
            },
            // Only scheduled jobs pending: the earliest run_at is ahead of now, the age is 0.
            QueueStats {
                queue: "later".into(),
                pending: 1,
                oldest_pending_run_at: Some(NOW + 5_000),
                ..QueueStats::default()
            },
            // Nothing pending at all.
            QueueStats { queue: "quiet".into(), completed: 1, ..QueueStats::default() },
        ],
    };
    let expected = r#"# HELP fenceq_jobs Jobs per queue and state (settled rows until retention prunes them).
# TYPE fenceq_jobs gauge
fenceq_jobs{queue="alerts",state="pending"} 3
fenceq_jobs{queue="alerts",state="running"} 2
fenceq_jobs{queue="alerts",state="waiting"} 4
fenceq_jobs{queue="alerts",state="completed"} 5
fenceq_jobs{queue="alerts",state="exhausted"} 13
fenceq_jobs{queue="alerts",state="unknown"} 8
fenceq_jobs{queue="alerts",state="cancelled"} 9
fenceq_jobs{queue="later",state="pending"} 1
fenceq_jobs{queue="later",state="running"} 0
fenceq_jobs{queue="later",state="waiting"} 0
fenceq_jobs{queue="later",state="completed"} 0
fenceq_jobs{queue="later",state="exhausted"} 0
fenceq_jobs{queue="later",state="unknown"} 0
fenceq_jobs{queue="later",state="cancelled"} 0
fenceq_jobs{queue="quiet",state="pending"} 0
fenceq_jobs{queue="quiet",state="running"} 0
fenceq_jobs{queue="quiet",state="waiting"} 0
fenceq_jobs{queue="quiet",state="completed"} 1
fenceq_jobs{queue="quiet",state="exhausted"} 0
fenceq_jobs{queue="quiet",state="unknown"} 0
fenceq_jobs{queue="quiet",state="cancelled"} 0
# HELP fenceq_oldest_pending_age_seconds How long the most overdue pending job has been due, in seconds (0 when none is due).
# TYPE fenceq_oldest_pending_age_seconds gauge
fenceq_oldest_pending_age_seconds{queue="alerts"} 0.001
fenceq_oldest_pending_age_seconds{queue="later"} 0
fenceq_oldest_pending_age_seconds{queue="quiet"} 0
# HELP fenceq_exhaustions_unacknowledged Exhausted jobs awaiting acknowledgement (fenceq exhausted).
# TYPE fenceq_exhaustions_unacknowledged gauge
fenceq_exhaustions_unacknowledged{queue="alerts"} 6
fenceq_exhaustions_unacknowledged{queue="later"} 0
fenceq_exhaustions_unacknowledged{queue="quiet"} 0
# HELP fenceq_unknown_outcomes_unresolved Unknown outcomes awaiting resolution (fenceq unknown).
# TYPE fenceq_unknown_outcomes_unresolved gauge
fenceq_unknown_outcomes_unresolved{queue="alerts"} 8
fenceq_unknown_outcomes_unresolved{queue="later"} 0
fenceq_unknown_outcomes_unresolved{queue="quiet"} 0
# HELP fenceq_expired_leases Running jobs whose lease has expired (reclaimable; fenceq reap).
# TYPE fenceq_expired_leases gauge
fenceq_expired_leases{queue="alerts"} 1
fenceq_expired_leases{queue="later"} 0
fenceq_expired_leases{queue="quiet"} 0
# HELP fenceq_queue_paused 1 while the queue is paused (its claims find nothing; fenceq unpause), else 0.
# TYPE fenceq_queue_paused gauge
fenceq_queue_paused{queue="alerts"} 0
fenceq_queue_paused{queue="later"} 0
fenceq_queue_paused{queue="quiet"} 0
# HELP fenceq_queue_backoff_seconds Seconds until the queue's back-off ends (its claims find nothing until then; fenceq backoff), else 0.
# TYPE fenceq_queue_backoff_seconds gauge
fenceq_queue_backoff_seconds{queue="alerts"} 0
fenceq_queue_backoff_seconds{queue="later"} 0
fenceq_queue_backoff_seconds{queue="quiet"} 0
"#;
    assert_eq!(stats.to_prometheus(NOW), expected);
    // Ages in whole and fractional seconds, and far from the epoch.
    let age = |ms: i64| {
        let q = QueueStats {
            queue: "q".into(),
            pending: 1,
            oldest_pending_run_at: Some(NOW - ms),
            ..QueueStats::default()
        };
        let text = Stats { queues: vec![q] }.to_prometheus(NOW);
        let line = text.lines().find(|l| l.starts_with("fenceq_oldest_pending_age_seconds{")).unwrap().to_string();
        line.rsplit(' ').next().unwrap().to_string()
    };
    assert_eq!(age(12_500), "12.5");
    assert_eq!(age(60_000), "60");
    assert_eq!(age(86_400_123), "86400.123");
    assert_eq!(age(0), "0");
}

#[test]
fn label_values_are_escaped_in_every_metric() {
    let q = QueueStats {
        queue: "a\"b\\c\nd".into(),
        pending: 1,
        oldest_pending_run_at: Some(NOW),
        ..QueueStats::default()
    };
    let text = Stats { queues: vec![q] }.to_prometheus(NOW);
    let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(samples.len(), 7 + 6, "{text}");
    for sample in samples {
        assert!(sample.contains(r#"{queue="a\"b\\c\nd""#), "{sample}");
    }
}

#[cfg(feature = "cli")]
mod cli {
    use assert_cmd::Command;
    use fenceq::{NewJob, Queue};
    use serde_json::Value;
    use std::path::{Path, PathBuf};
    use std::time::Duration;
    use tempfile::TempDir;

    use crate::cli_support::{run_cmd, Run};
    use crate::support::LEASE;

    const HOUR: Duration = Duration::from_secs(3600);

    fn run(db: &Path, args: &[&str]) -> Run {
        let mut cmd = Command::cargo_bin("fenceq").unwrap();
        cmd.arg("--db").arg(db).args(args);
        run_cmd(cmd)
    }

    /// A database with a scheduled job, a completed one, an exhaustion and an unknown outcome
    /// in "telegram", and a scheduled job in a queue whose name needs escaping.
    fn db() -> (TempDir, PathBuf, Queue) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        let queue = Queue::open(&path).unwrap();
        for settle in 0..3 {
            queue.enqueue(NewJob::new("telegram", b"x".to_vec())).unwrap();
            let token = queue.claim("telegram", "w", LEASE).unwrap().unwrap().token;
            match settle {
                0 => queue.complete(&token).unwrap(),
                1 => queue.exhaust(&token, "502").unwrap(),
                _ => queue.mark_unknown(&token, "timeout").unwrap(),
            }
        }
        queue.enqueue(NewJob::new("telegram", b"later".to_vec()).delay(HOUR)).unwrap();
        queue.enqueue(NewJob::new("ops \"eu\"\\1", b"later".to_vec()).delay(HOUR)).unwrap();
        (dir, path, queue)
    }

    #[test]
    fn stats_format_prometheus_prints_the_librarys_text() {
        let (_dir, path, queue) = db();
        let out = run(&path, &["stats", "--format", "prometheus"]).ok().to_string();
        assert_eq!(out, queue.metrics_text().unwrap());
        for line in [
            "fenceq_jobs{queue=\"telegram\",state=\"pending\"} 1\n",
            "fenceq_jobs{queue=\"telegram\",state=\"exhausted\"} 1\n",
            "fenceq_jobs{queue=\"ops \\\"eu\\\"\\\\1\",state=\"pending\"} 1\n",
            "fenceq_oldest_pending_age_seconds{queue=\"telegram\"} 0\n",
            "fenceq_exhaustions_unacknowledged{queue=\"telegram\"} 1\n",
            "fenceq_unknown_outcomes_unresolved{queue=\"telegram\"} 1\n",
            "fenceq_expired_leases{queue=\"telegram\"} 0\n",
        ] {
            assert!(out.contains(line), "{line:?} not in:\n{out}");
        }
    }

    #[test]
    fn stats_format_json_is_the_json_flag_and_text_is_the_default() {
        let (_dir, path, _queue) = db();
        // Without the fields that move with the clock.
        let counts = |args: &[&str]| {
            let mut v: Value = serde_json::from_str(run(&path, args).ok()).unwrap();
            v.as_object_mut().unwrap().remove("now");
            for q in v["queues"].as_array_mut().unwrap() {
                q.as_object_mut().unwrap().remove("oldest_pending_age_ms");
                q.as_object_mut().unwrap().remove("next_due_at");
            }
            v["totals"].as_object_mut().unwrap().remove("oldest_pending_age_ms");
            v["totals"].as_object_mut().unwrap().remove("next_due_at");
            v
        };
        let json = counts(&["stats", "--json"]);
        assert_eq!(json["totals"]["total"], 5);
        assert_eq!(counts(&["stats", "--format", "json"]), json);
        assert_eq!(counts(&["--json", "stats", "--format", "json"]), json);
        let text = run(&path, &["stats", "--format", "text"]).ok().to_string();
        assert!(text.contains("EXHAUSTED UNACKED") && text.contains("attention: 1 exhaustion"), "{text}");
        let plain = run(&path, &["stats"]).ok().to_string();
        assert_eq!(plain.lines().next(), text.lines().next(), "the table is the default");
    }

    /// A queue whose only pending job is delayed has no due job: one meaning in every form
    /// (no age, never a negative one), and the instant the delayed job becomes due beside it.
    /// A paused queue is a gauge of 1.
    #[test]
    fn a_queue_of_delayed_jobs_has_no_oldest_due_age_and_says_when_the_next_is_due() {
        let (_dir, path, queue) = db();
        queue.operator("ops").note("maintenance").pause("telegram").unwrap();
        let json: Value = serde_json::from_str(run(&path, &["stats", "--json"]).ok()).unwrap();
        let now = json["now"].as_i64().unwrap();
        let telegram = json["queues"].as_array().unwrap().iter().find(|q| q["queue"] == "telegram").unwrap();
        assert!(telegram["oldest_pending_age_ms"].is_null(), "{telegram}");
        let next = telegram["next_due_at"].as_i64().expect("the delayed job's due instant");
        assert!(next > now && next <= now + HOUR.as_millis() as i64, "{next} vs {now}");
        assert!(json["totals"]["oldest_pending_age_ms"].is_null(), "{}", json["totals"]);

        let text = run(&path, &["stats", "--format", "prometheus"]).ok().to_string();
        assert!(text.contains("fenceq_oldest_pending_age_seconds{queue=\"telegram\"} 0\n"), "{text}");
        assert!(text.contains("fenceq_queue_paused{queue=\"telegram\"} 1\n"), "{text}");
        assert!(text.contains("fenceq_queue_paused{queue=\"ops \\\"eu\\\"\\\\1\"} 0\n"), "{text}");

        let table = run(&path, &["stats"]).ok().to_string();
        assert!(table.contains("OLDEST DUE") && table.contains("NEXT DUE"), "{table}");
        let row = table.lines().find(|l| l.contains("telegram")).unwrap();
        assert!(row.contains(" in 59m ") || row.contains(" in 1h 0m "), "{row}");
        assert!(!row.contains(" ago "), "nothing is overdue: {row}");
    }

    #[test]
    fn stats_format_refuses_an_unknown_format_and_a_clash_with_json() {
        let (_dir, path, _queue) = db();
        for args in [
            &["stats", "--format", "xml"][..],
            &["stats", "--format"],
            &["--json", "stats", "--format", "prometheus"],
            &["stats", "--format", "text", "--json"],
        ] {
            let r = run(&path, args);
            assert_eq!(r.code, 2, "{args:?}: usage error; stderr: {}", r.stderr);
            assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
            assert!(r.stderr.starts_with("error: ") && !r.stderr.contains("panicked"), "{}", r.stderr);
        }
        let clash = run(&path, &["--json", "stats", "--format", "prometheus"]);
        assert!(clash.stderr.contains("--json asks for JSON but --format asks for prometheus"), "{}", clash.stderr);
    }

    #[test]
    fn stats_format_prometheus_without_a_database_prints_nothing_and_exits_1() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.db");
        let r = run(&missing, &["stats", "--format", "prometheus"]);
        assert_eq!(r.code, 1, "stderr: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{}", r.stdout);
        assert!(r.stderr.starts_with("error: no database at "), "{}", r.stderr);
        assert!(!missing.exists(), "not created");
    }

    /// The textfile-collector lines of `docs/operations.md`, run by `sh` as written there (with this
    /// test's paths): the file appears whole, nothing is left beside it, and a failing run
    /// keeps the last good file and exits non-zero.
    #[test]
    fn the_documented_textfile_recipe_renames_a_whole_file_into_place() {
        let (dir, path, queue) = db();
        let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md")).unwrap();
        let start = readme.find("out=/var/lib/node_exporter/textfile/fenceq.prom\n").expect("the recipe in the docs");
        let recipe = &readme[start..start + readme[start..].find("```").unwrap()];
        let textfile = dir.path().join("textfile");
        std::fs::create_dir(&textfile).unwrap();
        let script = recipe
            .replace("/var/lib/node_exporter/textfile", textfile.to_str().unwrap())
            .replace("/srv/bot/bot.db", path.to_str().unwrap());
        let bin = Path::new(env!("CARGO_BIN_EXE_fenceq")).parent().unwrap().to_str().unwrap().to_string();
        let sh = |script: &str| {
            let path_var = format!("{bin}:{}", std::env::var("PATH").unwrap_or_default());
            std::process::Command::new("sh").arg("-c").arg(script).env("PATH", path_var).output().unwrap()
        };
        let files = || {
            let mut names: Vec<String> =
                std::fs::read_dir(&textfile).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            names.sort();
            names
        };

        let first = sh(&script);
        assert!(first.status.success(), "{first:?}");
        assert_eq!(files(), ["fenceq.prom"]);
        let written = std::fs::read_to_string(textfile.join("fenceq.prom")).unwrap();
        assert_eq!(written, queue.metrics_text().unwrap());

        let broken = script.replace(path.to_str().unwrap(), dir.path().join("missing.db").to_str().unwrap());
        let failed = sh(&broken);
        assert!(!failed.status.success(), "a failed run is visible to cron: {failed:?}");
        assert_eq!(files(), ["fenceq.prom"], "no temporary file left behind");
        assert_eq!(std::fs::read_to_string(textfile.join("fenceq.prom")).unwrap(), written, "the last good file stays");
    }
}
