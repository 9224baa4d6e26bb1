//! The consumer: assigned partitions, fetched through a credit window.
//!
//! The window bounds the bytes fetched but not yet consumed. There is one fetcher per
//! partition leader, and each owns an equal share of the window (see [`credit`]): a
//! fetcher asks for more only when its share's level (its bytes buffered plus the
//! bytes requested by its fetch in flight) has fallen to its part of
//! `refill_threshold_bytes`, and then asks for its part of `refill_increment_bytes` at
//! most (never more than the room left in its share). With one leader the share is the
//! whole window. Refilling early, around half-empty, keeps the consumer from stalling
//! on an empty window (credit stall); refilling in large increments keeps the number of
//! fetches per byte low (amortization); a share per fetcher keeps one leader's long
//! polls or unread records from starving another leader's fetcher. A broker may answer
//! with more than was asked only when a single record batch is larger than the credit
//! (Kafka always returns the first batch whole); such answers are counted as
//! `overshoots`.

mod credit;

use crate::cluster::{Cluster, EARLIEST, LATEST};
use crate::error::{check, ClientError};
use bytes::Bytes;
use credit::Credit;
pub use credit::WindowState;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use kafka_protocol::ResponseError;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Most bytes fetched and not yet consumed.
    pub window_bytes: usize,
    /// Refill when the level falls to this.
    pub refill_threshold_bytes: usize,
    /// Most bytes one refill asks for.
    pub refill_increment_bytes: usize,
    /// Per-partition cap within one fetch.
    pub partition_max_bytes: usize,
    /// How long the broker may hold a fetch waiting for data.
    pub max_wait: Duration,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        let window_bytes = 8 * 1024 * 1024;
        ConsumerConfig {
            window_bytes,
            refill_threshold_bytes: window_bytes / 2,
            refill_increment_bytes: window_bytes / 2,
            partition_max_bytes: 1024 * 1024,
            max_wait: Duration::from_millis(500),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartOffset {
    Earliest,
    Latest,
    At(i64),
}

#[derive(Debug, Clone)]
pub struct ConsumedRecord {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

#[derive(Default)]
struct Chunk {
    /// The fetcher whose share the bytes count against.
    fetcher: usize,
    bytes: usize,
    records: VecDeque<ConsumedRecord>,
}

struct Shared {
    credit: Credit,
    chunks: VecDeque<Chunk>,
    /// Next offset to fetch and last known high watermark, per partition.
    positions: HashMap<(Arc<str>, i32), (i64, i64)>,
    closed: bool,
}

struct Inner {
    cluster: Arc<Cluster>,
    config: ConsumerConfig,
    shared: Mutex<Shared>,
    data: Notify,
    credit: Notify,
}

pub struct Consumer {
    inner: Arc<Inner>,
    fetchers: Vec<tokio::task::JoinHandle<()>>,
}

impl Consumer {
    /// Starts fetching the given partitions from the given offsets.
    pub async fn assign(
        cluster: Arc<Cluster>,
        config: ConsumerConfig,
        assignment: Vec<(String, i32, StartOffset)>,
    ) -> Result<Consumer, ClientError> {
        if config.refill_threshold_bytes >= config.window_bytes
            || config.refill_increment_bytes == 0
        {
            return Err(ClientError::Invalid(
                "refill threshold must be below the window, increment positive".into(),
            ));
        }
        let mut positions = HashMap::new();
        let mut by_leader: HashMap<i32, Vec<(Arc<str>, i32)>> = HashMap::new();
        for (topic, partition, start) in assignment {
            let offset = match start {
                StartOffset::Earliest => cluster.list_offset(&topic, partition, EARLIEST).await?,
                StartOffset::Latest => cluster.list_offset(&topic, partition, LATEST).await?,
                StartOffset::At(offset) => offset,
            };
            let (node, _) = cluster.leader(&topic, partition).await?;
            let topic: Arc<str> = Arc::from(topic);
            positions.insert((Arc::clone(&topic), partition), (offset, -1));
            by_leader.entry(node).or_default().push((topic, partition));
        }
        let credit = Credit::new(
            config.window_bytes,
            config.refill_threshold_bytes,
            config.refill_increment_bytes,
            by_leader.len(),
        );
        let inner = Arc::new(Inner {
            cluster,
            config,
            shared: Mutex::new(Shared {
                credit,
                chunks: VecDeque::new(),
                positions,
                closed: false,
            }),
            data: Notify::new(),
            credit: Notify::new(),
        });
        let fetchers = by_leader
            .into_iter()
            .enumerate()
            .map(|(fetcher, (node, partitions))| {
                tokio::spawn(fetch_loop(Arc::clone(&inner), fetcher, node, partitions))
            })
            .collect();
        Ok(Consumer { inner, fetchers })
    }

    /// The next record, waiting for one if none is buffered.
    pub async fn next(&self) -> ConsumedRecord {
        loop {
            let data = self.inner.data.notified();
            if let Some(record) = self.try_next() {
                return record;
            }
            data.await;
        }
    }

    /// Waits until a record is buffered (without taking it).
    pub async fn readable(&self) {
        loop {
            let data = self.inner.data.notified();
            if !self
                .inner
                .shared
                .lock()
                .expect("consumer lock")
                .chunks
                .is_empty()
            {
                return;
            }
            data.await;
        }
    }

    /// The next buffered record, if any.
    pub fn try_next(&self) -> Option<ConsumedRecord> {
        let mut shared = self.inner.shared.lock().expect("consumer lock");
        let chunk = shared.chunks.front_mut()?;
        let record = chunk.records.pop_front();
        if chunk.records.is_empty() {
            let (fetcher, bytes) = (chunk.fetcher, chunk.bytes);
            shared.chunks.pop_front();
            shared.credit.consumed(fetcher, bytes);
            self.inner.credit.notify_waiters();
        }
        record
    }

    pub fn window(&self) -> WindowState {
        self.inner
            .shared
            .lock()
            .expect("consumer lock")
            .credit
            .state()
            .clone()
    }

    /// True when every assigned partition has been read up to the high watermark seen
    /// in the latest fetch answer, and every fetched record was consumed.
    pub fn caught_up(&self) -> bool {
        let shared = self.inner.shared.lock().expect("consumer lock");
        shared.chunks.is_empty()
            && shared
                .positions
                .values()
                .all(|(next, hw)| *hw >= 0 && next >= hw)
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.inner.shared.lock().expect("consumer lock").closed = true;
        self.fetchers.iter().for_each(|f| f.abort());
    }
}

/// Waits until the fetcher's share has fallen to its threshold, then reserves a
/// refill's credit. Only the consumption of this fetcher's own chunks lowers its share
/// while it waits, and `try_next` wakes the waiters at each.
async fn reserve_credit(inner: &Inner, fetcher: usize) -> Option<usize> {
    loop {
        let credit = inner.credit.notified();
        {
            let mut shared = inner.shared.lock().expect("consumer lock");
            if shared.closed {
                return None;
            }
            if let Some(credit) = shared.credit.reserve(fetcher) {
                return Some(credit);
            }
        }
        credit.await;
    }
}

async fn fetch_loop(
    inner: Arc<Inner>,
    fetcher: usize,
    node: i32,
    partitions: Vec<(Arc<str>, i32)>,
) {
    let mut backoff = inner.cluster.config().retry_backoff;
    while let Some(credit) = reserve_credit(&inner, fetcher).await {
        let (mut chunk, moves, failed) = match fetch_once(&inner, node, &partitions, credit).await {
            Ok(Fetched {
                chunk,
                moves,
                failed,
            }) => (chunk, moves, failed),
            Err(e) => (Chunk::default(), Vec::new(), Some(e)),
        };
        chunk.fetcher = fetcher;
        {
            // Positions move and their records become readable under one lock, so that
            // `caught_up` never sees a position past records not yet buffered.
            let mut shared = inner.shared.lock().expect("consumer lock");
            move_positions(&mut shared, &moves);
            // Records or not, the credit comes back to this fetcher's share only.
            shared.credit.answered(fetcher, credit, chunk.bytes);
            if !chunk.records.is_empty() {
                shared.chunks.push_back(chunk);
                inner.data.notify_waiters();
            }
        }
        match failed {
            Some(e) => {
                tracing::warn!(error = %e, node, "fetch failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(inner.cluster.config().retry_backoff_max);
            }
            None => backoff = inner.cluster.config().retry_backoff,
        }
    }
}

/// One fetch's outcome: the records of the partitions that answered well, and the
/// first error of those that did not.
struct Fetched {
    chunk: Chunk,
    moves: Vec<Move>,
    failed: Option<ClientError>,
}

/// A partition's position past the records of an answer: the partition, the next
/// offset to fetch (if a batch was read) and the high watermark the leader answered.
type Move = ((Arc<str>, i32), Option<i64>, i64);

/// Moves positions past the records taken from an answer; the caller pushes those
/// records into `chunks` under the same lock.
fn move_positions(shared: &mut Shared, moves: &[Move]) {
    for (key, next, high_watermark) in moves {
        if let Some(position) = shared.positions.get_mut(key) {
            position.0 = next.unwrap_or(position.0);
            position.1 = *high_watermark;
        }
    }
}

/// Fetches once. A partition's position moves only together with its records going
/// into the chunk: a partition that answers with an error (or with a batch that does
/// not decode) keeps its position and is fetched again after the backoff, while the
/// other partitions of the same answer keep their records. An error for the whole
/// request moves nothing.
async fn fetch_once(
    inner: &Inner,
    node: i32,
    partitions: &[(Arc<str>, i32)],
    credit: usize,
) -> Result<Fetched, ClientError> {
    let addr = inner
        .cluster
        .broker_addr(node)
        .ok_or_else(|| ClientError::Invalid(format!("no address for broker {node}")))?;
    let connection = inner.cluster.connection(&addr).await?;
    let request = fetch_request(inner, partitions, credit);
    let response = connection.request(&request).await?;
    check(response.error_code, None)?;
    let Answer {
        chunk,
        moves,
        out_of_range,
        mut failed,
    } = take_answer(&inner.shared, response.responses);
    for key in out_of_range {
        if let Err(e) = restart_at_earliest(inner, &key).await {
            failed.get_or_insert(e);
        }
    }
    Ok(Fetched {
        chunk,
        moves,
        failed,
    })
}

/// What a fetch answer brought, once its records are taken.
struct Answer {
    chunk: Chunk,
    /// Where the positions of the partitions in `chunk` move, once it is buffered.
    moves: Vec<Move>,
    /// Partitions answered with OFFSET_OUT_OF_RANGE (their positions unchanged).
    out_of_range: Vec<(Arc<str>, i32)>,
    failed: Option<ClientError>,
}

/// Takes the records of every partition that answered without error into a chunk, and
/// says where those partitions' positions move past them (moved by `move_positions`
/// when the chunk is buffered). A partition with an error, or whose batches do not
/// decode, contributes nothing and keeps its position.
fn take_answer(shared: &Mutex<Shared>, responses: Vec<FetchableTopicResponse>) -> Answer {
    let mut answer = Answer {
        chunk: Chunk::default(),
        moves: Vec::new(),
        out_of_range: Vec::new(),
        failed: None,
    };
    for topic in responses {
        let name: Arc<str> = Arc::from(topic.topic.as_str());
        for p in topic.partitions {
            let key = (Arc::clone(&name), p.partition_index);
            if p.error_code == ResponseError::OffsetOutOfRange.code() {
                answer.out_of_range.push(key);
                continue;
            }
            if let Err(e) = take_records(shared, &key, p, &mut answer) {
                answer.failed.get_or_insert(e);
            }
        }
    }
    answer
}

/// A partition's answer: its records go into the answer's chunk together with its
/// move past them, or, on an error or records that do not decode, neither happens.
fn take_records(
    shared: &Mutex<Shared>,
    key: &(Arc<str>, i32),
    p: PartitionData,
    answer: &mut Answer,
) -> Result<(), ClientError> {
    check(p.error_code, None)?;
    let records = p.records.unwrap_or_default();
    let bytes = records.len();
    let Some((from, _)) = shared
        .lock()
        .expect("consumer lock")
        .positions
        .get(key)
        .copied()
    else {
        return Ok(());
    };
    // Decoded without the lock held: only this partition's fetcher moves its position.
    let mut decoded = VecDeque::new();
    let next = decode(&key.0, key.1, records, from, &mut decoded)?;
    answer.moves.push((key.clone(), next, p.high_watermark));
    answer.chunk.bytes += bytes;
    answer.chunk.records.extend(decoded);
    Ok(())
}

/// OFFSET_OUT_OF_RANGE: the partition starts again at its earliest offset.
async fn restart_at_earliest(inner: &Inner, key: &(Arc<str>, i32)) -> Result<(), ClientError> {
    let earliest = inner.cluster.list_offset(&key.0, key.1, EARLIEST).await?;
    tracing::warn!(topic = %key.0, partition = key.1, earliest, "offset out of range; restarting from the earliest offset");
    set_position(inner, key, Some(earliest), None);
    Ok(())
}

fn fetch_request(inner: &Inner, partitions: &[(Arc<str>, i32)], credit: usize) -> FetchRequest {
    let mut by_topic: Vec<(Arc<str>, Vec<FetchPartition>)> = Vec::new();
    for (topic, partition) in partitions {
        let offset = position(inner, &(Arc::clone(topic), *partition));
        let p = FetchPartition::default()
            .with_partition(*partition)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(inner.config.partition_max_bytes.min(credit) as i32);
        match by_topic.iter_mut().find(|(t, _)| t == topic) {
            Some((_, list)) => list.push(p),
            None => by_topic.push((Arc::clone(topic), vec![p])),
        }
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(inner.config.max_wait.as_millis() as i32)
        .with_min_bytes(1)
        .with_max_bytes(credit as i32)
        .with_session_epoch(-1)
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partitions(ps)
                })
                .collect(),
        )
}

fn position(inner: &Inner, key: &(Arc<str>, i32)) -> i64 {
    inner
        .shared
        .lock()
        .expect("consumer lock")
        .positions
        .get(key)
        .map_or(0, |p| p.0)
}

fn set_position(
    inner: &Inner,
    key: &(Arc<str>, i32),
    next: Option<i64>,
    high_watermark: Option<i64>,
) {
    let mut shared = inner.shared.lock().expect("consumer lock");
    if let Some(p) = shared.positions.get_mut(key) {
        if let Some(next) = next {
            p.0 = next;
        }
        if let Some(hw) = high_watermark {
            p.1 = hw;
        }
    }
}

/// Decodes (and decompresses) the batches of one partition, keeping records at or
/// after `from`. Returns the next offset to fetch, if any record batch was read.
/// A partial batch at the end (a broker may cut the last one at the size limit) is
/// left for the next fetch.
fn decode(
    topic: &Arc<str>,
    partition: i32,
    records: Bytes,
    from: i64,
    out: &mut VecDeque<ConsumedRecord>,
) -> Result<Option<i64>, ClientError> {
    let mut next = None;
    let mut at = 0;
    while records.len() - at >= 12 {
        let length = i32::from_be_bytes(records[at + 8..at + 12].try_into().expect("4 bytes"));
        let end = at + 12 + length.max(0) as usize;
        if length < 0 || end > records.len() {
            break;
        }
        let mut batch = records.slice(at..end);
        if batch.len() >= 27 {
            // From the header, so that a batch without records still moves the position.
            let base_offset = i64::from_be_bytes(batch[0..8].try_into().expect("8 bytes"));
            let last_offset_delta = i32::from_be_bytes(batch[23..27].try_into().expect("4 bytes"));
            next = Some(base_offset + i64::from(last_offset_delta) + 1);
        }
        at = end;
        let set = RecordBatchDecoder::decode(&mut batch)
            .map_err(|e| ClientError::Protocol(format!("bad record batch: {e}")))?;
        for r in set.records {
            if r.offset < from || r.control {
                continue;
            }
            out.push_back(ConsumedRecord {
                topic: Arc::clone(topic),
                partition,
                offset: r.offset,
                timestamp_ms: r.timestamp,
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            });
        }
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    /// One v2 batch of `count` records from `base`, values "0", "1", ...
    fn batch(base: i64, count: i64) -> Bytes {
        let records: Vec<Record> = (0..count)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: base + i,
                sequence: -1,
                timestamp: 0,
                key: None,
                value: Some(Bytes::from(i.to_string())),
                headers: Default::default(),
            })
            .collect();
        let mut out = bytes::BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut out, &records, &options).expect("encode");
        out.freeze()
    }

    fn partition(index: i32, error: i16, records: Bytes) -> PartitionData {
        PartitionData::default()
            .with_partition_index(index)
            .with_error_code(error)
            .with_high_watermark(100)
            .with_records(Some(records))
    }

    fn shared_at(positions: &[(i32, i64)]) -> Mutex<Shared> {
        Mutex::new(Shared {
            credit: Credit::new(64, 32, 32, 1),
            chunks: VecDeque::new(),
            positions: positions
                .iter()
                .map(|(p, o)| ((Arc::from("t"), *p), (*o, -1)))
                .collect(),
            closed: false,
        })
    }

    fn answer(partitions: Vec<PartitionData>) -> Vec<FetchableTopicResponse> {
        vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(partitions)]
    }

    fn position(shared: &Mutex<Shared>, p: i32) -> i64 {
        shared.lock().unwrap().positions[&(Arc::from("t"), p)].0
    }

    /// Buffers an answer's chunk and moves its positions, as `fetch_loop` does.
    fn settle(shared: &Mutex<Shared>, answer: &Answer) {
        move_positions(&mut shared.lock().unwrap(), &answer.moves);
    }

    #[test]
    fn an_error_on_one_partition_skips_nothing_on_the_others() {
        let shared = shared_at(&[(0, 10), (1, 20), (2, 30)]);
        let not_leader = ResponseError::NotLeaderOrFollower.code();
        let got = take_answer(
            &shared,
            answer(vec![
                partition(0, 0, batch(10, 5)),
                partition(1, not_leader, Bytes::new()),
                partition(2, 0, batch(30, 3)),
            ]),
        );
        // The partitions before and after the failed one keep their records, and only
        // their positions move; the failed one is fetched again from where it was.
        let offsets: Vec<(i32, i64)> = got
            .chunk
            .records
            .iter()
            .map(|r| (r.partition, r.offset))
            .collect();
        assert_eq!(
            offsets,
            vec![
                (0, 10),
                (0, 11),
                (0, 12),
                (0, 13),
                (0, 14),
                (2, 30),
                (2, 31),
                (2, 32)
            ]
        );
        // Until the chunk is buffered no position moves, so a consumer never looks
        // caught up while the records that would get it there are still in hand.
        assert_eq!(
            (
                position(&shared, 0),
                position(&shared, 1),
                position(&shared, 2)
            ),
            (10, 20, 30)
        );
        settle(&shared, &got);
        assert_eq!(
            (
                position(&shared, 0),
                position(&shared, 1),
                position(&shared, 2)
            ),
            (15, 20, 33)
        );
        assert!(got.failed.is_some());
    }

    #[test]
    fn records_that_do_not_decode_leave_their_partition_where_it_was() {
        let shared = shared_at(&[(0, 0), (1, 0)]);
        let mut corrupt = batch(0, 4).to_vec();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff; // the CRC no longer matches
        let got = take_answer(
            &shared,
            answer(vec![
                partition(0, 0, Bytes::from(corrupt)),
                partition(1, 0, batch(0, 2)),
            ]),
        );
        assert_eq!(got.chunk.records.len(), 2);
        assert!(got.chunk.records.iter().all(|r| r.partition == 1));
        settle(&shared, &got);
        assert_eq!((position(&shared, 0), position(&shared, 1)), (0, 2));
        assert!(got.failed.is_some());
    }

    #[test]
    fn out_of_range_partitions_are_named_and_not_moved() {
        let shared = shared_at(&[(0, 50), (1, 0)]);
        let out_of_range = ResponseError::OffsetOutOfRange.code();
        let got = take_answer(
            &shared,
            answer(vec![
                partition(0, out_of_range, Bytes::new()),
                partition(1, 0, batch(0, 1)),
            ]),
        );
        assert_eq!(got.out_of_range, vec![(Arc::from("t"), 0)]);
        settle(&shared, &got);
        assert_eq!((position(&shared, 0), position(&shared, 1)), (50, 1));
        assert!(got.failed.is_none());
    }
}
