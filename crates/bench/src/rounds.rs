//! The bench's plan: which scenarios run, in which order, in how many rounds, and which
//! ratios they are held against. Other queues are measured beside fenceq by their own
//! harnesses (`crates/bench/peers/`), in the same run.
//!
//! The machines this runs on are shared and noisy (the same binary's figures swing from one
//! minute to the next), so one run of a scenario says little and a ratio of two runs
//! minutes apart says less. Every round therefore runs each fenceq scenario right after its raw baseline, on
//! fresh files in the same directory, and every ratio is computed within a round; the report
//! gives the median of the rounds and their spread (min, max) for every figure and ratio.

use crate::guards;
use crate::scenarios::{self as s, Figure, Latency};
use crate::CliResult;
use fenceq::Synchronous;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Bench settings.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Jobs per throughput scenario.
    pub jobs: u64,
    /// Worker threads of the pools.
    pub workers: usize,
    /// Durability setting of the raw loops and the one-producer, pool and end-to-end scenarios.
    pub sync: Synchronous,
    /// Pending rows for the large claim-latency measurement and the peak-RSS pass.
    pub latency_rows: u64,
    /// The held-rate step's limit (starts per second).
    pub rate_limit: u32,
    /// The held-rate step's measured seconds.
    pub rate_secs: u64,
    /// The held-rate step's groups (0: none).
    pub rate_groups: u32,
    /// Interleaved rounds.
    pub rounds: usize,
    /// Run only the steps whose names contain one of these (all when empty).
    pub only: Vec<String>,
    /// The guards step's variants by name (all when empty).
    pub guards: Vec<String>,
    /// Where the scratch databases go.
    pub dir: PathBuf,
}

/// The steps of one round, by name (what `--only` matches).
/// `latency` and `rate` are one-off steps after the rounds.
pub const STEPS: &[&str] = &[
    "intake",
    "pool",
    "end_to_end",
    "webhook",
    "claim",
    "batch_1000",
    "full",
    "guards",
    "latency",
    "flow",
    "rate",
    "pickup",
];

/// A ratio the report computes within each round.
struct RatioSpec {
    name: String,
    numerator: String,
    denominator: String,
    /// The performance target for the median, where there is one.
    target: Option<f64>,
}

/// One figure over every round.
#[derive(Debug, Clone)]
pub struct Summary {
    pub scenario: String,
    pub unit: &'static str,
    pub spread: Spread,
    /// Each detail's median over the rounds.
    pub details: Vec<(String, f64)>,
}

/// Median, min and max of one value over the rounds.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub rounds: usize,
}

impl Spread {
    pub(super) fn of(values: &[f64]) -> Spread {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = match n {
            0 => 0.0,
            _ if n % 2 == 1 => sorted[n / 2],
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Spread {
            median,
            min: sorted.first().copied().unwrap_or(0.0),
            max: sorted.last().copied().unwrap_or(0.0),
            rounds: n,
        }
    }
}

/// One ratio over every round.
#[derive(Debug, Clone)]
pub struct RatioSummary {
    pub name: String,
    pub numerator: String,
    pub denominator: String,
    pub spread: Spread,
    pub target: Option<f64>,
}

impl RatioSummary {
    /// Whether the median reaches the target (None without one).
    pub fn met(&self) -> Option<bool> {
        self.target.map(|t| self.spread.median >= t)
    }
}

/// Everything a bench run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub figures: Vec<Summary>,
    pub ratios: Vec<RatioSummary>,
    pub seconds: f64,
}

/// Runs `options.rounds` rounds of every selected step, then the large scenarios (claim
/// latency in rounds of its own, numbered as the others, then the one-off ones), calling
/// `report(round, figure)` with each figure as soon as it is measured (round 0 for the
/// one-off ones; a failed report stops the run).
pub fn run(options: &BenchOptions, mut report: impl FnMut(usize, &Figure) -> CliResult<()>) -> CliResult<Report> {
    std::fs::create_dir_all(&options.dir)?;
    let started = Instant::now();
    let mut rounds: Vec<Vec<Figure>> = Vec::with_capacity(options.rounds);
    for round in 1..=options.rounds {
        let mut figures = Vec::new();
        one_round(options, &mut |figure| {
            report(round, &figure)?;
            figures.push(figure);
            Ok(())
        })?;
        rounds.push(figures);
    }
    let mut once = Vec::new();
    if options.selected("latency") {
        large(options, &mut |round, figure| {
            report(round, &figure)?;
            once.push(figure);
            Ok(())
        })?;
    }
    if options.selected("rate") {
        let target = crate::held_rate::Target::Sqlite(options.fresh("held_rate"));
        let figure = crate::held_rate::run(&target, options.held_rate())?;
        report(0, &figure)?;
        once.push(figure);
    }
    Ok(summarise(options, &rounds, &once, started.elapsed().as_secs_f64()))
}

