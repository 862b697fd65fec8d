//! `fenceq-bench --db postgres://…`: the five columns of the side-by-side table with other
//! queues (enqueue 1/call, batch of 100, process W=1, process W=N, end to end W=N), and 16
//! threads enqueueing one job per call at once, through fenceq's public API on PostgreSQL,
//! beside a raw SQL loop on the same server in the same run: the same
//! queue-shaped statements fenceq's store runs (insert with `ON CONFLICT DO NOTHING`, a
//! `FOR UPDATE SKIP LOCKED` claim CTE, a fenced complete), one operation per transaction,
//! and 100 per transaction.
//!
//! Every scenario runs in a fresh schema of its own (`<prefix>_<scenario>`, the prefix
//! `--schema` or `fenceq_bench_<pid>`), refused if it already exists, dropped at the end.
//! `tests/postgres.rs` runs it at a small size.

use crate::report::{spread_json, BenchArgs};
use crate::rounds::Spread;
use crate::scenarios::{enqueue_from_threads, enqueue_in_batches, in_batches, job, payload};
use crate::{fail, CliResult, Context, ResultExt};
use fenceq::diesel::connection::SimpleConnection;
use fenceq::diesel::sql_types::{Array, BigInt, Bytea, Text};
use fenceq::diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::{PostgresStore, Queue};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest one scenario may take before the bench gives up.
const SCENARIO_LIMIT: Duration = Duration::from_secs(600);

/// A row of the table: who did the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Row {
    /// Raw SQL, one operation per transaction (autocommit).
    Raw1,
    /// Raw SQL, 100 operations per transaction.
    Raw100,
    /// fenceq's public API.
    Fenceq,
}

impl Row {
    const ALL: [Row; 3] = [Row::Raw1, Row::Raw100, Row::Fenceq];

    fn name(self) -> &'static str {
        match self {
            Row::Raw1 => "raw_sql/1_op_per_tx",
            Row::Raw100 => "raw_sql/100_ops_per_tx",
            Row::Fenceq => "fenceq",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Row::Raw1 => "raw SQL, 1 op per transaction",
            Row::Raw100 => "raw SQL, 100 ops per transaction",
            Row::Fenceq => "fenceq",
        }
    }

    /// Operations per transaction of the raw loop.
    fn per_tx(self) -> usize {
        if self == Row::Raw100 {
            100
        } else {
            1
        }
    }
}

/// A column of the table: what was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    /// One producer, one job per call.
    Enqueue,
    /// One producer, 100 jobs per call (raw 1 op/tx: one 100-row INSERT per transaction).
    Batch,
    /// Pending jobs worked through by one worker.
    Process1,
    /// Pending jobs worked through by `--workers` workers.
    ProcessW,
    /// One producer enqueueing one per call while one worker completes them.
    EndToEnd1,
    /// One producer enqueueing one per call while `--workers` workers complete them.
    EndToEnd,
    /// [`CALLERS`] threads enqueueing one per call at once (fenceq's intake groups; the raw
    /// loop: a connection per thread).
    Concurrent,
    /// Pending jobs worked through by `--workers` workers on a queue with limits they never
    /// reach (fenceq only: held against fenceq's [`Column::ProcessW`] of the same round).
    ProcessLimited,
}

/// The threads of the concurrent intake column.
const CALLERS: u64 = 16;

impl Column {
    const ALL: [Column; 8] = [
        Column::Enqueue,
        Column::Batch,
        Column::Process1,
        Column::ProcessW,
        Column::EndToEnd1,
        Column::EndToEnd,
        Column::Concurrent,
        Column::ProcessLimited,
    ];

