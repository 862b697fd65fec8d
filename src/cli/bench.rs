//! `fenceq bench`: runs the `fenceq-bench` program (`crates/bench`) that sits beside this
//! executable, with `--db`, `--schema`, `--json` and the command's own options, and exits as
//! it exits. The bench is a client of the library like any application, so it is a crate
//! of its own, which the `fenceq` package cannot depend on (the bench depends on it, and
//! Cargo forbids the cycle): the two meet here, as programs.

use super::{fail, CliResult, Context, ResultExt};
use clap::Args;
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// The bench program's file name.
const PROGRAM: &str = "fenceq-bench";

/// The command that builds the bench beside a `fenceq` built from the repository.
const BUILD: &str = "cargo build --release -p fenceq-bench";

/// Options of `fenceq bench`: none of its own. Everything after `bench` goes to the bench
/// program as it is, `--help` too (which lists the bench's options).
#[derive(Debug, Args)]
#[command(disable_help_flag = true)]
pub struct BenchArgs {
    /// The bench's options: `fenceq bench --help` lists them.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "OPTIONS")]
    pub options: Vec<OsString>,
}

impl BenchArgs {
    /// Runs `fenceq-bench` from this executable's directory with the same `--db`, `--schema`
    /// and `--json` and the bench's options; its output is this command's output, and its
    /// exit code this process's.
    ///
    /// # Errors
    ///
    /// No `fenceq-bench` beside this executable (the message names the command that builds
    /// it), or one that cannot be started.
    pub fn run(self, ctx: &mut Context) -> CliResult<()> {
        let here = std::env::current_exe().context(|| "finding this executable's directory".to_string())?;
        let program = here.with_file_name(format!("{PROGRAM}{}", std::env::consts::EXE_SUFFIX));
        if !program.is_file() {
            return Err(missing(&program));
        }
        let mut command = Command::new(&program);
        if ctx.db_given {
            command.arg("--db").arg(&ctx.db);
        }
        if let Some(schema) = &ctx.schema {
            command.arg("--schema").arg(schema);
        }
        if ctx.json() {
            command.arg("--json");
        }
        command.args(&self.options);
        ctx.out.flush()?;
        run_as_this_process(command, &program)
    }
}

/// The refusal when there is no bench program: what to build, or what to run instead.
fn missing(program: &Path) -> super::BoxError {
    fail(format!(
        "the bench is a program of its own, and there is no {} beside this fenceq: build it with `{BUILD}` \
         (`--features postgres` for a PostgreSQL --db), or run it from the repository with \
         `cargo run --release -p fenceq-bench -- OPTIONS`",
        program.display()
    ))
}

/// Replaces this process with the bench (its output, signals and exit code are the
/// command's own).
#[cfg(unix)]
fn run_as_this_process(mut command: Command, program: &Path) -> CliResult<()> {
    use std::os::unix::process::CommandExt;
    // `exec` returns only when it failed.
    let error = command.exec();
    Err(error).context(|| format!("running {}", program.display()))
}

/// Runs the bench to its end and exits with its exit code (no `exec` here).
#[cfg(not(unix))]
fn run_as_this_process(mut command: Command, program: &Path) -> CliResult<()> {
    let status = command.status().context(|| format!("running {}", program.display()))?;
    std::process::exit(status.code().unwrap_or(1));
}
