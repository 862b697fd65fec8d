//! The reference model ([`crate::model`]) against the store under test, through its
//! [`Harness`]: the committed `fence_invariants` fuzz corpus, generated histories (the
//! model-based property test), and the model sequences and behaviours those found and pinned
//! down. Every step of every run is checked against the model: the ten invariants of DESIGN.md
//! on the rows `Queue::list` shows, every row column by column, the domain rows of the
//! closures, and at the end every token ever issued, every job, the stats and the previews.
//!
//! The model drives the whole public API, exhaustion records, their acknowledgement and
//! cursor pages included: these rules belong to the `durable` level.
//!
//! A second property test runs histories under limits (limits set first, mostly grouped jobs,
//! claims and settles, clock steps around the rates' windows), where the general histories
//! seldom hold a limit long enough for it to bite.
//!
//! `PROPTEST_CASES=10000 cargo test --test conformance -- generated_histories` for a soak run
//! of the property test, `-- under_limits` for the one under limits (default 256 cases;
//! failures are kept in `proptest-regressions/model_proptest.txt` at the repository's root and
//! replayed first).

use crate::fixture::{Db, LEASE};
use crate::harness::Harness;
use crate::model::*;
use crate::Rule;
use fenceq::NewJob;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, FileFailurePersistence, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Every rule of this module (for the `durable` level's list).
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    crate::rules![
        model_agrees_with_the_store_on_every_fuzz_corpus_input,
        model_agrees_with_the_store_on_generated_histories,
        model_agrees_with_the_store_under_limits,
        generated_histories_reach_every_operation,
        an_expired_unreclaimed_lease_is_live_again_after_the_clock_steps_back,
        an_expired_high_priority_job_is_claimed_before_a_low_priority_one,
        model_agrees_on_the_claim_order_of_expired_leases,
        a_panicking_closure_rolls_back_and_the_queue_goes_on,
        model_agrees_when_a_replayed_job_starts_again_at_the_same_instant,
        model_agrees_on_when_a_backoff_was_set_after_limits_are_set,
    ]
}

// ==================================================================== the fuzz corpus

/// The repository's `fuzz/` directory.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of every directory under `fuzz/<kind>/` whose name starts with `fence_invariants`
/// (the in-memory and the file target share their inputs), sorted by name, each name once;
/// `None` when `fuzz/<kind>` holds no such directory.
fn fence_inputs(kind: &str) -> Option<Vec<PathBuf>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fuzz_dir().join(kind))
        .ok()?
        .map(|e| e.expect("reading a fuzz directory entry").path())
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("fence_invariants")))
        .collect();
    if dirs.is_empty() {
        return None;
    }
    dirs.sort();
    let mut files = std::collections::BTreeMap::new();
    for dir in dirs {
        for entry in std::fs::read_dir(&dir).expect("reading a corpus directory") {
            let path = entry.expect("reading a corpus directory entry").path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if path.is_file() && !name.starts_with('.') {
                files.entry(name).or_insert(path);
            }
        }
    }
    Some(files.into_values().collect())
}

/// The message of a caught panic.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Every committed input of the `fence_invariants` fuzz targets (`fuzz/corpus/fence_invariants*/`
/// and any crash artifacts in `fuzz/artifacts/fence_invariants*/`), decoded into op sequences
/// and run through the store against the model. A missing or empty corpus fails: the replay
/// would pass without testing anything. Every input that diverged is listed.
fn model_agrees_with_the_store_on_every_fuzz_corpus_input<H: Harness>(h: &H) {
    let corpus = fence_inputs("corpus")
        .expect("fuzz/corpus/fence_invariants is missing: the replay would pass without testing anything");
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/fence_invariants is empty: the replay would pass without testing anything"
    );
    let artifacts = fence_inputs("artifacts").unwrap_or_default();
    let started = Instant::now();
    let mut runs = HarnessRuns::new(h);
    let mut failures = Vec::new();
    for path in corpus.iter().chain(&artifacts) {
        let bytes = std::fs::read(path).expect("reading a corpus file");
        match catch_unwind(AssertUnwindSafe(|| runs.try_run(&decode(&bytes)))) {
            Ok(Ok(_)) => {}
            Ok(Err(report)) => failures.push(format!("{}:\n{report}", path.display())),
            Err(panic) => failures.push(format!("{} (panicked):\n{}", path.display(), panic_message(&*panic))),
        }
    }
    eprintln!(
        "fence_invariants: replayed {} corpus files and {} artifacts through the harness in {:.1?}",
        corpus.len(),
        artifacts.len(),
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} of the fence_invariants inputs failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

