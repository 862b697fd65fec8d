//! `fenceq`: the operator command line of the fenceq work queue.
//!
//! It inspects a queue database (`stats`, `list`, `show`, `exhausted`, `unknown`), adds jobs
//! (`enqueue`), handles dead letters and ambiguous outcomes (`ack`, `replay`, `resolve`),
//! cancels jobs, runs maintenance (`reap`, `prune`, `migrate`), and takes online backups
//! (`backup`, or `--backup PATH` before any change). Run `fenceq --help` for
//! the commands and `fenceq COMMAND --help` for their options.
//!
//! Exit codes: 0 success, 1 error (one line on stderr: `error: ` and the error's chain of
//! causes joined by ": "), 2 usage error (from clap).

mod cli;

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    // The library reports what it cannot return through `tracing` (a lost lease, a settle
    // that failed in a worker pool, a maintenance pass that failed): warnings and errors go
    // to stderr, never to stdout, which holds the command's own output.
    tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`fenceq list | head`): nothing left to tell anyone.
        Err(error) if cli::is_broken_pipe(error.as_ref()) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "error: {}", cli::error_line(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}
