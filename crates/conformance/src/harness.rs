//! What the kit needs from a store that the public API does not give: a fresh database,
//! a raw view of its rows, a domain table beside the queue, a transaction of the caller's
//! own, and a way to make claims fail.

use fenceq::store::Store;
use fenceq::{ManualClock, Queue};

/// One row as the store holds it, read without fenceq's own queries: (id, state, attempt,
/// claim id, lease end, last error). A rejected call must leave every row's snapshot equal.
pub type RawRow = (i64, String, i64, Option<Vec<u8>>, Option<i64>, Option<String>);

/// The store-specific half of the kit. Implement it for a store, then run the kit with
/// [`run`](crate::run) from a test target with `harness = false`.
///
/// Every method may panic on failure: the kit runs only in tests.
pub trait Harness: Send + Sync + 'static {
    /// The store under test.
    type Store: Store;
    /// What keeps one test's database alive and apart from every other test's (a temporary
    /// directory; a schema on a server). Dropped at the end of the test.
    type Place: Send + Sync;

    /// A fresh, empty database of its own.
    fn create(&self) -> Self::Place;

    /// A queue handle on `place`, reading time from `clock`, with the store's defaults
    /// except `max_attempts` (when given). Called again on the same place to reopen it.
    fn open(&self, place: &Self::Place, clock: &ManualClock, max_attempts: Option<u32>) -> Queue<Self::Store>;

    /// Every job row, in id order, read without fenceq.
    fn snapshot(&self, place: &Self::Place) -> Vec<RawRow>;

    /// How many job rows are in `state`, counted without fenceq.
    fn count(&self, place: &Self::Place, state: &str) -> i64;

    /// Creates the domain table `replies (job, attempt, text)` beside the queue.
    fn create_replies(&self, place: &Self::Place);

    /// A domain write inside the caller's transaction `tx` (what an application does in
    /// `with_ownership`, `complete_with`, `transaction`): one row of `replies`.
    ///
    /// # Errors
    ///
    /// The store's error, as `fenceq::Error`.
    fn insert_reply(tx: &<Self::Store as Store>::Tx, job: i64, attempt: i64, text: &str) -> fenceq::Result<()>;

    /// Every row of `replies`, as (job, attempt, text), in insertion order.
    fn replies(&self, place: &Self::Place) -> Vec<(i64, i64, String)>;

    /// Runs `f` in a transaction of the application's own on `place` (another connection
    /// than the queue's), then commits it when `commit` is true, else rolls it back.
    fn foreign_transaction(&self, place: &Self::Place, commit: bool, f: &mut dyn FnMut(&<Self::Store as Store>::Tx));

    /// While `fail` is true, every claim of `place` fails with a store error (and changes
    /// nothing); settles and everything else keep working.
    fn fail_claims(&self, place: &Self::Place, fail: bool);

    /// Every row of `replies` as (job, attempt, text), in insertion order, read inside `tx`
    /// (the queue's own connection, through `Queue::with_connection`): what the model reads
    /// after every step of every history, without opening a connection of its own each time.
    ///
    /// # Errors
    ///
    /// The store's error, as `fenceq::Error`.
    fn replies_in(tx: &<Self::Store as Store>::Tx) -> fenceq::Result<Vec<(i64, i64, String)>>;

    /// A fresh database of its own with an empty `replies` table (and no jobs), for checks
    /// of behaviour that run by the hundred: the model's corpus and generated histories.
    /// Nothing checks there what a crash or a power loss leaves, so a store may make it
    /// cheaper than [`Harness::create`]'s: in memory-backed storage, copied from a template.
    /// By default, [`Harness::create`] then [`Harness::create_replies`].
    fn create_scratch(&self) -> Self::Place {
        let place = self.create();
        self.create_replies(&place);
        place
    }

    /// Empties a scratch place after a run that went well, for the next run to reuse with
    /// its open `queue` (the model's runs, by the hundred): no jobs and no replies, ids
    /// assigned from the start again, as [`Harness::create_scratch`] made it. Returns false
    /// when the store cannot (the default): the next run then gets a new place.
    fn recycle(&self, place: &Self::Place, queue: &Queue<Self::Store>) -> bool {
        let _ = (place, queue);
        false
    }
}