// ==================================================================== generated histories

fn state() -> impl Strategy<Value = StateSel> {
    prop_oneof![
        4 => select(vec![StateSel::Running, StateSel::Waiting, StateSel::Exhausted, StateSel::Unknown]),
        1 => select(vec![StateSel::Pending, StateSel::Completed, StateSel::Cancelled]),
    ]
}

fn job_ref() -> impl Strategy<Value = JobRef> {
    prop_oneof![
        3 => (0u8..8).prop_map(JobRef::Ever),
        4 => (state(), 0u8..4).prop_map(|(s, i)| JobRef::InState(s, i)),
        1 => Just(JobRef::Missing),
    ]
}

fn forgery() -> impl Strategy<Value = Forgery> {
    prop_oneof![
        Just(Forgery::FreshClaimId),
        any::<u8>().prop_map(Forgery::OtherClaimId),
        any::<u8>().prop_map(Forgery::OtherJob),
        Just(Forgery::UnknownJob),
        Just(Forgery::NextAttempt),
        Just(Forgery::PrevAttempt),
        Just(Forgery::ZeroAttempt),
        Just(Forgery::MaxAttempt),
        Just(Forgery::NilClaimId),
    ]
}

/// A token for a call that needs a job in `state`: mostly the current identity of such a
/// job (the call should succeed unless its lease ran out), else the latest claim, a replay of
/// any issued token, another job's identity, or a forgery.
fn token(state: StateSel) -> impl Strategy<Value = TokenRef> {
    prop_oneof![
        6 => (0u8..4).prop_map(move |i| TokenRef::CurrentOf(JobRef::InState(state, i))),
        2 => Just(TokenRef::Latest),
        2 => any::<u8>().prop_map(TokenRef::Issued),
        1 => job_ref().prop_map(TokenRef::CurrentOf),
        2 => (any::<u8>(), forgery()).prop_map(|(i, f)| TokenRef::Forged(i, f)),
    ]
}

/// A job for a call that needs one in `state` (mostly), or any job, or none.
fn job_in(state: StateSel) -> impl Strategy<Value = JobRef> {
    prop_oneof![3 => (0u8..4).prop_map(move |i| JobRef::InState(state, i)), 1 => job_ref()]
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    (
        prop_oneof![3 => Just(QueueSel::A), 1 => Just(QueueSel::B)],
        proptest::option::of(select(vec![KeySel::K0, KeySel::K1, KeySel::K2])),
        select(vec![PrioritySel::Normal, PrioritySel::Low, PrioritySel::High]),
        prop_oneof![4 => Just(DelaySel::Now), 1 => select(vec![DelaySel::OneMs, DelaySel::Lease, DelaySel::Hour])],
        select(vec![AttemptsSel::Default, AttemptsSel::One, AttemptsSel::Two, AttemptsSel::Four]),
        prop_oneof![8 => Just(None), 1 => Just(Some(GroupSel::G0)), 1 => Just(Some(GroupSel::G1))],
    )
        .prop_map(|(queue, key, priority, delay, attempts, group)| JobSpec {
            queue,
            key,
            priority,
            delay,
            attempts,
            group,
        })
}

fn invalid_job() -> impl Strategy<Value = InvalidJob> {
    select(vec![
        InvalidJob::EmptyQueue,
        InvalidJob::LongQueue,
        InvalidJob::EmptyKey,
        InvalidJob::LongKey,
        InvalidJob::EmptyPayload,
        InvalidJob::ZeroAttempts,
        InvalidJob::HugeDelay,
    ])
}

fn claim_queue() -> impl Strategy<Value = ClaimQueue> {
    prop_oneof![
        9 => Just(ClaimQueue::A),
        3 => Just(ClaimQueue::B),
        1 => select(vec![ClaimQueue::Idle, ClaimQueue::Empty, ClaimQueue::TooLong]),
    ]
}

fn worker() -> impl Strategy<Value = WorkerSel> {
    prop_oneof![10 => select(vec![WorkerSel::W1, WorkerSel::W2]), 1 => Just(WorkerSel::Empty)]
}

fn lease() -> impl Strategy<Value = LeaseSel> {
    prop_oneof![
        8 => Just(LeaseSel::Standard),
        3 => select(vec![LeaseSel::OneMs, LeaseSel::Hour, LeaseSel::Max]),
        1 => select(vec![LeaseSel::Zero, LeaseSel::TooLong]),
    ]
}

