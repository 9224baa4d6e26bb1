//! Goal: a transaction survives a crash of the coordinator at every step: after its
//! partitions were added, after its PrepareCommit was written but before any marker,
//! after the markers but before CompleteCommit, and after it completed; and an open
//! transaction found at start-up still times out.
//!
//! Method: the coordinator runs over a real log in a temporary directory with a fake
//! MarkerWriter that records its calls and, per test, hangs or fails. A crash is the
//! coordinator closed mid-step (its tasks stop, nothing more is written); a second
//! coordinator opens the same directory and must finish what the first left, as its
//! records and the markers it writes show.

use headway_base::{PartitionIndex, ProducerEpoch, ProducerId, TopicPartition};
use headway_broker::FlushPolicy;
use headway_txn::{
    MarkerFuture, MarkerWriter, ProducerIdSource, TransactionResult, TxnConfig, TxnCoordinator,
    TxnError, TxnParts, TxnState,
};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const T: &str = "orders-txn";

#[derive(Debug, Clone, PartialEq, Eq)]
struct MarkerCall {
    producer_id: ProducerId,
    producer_epoch: ProducerEpoch,
    result: TransactionResult,
    partitions: Vec<TopicPartition>,
}

#[derive(Clone, Copy)]
enum Mode {
    /// Record the call and succeed.
    Write,
    /// Never resolve: the crash comes before any marker is written.
    Hang,
    /// Record the call, then never resolve: markers written, completion not.
    WriteThenHang,
    /// Fail this many calls, then write.
    FailFirst(usize),
}

struct FakeMarkers {
    mode: Mode,
    calls: Mutex<Vec<MarkerCall>>,
    attempts: AtomicUsize,
}

impl FakeMarkers {
    fn new(mode: Mode) -> Arc<FakeMarkers> {
        Arc::new(FakeMarkers {
            mode,
            calls: Mutex::new(Vec::new()),
            attempts: AtomicUsize::new(0),
        })
    }

    fn calls(&self) -> Vec<MarkerCall> {
        self.calls.lock().unwrap().clone()
    }
}

impl MarkerWriter for FakeMarkers {
    fn write_markers<'a>(
        &'a self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        result: TransactionResult,
        coordinator_epoch: i32,
        partitions: &'a [TopicPartition],
    ) -> MarkerFuture<'a> {
        assert_eq!(coordinator_epoch, headway_txn::COORDINATOR_EPOCH);
        let attempt = self.attempts.fetch_add(1, Ordering::SeqCst);
        let call = MarkerCall {
            producer_id,
            producer_epoch,
            result,
            partitions: partitions.to_vec(),
        };
        Box::pin(async move {
            match self.mode {
                Mode::Hang => std::future::pending().await,
                Mode::FailFirst(n) if attempt < n => {
                    return Err(TxnError::Markers("injected failure".into()))
                }
                Mode::Write | Mode::FailFirst(_) => {}
                Mode::WriteThenHang => {
                    self.calls.lock().unwrap().push(call);
                    return std::future::pending().await;
                }
            }
            self.calls.lock().unwrap().push(call);
            Ok(())
        })
    }
}

struct Counter(AtomicI64);

impl ProducerIdSource for Counter {
    fn allocate(&self) -> Result<ProducerId, TxnError> {
        Ok(ProducerId::new(self.0.fetch_add(1, Ordering::SeqCst)))
    }
}

async fn open(dir: &Path, markers: &Arc<FakeMarkers>, first_id: i64) -> Arc<TxnCoordinator> {
    open_checking_every(dir, markers, first_id, Duration::from_millis(20)).await
}

async fn open_checking_every(
    dir: &Path,
    markers: &Arc<FakeMarkers>,
    first_id: i64,
    check_interval: Duration,
) -> Arc<TxnCoordinator> {
    let parts = TxnParts {
        config: TxnConfig::default(),
        check_interval,
        markers: Arc::clone(markers) as Arc<dyn MarkerWriter>,
        producer_ids: Arc::new(Counter(AtomicI64::new(first_id))),
    };
    let c = TxnCoordinator::open(dir, FlushPolicy::Sync, parts)
        .await
        .expect("coordinator opens");
    tokio::time::timeout(Duration::from_secs(30), c.wait_loaded())
        .await
        .expect("the log loads");
    c
}

/// The crash: the coordinator's tasks stop and its log is closed.
async fn crash(c: Arc<TxnCoordinator>) {
    tokio::task::spawn_blocking(move || c.close())
        .await
        .unwrap();
}

async fn wait_for_state(c: &TxnCoordinator, state: TxnState) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = c.get(T).map(|m| m.state);
        if now == Some(state) {
            return;
        }
        assert!(Instant::now() < deadline, "still {now:?}, not {state:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn partitions() -> Vec<TopicPartition> {
    vec![
        TopicPartition::new("in", PartitionIndex::new(0)),
        TopicPartition::new("out", PartitionIndex::new(3)),
    ]
}

