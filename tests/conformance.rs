//! The conformance kit (`crates/conformance`) against fenceq's SQLite store: every rule of
//! every capability level, each a test named `level::rule`.

fn main() {
    fenceq_conformance::run(fenceq_conformance::SqliteHarness);
}