fn batch_limit() -> impl Strategy<Value = BatchLimit> {
    prop_oneof![
        8 => select(vec![BatchLimit::One, BatchLimit::Two, BatchLimit::Three, BatchLimit::Eight]),
        1 => select(vec![BatchLimit::Zero, BatchLimit::TooMany]),
    ]
}

fn page_limit() -> impl Strategy<Value = PageLimit> {
    prop_oneof![
        8 => select(vec![PageLimit::One, PageLimit::Two, PageLimit::Three, PageLimit::Hundred]),
        1 => Just(PageLimit::Zero),
    ]
}

fn text() -> impl Strategy<Value = TextSel> {
    prop_oneof![6 => Just(TextSel::Short), 1 => Just(TextSel::Empty), 1 => Just(TextSel::Long)]
}

fn backoff() -> impl Strategy<Value = BackoffSel> {
    select(vec![
        BackoffSel::Now,
        BackoffSel::OneMs,
        BackoffSel::Lease,
        BackoffSel::Huge,
        BackoffSel::Policy,
        BackoffSel::PolicyNoJitter,
    ])
}

fn park() -> impl Strategy<Value = ParkSel> {
    prop_oneof![
        6 => select(vec![ParkSel::OneMs, ParkSel::Lease, ParkSel::Hour]),
        1 => select(vec![ParkSel::Zero, ParkSel::TooLong]),
    ]
}

fn act() -> impl Strategy<Value = ClosureAct> {
    prop_oneof![
        6 => Just(ClosureAct::Write),
        1 => Just(ClosureAct::Fail),
        1 => Just(ClosureAct::Nested),
        1 => Just(ClosureAct::Panic),
    ]
}

fn retention() -> impl Strategy<Value = RetentionSel> {
    prop_oneof![
        8 => select(vec![RetentionSel::Default, RetentionSel::Zero, RetentionSel::Lease, RetentionSel::HourBatch1]),
        1 => select(vec![RetentionSel::ZeroBatch, RetentionSel::HugeBatch]),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => prop_oneof![Just(Step::Zero), Just(Step::OneMs), (0u16..5000).prop_map(Step::Ms)],
        2 => select(vec![Step::LeaseMinusOne, Step::Lease, Step::LeasePlusOne]),
        1 => select(vec![Step::Hour, Step::Week, Step::Decade]),
        1 => any::<u16>().prop_map(Step::Ms),
    ]
}

/// Valid limits: any combination of a queue rate, group rates and a running limit (the rates
/// per lease more often than per hour, so that histories see windows open).
fn limits_spec() -> impl Strategy<Value = LimitsSpec> {
    (
        proptest::option::of(rate_sel()),
        proptest::option::of(group_rates_sel()),
        proptest::option::of(select(vec![RunningSel::One, RunningSel::Two])),
    )
        .prop_map(|(rate, group_rates, max_running)| LimitsSpec { rate, group_rates, max_running })
}

fn rate_sel() -> impl Strategy<Value = RateSel> {
    prop_oneof![
        3 => select(vec![RateSel::OnePerLease, RateSel::TwoPerLease]),
        1 => select(vec![RateSel::OnePerHour, RateSel::TwoPerHour]),
    ]
}

fn group_rates_sel() -> impl Strategy<Value = GroupRatesSel> {
    prop_oneof![
        3 => Just(GroupRatesSel::OnePerLease),
        1 => select(vec![GroupRatesSel::TwoPerHour, GroupRatesSel::Both, GroupRatesSel::BothReversed]),
    ]
}

fn bad_limits() -> impl Strategy<Value = BadLimits> {
    select(vec![
        BadLimits::ZeroCount,
        BadLimits::ZeroWindow,
        BadLimits::WindowTooLong,
        BadLimits::CountTooHigh,
        BadLimits::SubMillisecond,
        BadLimits::SameGroupWindow,
        BadLimits::ZeroRunning,
    ])
}

fn queue_sel() -> impl Strategy<Value = QueueSel> {
    prop_oneof![3 => Just(QueueSel::A), 1 => Just(QueueSel::B)]
}