/// A fresh scratch database path `dir/name.db` (any earlier file of that name, with its WAL
/// and shared-memory files, removed).
pub(crate) fn fresh_in(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.db"));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

impl BenchOptions {
    /// The held-rate step's settings.
    fn held_rate(&self) -> crate::held_rate::HeldRate {
        crate::held_rate::HeldRate { limit: self.rate_limit, secs: self.rate_secs, groups: self.rate_groups }
    }

    fn selected(&self, step: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| step.contains(o.as_str()))
    }

    /// A fresh scratch database path (any earlier file of that name removed).
    fn fresh(&self, name: &str) -> PathBuf {
        fresh_in(&self.dir, name)
    }

    /// Callers of the `FULL` scenarios.
    fn full_callers(&self) -> [u64; 2] {
        [16, 64]
    }
}

type Sink<'a> = dyn FnMut(Figure) -> CliResult<()> + 'a;

/// One round: each fenceq scenario right after the raw loop it is compared with.
fn one_round(o: &BenchOptions, out: &mut Sink<'_>) -> CliResult<()> {
    let n = o.jobs;
    let w = o.workers;
    if o.selected("intake") || o.selected("pool") {
        // One producer, one enqueue per job, then a pool of one worker on those jobs,
        // beside the raw loop with one operation per transaction.
        raw_loop(o, 1, out)?;
        // The cheapest raw insert: one autocommit statement per job, no explicit transaction;
        // with AUTOINCREMENT ids (as the other raw loops and plainjob have them), then without.
        let autocommit = s::raw_enqueue_per_commit(&o.fresh("raw_autocommit"), n, o.sync, s::RawIds::Autoincrement)?;
        out(Figure::rate("raw_sqlite/intake/autocommit", autocommit))?;
        let plain = s::raw_enqueue_per_commit(&o.fresh("raw_autocommit_plain_ids"), n, o.sync, s::RawIds::Plain)?;
        out(Figure::rate("raw_sqlite/intake/autocommit_plain_ids", plain))?;
        let queue = s::open(&o.fresh("one_per_call"), o.sync, 3)?;
        let (rate, latency) = s::enqueue_one_per_call(&queue, n)?;
        out(Figure::rate("fenceq/intake/enqueue_1_per_call", rate))?;
        out(latency_figure("fenceq/latency/enqueue", latency))?;
        // The same without intake keys, as a queue without idempotent intake writes its jobs.
        let unkeyed = s::open(&o.fresh("one_per_call_without_key"), o.sync, 3)?;
        let (rate, _) = s::enqueue_one_per_call_of(&unkeyed, n, s::job_without_key)?;
        drop(unkeyed);
        out(Figure::rate("fenceq/intake/enqueue_1_per_call_without_key", rate))?;
        out(Figure::rate("fenceq/process/1_worker", s::process(&queue, n, 1)?))?;
        drop(queue);
        // Batches of 100, then a pool of `w` workers, beside 100 operations per transaction.
        raw_loop(o, 100, out)?;
        let queue = s::open(&o.fresh("batch_100"), o.sync, w as u32 + 2)?;
        out(Figure::rate("fenceq/intake/enqueue_batch_100", s::enqueue_in_batches(&queue, n, 100)?))?;
        out(Figure::rate(format!("fenceq/process/{w}_workers"), s::process(&queue, n, w)?))?;
    }
    if o.selected("end_to_end") {
        let one = s::end_to_end(&o.fresh("e2e_1"), n, 1, w, o.sync)?;
        out(named(one, format!("fenceq/end_to_end/1_producer_{w}_workers")))?;
        let four = s::end_to_end(&o.fresh("e2e_4"), n, 4, w, o.sync)?;
        out(named(four, format!("fenceq/end_to_end/4_producers_{w}_workers")))?;
    }
    if o.selected("webhook") {
        let webhook = s::end_to_end(&o.fresh("webhook"), n, 64, w, o.sync)?;
        out(named(webhook, format!("fenceq/webhook/64_intakes_{w}_workers")))?;
        let on_fenceq_table = s::raw_loop_on_fenceq_table(&o.fresh("raw_100_fenceq_table"), n, 100, o.sync)?;
        out(Figure::rate("raw_sqlite/end_to_end/100_per_tx_on_fenceq_table", on_fenceq_table.end_to_end))?;
    }
    if o.selected("claim") {
        out(Figure::rate("raw_sqlite/claim_64+settle_64", s::raw_claim_64_settle_64(&o.fresh("raw_claim"), n * 2)?))?;
        let on_fenceq_table = s::raw_claim_64_settle_64_on_fenceq_table(&o.fresh("raw_claim_fenceq_table"), n * 2)?;
        out(Figure::rate("raw_sqlite/claim_64+settle_64_on_fenceq_table", on_fenceq_table))?;
        let guarded = s::raw_claim_64_settle_64_guarded_table(&o.fresh("raw_claim_guarded"), n * 2)?;
        out(Figure::rate("raw_sqlite/claim_64+settle_64_guarded_table", guarded))?;
        out(Figure::rate("fenceq/claim_batch_64+complete_all", s::claim_batch_settle(&o.fresh("claim64"), n * 2)?))?;
    }
    if o.selected("batch_1000") {
        let queue = s::open(&o.fresh("batch_1000"), Synchronous::Normal, 2)?;
        out(Figure::rate("fenceq/intake/enqueue_batch_1000", s::enqueue_in_batches(&queue, n * 5, 1000)?))?;
    }
    if o.selected("full") {
        full(o, out)?;
    }
    if o.selected("flow") {
        // The pool on a queue whose limits it never reaches, right after the same pool on a
        // queue without limits: what the limited claim's counting costs.
        let plain = s::open(&o.fresh("flow_plain"), o.sync, w as u32 + 2)?;
        s::enqueue_in_batches(&plain, n, 100)?;
        out(Figure::rate(format!("fenceq/flow/process_unlimited_{w}_workers"), s::process(&plain, n, w)?))?;
        drop(plain);
        let limited = s::open(&o.fresh("flow_limited"), o.sync, w as u32 + 2)?;
        limited.set_limits("bench", &s::limits_never_reached())?;
        s::enqueue_in_batches(&limited, n, 100)?;
        out(Figure::rate(format!("fenceq/flow/process_limited_{w}_workers"), s::process(&limited, n, w)?))?;
        drop(limited);
        // A running limit alone: the limited claim without the starts it records for a rate.
        let running = s::open(&o.fresh("flow_running"), o.sync, w as u32 + 2)?;
        let only_running = fenceq::Limits { max_running: Some(fenceq::MAX_LIMIT_COUNT), ..fenceq::Limits::default() };
        running.set_limits("bench", &only_running)?;
        s::enqueue_in_batches(&running, n, 100)?;
        out(Figure::rate(format!("fenceq/flow/process_running_limit_{w}_workers"), s::process(&running, n, w)?))?;
    }
    if o.selected("guards") {
        let chosen =
            guards::variants().into_iter().filter(|v| o.guards.is_empty() || o.guards.iter().any(|g| g == v.name));
        for variant in chosen {
            let costs = guards::measure(&o.fresh("guards"), &variant, n)?;
            let phases = [
                ("enqueue_1_per_call", costs.enqueue_1_per_call),
                ("enqueue", costs.enqueue),
                ("claim", costs.claim),
                ("complete", costs.complete),
            ];
            for (phase, us) in phases {
                out(Figure::of(format!("guards/{}/{phase}", variant.name), us, "us/job"))?;
            }
        }
    }
    if o.selected("pickup") {
        crate::pickup::sqlite_round((n, w), &|name| o.fresh(name), out)?;
    }
    Ok(())
}