    fn name(self) -> &'static str {
        match self {
            Column::Enqueue => "enqueue_1_per_call",
            Column::Batch => "batch_of_100",
            Column::Process1 => "process_w1",
            Column::ProcessW => "process_wn",
            Column::EndToEnd1 => "end_to_end_w1",
            Column::EndToEnd => "end_to_end_wn",
            Column::Concurrent => "enqueue_1_per_call_16_threads",
            Column::ProcessLimited => "process_wn_limits_never_reached",
        }
    }

    fn label(self, workers: usize) -> String {
        match self {
            Column::Enqueue => "enqueue 1/call".to_string(),
            Column::Batch => "batch of 100".to_string(),
            Column::Process1 => "process W=1".to_string(),
            Column::ProcessW => format!("process W={workers}"),
            Column::EndToEnd1 => "end to end W=1".to_string(),
            Column::EndToEnd => format!("end to end W={workers}"),
            Column::Concurrent => format!("enqueue 1/call, {CALLERS} threads"),
            Column::ProcessLimited => format!("process W={workers} under limits"),
        }
    }

    /// That table leaves the raw 100-per-transaction loop out of these: one job per
    /// call is one job per transaction, and a producer racing its workers is not a batch.
    /// The limited pool is fenceq's alone (compared with fenceq's unlimited pool).
    fn applies(self, row: Row) -> bool {
        match self {
            Column::ProcessLimited => row == Row::Fenceq,
            Column::Enqueue | Column::EndToEnd1 | Column::EndToEnd | Column::Concurrent => row != Row::Raw100,
            Column::Batch | Column::Process1 | Column::ProcessW => true,
        }
    }

    /// The pool's workers in this column: one in the W=1 columns, else `--workers`.
    fn workers(self, workers: usize) -> usize {
        if matches!(self, Column::Process1 | Column::EndToEnd1) {
            1
        } else {
            workers
        }
    }

    /// The `--only` steps that select this column (as the SQLite bench names its steps).
    fn steps(self) -> &'static [&'static str] {
        match self {
            Column::Enqueue | Column::Batch | Column::Concurrent => &["intake"],
            Column::Process1 => &["pool"],
            Column::ProcessW => &["pool", "flow"],
            Column::EndToEnd1 | Column::EndToEnd => &["end_to_end"],
            Column::ProcessLimited => &["flow"],
        }
    }
}

/// One measured cell of one round.
struct Cell {
    round: usize,
    row: Row,
    column: Column,
    jobs_per_sec: f64,
}

/// The bench's settings and its server.
struct Bench {
    url: String,
    prefix: String,
    jobs: u64,
    workers: usize,
    rounds: usize,
    /// The scratch schemas created so far (dropped at the end).
    created: Vec<String>,
}