/// One operation, weighted towards the calls that move jobs through their states.
pub fn op() -> impl Strategy<Value = QueueOp> {
    prop_oneof![
        14 => job_spec().prop_map(QueueOp::Enqueue),
        3 => (proptest::collection::vec(job_spec(), 0..5), proptest::bool::weighted(0.2))
            .prop_map(|(jobs, poison)| QueueOp::EnqueueBatch { jobs, poison }),
        1 => invalid_job().prop_map(QueueOp::EnqueueInvalid),
        2 => (job_spec(), proptest::bool::weighted(0.7)).prop_map(|(job, commit)| QueueOp::EnqueueTx { job, commit }),
        1 => (proptest::collection::vec(token(StateSel::Running), 0..5), lease())
            .prop_map(|(tokens, lease)| QueueOp::RenewAll { tokens, lease }),
        1 => proptest::collection::vec(token(StateSel::Running), 0..5).prop_map(QueueOp::CompleteAll),
        14 => (claim_queue(), worker(), lease()).prop_map(|(queue, worker, lease)| QueueOp::Claim { queue, worker, lease }),
        5 => (claim_queue(), worker(), lease(), batch_limit())
            .prop_map(|(queue, worker, lease, limit)| QueueOp::ClaimBatch { queue, worker, lease, limit }),
        4 => (token(StateSel::Running), lease()).prop_map(|(token, lease)| QueueOp::Renew { token, lease }),
        2 => token(StateSel::Running).prop_map(QueueOp::Owns),
        6 => token(StateSel::Running).prop_map(QueueOp::Complete),
        3 => (token(StateSel::Running), act()).prop_map(|(token, act)| QueueOp::CompleteWith { token, act }),
        2 => (token(StateSel::Running), act()).prop_map(|(token, act)| QueueOp::WithOwnership { token, act }),
        5 => (token(StateSel::Running), backoff(), text()).prop_map(|(token, backoff, error)| QueueOp::Retry { token, backoff, error }),
        3 => (token(StateSel::Running), text()).prop_map(|(token, error)| QueueOp::Exhaust { token, error }),
        3 => (token(StateSel::Running), text()).prop_map(|(token, evidence)| QueueOp::MarkUnknown { token, evidence }),
        3 => (token(StateSel::Running), park(), text()).prop_map(|(token, timeout, reason)| QueueOp::Park { token, timeout, reason }),
        3 => (
            token(StateSel::Running),
            prop_oneof![
                4 => select(vec![SnoozeSel::Zero, SnoozeSel::OneMs, SnoozeSel::Lease]),
                1 => select(vec![SnoozeSel::Hour, SnoozeSel::Year, SnoozeSel::TooLong]),
            ],
            prop_oneof![4 => Just(ScopeSel::Job), 1 => Just(ScopeSel::Group), 2 => Just(ScopeSel::Queue)],
            select(vec![CapSel::Zero, CapSel::One, CapSel::Two, CapSel::Default]),
            text(),
        )
            .prop_map(|(token, delay, scope, cap, reason)| QueueOp::Snooze { token, delay, scope, cap, reason }),
        1 => select(vec![QueueSel::A, QueueSel::B]).prop_map(QueueOp::ClearBackoff),
        6 => token(StateSel::Waiting).prop_map(QueueOp::Resume),
        2 => prop_oneof![job_in(StateSel::Pending), job_in(StateSel::Running), job_in(StateSel::Waiting)].prop_map(QueueOp::Cancel),
        3 => token(StateSel::Exhausted).prop_map(QueueOp::Acknowledge),
        2 => job_in(StateSel::Exhausted).prop_map(QueueOp::Replay),
        3 => (token(StateSel::Unknown), select(vec![ResolutionSel::Completed, ResolutionSel::Retry, ResolutionSel::Exhaust]))
            .prop_map(|(token, resolution)| QueueOp::Resolve { token, resolution }),
        3 => Just(QueueOp::Reap),
        3 => retention().prop_map(QueueOp::Prune),
        3 => page_limit().prop_map(QueueOp::ExhaustionsPage),
        1 => (proptest::option::of(job_ref()), page_limit())
            .prop_map(|(after, limit)| QueueOp::UnknownsPage { after, limit }),
        6 => step().prop_map(QueueOp::Advance),
        1 => select(vec![BackSel::OneMs, BackSel::Lease, BackSel::Hour, BackSel::Week]).prop_map(QueueOp::ClockBack),
        1 => Just(QueueOp::Reopen),
        1 => Just(QueueOp::Check),
        3 => (queue_sel(), limits_spec()).prop_map(|(queue, limits)| QueueOp::SetLimits { queue, limits }),
        1 => (queue_sel(), bad_limits()).prop_map(|(queue, bad)| QueueOp::SetBadLimits { queue, bad }),
        1 => queue_sel().prop_map(QueueOp::ClearLimits),
        1 => queue_sel().prop_map(QueueOp::ReadLimits),
    ]
}