fn raw_loop(o: &BenchOptions, per_tx: u64, out: &mut Sink<'_>) -> CliResult<()> {
    let raw = s::raw_loop(&o.fresh(&format!("raw_{per_tx}")), o.jobs, per_tx, o.sync)?;
    out(Figure::rate(format!("raw_sqlite/intake/{per_tx}_per_tx"), raw.intake))?;
    out(Figure::rate(format!("raw_sqlite/process/{per_tx}_per_tx"), raw.process))?;
    out(Figure::rate(format!("raw_sqlite/end_to_end/{per_tx}_per_tx"), raw.end_to_end))?;
    if per_tx == 1 {
        out(latency_figure("raw_sqlite/latency/insert_commit", raw.insert_commit))?;
    }
    Ok(())
}

/// `synchronous=FULL`: the disk's sync time, the raw one-commit-per-insert loop, and
/// concurrent callers beside the ceiling the disk allows them. Each caller waits for a sync
/// covering its own write, so one sync carries at most one write per caller: no design
/// exceeds `callers` writes per sync time. Beside each, the same callers at `NORMAL`: where
/// the disk syncs faster than the one writer can commit their writes, that (not the sync) is
/// the ceiling.
fn full(o: &BenchOptions, out: &mut Sink<'_>) -> CliResult<()> {
    let sync_us = s::sync_latency(&o.dir, 500)?;
    out(Figure::of("disk/fdatasync_4k", sync_us, "us_p50"))?;
    let raw_n = (o.jobs / 10).max(200);
    out(Figure::rate(
        "raw_sqlite/full/enqueue_1_per_commit",
        s::raw_enqueue_per_commit(&o.fresh("raw_full"), raw_n, Synchronous::Full, s::RawIds::Autoincrement)?,
    ))?;
    for callers in o.full_callers() {
        let jobs = (o.jobs / 4).max(callers * 20);
        out(Figure::rate(format!("ceiling/full/{callers}_callers"), callers as f64 * 1e6 / sync_us))?;
        let figure = s::concurrent_enqueue(&o.fresh(&format!("full_{callers}")), jobs, callers, Synchronous::Full)?;
        out(named(figure, format!("fenceq/full/enqueue_{callers}_callers")))?;
        // The same callers at NORMAL (no sync at all): what the one writer's CPU allows them.
        let figure = s::concurrent_enqueue(&o.fresh(&format!("normal_{callers}")), jobs, callers, Synchronous::Normal)?;
        out(named(figure, format!("fenceq/normal/enqueue_{callers}_callers")))?;
    }
    Ok(())
}