/// Initialises `T` and opens a transaction over [`partitions`].
async fn begin(c: &Arc<TxnCoordinator>) -> (ProducerId, ProducerEpoch) {
    let (id, epoch) = c.init_producer_id(T, 60_000, None).await.unwrap();
    c.add_partitions(T, id, epoch, &partitions()).await.unwrap();
    (id, epoch)
}

fn expected_commit(id: ProducerId, epoch: ProducerEpoch) -> MarkerCall {
    MarkerCall {
        producer_id: id,
        producer_epoch: epoch,
        result: TransactionResult::Commit,
        partitions: partitions(),
    }
}

#[tokio::test]
async fn a_commit_writes_its_markers_then_completes() {
    let dir = tempfile::tempdir().unwrap();
    let markers = FakeMarkers::new(Mode::Write);
    let c = open(dir.path(), &markers, 1).await;
    let (id, epoch) = begin(&c).await;
    let answer = c
        .end_txn(T, id, epoch, TransactionResult::Commit, false)
        .await
        .unwrap();
    assert_eq!(answer, (id, epoch));
    wait_for_state(&c, TxnState::CompleteCommit).await;
    assert_eq!(markers.calls(), vec![expected_commit(id, epoch)]);
    crash(c).await;
}

#[tokio::test]
async fn a_crash_after_prepare_commit_before_any_marker_completes_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    let hung = FakeMarkers::new(Mode::Hang);
    let c = open(dir.path(), &hung, 1).await;
    let (id, epoch) = begin(&c).await;
    c.end_txn(T, id, epoch, TransactionResult::Commit, false)
        .await
        .unwrap();
    assert_eq!(c.get(T).unwrap().state, TxnState::PrepareCommit);
    assert_eq!(
        c.end_txn(T, id, epoch, TransactionResult::Commit, false)
            .await,
        Err(TxnError::ConcurrentTransactions),
        "a retried commit waits for the markers"
    );
    crash(c).await;
    assert!(hung.calls().is_empty());

    let markers = FakeMarkers::new(Mode::Write);
    let c = open(dir.path(), &markers, 1000).await;
    wait_for_state(&c, TxnState::CompleteCommit).await;
    assert_eq!(markers.calls(), vec![expected_commit(id, epoch)]);
    let meta = c.get(T).unwrap();
    assert!(meta.partitions.is_empty());
    assert_eq!((meta.producer_id, meta.producer_epoch), (id, epoch));
    crash(c).await;
}

#[tokio::test]
async fn a_crash_after_the_markers_before_complete_commit_writes_them_again() {
    let dir = tempfile::tempdir().unwrap();
    let first = FakeMarkers::new(Mode::WriteThenHang);
    let c = open(dir.path(), &first, 1).await;
    let (id, epoch) = begin(&c).await;
    c.end_txn(T, id, epoch, TransactionResult::Commit, false)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while first.calls().is_empty() {
        assert!(Instant::now() < deadline, "markers never written");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(c.get(T).unwrap().state, TxnState::PrepareCommit);
    crash(c).await;

    let markers = FakeMarkers::new(Mode::Write);
    let c = open(dir.path(), &markers, 1000).await;
    wait_for_state(&c, TxnState::CompleteCommit).await;
    assert_eq!(markers.calls(), vec![expected_commit(id, epoch)]);
    crash(c).await;

    // Completed: a third start writes nothing more.
    let again = FakeMarkers::new(Mode::Write);
    let c = open(dir.path(), &again, 2000).await;
    assert_eq!(c.get(T).unwrap().state, TxnState::CompleteCommit);
    assert_eq!(
        c.end_txn(T, id, epoch, TransactionResult::Commit, false)
            .await,
        Ok((id, epoch)),
        "a retried commit is answered from the replayed state"
    );
    assert!(again.calls().is_empty());
    crash(c).await;
}

#[tokio::test]
async fn an_open_transaction_survives_a_crash_and_then_times_out_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let markers = FakeMarkers::new(Mode::Write);
    // The first coordinator never checks timeouts: the crash always finds it open.
    let c = open_checking_every(dir.path(), &markers, 1, Duration::from_secs(3600)).await;
    let (id, epoch) = c.init_producer_id(T, 100, None).await.unwrap();
    c.add_partitions(T, id, epoch, &partitions()).await.unwrap();
    let before = c.get(T).unwrap();
    crash(c).await;

    let c = open(dir.path(), &markers, 1000).await;
    let after = c.get(T).unwrap();
    assert_eq!(after, before, "replayed as it was written");
    wait_for_state(&c, TxnState::CompleteAbort).await;
    let fenced = ProducerEpoch::new(epoch.value() + 1);
    assert_eq!(
        markers.calls(),
        vec![MarkerCall {
            producer_id: id,
            producer_epoch: fenced,
            result: TransactionResult::Abort,
            partitions: partitions(),
        }]
    );
    assert_eq!(
        c.end_txn(T, id, epoch, TransactionResult::Commit, false)
            .await,
        Err(TxnError::ProducerFenced),
        "the producer that let it time out is fenced"
    );
    crash(c).await;
}