/// A history: one to 59 operations.
pub fn ops() -> impl Strategy<Value = Vec<QueueOp>> {
    proptest::collection::vec(op(), 1..60)
}

/// A job of queue "a", most of them in one of two groups.
fn flow_job() -> impl Strategy<Value = JobSpec> {
    (
        select(vec![PrioritySel::Normal, PrioritySel::Low, PrioritySel::High]),
        prop_oneof![6 => Just(DelaySel::Now), 1 => select(vec![DelaySel::OneMs, DelaySel::Lease])],
        select(vec![AttemptsSel::Default, AttemptsSel::Two, AttemptsSel::Four]),
        prop_oneof![1 => Just(None), 2 => Just(Some(GroupSel::G0)), 2 => Just(Some(GroupSel::G1))],
    )
        .prop_map(|(priority, delay, attempts, group)| JobSpec {
            queue: QueueSel::A,
            key: None,
            priority,
            delay,
            attempts,
            group,
        })
}

/// A token for a settle under limits: mostly a running job's own, now and then a replay.
fn live_token() -> impl Strategy<Value = TokenRef> {
    prop_oneof![
        8 => (0u8..4).prop_map(|i| TokenRef::CurrentOf(JobRef::InState(StateSel::Running, i))),
        1 => Just(TokenRef::Latest),
        1 => any::<u8>().prop_map(TokenRef::Issued),
    ]
}

/// One operation of a history under limits: mostly grouped jobs of queue "a", claims and
/// settles, and clock steps around the rates' windows, with limits set, cleared and read
/// now and then.
fn limited_op() -> impl Strategy<Value = QueueOp> {
    let claim_a =
        (worker(), lease()).prop_map(|(worker, lease)| QueueOp::Claim { queue: ClaimQueue::A, worker, lease });
    let batch_a = (worker(), lease(), batch_limit()).prop_map(|(worker, lease, limit)| QueueOp::ClaimBatch {
        queue: ClaimQueue::A,
        worker,
        lease,
        limit,
    });
    prop_oneof![
        10 => flow_job().prop_map(QueueOp::Enqueue),
        10 => claim_a,
        4 => batch_a,
        8 => live_token().prop_map(QueueOp::Complete),
        3 => (live_token(), backoff(), text()).prop_map(|(token, backoff, error)| QueueOp::Retry { token, backoff, error }),
        2 => (live_token(), text()).prop_map(|(token, error)| QueueOp::Exhaust { token, error }),
        2 => job_in(StateSel::Exhausted).prop_map(QueueOp::Replay),
        1 => token(StateSel::Exhausted).prop_map(QueueOp::Acknowledge),
        1 => (live_token(), select(vec![SnoozeSel::Zero, SnoozeSel::OneMs, SnoozeSel::Lease]))
            .prop_map(|(token, delay)| QueueOp::Snooze { token, delay, scope: ScopeSel::Job, cap: CapSel::Default, reason: TextSel::Short }),
        1 => job_in(StateSel::Pending).prop_map(QueueOp::Cancel),
        6 => prop_oneof![
            4 => select(vec![Step::Zero, Step::OneMs, Step::LeaseMinusOne, Step::Lease, Step::LeasePlusOne]),
            4 => (0u16..5000).prop_map(Step::Ms),
            1 => Just(Step::Hour),
        ]
        .prop_map(QueueOp::Advance),
        1 => select(vec![BackSel::OneMs, BackSel::Lease]).prop_map(QueueOp::ClockBack),
        2 => Just(QueueOp::Reap),
        2 => Just(QueueOp::Check),
        1 => limits_spec().prop_map(|limits| QueueOp::SetLimits { queue: QueueSel::A, limits }),
        1 => bad_limits().prop_map(|bad| QueueOp::SetBadLimits { queue: QueueSel::A, bad }),
        1 => Just(QueueOp::ClearLimits(QueueSel::A)),
        1 => Just(QueueOp::ReadLimits(QueueSel::A)),
        1 => Just(QueueOp::Reopen),
    ]
}

/// A history under limits: limits set on queue "a" first (mostly with group rates), then one
/// to 59 operations.
pub fn limited_ops() -> impl Strategy<Value = Vec<QueueOp>> {
    let first = prop_oneof![
        3 => (limits_spec(), group_rates_sel()).prop_map(|(limits, group)| LimitsSpec { group_rates: Some(group), ..limits }),
        1 => limits_spec(),
    ];
    (first, proptest::collection::vec(limited_op(), 1..60)).prop_map(|(limits, mut ops)| {
        ops.insert(0, QueueOp::SetLimits { queue: QueueSel::A, limits });
        ops
    })
}