/// After the rounds: claim latency with many rows pending beside 1,000 (and with `flow`,
/// beside the same rows in groups), and a pass through as many jobs for the peak RSS. The
/// queues are filled once; then each of as many rounds as the others samples them one right
/// after the other, and the ratios are computed within the round (the report gives their
/// median and spread: one sample of each said little on a shared machine).
fn large(o: &BenchOptions, report: &mut dyn FnMut(usize, Figure) -> CliResult<()>) -> CliResult<()> {
    let rows = o.latency_rows;
    let small = s::LatencyQueue::filled(&o.fresh("lat_small"), 1000)?;
    let large = s::LatencyQueue::filled(&o.fresh("lat_big"), rows)?;
    // Groups of 10 (a tenth as many groups as jobs), each group's later jobs held back by its
    // head.
    let groups = (rows / 10).max(1);
    let grouped =
        if o.selected("flow") { Some(s::LatencyQueue::grouped(&o.fresh("lat_grouped"), rows, groups)?) } else { None };
    for round in 1..=o.rounds.max(1) {
        let mut out = |figure| report(round, figure);
        let (reference, big) = (small.claims(2000)?, large.claims(2000)?);
        out(latency_figure("fenceq/latency/claim_reference_1000_pending", reference))?;
        out(latency_figure(&format!("fenceq/latency/claim_{rows}_pending"), big)
            .with("p50_ratio_to_1000", big.p50 / reference.p50)
            .with("p99_ratio_to_1000", big.p99 / reference.p99))?;
        // The ratio as a figure of its own too, so that the report gives its spread.
        out(Figure::of(
            format!("fenceq/latency/claim_{rows}_pending_p50_ratio_to_1000"),
            big.p50 / reference.p50,
            "x",
        ))?;
        if let Some(grouped) = &grouped {
            let held = grouped.claims(2000)?;
            out(latency_figure(&format!("fenceq/latency/claim_{rows}_pending_{groups}_groups"), held)
                .with("p50_ratio_to_ungrouped", held.p50 / big.p50)
                .with("p99_ratio_to_ungrouped", held.p99 / big.p99))?;
        }
    }
    drop((small, large, grouped));
    let mut out = |figure| report(0, figure);
    let started = Instant::now();
    s::claim_batch_settle(&o.fresh("through"), rows)?;
    out(Figure::rate(format!("fenceq/work_through_{rows}_jobs"), rows as f64 / started.elapsed().as_secs_f64()))?;
    out(Figure::of("process/peak_rss", s::peak_rss_mib(), "MiB").with("jobs_worked_through", rows as f64))?;
    Ok(())
}