#[tokio::test]
async fn failed_marker_writes_are_retried_until_they_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let markers = FakeMarkers::new(Mode::FailFirst(2));
    let c = open(dir.path(), &markers, 1).await;
    let (id, epoch) = begin(&c).await;
    c.end_txn(T, id, epoch, TransactionResult::Commit, false)
        .await
        .unwrap();
    wait_for_state(&c, TxnState::CompleteCommit).await;
    assert_eq!(markers.attempts.load(Ordering::SeqCst), 3);
    assert_eq!(markers.calls(), vec![expected_commit(id, epoch)]);
    crash(c).await;
}

#[tokio::test]
async fn version_2_ends_return_the_bumped_epoch_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let markers = FakeMarkers::new(Mode::Write);
    let c = open(dir.path(), &markers, 1).await;
    let (id, epoch) = c.init_producer_id(T, 60_000, None).await.unwrap();
    for tp in partitions() {
        c.check_produce(T, id, epoch, &tp, true).await.unwrap();
    }
    let bumped = ProducerEpoch::new(epoch.value() + 1);
    let answer = c
        .end_txn(T, id, epoch, TransactionResult::Commit, true)
        .await
        .unwrap();
    assert_eq!(answer, (id, bumped));
    wait_for_state(&c, TxnState::CompleteCommit).await;
    assert_eq!(markers.calls(), vec![expected_commit(id, bumped)]);
    crash(c).await;

    let c = open(dir.path(), &markers, 1000).await;
    assert_eq!(
        c.end_txn(T, id, epoch, TransactionResult::Commit, true)
            .await,
        Ok((id, bumped)),
        "a retry after the restart gets the same answer"
    );
    assert_eq!(
        c.check_produce(T, id, epoch, &partitions()[0], true).await,
        Err(TxnError::InvalidProducerEpoch)
    );
    crash(c).await;
}

#[tokio::test]
async fn init_over_an_open_transaction_aborts_it_and_the_retry_gets_a_new_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let markers = FakeMarkers::new(Mode::Write);
    let c = open(dir.path(), &markers, 1).await;
    let (id, epoch) = begin(&c).await;
    assert_eq!(
        c.init_producer_id(T, 60_000, None).await,
        Err(TxnError::ConcurrentTransactions)
    );
    wait_for_state(&c, TxnState::CompleteAbort).await;
    let (id2, epoch2) = c.init_producer_id(T, 60_000, None).await.unwrap();
    assert_eq!(id2, id);
    assert_eq!(epoch2.value(), epoch.value() + 2, "fenced, then bumped");
    assert_eq!(markers.calls()[0].result, TransactionResult::Abort);
    crash(c).await;
}

#[tokio::test]
async fn a_retired_coordinator_answers_not_coordinator_and_its_successor_completes() {
    use headway_broker::coordinator_shards::Shard;
    let dir = tempfile::tempdir().unwrap();
    let failing = FakeMarkers::new(Mode::FailFirst(usize::MAX));
    let c = open(dir.path(), &failing, 1).await;
    let (id, epoch) = begin(&c).await;
    c.end_txn(T, id, epoch, TransactionResult::Commit, false)
        .await
        .unwrap();
    // The partition moves: every request is sent to look for the coordinator again.
    c.retire();
    assert_eq!(
        c.init_producer_id(T, 60_000, None).await,
        Err(TxnError::NotCoordinator)
    );
    assert_eq!(
        c.add_partitions(T, id, epoch, &partitions()).await,
        Err(TxnError::NotCoordinator)
    );
    assert_eq!(
        c.describe(&[T.to_string()]),
        vec![Err(TxnError::NotCoordinator)]
    );
    // Retired, it completes nothing: the transaction stays prepared for the next leader.
    assert_eq!(c.get(T).map(|m| m.state), Some(TxnState::PrepareCommit));
    crash(c).await;
    // The next leader replays the log and writes the markers of what was prepared.
    let markers = FakeMarkers::new(Mode::Write);
    let next = open(dir.path(), &markers, 100).await;
    wait_for_state(&next, TxnState::CompleteCommit).await;
    assert_eq!(markers.calls(), vec![expected_commit(id, epoch)]);
    crash(next).await;
}