/// Runs every cell in `--rounds` interleaved rounds (in each round every column's raw loops
/// and then fenceq, one after the other, on fresh schemas), so that each ratio is computed
/// within a round; with --json one JSON line per cell as it is measured and then one
/// `summary` line per cell, else a table of medians with the ratios' spread.
///
/// # Errors
///
/// The server's errors, a scratch schema that already exists, a scenario that did not
/// finish within [`SCENARIO_LIMIT`] or completed the wrong number of jobs.
pub fn run(args: &BenchArgs, ctx: &mut Context) -> CliResult<()> {
    let prefix = ctx.schema.clone().unwrap_or_else(|| format!("fenceq_bench_{}", std::process::id()));
    // The scratch schemas' names go into SQL as quoted identifiers: plain ones only, with
    // room for the scenario's suffix within PostgreSQL's 63 bytes.
    let plain = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    if prefix.is_empty()
        || prefix.len() > 52
        || !prefix.chars().all(plain)
        || prefix.starts_with(|c: char| c.is_ascii_digit())
    {
        return Err(fail(format!(
            "--schema {prefix:?}: the bench needs 1..=52 of [a-z0-9_], not starting with a digit"
        )));
    }
    let mut bench = Bench {
        url: ctx.server_url(),
        prefix,
        jobs: args.jobs,
        workers: args.workers as usize,
        rounds: args.rounds as usize,
        created: Vec::new(),
    };
    // The steps measured on their own, outside the table's columns.
    const ONE_OFF: [&str; 4] = ["rate", "pickup", crate::report::LONG_HORIZON, crate::stats::STEP];
    let selected = |step: &str| args.only.is_empty() || args.only.iter().any(|o| o == step);
    if let Some(other) = args
        .only
        .iter()
        .find(|o| !Column::ALL.iter().any(|c| c.steps().contains(&o.as_str())) && !ONE_OFF.contains(&o.as_str()))
    {
        return Err(fail(format!(
            "--only {other}: not measured on PostgreSQL (steps there: intake, pool, end_to_end, flow, rate, pickup, long_horizon, stats)"
        )));
    }
    let server = bench.server_settings()?;
    if args.only.iter().any(|o| o == crate::report::LONG_HORIZON) {
        let settings = crate::long_horizon::Settings::new(
            args.horizon_rate,
            args.horizon_workers,
            &args.phase_secs,
            args.horizon_lease_secs,
        )?;
        let url = bench.url.clone();
        let result = crate::long_horizon::run(&mut |what| bench.scratch(what), &url, &settings, ctx);
        let dropped = bench.drop_schemas();
        result?;
        return dropped;
    }
    if args.only.iter().any(|o| o == crate::stats::STEP) {
        let result = bench.stats(args, ctx);
        let dropped = bench.drop_schemas();
        result?;
        return dropped;
    }
    if args.only.iter().any(|o| o == "pickup") {
        let sizes = (bench.url.clone(), bench.jobs, bench.workers, bench.rounds);
        let result =
            crate::pickup::postgres_rounds(&mut |what| bench.scratch(what), (&sizes.0, sizes.1, sizes.2, sizes.3), ctx);
        let dropped = bench.drop_schemas();
        result?;
        return dropped;
    }
    // Column by column, so that fenceq runs right after the raw loops it is compared with.
    let columns: Vec<Column> =
        Column::ALL.iter().copied().filter(|c| c.steps().iter().any(|step| selected(step))).collect();
    let cells: Vec<(Row, Column)> = columns
        .iter()
        .flat_map(|&column| Row::ALL.iter().filter(move |&&row| column.applies(row)).map(move |&row| (row, column)))
        .collect();
    let progress = ctx.out.progress((cells.len() * bench.rounds) as u64, "benchmarking");
    let mut measured: Vec<Cell> = Vec::new();
    let mut result = Ok(());
    'rounds: for round in 1..=bench.rounds {
        for &(row, column) in &cells {
            progress.set_message(format!("round {round}: {} {}", row.name(), column.name()));
            let cell = match bench.measure(row, column) {
                Ok(jobs_per_sec) => Cell { round, row, column, jobs_per_sec },
                Err(e) => {
                    result = Err(e);
                    break 'rounds;
                }
            };
            progress.inc(1);
            if ctx.json() {
                let line = cell_json(&cell, &measured, &bench, &server);
                if let Err(e) = ctx.out.record(&line) {
                    result = Err(e.into());
                    break 'rounds;
                }
            }
            measured.push(cell);
        }
    }
    progress.finish_and_clear();
    let mut held = None;
    if result.is_ok() && selected("rate") {
        result = bench.held_rate(args).map(|figure| held = Some(figure));
    }
    let dropped = bench.drop_schemas();
    result?;
    dropped?;
    if ctx.json() {
        for &(row, column) in &cells {
            ctx.out.record(&summary_json(&measured, row, column, &bench, &server))?;
        }
        if let Some(figure) = &held {
            ctx.out.record(&held_rate_json(figure, &bench, &server))?;
        }
        return Ok(());
    }
    let mut header = vec!["".to_string()];
    header.extend(columns.iter().map(|c| c.label(bench.workers)));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = crate::output::table(&header);
    for row in Row::ALL {
        let mut line = vec![row.label().to_string()];
        for &column in &columns {
            line.push(figures(&measured, row, column).map_or_else(String::new, |f| format!("{:.0}", f.median)));
        }
        table.add_row(line);
    }
    let mut ratios = vec!["fenceq / raw 1 op per tx (min–max)".to_string()];
    for &column in &columns {
        ratios.push(ratios_to(&measured, column, Row::Raw1).map_or_else(String::new, |r| {
            if bench.rounds == 1 {
                format!("{:.2}x", r.median)
            } else {
                format!("{:.2}x ({:.2}–{:.2})", r.median, r.min, r.max)
            }
        }));
    }
    table.add_row(ratios);
    ctx.out.table(&table)?;
    if let Some(r) = ratio_between(&measured, (Row::Fenceq, Column::ProcessLimited), (Row::Fenceq, Column::ProcessW)) {
        ctx.out.line(format!(
            "{}: {:.2}x ({:.2}–{:.2}) the same pool on a queue without limits",
            Column::ProcessLimited.label(bench.workers),
            r.median,
            r.min,
            r.max
        ))?;
    }
    if let Some(figure) = &held {
        let detail = |key: &str| figure.details.iter().find(|(k, _)| k == key).map_or(0.0, |(_, v)| *v);
        ctx.out.line(format!(
            "{}: {:.2} % of the limit ({} starts; at most {} in any second, limit {})",
            figure.scenario,
            figure.value,
            detail("starts_in_run"),
            detail("most_in_any_1s"),
            detail("limit")
        ))?;
    }
    ctx.out.line(format!(
        "jobs/s, medians of {} interleaved rounds; jobs={} workers={} on {} (PostgreSQL {}, fsync={}, \
         synchronous_commit={}); each ratio is computed within a round",
        bench.rounds,
        bench.jobs,
        bench.workers,
        ctx.db_display(),
        server.version,
        server.fsync,
        server.synchronous_commit
    ))?;
    Ok(())
}

