//! `fenceq bench` runs the `fenceq-bench` program beside the `fenceq` executable (the bench
//! is a crate of its own, `crates/bench`, whose own tests run it at a tiny size): here a copy
//! of the binary in a directory of its own, beside a stand-in bench script that prints its
//! arguments, writes to stderr and exits with a code of its own. The arguments, the output
//! and the exit code pass through unchanged, `--help` included; without a bench beside it
//! the command fails on one line naming the command that builds one.
#![cfg(all(feature = "cli", unix))]

use assert_cmd::Command;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A stand-in for `fenceq-bench`: one argument per line on stdout, one line on stderr, exit 3.
const STAND_IN: &str =
    "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\necho 'from the bench' >&2\nexit 3\n";

fn run(fenceq: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(fenceq).args(args).output().unwrap();
    (out.status.code(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

// One test, its steps in order: a program written by this test and run by another thread's
// forked child while still open for writing would fail with "text file busy".
#[test]
fn bench_runs_the_bench_program_beside_it_passing_arguments_output_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let fenceq = dir.path().join("fenceq");
    std::fs::copy(assert_cmd::cargo::cargo_bin("fenceq"), &fenceq).unwrap();

    // No bench beside it: one error line with the build command, exit 1, nothing run.
    let (code, stdout, stderr) = run(&fenceq, &["bench", "--jobs", "1000"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.starts_with("error: ") && stderr.lines().count() == 1, "{stderr}");
    assert!(stderr.contains("cargo build --release -p fenceq-bench"), "{stderr}");
    assert!(stderr.contains(&dir.path().join("fenceq-bench").display().to_string()), "{stderr}");

    let bench = dir.path().join("fenceq-bench");
    std::fs::write(&bench, STAND_IN).unwrap();
    std::fs::set_permissions(&bench, std::fs::Permissions::from_mode(0o755)).unwrap();

    // The global options given before `bench` first, then everything after it, as it is.
    let (code, stdout, stderr) =
        run(&fenceq, &["--db", "scratch dir", "--json", "bench", "--jobs", "1000", "--only", "claim"]);
    assert_eq!((code, stderr.as_str()), (Some(3), "from the bench\n"));
    assert_eq!(stdout, "--db\nscratch dir\n--json\n--jobs\n1000\n--only\nclaim\n");
    let (_, stdout, _) = run(&fenceq, &["bench", "--json", "--rounds", "1", "--db", "d"]);
    assert_eq!(stdout, "--json\n--rounds\n1\n--db\nd\n");
    // A PostgreSQL --db and --schema are the bench's to read, whatever this build's features.
    let (_, stdout, _) = run(&fenceq, &["--db", "postgres://u@h/d", "--schema", "s", "bench"]);
    assert_eq!(stdout, "--db\npostgres://u@h/d\n--schema\ns\n");
    // The bench's help is the bench's.
    let (_, stdout, _) = run(&fenceq, &["bench", "--help"]);
    assert_eq!(stdout, "--help\n");
    let (code, stdout, _) = run(&fenceq, &["bench"]);
    assert_eq!((code, stdout.as_str()), (Some(3), ""));
}
