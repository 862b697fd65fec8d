//! `fenceq-bench`: fenceq's benchmark beside raw SQL loops (see the library's docs). `fenceq
//! bench OPTIONS` runs this program with the same options.
//!
//! Exit codes: 0 success, 1 error (one line on stderr: `error: ` and the error's chain of
//! causes joined by ": "), 2 usage error (from clap).

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The library reports what it cannot return (a lost lease, a settle that failed in a
    // worker pool) through `tracing`: warnings and errors go to stderr, never to stdout,
    // which holds the figures.
    tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // A child of the held-rate scenario: the bench's own executable, told so by its parent.
    if let Ok(spec) = std::env::var(fenceq_bench::HELD_RATE_CHILD_ENV) {
        return match fenceq_bench::held_rate_child(&spec) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                let _ = writeln!(std::io::stderr(), "error: {}", fenceq_bench::error_line(error.as_ref()));
                ExitCode::FAILURE
            }
        };
    }
    let cli = fenceq_bench::Cli::parse();
    match fenceq_bench::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`fenceq-bench --json | head`): nothing left to tell anyone.
        Err(error) if fenceq_bench::is_broken_pipe(error.as_ref()) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "error: {}", fenceq_bench::error_line(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}
