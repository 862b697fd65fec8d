//! The harness of the tests that run the `fenceq` binary as a process (`tests/sqlite/cli.rs`,
//! the CLI half of `tests/sqlite/metrics.rs`, `tests/postgres/cli.rs` and `urls.rs`): one
//! run's exit code and output, and the assertions every command's outcome is checked with.
//! The PostgreSQL binary includes this file (`#[path]`): it knows no store.
#![allow(dead_code)]

use assert_cmd::Command;
use serde_json::Value;

/// What one run of the binary said: its exit code and its output.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts exit 0 and an empty stderr; returns stdout.
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "stdout: {}\nstderr: {}", self.stdout, self.stderr);
        assert!(self.stderr.is_empty(), "stderr: {}", self.stderr);
        &self.stdout
    }

    /// Asserts exit 1 with exactly one `error: ` line on stderr and no panic; returns it.
    pub fn error(&self) -> &str {
        assert_eq!(self.code, 1, "stdout: {}\nstderr: {}", self.stdout, self.stderr);
        assert_no_panic(&self.stderr);
        assert!(self.stderr.starts_with("error: "), "stderr: {}", self.stderr);
        assert!(self.stderr.ends_with('\n') && self.stderr.lines().count() == 1, "stderr: {:?}", self.stderr);
        self.stderr.trim_end()
    }

    /// Asserts a usage error: exit 2 from clap, no panic.
    pub fn usage(&self) {
        assert_eq!(self.code, 2, "stdout: {}\nstderr: {}", self.stdout, self.stderr);
        assert_no_panic(&self.stderr);
        assert!(self.stderr.contains("error:"), "stderr: {}", self.stderr);
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(self.ok()).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }

    pub fn json_lines(&self) -> Vec<Value> {
        self.ok()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
            .collect()
    }
}

pub fn assert_no_panic(stderr: &str) {
    assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"), "stderr: {stderr}");
}

/// Runs `cmd` (the `fenceq` binary) to its end and keeps what it said.
pub fn run_cmd(mut cmd: Command) -> Run {
    let output = cmd.output().expect("the fenceq binary runs");
    Run {
        code: output.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
    }
}