/// Where failing histories are kept and replayed from first (the repository's
/// `proptest-regressions/model_proptest.txt`, whatever the test's working directory).
const REGRESSIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proptest-regressions/model_proptest.txt");

/// 256 cases unless `PROPTEST_CASES` says otherwise. Failures are kept in [`REGRESSIONS`] and
/// replayed first.
fn config() -> Config {
    let persistence = FileFailurePersistence::Direct(REGRESSIONS);
    Config { max_shrink_iters: 4096, failure_persistence: Some(Box::new(persistence)), ..Config::default() }
}

/// The model-based fence property test: generated histories of every queue operation, clock
/// moves (forward and back), reopens, and replays of any token ever issued (stale, forged,
/// cross-row), run through the store and the model. A divergence is shrunk to a minimal
/// history and reported with the model's rows.
fn model_agrees_with_the_store_on_generated_histories<H: Harness>(h: &H) {
    let runs = std::cell::RefCell::new(HarnessRuns::new(h));
    let mut runner = TestRunner::new(config());
    let result = runner.run(&ops(), |ops| runs.borrow_mut().try_run(&ops).map(drop).map_err(TestCaseError::fail));
    if let Err(e) = result {
        panic!("{e}\n{runner}");
    }
}

/// The same under limits: histories of grouped jobs claimed under a queue rate, group rates
/// and a running limit, each claim (which jobs, in which order, which group heads it defers)
/// predicted by the model and the guarantee checked on the model's history of starts.
fn model_agrees_with_the_store_under_limits<H: Harness>(h: &H) {
    let runs = std::cell::RefCell::new(HarnessRuns::new(h));
    let mut runner = TestRunner::new(config());
    let result =
        runner.run(&limited_ops(), |ops| runs.borrow_mut().try_run(&ops).map(drop).map_err(TestCaseError::fail));
    if let Err(e) = result {
        panic!("{e}\n{runner}");
    }
}