fn latency_figure(scenario: &str, latency: Latency) -> Figure {
    Figure::of(scenario, latency.p50, "us_p50").with("p99_us", latency.p99)
}

fn named(mut figure: Figure, scenario: String) -> Figure {
    figure.scenario = scenario;
    figure
}

fn ratio_specs(o: &BenchOptions) -> Vec<RatioSpec> {
    let w = o.workers;
    let spec = |name: &str, numerator: &str, denominator: &str, target| RatioSpec {
        name: name.to_string(),
        numerator: numerator.to_string(),
        denominator: denominator.to_string(),
        target,
    };
    let mut specs = vec![
        spec("intake 1/call ÷ raw 1/tx", "fenceq/intake/enqueue_1_per_call", "raw_sqlite/intake/1_per_tx", Some(0.9)),
        spec(
            "intake 1/call ÷ raw autocommit INSERT",
            "fenceq/intake/enqueue_1_per_call",
            "raw_sqlite/intake/autocommit",
            Some(0.85),
        ),
        spec(
            "intake 1/call ÷ raw autocommit INSERT, plain ids",
            "fenceq/intake/enqueue_1_per_call",
            "raw_sqlite/intake/autocommit_plain_ids",
            None,
        ),
        spec(
            "intake batch 100 ÷ raw 100/tx",
            "fenceq/intake/enqueue_batch_100",
            "raw_sqlite/intake/100_per_tx",
            Some(0.8),
        ),
        spec(
            "claim_batch 64 ÷ raw batched claim",
            "fenceq/claim_batch_64+complete_all",
            "raw_sqlite/claim_64+settle_64",
            Some(0.8),
        ),
        spec(
            "raw batched claim on fenceq's table ÷ raw batched claim (the table's own cost)",
            "raw_sqlite/claim_64+settle_64_on_fenceq_table",
            "raw_sqlite/claim_64+settle_64",
            None,
        ),
        spec(
            "raw batched claim on the least guarded table ÷ raw batched claim",
            "raw_sqlite/claim_64+settle_64_guarded_table",
            "raw_sqlite/claim_64+settle_64",
            None,
        ),
        spec(
            "claim_batch 64 ÷ raw batched claim on fenceq's table (fenceq's code on its table)",
            "fenceq/claim_batch_64+complete_all",
            "raw_sqlite/claim_64+settle_64_on_fenceq_table",
            None,
        ),
        spec(
            "enqueue p50 latency ÷ raw commit p50 (lower is better)",
            "fenceq/latency/enqueue",
            "raw_sqlite/latency/insert_commit",
            None,
        ),
        spec("process 1 worker ÷ raw 1/tx", "fenceq/process/1_worker", "raw_sqlite/process/1_per_tx", None),
        spec(
            "full 16 callers ÷ raw 1/commit",
            "fenceq/full/enqueue_16_callers",
            "raw_sqlite/full/enqueue_1_per_commit",
            None,
        ),
    ];
    specs.push(RatioSpec {
        name: "flow: pool under limits it never reaches ÷ the same pool without".into(),
        numerator: format!("fenceq/flow/process_limited_{w}_workers"),
        denominator: format!("fenceq/flow/process_unlimited_{w}_workers"),
        target: Some(0.9),
    });
    specs.push(RatioSpec {
        name: "flow: pool under a running limit alone ÷ the same pool without".into(),
        numerator: format!("fenceq/flow/process_running_limit_{w}_workers"),
        denominator: format!("fenceq/flow/process_unlimited_{w}_workers"),
        target: None,
    });
    specs.push(RatioSpec {
        name: "webhook ÷ raw end to end 100/tx".into(),
        numerator: format!("fenceq/webhook/64_intakes_{w}_workers"),
        denominator: "raw_sqlite/end_to_end/100_per_tx".into(),
        target: Some(0.6),
    });
    specs.push(RatioSpec {
        name: "raw end to end 100/tx on fenceq's table ÷ raw end to end 100/tx (the table's own cost)".into(),
        numerator: "raw_sqlite/end_to_end/100_per_tx_on_fenceq_table".into(),
        denominator: "raw_sqlite/end_to_end/100_per_tx".into(),
        target: None,
    });
    specs.push(RatioSpec {
        name: "webhook ÷ raw end to end 100/tx on fenceq's table (fenceq's code on its table)".into(),
        numerator: format!("fenceq/webhook/64_intakes_{w}_workers"),
        denominator: "raw_sqlite/end_to_end/100_per_tx_on_fenceq_table".into(),
        target: None,
    });
    specs.push(RatioSpec {
        name: "process pool ÷ raw 100/tx".into(),
        numerator: format!("fenceq/process/{w}_workers"),
        denominator: "raw_sqlite/process/100_per_tx".into(),
        target: None,
    });
    specs.push(RatioSpec {
        name: "end to end 1 producer ÷ raw 100/tx".into(),
        numerator: format!("fenceq/end_to_end/1_producer_{w}_workers"),
        denominator: "raw_sqlite/end_to_end/100_per_tx".into(),
        target: None,
    });
    specs.push(RatioSpec {
        name: "end to end 4 producers ÷ raw 100/tx".into(),
        numerator: format!("fenceq/end_to_end/4_producers_{w}_workers"),
        denominator: "raw_sqlite/end_to_end/100_per_tx".into(),
        target: None,
    });
    for (callers, target) in o.full_callers().into_iter().zip([0.6, 0.75]) {
        specs.push(RatioSpec {
            name: format!("full {callers} callers ÷ sync ceiling"),
            numerator: format!("fenceq/full/enqueue_{callers}_callers"),
            denominator: format!("ceiling/full/{callers}_callers"),
            target: Some(target),
        });
        specs.push(RatioSpec {
            name: format!("full {callers} callers ÷ the same callers at NORMAL"),
            numerator: format!("fenceq/full/enqueue_{callers}_callers"),
            denominator: format!("fenceq/normal/enqueue_{callers}_callers"),
            target: None,
        });
    }
    // Each guard's share: a variant's cost per job over the full schema's, per phase.
    for variant in guards::variants().iter().skip(1) {
        for phase in ["enqueue", "claim", "complete"] {
            specs.push(RatioSpec {
                name: format!("guards: {} ÷ fenceq schema, {phase} (cost per job)", variant.name),
                numerator: format!("guards/{}/{phase}", variant.name),
                denominator: format!("guards/fenceq_schema/{phase}"),
                target: None,
            });
        }
    }
    specs
}

