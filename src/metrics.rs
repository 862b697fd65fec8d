//! Metrics a person can scrape: the counts of [`Queue::stats`] in the Prometheus text
//! exposition format, version 0.0.4 (what `fenceq stats --format prometheus` prints, for
//! node-exporter's textfile collector or any scraper that reads a file or a command's output).
//!
//! Written by hand, with no dependency: the format is a `# HELP` and a `# TYPE` line per
//! metric, one sample per line, and three escapes in label values. A client library
//! (`prometheus`, `metrics-exporter-prometheus`) would bring a registry and global state, and
//! its exporters an HTTP server, for the same few lines of text.

use crate::error::Result;
use crate::job::JobState;
use crate::queue::Queue;
use crate::report::{QueueStats, Stats};
use crate::store::Store;
use std::fmt::Write;

impl Stats {
    /// The counts in the Prometheus text exposition format 0.0.4, as of `now_ms` (ms since
    /// the epoch, the clock's now: [`Queue::now_ms`]). [`Queue::metrics_text`] reads both at
    /// once.
    ///
    /// Every metric is a gauge with a `queue` label (the queue's name, escaped: `\` as `\\`,
    /// `"` as `\"`, a line feed as `\n`); queues come in name order, and a queue whose rows
    /// were all pruned is no longer listed:
    ///
    /// - `fenceq_jobs{queue, state}`: rows in each of the seven states (`pending`, `running`,
    ///   `waiting`, `completed`, `exhausted`, `unknown`, `cancelled`; every state is listed,
    ///   0 included). Settled rows count until retention prunes them.
    /// - `fenceq_oldest_pending_age_seconds{queue}`: how long the most overdue pending job has
    ///   been due (since its `run_at`: enqueue, or the end of its retry backoff), in seconds
    ///   with millisecond precision; 0 when no pending job is due
    ///   ([`QueueStats::oldest_due_age_ms`]).
    /// - `fenceq_exhaustions_unacknowledged{queue}`: exhaustions awaiting acknowledgement
    ///   (`fenceq exhausted`; acknowledged ones are still in `fenceq_jobs{state="exhausted"}`).
    /// - `fenceq_unknown_outcomes_unresolved{queue}`: unknown outcomes awaiting resolution.
    /// - `fenceq_expired_leases{queue}`: running jobs whose lease ran out at `now_ms`
    ///   (reclaimable; the reaper returns them to pending).
    /// - `fenceq_queue_paused{queue}`: 1 while the queue is paused (a paused queue with no
    ///   rows is listed too), else 0.
    /// - `fenceq_queue_backoff_seconds{queue}`: how long the queue's back-off still lasts
    ///   ([`QueueStats::backoff`]), in seconds with millisecond precision; 0 when it is not
    ///   backing off (a queue backing off with no rows is listed too).
    ///
    /// No sample has a timestamp (the textfile collector refuses them; the scrape's time is
    /// the reading's). The text ends with a line feed.
    ///
    /// ```
    /// # use fenceq::{NewJob, Queue};
    /// # let queue = Queue::open_in_memory()?;
    /// queue.enqueue(NewJob::new("telegram", b"update".to_vec()))?;
    /// let text = queue.stats()?.to_prometheus(queue.now_ms());
    /// assert!(text.contains("fenceq_jobs{queue=\"telegram\",state=\"pending\"} 1\n"));
    /// # Ok::<(), fenceq::Error>(())
    /// ```
    pub fn to_prometheus(&self, now_ms: i64) -> String {
        let mut out = String::new();
        let queues = &self.queues;
        header(&mut out, "fenceq_jobs", "Jobs per queue and state (settled rows until retention prunes them).");
        for q in queues {
            for state in JobState::ALL {
                let _ = writeln!(
                    out,
                    "fenceq_jobs{{queue=\"{}\",state=\"{}\"}} {}",
                    escape_label(&q.queue),
                    state.as_str(),
                    count(q, state)
                );
            }
        }
        gauge(
            &mut out,
            "fenceq_oldest_pending_age_seconds",
            "How long the most overdue pending job has been due, in seconds (0 when none is due).",
            queues,
            |q| {
                let age_ms = q.oldest_due_age_ms(now_ms).unwrap_or(0);
                // f64's Display is the shortest text that reads back the same: 12.5, 0, 0.001.
                (age_ms as f64 / 1000.0).to_string()
            },
        );
        gauge(
            &mut out,
            "fenceq_exhaustions_unacknowledged",
            "Exhausted jobs awaiting acknowledgement (fenceq exhausted).",
            queues,
            |q| q.exhausted_unacknowledged.to_string(),
        );
        gauge(
            &mut out,
            "fenceq_unknown_outcomes_unresolved",
            "Unknown outcomes awaiting resolution (fenceq unknown).",
            queues,
            |q| q.unknown.to_string(),
        );
        gauge(
            &mut out,
            "fenceq_expired_leases",
            "Running jobs whose lease has expired (reclaimable; fenceq reap).",
            queues,
            |q| q.expired_leases.to_string(),
        );
        gauge(
            &mut out,
            "fenceq_queue_paused",
            "1 while the queue is paused (its claims find nothing; fenceq unpause), else 0.",
            queues,
            |q| u8::from(q.paused.is_some()).to_string(),
        );
        gauge(
            &mut out,
            "fenceq_queue_backoff_seconds",
            "Seconds until the queue's back-off ends (its claims find nothing until then; fenceq backoff), else 0.",
            queues,
            |q| {
                let left_ms = q.backoff.as_ref().map_or(0, |b| b.until.saturating_sub(now_ms).max(0));
                (left_ms as f64 / 1000.0).to_string()
            },
        );
        out
    }
}