/// The figures of one cell over the rounds.
fn figures(measured: &[Cell], row: Row, column: Column) -> Option<Spread> {
    let values: Vec<f64> =
        measured.iter().filter(|c| c.row == row && c.column == column).map(|c| c.jobs_per_sec).collect();
    (!values.is_empty()).then(|| Spread::of(&values))
}

/// fenceq's figure over the raw loop's in `column`, within each round that measured both.
fn ratios_to(measured: &[Cell], column: Column, raw: Row) -> Option<Spread> {
    ratio_between(measured, (Row::Fenceq, column), (raw, column))
}

/// One cell's figure over another's, within each round that measured both.
fn ratio_between(measured: &[Cell], of: (Row, Column), to: (Row, Column)) -> Option<Spread> {
    let find = |round, (row, column): (Row, Column)| {
        measured.iter().find(|c| c.round == round && c.row == row && c.column == column).map(|c| c.jobs_per_sec)
    };
    let ratios: Vec<f64> = measured
        .iter()
        .filter(|c| (c.row, c.column) == of)
        .filter_map(|c| Some(c.jobs_per_sec / find(c.round, to)?))
        .collect();
    (!ratios.is_empty()).then(|| Spread::of(&ratios))
}

/// The settings every JSON line carries.
fn settings_json(bench: &Bench, server: &Server) -> serde_json::Value {
    json!({
        "jobs": bench.jobs,
        "workers": bench.workers,
        "rounds": bench.rounds,
        "server_version": server.version,
        "fsync": server.fsync,
        "synchronous_commit": server.synchronous_commit,
    })
}

fn scenario(row: Row, column: Column) -> String {
    format!("postgres/{}/{}", row.name(), column.name())
}

fn cell_json(cell: &Cell, before: &[Cell], bench: &Bench, server: &Server) -> serde_json::Value {
    let mut value = settings_json(bench, server);
    value["round"] = json!(cell.round);
    value["scenario"] = json!(scenario(cell.row, cell.column));
    value["value"] = json!((cell.jobs_per_sec * 100.0).round() / 100.0);
    value["unit"] = json!("jobs/s");
    if cell.row == Row::Fenceq {
        for raw in [Row::Raw1, Row::Raw100] {
            let baseline = before.iter().find(|c| c.round == cell.round && c.row == raw && c.column == cell.column);
            if let Some(baseline) = baseline {
                value[ratio_key(raw)] = json!((cell.jobs_per_sec / baseline.jobs_per_sec * 1000.0).round() / 1000.0);
            }
        }
        if cell.column == Column::ProcessLimited {
            let unlimited = |c: &&Cell| c.round == cell.round && c.row == Row::Fenceq && c.column == Column::ProcessW;
            if let Some(baseline) = before.iter().find(unlimited) {
                value[UNLIMITED_KEY] = json!((cell.jobs_per_sec / baseline.jobs_per_sec * 1000.0).round() / 1000.0);
            }
        }
    }
    value
}

/// The JSON key of the limited pool's ratio to the same pool without limits.
const UNLIMITED_KEY: &str = "ratio_to_unlimited";

/// The held-rate step's line: its figure and details, the run's settings.
fn held_rate_json(figure: &crate::scenarios::Figure, bench: &Bench, server: &Server) -> serde_json::Value {
    let mut value = settings_json(bench, server);
    value["summary"] = json!("figure");
    value["scenario"] = json!(format!("postgres/{}", figure.scenario));
    value["value"] = json!((figure.value * 100.0).round() / 100.0);
    value["unit"] = json!(figure.unit);
    for (k, v) in &figure.details {
        value[k.as_str()] = json!(v);
    }
    value
}

fn ratio_key(raw: Row) -> &'static str {
    if raw == Row::Raw1 {
        "ratio_to_raw_1_op_per_tx"
    } else {
        "ratio_to_raw_100_ops_per_tx"
    }
}