fn summarise(o: &BenchOptions, rounds: &[Vec<Figure>], once: &[Figure], seconds: f64) -> Report {
    let find = |round: &[Figure], name: &str| round.iter().find(|f| f.scenario == name).map(|f| f.value);
    let mut figures: Vec<Summary> = Vec::new();
    let all = rounds.iter().flatten().chain(once);
    for figure in all {
        if figures.iter().any(|s| s.scenario == figure.scenario) {
            continue;
        }
        let same: Vec<&Figure> =
            rounds.iter().flatten().chain(once).filter(|f| f.scenario == figure.scenario).collect();
        let values: Vec<f64> = same.iter().map(|f| f.value).collect();
        let details = figure
            .details
            .iter()
            .map(|(key, _)| {
                let of_key: Vec<f64> =
                    same.iter().filter_map(|f| f.details.iter().find(|(k, _)| k == key).map(|(_, v)| *v)).collect();
                (key.clone(), Spread::of(&of_key).median)
            })
            .collect();
        figures.push(Summary {
            scenario: figure.scenario.clone(),
            unit: figure.unit,
            spread: Spread::of(&values),
            details,
        });
    }
    let ratios = ratio_specs(o)
        .into_iter()
        .filter_map(|spec| {
            let per_round: Vec<f64> = rounds
                .iter()
                .filter_map(|round| Some(find(round, &spec.numerator)? / find(round, &spec.denominator)?))
                .collect();
            (!per_round.is_empty()).then(|| RatioSummary {
                name: spec.name,
                numerator: spec.numerator,
                denominator: spec.denominator,
                spread: Spread::of(&per_round),
                target: spec.target,
            })
        })
        .collect();
    Report { figures, ratios, seconds }
}

/// The scratch directory's default: a fresh directory under the system's temporary one.
pub fn default_dir() -> PathBuf {
    std::env::temp_dir().join(format!("fenceq-bench-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn spread_takes_the_median_of_odd_and_even_rounds() {
        let odd = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!((odd.median, odd.min, odd.max, odd.rounds), (2.0, 1.0, 3.0, 3));
        let even = Spread::of(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!((even.median, even.min, even.max), (2.5, 1.0, 4.0));
    }
}