impl<S: Store> Queue<S> {
    /// The queue's counts in the Prometheus text exposition format 0.0.4: [`Stats::to_prometheus`]
    /// of [`Queue::stats`], both at one reading of the clock. Serve it from the application's
    /// own HTTP endpoint, or write it to a file for node-exporter's textfile collector (the CLI:
    /// `fenceq stats --format prometheus`).
    ///
    /// # Errors
    ///
    /// Those of [`Queue::stats`]: only read errors.
    pub fn metrics_text(&self) -> Result<String> {
        let (stats, now) = self.stats_now()?;
        Ok(stats.to_prometheus(now))
    }
}

/// The rows of `q` in `state` (exhausted: acknowledged or not).
fn count(q: &QueueStats, state: JobState) -> u64 {
    match state {
        JobState::Pending => q.pending,
        JobState::Running => q.running,
        JobState::Waiting => q.waiting,
        JobState::Completed => q.completed,
        JobState::Exhausted => q.exhausted_unacknowledged + q.exhausted_acknowledged,
        JobState::Unknown => q.unknown,
        JobState::Cancelled => q.cancelled,
    }
}

/// A metric's `# HELP` and `# TYPE` lines (every metric here is a gauge; the help texts are
/// constants without a backslash or a line feed, so they need no escaping).
fn header(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
}

/// A gauge with one sample per queue, labelled by the queue.
fn gauge(out: &mut String, name: &str, help: &str, queues: &[QueueStats], value: impl Fn(&QueueStats) -> String) {
    header(out, name, help);
    for q in queues {
        let _ = writeln!(out, "{name}{{queue=\"{}\"}} {}", escape_label(&q.queue), value(q));
    }
}

/// A label value as the format spells it: `\` as `\\`, `"` as `\"`, a line feed as `\n`;
/// everything else (any UTF-8) as it is.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_escape_backslash_quote_and_line_feed_only() {
        assert_eq!(escape_label("telegram"), "telegram");
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("two\nlines\r\ttab"), "two\\nlines\r\ttab");
        assert_eq!(escape_label("bücher-✓"), "bücher-✓");
        assert_eq!(escape_label(r"\n"), r"\\n");
    }

    #[test]
    fn no_queues_is_only_the_headers() {
        let text = Stats::default().to_prometheus(0);
        assert_eq!(text.lines().count(), 14);
        assert!(text.lines().all(|line| line.starts_with("# HELP fenceq_") || line.starts_with("# TYPE fenceq_")));
        assert!(text.ends_with(" gauge\n"));
    }
}