/// One cell over every round: `value` is the median; fenceq's cells carry each ratio's
/// median and spread (`ratio_to_raw_1_op_per_tx`, `..._min`, `..._max`).
fn summary_json(measured: &[Cell], row: Row, column: Column, bench: &Bench, server: &Server) -> serde_json::Value {
    let mut value = settings_json(bench, server);
    value["summary"] = json!("figure");
    value["scenario"] = json!(scenario(row, column));
    value["unit"] = json!("jobs/s");
    if let Some(f) = figures(measured, row, column) {
        value["value"] = json!((f.median * 100.0).round() / 100.0);
        spread_json(&mut value, &f, 100.0);
    }
    if row == Row::Fenceq {
        let mut ratios: Vec<(&str, Option<Spread>)> = [Row::Raw1, Row::Raw100]
            .into_iter()
            .map(|raw| (ratio_key(raw), ratios_to(measured, column, raw)))
            .collect();
        if column == Column::ProcessLimited {
            let r = ratio_between(measured, (Row::Fenceq, column), (Row::Fenceq, Column::ProcessW));
            ratios.push((UNLIMITED_KEY, r));
        }
        for (key, r) in ratios {
            if let Some(r) = r {
                let round3 = |v: f64| (v * 1000.0).round() / 1000.0;
                value[key] = json!(round3(r.median));
                value[format!("{key}_min")] = json!(round3(r.min));
                value[format!("{key}_max")] = json!(round3(r.max));
            }
        }
    }
    value
}

/// The server's durability settings, printed with the figures.
struct Server {
    version: String,
    fsync: String,
    synchronous_commit: String,
}

#[derive(QueryableByName)]
struct Setting {
    #[diesel(sql_type = Text)]
    value: String,
}

#[derive(QueryableByName)]
struct Claimed {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    claim_id: String,
}

/// The raw loop's table: the columns a fenced claim needs, the idempotency index and the
/// claim index, as fenceq's own schema has them.
const RAW_SCHEMA: &str = "
    CREATE TABLE raw_jobs (
        id BIGSERIAL PRIMARY KEY, queue TEXT NOT NULL, key TEXT, payload BYTEA NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending', priority INT NOT NULL DEFAULT 0,
        attempt INT NOT NULL DEFAULT 0, claim_id UUID, lease_until BIGINT, run_at BIGINT NOT NULL);
    CREATE UNIQUE INDEX raw_jobs_key ON raw_jobs (queue, key) WHERE key IS NOT NULL;
    CREATE INDEX raw_jobs_claim ON raw_jobs (queue, priority DESC, run_at, id) WHERE state = 'pending';";

const RAW_INSERT: &str =
    "INSERT INTO raw_jobs (queue, key, payload, run_at) VALUES ('q', $1, $2, 0) ON CONFLICT DO NOTHING";
const RAW_INSERT_MANY: &str = "INSERT INTO raw_jobs (queue, key, payload, run_at)
     SELECT 'q', k, p, 0 FROM unnest($1::text[], $2::bytea[]) AS t(k, p) ON CONFLICT DO NOTHING";
const RAW_CLAIM: &str = "WITH due AS (
         SELECT id FROM raw_jobs WHERE queue = 'q' AND state = 'pending' AND run_at <= $1
         ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
     UPDATE raw_jobs j SET state = 'running', attempt = j.attempt + 1, claim_id = gen_random_uuid(),
            lease_until = $1 + 30000
     FROM due WHERE j.id = due.id RETURNING j.id, j.claim_id::text AS claim_id";
const RAW_COMPLETE: &str = "UPDATE raw_jobs SET state = 'completed', lease_until = NULL
     WHERE id = $1 AND claim_id = $2::uuid AND state = 'running' AND lease_until > $3";

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// What the raw loops' database calls fail with.
fn raw(e: fenceq::diesel::result::Error) -> crate::BoxError {
    fail(format!("the raw SQL loop: {e}"))
}

impl Bench {
    /// A connection of the raw loop, its `search_path` on `schema`.
    fn connect(&self, schema: Option<&str>) -> CliResult<PgConnection> {
        let separator = if self.url.contains('?') { '&' } else { '?' };
        let url = if self.url.contains("connect_timeout=") {
            self.url.clone()
        } else {
            format!("{}{separator}connect_timeout=10", self.url)
        };
        // The error names the server's reason, never the URL (it may hold a password).
        let mut conn =
            PgConnection::establish(&url).map_err(|e| fail(format!("the raw SQL loop's connection: {e}")))?;
        let mut settings = "SET statement_timeout = '600s';".to_string();
        if let Some(schema) = schema {
            settings.push_str(&format!(" SET search_path TO \"{schema}\";"));
        }
        conn.batch_execute(&settings).map_err(raw)?;
        Ok(conn)
    }