/// The generator is worth something only if it drives jobs through every transition: a
/// fixed-seed batch must see each kind of call succeed (and fail) at least once.
fn generated_histories_reach_every_operation<H: Harness>(h: &H) {
    const CASES: u32 = 128;
    let mut runner =
        TestRunner::new_with_rng(Config::with_cases(CASES), TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let mut total = RunStats::default();
    let mut runs = HarnessRuns::new(h);
    for _ in 0..CASES {
        let ops = ops().new_tree(&mut runner).expect("a value").current();
        total.merge(&runs.run(&ops));
    }
    eprintln!(
        "{CASES} fixed-seed cases: {} steps, {} claims ({} under limits, {} held back by them, {} group heads \
         deferred), calls (ok, refused): {:?}",
        total.steps, total.claims, total.limited_claims, total.held_back, total.deferred, total.calls
    );
    let succeeded = [
        "enqueue",
        "enqueue_batch",
        "enqueue_tx",
        "renew_all",
        "complete_all",
        "claim",
        "claim_batch",
        "renew",
        "owns",
        "complete",
        "complete_with",
        "with_ownership",
        "retry",
        "exhaust",
        "mark_unknown",
        "park",
        "resume",
        "cancel",
        "acknowledge",
        "replay",
        "resolve",
        "reap",
        "prune",
        "exhaustions",
        "unknowns",
        "reopen",
        "snooze",
        "clear_backoff",
        "set_limits",
        "clear_limits",
        "limits",
    ];
    for name in succeeded {
        let (ok, _) = total.calls.get(name).copied().unwrap_or_default();
        assert!(ok > 0, "no generated `{name}` call succeeded in {CASES} cases: {:?}", total.calls);
    }
    for name in [
        "renew",
        "complete",
        "retry",
        "exhaust",
        "park",
        "resume",
        "acknowledge",
        "resolve",
        "cancel",
        "snooze",
        "set_limits",
    ] {
        let (_, err) = total.calls.get(name).copied().unwrap_or_default();
        assert!(err > 0, "no generated `{name}` call was refused in {CASES} cases: {:?}", total.calls);
    }
    assert!(total.file, "some cases reopen the database");
    // Under limits: claims held back by each kind of limit's effect, and group heads deferred.
    let mut limited = RunStats::default();
    for _ in 0..CASES / 2 {
        let ops = limited_ops().new_tree(&mut runner).expect("a value").current();
        limited.merge(&runs.run(&ops));
    }
    eprintln!(
        "{} fixed-seed cases under limits: {} steps, {} claims ({} under limits, {} held back by them, {} group \
         heads deferred)",
        CASES / 2,
        limited.steps,
        limited.claims,
        limited.limited_claims,
        limited.held_back,
        limited.deferred
    );
    for (what, n, least) in [
        ("claims of a queue with limits", limited.limited_claims, 100),
        ("claims held back by a limit", limited.held_back, 20),
        ("group heads deferred", limited.deferred, 5),
    ] {
        assert!(n >= least, "only {n} {what} in {} cases under limits: {limited:?}", CASES / 2);
    }
}

// ==================================================================== pinned behaviour

fn plain_job(priority: PrioritySel) -> JobSpec {
    JobSpec {
        queue: QueueSel::A,
        key: None,
        priority,
        delay: DelaySel::Now,
        attempts: AttemptsSel::Default,
        group: None,
    }
}

/// DESIGN invariant 5 says a token stays dead "after expiry"; the engine (and invariant 3)
/// decide liveness by `lease_until > now` at each call. With a clock that steps back (a wall
/// clock can; `ManualClock::set` allows it), a lease that expired and was neither reclaimed nor
/// reaped is live again, and its token is accepted. No second claim can exist meanwhile (a
/// reclaim or a reap changes the row and kills the token for good), so invariant 1 holds; the
/// model follows invariant 3. This pins the behaviour down so that a change is deliberate.
fn an_expired_unreclaimed_lease_is_live_again_after_the_clock_steps_back<H: Harness>(h: &H) {
    let spec = plain_job(PrioritySel::Normal);
    let revived = run_on(
        h,
        &[
            QueueOp::Enqueue(spec),
            QueueOp::Claim { queue: ClaimQueue::A, worker: WorkerSel::W1, lease: LeaseSel::Standard },
            QueueOp::Advance(Step::Lease),
            QueueOp::Owns(TokenRef::Latest),
            QueueOp::ClockBack(BackSel::OneMs),
            QueueOp::Renew { token: TokenRef::Latest, lease: LeaseSel::Standard },
            QueueOp::Complete(TokenRef::Latest),
        ],
    );
    assert_eq!(revived.calls["owns"], (0, 1), "expired at T0 + lease");
    assert_eq!(revived.calls["renew"], (1, 0), "live again at T0 + lease - 1 ms");
    assert_eq!(revived.calls["complete"], (1, 0));
    let stats = run_on(
        h,
        &[
            QueueOp::Enqueue(spec),
            QueueOp::Claim { queue: ClaimQueue::A, worker: WorkerSel::W1, lease: LeaseSel::Standard },
            QueueOp::Advance(Step::Lease),
            QueueOp::Claim { queue: ClaimQueue::A, worker: WorkerSel::W2, lease: LeaseSel::Standard },
            QueueOp::ClockBack(BackSel::Hour),
            // The first token was superseded by the reclaim: dead whatever the clock says.
            QueueOp::Complete(TokenRef::Issued(0)),
            QueueOp::Complete(TokenRef::Issued(1)),
        ],
    );
    assert_eq!(stats.calls["complete"], (1, 1), "only the reclaim's token completes");
}

/// Engine defect "claim-order", found by the model and fixed in ac0020d: `claim` documents
/// "by priority, then run_at, then id" over every claimable job, but the expired-lease branch
/// of SQLite's `JOB_SELECT_CLAIMABLE` pre-selected `LIMIT :limit` rows by `lease_until` before
/// the outer `ORDER BY priority DESC, run_at, id`. With more expired leases than the limit, a
/// low-priority job whose lease expired first was claimed ahead of a high-priority one.
fn an_expired_high_priority_job_is_claimed_before_a_low_priority_one<H: Harness>(h: &H) {
    let db = Db::new(h);
    let low = db.enqueue(NewJob::new("q", b"low".to_vec()).priority(0)).unwrap().id();
    assert_eq!(db.claim("q", "w1", Duration::from_millis(1)).unwrap().unwrap().id(), low);
    let high = db.enqueue(NewJob::new("q", b"high".to_vec()).priority(5)).unwrap().id();
    assert_eq!(db.claim("q", "w1", Duration::from_millis(2)).unwrap().unwrap().id(), high);
    db.advance(Duration::from_millis(10));
    let next = db.claim("q", "w2", LEASE).unwrap().unwrap();
    assert_eq!(next.id(), high, "both leases expired: the higher priority job comes first");
}

/// The same defect as the minimal model history the property test shrank it to.
fn model_agrees_on_the_claim_order_of_expired_leases<H: Harness>(h: &H) {
    let claim = |lease| QueueOp::Claim { queue: ClaimQueue::A, worker: WorkerSel::W1, lease };
    run_on(
        h,
        &[
            QueueOp::Enqueue(plain_job(PrioritySel::Normal)),
            claim(LeaseSel::OneMs),
            QueueOp::Enqueue(plain_job(PrioritySel::High)),
            claim(LeaseSel::Standard),
            QueueOp::Advance(Step::Hour),
            claim(LeaseSel::Standard),
        ],
    );
}

/// A closure that panics inside `complete_with` / `with_ownership` rolls back with the settle,
/// the panic reaches the caller, and the queue goes on working, a reopen included (fixed in
/// ac0020d; found by the fault suite, kept as a model history).
fn a_panicking_closure_rolls_back_and_the_queue_goes_on<H: Harness>(h: &H) {
    let spec = plain_job(PrioritySel::Normal);
    let running = TokenRef::CurrentOf(JobRef::InState(StateSel::Running, 0));
    run_on(
        h,
        &[
            QueueOp::Enqueue(spec),
            QueueOp::Claim { queue: ClaimQueue::A, worker: WorkerSel::W1, lease: LeaseSel::Standard },
            QueueOp::CompleteWith { token: running, act: ClosureAct::Panic },
            QueueOp::WithOwnership { token: running, act: ClosureAct::Panic },
            QueueOp::Enqueue(spec),
            QueueOp::CompleteWith { token: running, act: ClosureAct::Write },
            QueueOp::Reopen,
            QueueOp::Claim { queue: ClaimQueue::A, worker: WorkerSel::W2, lease: LeaseSel::Standard },
            QueueOp::Complete(TokenRef::Latest),
        ],
    );
}

/// Engine defect "starts-key", found by the model-based property test and fixed in 1e4efb1,
/// as the minimal history it shrank to: with a rate set (the queue's claims record their
/// starts), a job claimed, exhausted, replayed and claimed again at the same instant starts
/// attempt 1 a second time. SQLite's starts log,
/// keyed by (queue, at, job, attempt), refused the second start and failed the claim with a
/// constraint error (`base::a_replayed_job_started_again_at_the_same_instant_counts_twice`).
fn model_agrees_when_a_replayed_job_starts_again_at_the_same_instant<H: Harness>(h: &H) {
    let claim = QueueOp::Claim { queue: ClaimQueue::A, worker: WorkerSel::W1, lease: LeaseSel::Standard };
    let limits = LimitsSpec { rate: None, group_rates: Some(GroupRatesSel::OnePerLease), max_running: None };
    let stats = run_on(
        h,
        &[
            QueueOp::Enqueue(plain_job(PrioritySel::Normal)),
            QueueOp::SetLimits { queue: QueueSel::A, limits },
            claim.clone(),
            QueueOp::Exhaust {
                token: TokenRef::CurrentOf(JobRef::InState(StateSel::Running, 0)),
                error: TextSel::Short,
            },
            QueueOp::Replay(JobRef::InState(StateSel::Exhausted, 0)),
            claim,
            QueueOp::Check,
        ],
    );
    assert_eq!(stats.calls["claim"], (2, 0), "the replayed job starts again");
}

/// Engine defect "backoff-since", found by the model-based property test and fixed in
/// 58a47d7, as the minimal history it shrank to: a queue-scoped snooze past its cap backs the
/// queue off (and exhausts the job); setting the queue's limits a millisecond later moved the
/// back-off's `since` (read from the flow-control row's `updated_at`), and the final check's
/// `stats` reported it set then (the kit rule
/// `base::a_queue_backoff_keeps_when_it_was_set_while_limits_and_the_group_policy_change`).
fn model_agrees_on_when_a_backoff_was_set_after_limits_are_set<H: Harness>(h: &H) {
    let none = LimitsSpec { rate: None, group_rates: None, max_running: None };
    run_on(
        h,
        &[
            QueueOp::Enqueue(plain_job(PrioritySel::Normal)),
            QueueOp::Claim { queue: ClaimQueue::A, worker: WorkerSel::W1, lease: LeaseSel::Standard },
            QueueOp::Snooze {
                token: TokenRef::CurrentOf(JobRef::InState(StateSel::Running, 0)),
                delay: SnoozeSel::Year,
                scope: ScopeSel::Queue,
                cap: CapSel::Zero,
                reason: TextSel::Short,
            },
            QueueOp::Advance(Step::OneMs),
            QueueOp::SetLimits { queue: QueueSel::A, limits: none },
            QueueOp::Check,
        ],
    );
}