    fn server_settings(&self) -> CliResult<Server> {
        let mut conn = self.connect(None)?;
        let mut show = |name: &str| -> CliResult<String> {
            let setting: Setting =
                sql_query(format!("SELECT current_setting('{name}') AS value")).get_result(&mut conn).map_err(raw)?;
            Ok(setting.value)
        };
        Ok(Server {
            version: show("server_version")?,
            fsync: show("fsync")?,
            synchronous_commit: show("synchronous_commit")?,
        })
    }

    /// A new scratch schema for one scenario (an existing one is refused, never reused).
    fn scratch(&mut self, what: &str) -> CliResult<String> {
        let schema = format!("{}_{what}", self.prefix);
        let mut conn = self.connect(None)?;
        #[derive(QueryableByName)]
        struct Found {
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        let found: Found = sql_query("SELECT count(*) AS n FROM pg_namespace WHERE nspname = $1")
            .bind::<Text, _>(&schema)
            .get_result(&mut conn)
            .map_err(raw)?;
        if found.n > 0 {
            return Err(fail(format!(
                "the bench's scratch schema {schema} already exists; drop it or give another --schema prefix"
            )));
        }
        conn.batch_execute(&format!("CREATE SCHEMA \"{schema}\"")).map_err(raw)?;
        self.created.push(schema.clone());
        Ok(schema)
    }

    /// Drops every scratch schema this run created.
    /// The stats step on a scratch schema of its own.
    fn stats(&mut self, args: &BenchArgs, ctx: &mut Context) -> CliResult<()> {
        let schema = self.scratch("stats")?;
        let queue = self.open(&schema, 4)?;
        let raw = std::cell::RefCell::new(self.connect(Some(&schema))?);
        let sql = crate::stats::whole_table_count(queue.now_ms());
        // The jobs table as autovacuum leaves it once it has caught up with the fill: before,
        // the claim index still holds an entry for each of the jobs claimed, which the count of
        // pending jobs reads past.
        let mut vacuum = || -> CliResult<()> {
            raw.borrow_mut().batch_execute("VACUUM (ANALYZE) fenceq_jobs").context(|| "vacuuming the jobs".to_string())
        };
        let mut whole_table = || -> CliResult<()> {
            raw.borrow_mut().batch_execute(&sql).context(|| "the whole-table count".to_string())
        };
        crate::stats::run(&queue, args.stats_rows, self.rounds, Some(&mut vacuum), &mut whole_table, ctx)
    }

    fn drop_schemas(&mut self) -> CliResult<()> {
        if self.created.is_empty() {
            return Ok(());
        }
        let mut conn = self.connect(None)?;
        for schema in std::mem::take(&mut self.created) {
            conn.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .context(|| format!("dropping the bench's scratch schema {schema}"))?;
        }
        Ok(())
    }

    fn measure(&mut self, row: Row, column: Column) -> CliResult<f64> {
        let schema =
            self.scratch(&format!("{}_{}", if row == Row::Fenceq { "fq" } else { "raw" }, self.created.len()))?;
        match row {
            Row::Fenceq => self.fenceq(&schema, column),
            Row::Raw1 | Row::Raw100 => {
                self.connect(Some(&schema))?.batch_execute(RAW_SCHEMA).map_err(raw)?;
                self.raw(&schema, row.per_tx(), column)
            }
        }
    }

    // --------------------------------------------------------------------------- fenceq

    /// The held-rate step on a scratch schema of its own.
    fn held_rate(&mut self, args: &BenchArgs) -> CliResult<crate::scenarios::Figure> {
        let schema = self.scratch("fq_held_rate")?;
        let target = crate::held_rate::Target::Postgres { url: self.url.clone(), schema };
        crate::held_rate::run(
            &target,
            crate::held_rate::HeldRate { limit: args.rate_limit, secs: args.rate_secs, groups: args.rate_groups },
        )
    }

    fn open(&self, schema: &str, pool: usize) -> CliResult<Queue<PostgresStore>> {
        let builder = postgres_builder_for(&self.url, schema);
        Ok(builder.pool_size(pool as u32 + 2).open_postgres()?)
    }

    fn fenceq(&self, schema: &str, column: Column) -> CliResult<f64> {
        let jobs = self.jobs;
        match column {
            Column::Enqueue => {
                let queue = self.open(schema, 1)?;
                let started = Instant::now();
                for j in 0..jobs {
                    queue.enqueue(job(j))?;
                }
                Ok(jobs as f64 / started.elapsed().as_secs_f64())
            }
            Column::Batch => enqueue_in_batches(&self.open(schema, 1)?, jobs, 100),
            Column::Process1 | Column::ProcessW | Column::ProcessLimited => {
                let workers = column.workers(self.workers);
                let queue = self.open(schema, workers)?;
                if column == Column::ProcessLimited {
                    queue.set_limits("bench", &crate::scenarios::limits_never_reached())?;
                }
                enqueue_in_batches(&queue, jobs, 5000)?;
                crate::scenarios::pool_completes(&queue, jobs, workers, || Ok(()))
            }
            Column::Concurrent => {
                let queue = self.open(schema, CALLERS as usize)?;
                let started = Instant::now();
                enqueue_from_threads(&queue, jobs, CALLERS)?;
                Ok(jobs as f64 / started.elapsed().as_secs_f64())
            }
            Column::EndToEnd1 | Column::EndToEnd => {
                let workers = column.workers(self.workers);
                let queue = self.open(schema, workers)?;
                let producer = queue.clone();
                crate::scenarios::pool_completes(&queue, jobs, workers, move || {
                    for j in 0..jobs {
                        producer.enqueue(job(j))?;
                    }
                    Ok(())
                })
            }
        }
    }

    // --------------------------------------------------------------------------- raw SQL

    fn raw(&self, schema: &str, per_tx: usize, column: Column) -> CliResult<f64> {
        let jobs = self.jobs;
        match column {
            Column::Enqueue => {
                let mut conn = self.connect(Some(schema))?;
                let started = Instant::now();
                in_transactions(&mut conn, jobs, per_tx, |conn, j| insert(conn, j).map(|_| ()))?;
                Ok(jobs as f64 / started.elapsed().as_secs_f64())
            }
            Column::Batch => {
                let mut conn = self.connect(Some(schema))?;
                let started = Instant::now();
                if per_tx == 1 {
                    // One operation is one 100-row statement, in its own transaction.
                    in_batches(jobs, 100, |range| insert_many(&mut conn, range).map(drop))?;
                } else {
                    in_transactions(&mut conn, jobs, per_tx, |conn, j| insert(conn, j).map(|_| ()))?;
                }
                Ok(jobs as f64 / started.elapsed().as_secs_f64())
            }
            Column::Process1 | Column::ProcessW => {
                let workers = column.workers(self.workers);
                let mut conn = self.connect(Some(schema))?;
                in_batches(jobs, 5000, |range| insert_many(&mut conn, range).map(drop))?;
                drop(conn);
                self.raw_workers(schema, per_tx, workers, None)
            }
            Column::ProcessLimited => Err(fail("the pool under limits has no raw loop (Column::applies)")),
            Column::Concurrent => {
                let connections = (0..CALLERS).map(|_| self.connect(Some(schema))).collect::<CliResult<Vec<_>>>()?;
                let per_thread = jobs.div_ceil(CALLERS);
                let started = Instant::now();
                std::thread::scope(|s| -> CliResult<()> {
                    let handles: Vec<_> = connections
                        .into_iter()
                        .zip(0..CALLERS)
                        .map(|(mut conn, t)| {
                            s.spawn(move || -> CliResult<()> {
                                for j in (t * per_thread..(t + 1) * per_thread).take_while(|&j| j < jobs) {
                                    insert(&mut conn, j)?;
                                }
                                Ok(())
                            })
                        })
                        .collect();
                    handles.into_iter().try_for_each(|h| h.join().map_err(|_| fail("a raw SQL thread panicked"))?)
                })?;
                Ok(jobs as f64 / started.elapsed().as_secs_f64())
            }
            Column::EndToEnd1 | Column::EndToEnd => {
                let workers = column.workers(self.workers);
                let producer = self.connect(Some(schema))?;
                self.raw_workers(schema, per_tx, workers, Some(producer))
            }
        }
    }

    /// `workers` threads, each on its own connection, claim and complete until `jobs`
    /// are done (`per_tx` claims, each followed by its complete, per transaction), while
    /// `producer`, if given, inserts them one per transaction. Returns jobs/s.
    fn raw_workers(
        &self,
        schema: &str,
        per_tx: usize,
        workers: usize,
        producer: Option<PgConnection>,
    ) -> CliResult<f64> {
        let jobs = self.jobs;
        let done = AtomicU64::new(0);
        let connections = (0..workers).map(|_| self.connect(Some(schema))).collect::<CliResult<Vec<_>>>()?;
        let started = Instant::now();
        let deadline = started + SCENARIO_LIMIT;
        std::thread::scope(|s| -> CliResult<()> {
            let done = &done;
            let mut handles = Vec::new();
            if let Some(mut conn) = producer {
                handles.push(s.spawn(move || -> CliResult<()> {
                    for j in 0..jobs {
                        insert(&mut conn, j)?;
                    }
                    Ok(())
                }));
            }
            for mut conn in connections {
                handles.push(s.spawn(move || -> CliResult<()> {
                    while done.load(Ordering::Relaxed) < jobs {
                        if Instant::now() > deadline {
                            return Err(fail("the raw SQL loop did not finish within 10 minutes"));
                        }
                        let settled = claim_and_complete(&mut conn, per_tx)?;
                        if settled == 0 {
                            // Nothing due yet (the producer is behind): poll again shortly.
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        done.fetch_add(settled, Ordering::Relaxed);
                    }
                    Ok(())
                }));
            }
            handles.into_iter().try_for_each(|h| h.join().map_err(|_| fail("a raw SQL thread panicked"))?)
        })?;
        let elapsed = started.elapsed();
        let done = done.into_inner();
        if done != jobs {
            return Err(fail(format!("the raw SQL loop completed {done} of {jobs} jobs")));
        }
        Ok(jobs as f64 / elapsed.as_secs_f64())
    }
}

fn postgres_builder_for(url: &str, schema: &str) -> fenceq::QueueBuilder<fenceq::PostgresOptions> {
    Queue::builder().url(url.to_string()).schema(schema.to_string())
}

/// Runs `op` for `0..count`, `per_tx` calls per transaction (1: autocommit, no BEGIN).
fn in_transactions(
    conn: &mut PgConnection,
    count: u64,
    per_tx: usize,
    mut op: impl FnMut(&mut PgConnection, u64) -> CliResult<()>,
) -> CliResult<()> {
    let mut next = 0;
    while next < count {
        let end = (next + per_tx as u64).min(count);
        if per_tx == 1 {
            op(conn, next)?;
        } else {
            conn.transaction(|conn| -> CliResult<()> { (next..end).try_for_each(|j| op(conn, j)) })?;
        }
        next = end;
    }
    Ok(())
}

fn insert(conn: &mut PgConnection, j: u64) -> CliResult<usize> {
    sql_query(RAW_INSERT).bind::<Text, _>(format!("k{j}")).bind::<Bytea, _>(payload(j)).execute(conn).map_err(raw)
}

fn insert_many(conn: &mut PgConnection, range: std::ops::Range<u64>) -> CliResult<usize> {
    let keys: Vec<String> = range.clone().map(|j| format!("k{j}")).collect();
    let payloads: Vec<Vec<u8>> = range.map(payload).collect();
    sql_query(RAW_INSERT_MANY).bind::<Array<Text>, _>(keys).bind::<Array<Bytea>, _>(payloads).execute(conn).map_err(raw)
}

/// Up to `per_tx` claims, each followed by its fenced complete, in one transaction (none
/// for 1: each statement commits on its own). Returns how many jobs it completed.
fn claim_and_complete(conn: &mut PgConnection, per_tx: usize) -> CliResult<u64> {
    let one = |conn: &mut PgConnection| -> CliResult<u64> {
        let now = now_ms();
        let claimed: Vec<Claimed> = sql_query(RAW_CLAIM).bind::<BigInt, _>(now).load(conn).map_err(raw)?;
        let Some(job) = claimed.first() else { return Ok(0) };
        let completed = sql_query(RAW_COMPLETE)
            .bind::<BigInt, _>(job.id)
            .bind::<Text, _>(&job.claim_id)
            .bind::<BigInt, _>(now)
            .execute(conn)
            .map_err(raw)?;
        if completed != 1 {
            return Err(fail(format!("the raw SQL loop's complete of job {} changed {completed} rows", job.id)));
        }
        Ok(1)
    };
    if per_tx == 1 {
        return one(conn);
    }
    conn.transaction(|conn| -> CliResult<u64> {
        let mut settled = 0;
        for _ in 0..per_tx {
            match one(conn)? {
                0 => break,
                n => settled += n,
            }
        }
        Ok(settled)
    })
}
