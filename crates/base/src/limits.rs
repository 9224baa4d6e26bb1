//! Every hard bound of the broker, in one place, with why it holds and what happens
//! when it is reached. (The group coordinator's bounds, members per group and groups,
//! are in `headway_group::GroupConfig`, next to the state they bound.) Settings a user
//! may want to change live in `headway_broker::config` with these as defaults; the
//! rest are constants. Every crate of the workspace reads its bounds from here.
//!
//! # Memory
//!
//! What the broker's resident memory is made of, each part with its bound (the
//! derivation and the figures for the defaults are in `docs/isolation.md`):
//!
//! - request frames being read and handled: at most `request_bytes_in_flight_max` for
//!   large frames, plus one small frame ([`REQUEST_SMALL_FRAME_BYTES`]) per connection,
//!   plus the produce batches being copied to have their offsets rewritten (at most
//!   the frames they came in);
//! - decoded requests: decoding runs on the worker threads, one request at a time on
//!   each, and allocates at most [`DECODED_BYTES_MAX`] (16 MiB), next to
//!   the check that every count on the wire is backed by bytes present;
//! - fetch responses read and not yet written: at most `outbound_bytes_max` in all and
//!   `connection_outbound_bytes_max` per connection, plus one batch per response (the
//!   first batch is always whole), plus one copy of each response being encoded;
//! - per connection: a 16 KiB write buffer, the task pair, and the window of
//!   [`REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX`] handled requests, each holding its parsed
//!   request (for a fetch, about 50 bytes per partition named); at most
//!   `connections_max` connections;
//! - per partition: the offset and time indexes of its segments in memory (at most 24
//!   bytes per `index_interval_bytes` of the active segment, about 6 MiB per GiB at the
//!   default 4 KiB; a sealed segment keeps one entry in 16, about 384 KiB per GiB) and
//!   at most [`PRODUCERS_PER_PARTITION_MAX`] idempotent producers (about 150 bytes
//!   each, at most [`TRANSACTIONS_PER_PARTITION_MAX`] of them with an open
//!   transaction), and 24 bytes per aborted transaction whose marker the log holds
//!   (like the offset index, it grows with the log: `docs/log-format.md`);
//! - per group: its members' metadata and assignments, with at most
//!   `members_per_group_max` members and `groups_max` groups;
//! - the transaction coordinator's ids and open transactions: at most
//!   [`TRANSACTIONAL_IDS_MAX`] ids and [`TRANSACTION_ENTRIES_MAX`] partitions and groups
//!   in open transactions, about 120 MiB at worst.
//!
//! Record data is never kept between requests: consumers read the log through the page
//! cache, which the kernel owns and evicts.

/// Largest request frame accepted (Kafka's `socket.request.max.bytes`, 100 MiB).
/// At the limit the connection is closed with a log line, before the body is read,
/// so a hostile length never allocates memory.
pub const FRAME_BYTES_MAX_DEFAULT: usize = 100 * 1024 * 1024;

/// Requests a connection may have in flight: read and handled, response not yet
/// written. Produces waiting for their fsync count here. When the window is full the
/// connection stops reading its socket, which pushes back on that client alone (TCP).
pub const REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX: usize = 128;

/// Bytes of long-poll bookkeeping one connection's waiting answers may hold: a fetch or
/// share fetch keeps a summary of every partition it named (about 100 bytes each) until
/// it is answered. Past this, the connection's socket is not read until earlier answers
/// are written (and their summaries freed), so a client that names the same partitions
/// hundreds of thousands of times in each of many pipelined long polls holds at most
/// this plus one request's summary (itself bounded by the decode footprint limit),
/// instead of up to a gigabyte. A consumer of 6,000 partitions keeps about 600 KB per
/// fetch.
pub const LONG_POLL_BYTES_PER_CONNECTION_MAX: usize = 4 * 1024 * 1024;

/// Bytes of large request frames held in memory across all connections, from the
/// moment a frame's first [`REQUEST_SMALL_FRAME_BYTES`] have arrived until it has been
/// handled. Such a frame reserves its whole size at once, holding nothing else while it
/// waits, so readers never wait on each other; whenever bytes come back every waiter
/// tries again, so a small reservation is never queued behind a large one that does not
/// fit (`crates/server/src/request_budget.rs`). A reader that waits stops reading its
/// socket. Must stay above the frame limit.
pub const REQUEST_BYTES_IN_FLIGHT_MAX_DEFAULT: usize = 128 * 1024 * 1024;

/// Frames up to this size are read without asking the request budget: a connection
/// may always hold one, as part of its own cost (at most `connections_max` × 8 KiB, 80
/// MiB with 10,000 connections). Fetches, metadata, commits and a light producer's
/// produces fit, so light clients never wait behind a heavy one's large frames.
pub const REQUEST_SMALL_FRAME_BYTES: usize = 8 * 1024;

/// What decoding one request may allocate: its arrays at their in-memory size (strings
/// and byte strings share the frame). 16 MiB holds a fetch naming about 180,000
/// partitions or a metadata request naming about 200,000 topics; a request past it is
/// refused, as one whose counts are not backed by its bytes is.
pub const DECODED_BYTES_MAX: usize = 16 * 1024 * 1024;

/// How long a client may take to send a request body once its length has arrived
/// (`request_body_timeout_ms`), waits for the request budget included. A client that
/// stalls mid-frame (a slow-loris, or a length prefix with nothing behind it) is closed
/// when it passes, and what its body held of the request budget is released. A 100 MiB
/// frame at this default needs about 3.4 MB/s.
pub const REQUEST_BODY_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// Concurrent client connections. Further connections wait in the accept backlog.
pub const CONNECTIONS_MAX_DEFAULT: usize = 10_000;

/// Bytes of records one fetch response may carry, whatever the client asks for
/// (`fetch.max.bytes` defaults to 50 MiB in Kafka clients). The first batch of the
/// response is always whole, so a batch up to `max.message.bytes` always gets through.
/// With the defaults the connection's outbound budget
/// ([`CONNECTION_OUTBOUND_BYTES_MAX_DEFAULT`], 16 MiB) is the smaller limit and applies
/// first; this one holds when that budget is configured larger.
pub const FETCH_RESPONSE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Reads one partition's fetch makes past batches the log cleaner emptied before it
/// answers with what it has (each read is at most one segment).
pub const FETCH_EMPTY_BATCH_READS_MAX: usize = 64;

/// Longest a fetch may wait for `min_bytes` (clients default to 500 ms).
/// A larger `max_wait_ms` is clamped, so a waiter never lingers for minutes.
pub const FETCH_WAIT_MS_MAX: u64 = 30_000;

/// Partitions per topic, and thus partition directories and flusher tasks per topic.
/// CreateTopics above it fails with INVALID_PARTITIONS.
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

/// Topic name length (Kafka's limit, which keeps `<name>/<partition>` a valid path).
pub const TOPIC_NAME_BYTES_MAX: usize = 249;

/// Threads for blocking disk work other than fetch reads (fsyncs, recovery, admin
/// operations). Beyond this bound such work queues instead of spawning threads
/// without limit. Fetch reads have threads of their own ([`READ_THREADS_DEFAULT`]),
/// so a burst of cold reads never delays a sync.
pub const BLOCKING_THREADS_MAX: usize = 64;

/// Threads for fetch reads that may wait for the disk (`read_threads`). Each
/// connection has at most [`COLD_READS_PER_CONNECTION`] of them at a time; the
/// queue in front of them is first come, first served.
pub const READ_THREADS_DEFAULT: usize = 8;
pub const READ_THREADS_MAX: usize = 256;

/// How far behind the log's end a fetch may start and still count as reading the
/// tail (`read_tail_bytes`): such reads are served from the page cache on the
/// connection's thread when the data is there. Reads further behind are catching up
/// and go to the read threads.
pub const READ_TAIL_BYTES_DEFAULT: u64 = 8 * 1024 * 1024;

/// Nice value of the read threads (`read_threads_nice`): catching up runs on the
/// CPU time that tail reads and produces leave over.
pub const READ_THREADS_NICE_DEFAULT: i32 = 10;

/// Threads that write large answers to plain TCP sockets in the `SCHED_IDLE` class
/// (`bulk_send_threads`; 0 writes every answer on the runtime's worker threads). Off by
/// default: measured beside a catch-up reader it did not lower the tail consumers'
/// latency on this machine, and on a CPU kept busy by normal threads it would starve
/// catching up (`docs/sync.md`).
pub const BULK_SEND_THREADS_DEFAULT: usize = 0;
pub const BULK_SEND_THREADS_MAX: usize = 64;

/// An answer of at least this many bytes is bulk work: with bulk send threads, a plain
/// TCP connection's writer hands it to them. A tail consumer's answers stay well below
/// it (at 2,000 messages of 1 KiB per second it takes 128 ms to gather this much); a
/// consumer catching up gets up to a megabyte per partition.
pub const BULK_SEND_BYTES_MIN: usize = 256 * 1024;

/// A produce request larger than this is bulk work (a heavy writer): it passes the bulk
/// budget and is handled on the bulk threads. A light producer's requests stay well
/// below it even when a stall of some milliseconds lets its batches grow: at 2,000
/// messages of 1 KiB per second it takes 32 ms to gather this much.
pub const BULK_PRODUCE_BYTES_MIN: usize = 64 * 1024;

/// Highest and lowest rate of bulk work, in bytes per second (`bulk_bytes_per_sec_max`,
/// `bulk_bytes_per_sec_min`): the highest for writing (produce requests larger than
/// [`BULK_PRODUCE_BYTES_MIN`], the log cleaner), the lowest for writing and reading.
/// The rates start at the highest and halve while light work is slower than
/// [`LIGHT_LATENCY_TARGET_MS_DEFAULT`] (`headway_broker::io::bulk_budget`); they never drop below
/// the lowest, so catching up and heavy writing always progress.
pub const BULK_BYTES_PER_SEC_MAX_DEFAULT: u64 = 1024 * 1024 * 1024;
pub const BULK_BYTES_PER_SEC_MIN_DEFAULT: u64 = 16 * 1024 * 1024;

/// Highest rate of reading for consumers catching up on data the page cache does not
/// hold (`bulk_read_bytes_per_sec_max`), in bytes per second. Every byte such a replay
/// reads is a disk read the light partitions' syncs may queue behind, and a byte the
/// CPU copies into a socket; the light clients pay for it per second of the
/// replay, and more per second the faster it reads. Measured beside a cold 1 GiB replay
/// on a disk of about 900 MB/s of sequential reads, the light consumers' p99 was
/// 1.11-1.38x quiet with this maximum (the replay at 208-248 MB/s of records) against
/// 1.29-1.61x at 1 GiB/s (347-450 MB/s), and a process outside the broker doing only the
/// reads and the socket copies cost 1.10-1.34x (`docs/latency.md`). Catching up on
/// cached data never passes the budget.
pub const BULK_READ_BYTES_PER_SEC_MAX_DEFAULT: u64 = 256 * 1024 * 1024;

/// The slowest light work per interval that counts as fast (`light_latency_target_ms`):
/// a small sync, or a small produce's wait from its append to its data being durable
/// (which is at most about two syncs). Above it, bulk work is cut back. A quiet disk
/// syncs 4 KiB in well under a millisecond here (`docs/sync.md`).
pub const LIGHT_LATENCY_TARGET_MS_DEFAULT: u64 = 3;

/// How long a catch-up read waits, before each disk read of at most 256 KiB, for the
/// small syncs in progress to end (`bulk_read_sync_wait_us`; `headway_broker::io::timings::SyncGate`).
/// A small sync then queues behind at most the one read already on the disk; bounded so
/// that catching up progresses while light partitions sync without pause (with 1,000
/// µs and 256 KiB reads, at worst 256 KiB per millisecond of waiting). Off by default:
/// measured beside a cold catch-up reader it did not lower the tail consumers' p99
/// (`docs/sync.md`).
pub const BULK_READ_SYNC_WAIT_US_DEFAULT: u64 = 0;

/// How often the bulk rate is adjusted.
pub const BULK_BUDGET_INTERVAL_MS: u64 = 100;

/// Bytes a partition may have appended and not yet handed to a sync
/// (`partition_unsynced_bytes_max`, with `flush = sync`). A producer whose append
/// leaves more stops being read until the partition's sync in progress ends, so every
/// sync stays small and a heavy writer's syncs do not grow with its rate.
pub const PARTITION_UNSYNCED_BYTES_MAX_DEFAULT: u64 = 8 * 1024 * 1024;

/// Cold reads one connection may have queued or running at once: its fair share of
/// the read threads. A catch-up consumer thus waits its turn behind every other
/// connection's read instead of filling the queue.
pub const COLD_READS_PER_CONNECTION: usize = 1;

/// Bytes of fetch responses a connection may hold before its socket takes them
/// (`connection_outbound_bytes_max`). A fetch reserves what it may read before
/// reading and asks for no more than the connection has left; the reservation is
/// released once the response is written. A client that never reads its socket
/// holds this much broker memory at most, plus one batch (the first batch of a
/// response is always whole), and its connection stops being read once
/// [`REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX`] requests wait.
pub const CONNECTION_OUTBOUND_BYTES_MAX_DEFAULT: usize = 16 * 1024 * 1024;

/// Bytes of fetch responses all connections together may hold (`outbound_bytes_max`).
/// When fewer are left than a fetch would like, it reads what is left (at least
/// [`OUTBOUND_BYTES_MIN`]) rather than wait; only when even that is not left does
/// it wait for other connections' responses to be written.
pub const OUTBOUND_BYTES_MAX_DEFAULT: usize = 256 * 1024 * 1024;

/// The least a fetch reserves (and the smallest allowed per-connection budget).
pub const OUTBOUND_BYTES_MIN: usize = 64 * 1024;

/// Idempotent producers remembered per partition (each up to five batches, about
/// 150 bytes). Past it the producer idle for longest is forgotten; if it comes back
/// with a later sequence it gets UNKNOWN_PRODUCER_ID and resets, as after expiry.
pub const PRODUCERS_PER_PARTITION_MAX: usize = 10_000;

/// Transactions open at once in one partition (each one producer of the table above,
/// which is never evicted while its transaction is open). Past it, a producer's first
/// transactional batch is refused (POLICY_VIOLATION, with the reason) until a
/// coordinator ends some: a transaction coordinator bounds its open transactions far
/// lower, so the bound is reached only by a broken or hostile coordinator or producer.
pub const TRANSACTIONS_PER_PARTITION_MAX: usize = 5_000;

/// Aborted transactions a read_committed fetch names for one partition (12 bytes each
/// on the wire). Each aborted transaction in a fetched range holds at least a batch and
/// a marker (about 140 bytes), so a read of a megabyte rarely meets more than a few
/// hundred. Past the bound the read is halved until its transactions fit, so a client
/// is never shown an aborted record it was not told about; a single batch overlaps at
/// most the transactions open at its offset ([`TRANSACTIONS_PER_PARTITION_MAX`]), which
/// fit.
pub const ABORTED_TRANSACTIONS_PER_FETCH_MAX: usize = 10_000;

/// Free bytes the data directory's filesystem must keep (`disk_free_bytes_min`):
/// below it, produces are refused with KAFKA_STORAGE_ERROR (retriable: clients retry
/// until space returns) while the broker's own small writes (committed offsets,
/// producer-id blocks, topic metadata, shutdown snapshots and markers, index entries)
/// still find room. Measured every [`DISK_CHECK_INTERVAL_MS`]; between measurements
/// each produce reserves its size from the last figure, so only other processes'
/// writes can take the disk below it. 0 turns the check off (a full disk then refuses
/// writes as they fail, see `docs/storage-errors.md`).
pub const DISK_FREE_BYTES_MIN_DEFAULT: u64 = 1024 * 1024 * 1024;

/// How often the data directory's free space is measured (one `statvfs(2)` on its own
/// task, never on the produce path). Produces refused for lack of space are accepted
/// again at most this long after space returns.
pub const DISK_CHECK_INTERVAL_MS: u64 = 250;

/// How long the log cleaner rests when no compacted partition needs cleaning (Kafka's
/// `log.cleaner.backoff.ms`).
pub const LOG_CLEANER_BACKOFF_MS_DEFAULT: u64 = 15_000;

/// Memory for a cleaning pass's key map (Kafka's `log.cleaner.dedupe.buffer.size`,
/// whose default is four times this): 48 bytes a key, so a pass reads up to about
/// 700,000 distinct keys, and a partition with more is cleaned in several passes.
/// Allocated only while a pass runs; one pass runs at a time.
pub const LOG_CLEANER_DEDUPE_BUFFER_BYTES_DEFAULT: usize = 32 * 1024 * 1024;

/// The dirty (not yet cleaned) bytes one cleaning pass takes at most, so that a pass
/// ends and the cleaner turns to the next partition.
pub const LOG_CLEANER_PASS_DIRTY_BYTES_MAX: u64 = 1024 * 1024 * 1024;

/// The log cleaner's fixed I/O cap, bytes per second of reads and writes (Kafka's
/// `log.cleaner.io.max.bytes.per.second`, unlimited there). The adaptive bulk budget the
/// cleaner also passes answers to slow syncs, not to the CPU a pass takes (reading,
/// hashing keys, rewriting batches); measured with `bench/compaction_interference.py`
/// beside light clients on 2 cores, cleaning 2 GiB uncapped took their end-to-end p99 to
/// 2.3x, and at this cap to 1.3x (`bench/results/compaction/README.md`). A 2 GiB
/// partition then takes about a minute and a half to clean.
pub const LOG_CLEANER_IO_BYTES_PER_SEC_DEFAULT: u64 = 64 * 1024 * 1024;

/// Open files kept back from new partitions beside the connections' reserve: syncs of
/// directories, side files, the metrics listener, a log cleaner's staged segment
/// (`headway_broker::open_files`).
pub const OPEN_FILES_HEADROOM: u64 = 64;

/// Transactional ids the transaction coordinator holds (`headway_txn`), each with its
/// producer id, epoch, state and settings (about 300 bytes besides its id and its
/// partitions). An InitProducerId for a new id beyond it is refused with
/// POLICY_VIOLATION and a message naming the bound; ids idle for
/// `transactional_id_expiration_ms` are removed and make room.
pub const TRANSACTIONAL_IDS_MAX: usize = 50_000;

/// Longest transactional id, and longest group id in a transaction, in bytes. Kafka
/// Streams' ids (application id, a UUID, a thread index) take well under it. Longer
/// ones are refused (INVALID_REQUEST, INVALID_GROUP_ID), so every id's memory is
/// bounded and its record's u16 lengths hold it.
pub const TRANSACTION_ID_BYTES_MAX: usize = 1024;

/// Partitions in one transaction. An AddPartitionsToTxn, AddOffsetsToTxn or a
/// transactions-version-2 produce that would pass it is refused with
/// POLICY_VIOLATION (the client aborts the transaction); the record of a transaction
/// stays small enough for one batch of the coordinator's log.
pub const PARTITIONS_PER_TRANSACTION_MAX: usize = 1_000;

/// Consumer groups whose offsets one transaction commits (AddOffsetsToTxn), refused
/// past it like partitions.
pub const GROUPS_PER_TRANSACTION_MAX: usize = 100;

/// Partitions and groups in all open transactions together, refused past it like
/// partitions. With the bounds above the coordinator's memory stays under about
/// 120 MiB whatever producers do: at most 50,000 ids of at most 1.3 KiB, and 50,000
/// partitions or groups of at most 1.1 KiB; with the ids clients use (tens of bytes)
/// it is a tenth of that.
pub const TRANSACTION_ENTRIES_MAX: usize = 50_000;

/// Partitions with their own series on `/metrics` (offsets, size on disk, health): a
/// scrape stays a few hundred KiB and a Prometheus server's series count bounded. The
/// first partitions by topic name and index have series; the rest are left out and
/// counted by `headway_partitions_omitted` (broker-wide totals still cover them).
pub const METRICS_PARTITIONS_MAX: usize = 1_000;

/// Topics with their own traffic series on `/metrics` (bytes and records in and out),
/// for the same reason; the first by name have series, broker-wide totals cover all.
pub const METRICS_TOPICS_MAX: usize = 1_000;

/// Group partitions (a group's committed partition) with their own series on
/// `/metrics` (committed offset and lag), for the same reason; the first by group id,
/// topic and index have series, the rest are counted by
/// `headway_group_partitions_omitted`.
pub const METRICS_GROUP_PARTITIONS_MAX: usize = 1_000;

/// Lines a second logged for responses that carry a failure of the broker's own or a
/// refusal of bad input (`crates/server/src/requests.rs`): a client repeating a failing
/// request cannot flood the log. Lines left out are counted, and the next line logged
/// says how many.
pub const FAILURE_LOG_LINES_PER_SECOND: u64 = 20;

/// How long a client of an SSL listener has to finish its TLS handshake; a client that
/// stalls in it is disconnected and counted (`tls_handshake_failures` on `/metrics`).
pub const TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// Smallest capacity of the cache of sealed segments' open files
/// (`headway_log::FileCache`), whatever the active segments hold: reads of sealed
/// segments then still find a file to use, at the cost of opening it (one `open(2)`
/// per miss). The files held open for a read stay valid when evicted, so a small
/// cache costs opens, never errors.
pub const FILE_CACHE_CAPACITY_MIN: usize = 64;

/// Records in flight (from the share-partition start offset to its end offset) per
/// share-partition (Kafka's `group.share.partition.max.record.locks`). Past it a
/// share fetch acquires nothing more there until acknowledgements or expired locks
/// let the start offset move; it bounds a share-partition's memory (its runs of
/// in-flight records) and what one slow consumer can hold back.
pub const SHARE_PARTITION_RECORD_LOCKS_MAX: u32 = 2_000;

/// Share sessions on the broker (Kafka's `group.share.max.share.sessions`). A new
/// one past it gets SHARE_SESSION_LIMIT_REACHED (retriable); sessions go when their
/// member closes them, leaves or times out.
pub const SHARE_SESSIONS_MAX: usize = 2_000;

/// Members of one share group (Kafka's `group.share.max.size`); a join past it gets
/// GROUP_MAX_SIZE_REACHED.
pub const SHARE_GROUP_MEMBERS_MAX: usize = 1_000;

/// Share groups the broker holds. A heartbeat that would create one more gets
/// COORDINATOR_NOT_AVAILABLE (retriable) until groups are deleted or emptied of state;
/// it bounds the share coordinator's memory as `groups_max` bounds consumer groups'.
pub const SHARE_GROUPS_MAX: usize = 10_000;

/// Groups that may have settings of their own (GROUP config resources). Every change
/// rewrites the one file that holds them all, and a client with AlterConfigs may name
/// groups that do not exist, so their number is bounded: past it, settings for a
/// further group are refused with INVALID_REQUEST naming the limit (changes to groups
/// that have settings, and deletions, go on).
pub const GROUP_CONFIG_GROUPS_MAX: usize = 10_000;

/// Records one ShareFetch acquires at most, whatever its MaxRecords says: a response
/// stays bounded and records stay available to the group's other members.
pub const SHARE_FETCH_RECORDS_MAX: u32 = 10_000;

/// Share groups with their own series on `/metrics` (members, in-flight, acquired,
/// redelivered and archived records), the first by group id; `headway_share_groups`
/// counts them all.
pub const METRICS_SHARE_GROUPS_MAX: usize = 1_000;

/// Partitions listed by the web console's `/api/state` (`docs/console.md`): one poll a
/// second stays a few hundred KiB however many topics there are. The first by topic
/// name and index are listed; the answer counts the ones left out, and its traffic
/// totals still cover all.
pub const CONSOLE_PARTITIONS_MAX: usize = 500;

/// Groups listed by the console's `/api/state`, the first by group id; the answer
/// counts the ones left out.
pub const CONSOLE_GROUPS_MAX: usize = 100;

/// Members and committed partitions listed per group by the console's `/api/state`;
/// the answer counts the ones left out.
pub const CONSOLE_GROUP_ENTRIES_MAX: usize = 200;

/// Connections listed by the console's `/api/state`, those holding the most outbound
/// bytes first; the answer counts the ones left out.
pub const CONSOLE_CONNECTIONS_MAX: usize = 200;

/// Threads that close partitions at once at a clean stop: each close of a written
/// partition syncs its files, directory and clean-shutdown marker, and overlapping
/// them lets the disk merge the flushes (`headway_broker::Broker::shutdown`).
pub const SHUTDOWN_CLOSE_THREADS: usize = 16;

/// How often the cache of segment files closes the files not used since its previous
/// round (`headway_log::FileCache::close_unused`): a partition idle for one to two
/// periods holds no open file. Reopening one costs three `open(2)` at its next append.
pub const FILE_CACHE_IDLE_CLOSE_MS: u64 = 30_000;

/// ACLs the broker holds (CreateAcls past it is refused with INVALID_REQUEST): every
/// request's check walks the ACLs of its resources, so they stay bounded in memory.
pub const ACLS_MAX: usize = 10_000;

/// SCRAM users the broker's security store holds (AlterUserScramCredentials past it
/// answers UNACCEPTABLE_CREDENTIAL for the new user): every user's credentials are
/// kept in memory and rewritten to disk whole on each change.
pub const SCRAM_USERS_MAX: usize = 10_000;

/// Longest salt an AlterUserScramCredentials upsertion may carry (clients send 32 to 64
/// bytes): the salt is stored and sent in every SCRAM exchange of the user, so a client
/// cannot grow the store or the exchanges past this. Longer: UNACCEPTABLE_CREDENTIAL.
pub const SCRAM_SALT_BYTES_MAX: usize = 1024;
/// Largest request frame a SASL listener reads from a client that has not
/// authenticated: ApiVersions, SaslHandshake and SaslAuthenticate fit in far less. A
/// longer length prefix closes the connection before its body is read.
pub const SASL_UNAUTHENTICATED_FRAME_BYTES_MAX: usize = 8 * 1024;

/// How long a client of a SASL listener has from its connection to a successful
/// authentication; past it the connection is closed and counted as a failure.
pub const SASL_AUTHENTICATION_TIMEOUT_MS: u64 = 10_000;

/// Longest delay before the answer to a failed SASL authentication, however many
/// recent failures its address has (`sasl_failed_authentication_delay_ms`).
pub const SASL_FAILURE_DELAY_MAX_MS: u64 = 5_000;

/// Client addresses whose recent SASL failures are remembered (to lengthen their
/// delay); when full, the oldest entry is forgotten.
pub const SASL_FAILURE_ADDRESSES_MAX: usize = 4_096;

/// How often the controller leader reaches every voter when it has nothing to replicate.
pub const CONTROLLER_HEARTBEAT_MS_DEFAULT: u64 = 150;
/// A controller voter that hears from no leader for a time drawn between these two starts
/// an election. Several heartbeats fit in the shortest, so a busy 2-core machine does not
/// elect for nothing; a dead leader is replaced within about two seconds.
pub const CONTROLLER_ELECTION_MIN_MS_DEFAULT: u64 = 1_000;
pub const CONTROLLER_ELECTION_MAX_MS_DEFAULT: u64 = 2_000;
/// The controller snapshots its metadata every this many log entries ...
pub const CONTROLLER_SNAPSHOT_EVERY_ENTRIES: u64 = 1_000;
/// ... and keeps this many entries before the snapshot, for voters slightly behind.
pub const CONTROLLER_LOG_KEPT_AFTER_SNAPSHOT: u64 = 200;
/// Largest frame between controller voters (a snapshot of the whole metadata travels in
/// one). A longer length prefix closes the connection.
pub const CONTROLLER_FRAME_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Longest wait for a connection to another controller voter.
pub const CONTROLLER_CONNECT_TIMEOUT_MS: u64 = 1_000;
/// How long a proposal looks for a leader (through elections) before it fails.
pub const CONTROLLER_PROPOSAL_TIMEOUT_MS: u64 = 15_000;
/// Connections a controller listener serves at once; more are closed at accept.
pub const CONTROLLER_CONNECTIONS_MAX: usize = 256;
/// A broker the controller leader has not heard from for this long is fenced: it leads no
/// partition and leaves every ISR. Kafka's `broker.session.timeout.ms` is 9 s; a shorter
/// one bounds how long a dead broker's partitions wait for a new leader, and 6 s is still
/// some forty heartbeats, so a voter slowed by a loaded machine is not fenced for it.
pub const BROKER_SESSION_TIMEOUT_MS_DEFAULT: u64 = 6_000;

/// How long a broker in a cluster that is shutting down waits for the controller to fence
/// it (a controlled shutdown, which hands its partitions to other in-sync replicas before
/// it stops). Past it, the broker stops all the same and the others fence it after the
/// session timeout, as they do a killed broker.
pub const CONTROLLED_SHUTDOWN_WAIT_MS: u64 = 5_000;

/// How long a leader holds a follower's Fetch that finds nothing new (Kafka's
/// `replica.fetch.wait.max.ms`): a caught-up follower costs one waiting request per
/// leader broker.
pub const REPLICA_FETCH_WAIT_MS: u64 = 500;

/// How long a replica fetcher waits for its partitions still syncing what the last fetch
/// brought before it fetches without them. Their next fetch is what tells the leader they
/// hold it, which an acks=all produce waits for: a round that left them out and then
/// waited `REPLICA_FETCH_WAIT_MS` for the others would hold that produce as long.
pub const REPLICA_FETCH_SYNC_GRACE_MS: u64 = 100;

/// How long the leader may hold a follower's Fetch that leaves out partitions still
/// syncing past `REPLICA_FETCH_SYNC_GRACE_MS`: they join the next round this soon.
pub const REPLICA_FETCH_WAIT_SYNCING_MS: u64 = 5;

/// How long a replica fetcher waits before it tries a leader it could not reach again,
/// and how long a partition the leader refused sits out (Kafka's
/// `replica.fetch.backoff.ms` is 1 s; the controller's metadata usually moves the
/// partition sooner).
pub const REPLICA_FETCH_BACKOFF_MS: u64 = 500;

/// How long a replica fetcher waits for its leader's answer before it reconnects
/// (Kafka's `replica.socket.timeout.ms`); well above `REPLICA_FETCH_WAIT_MS`.
pub const REPLICA_FETCH_REQUEST_TIMEOUT_MS: u64 = 30_000;

/// Bytes a follower asks per partition in one Fetch (Kafka's `replica.fetch.max.bytes`).
pub const REPLICA_FETCH_PARTITION_BYTES_MAX: usize = 1 << 20;

/// Bytes a follower asks in one Fetch over all its partitions (Kafka's
/// `replica.fetch.response.max.bytes`).
pub const REPLICA_FETCH_RESPONSE_BYTES_MAX: usize = 10 << 20;

/// How long a follower may go without catching up with its leader's end before the
/// leader takes it out of the ISR (Kafka's `replica.lag.time.max.ms` is 30 s): an
/// acks=all produce waits at most about this long for a follower that stopped. A
/// caught-up follower catches up at every fetch, at least every `REPLICA_FETCH_WAIT_MS`
/// plus a sync.
pub const REPLICA_LAG_TIME_MAX_MS_DEFAULT: u64 = 5_000;

/// Longest a fetch waits for one read of the remote tier (a partition's data below its
/// local log): past it the partition is answered `KAFKA_STORAGE_ERROR`, which clients
/// retry, so an unreachable or stalled bucket costs its own readers this wait and holds
/// no one else (the other partitions of the same fetch wait with it, as in Kafka).
pub const REMOTE_READ_TIMEOUT_MS: u64 = 5_000;

/// Bytes of remote segments' `.index` and `.txnindex` copies a broker keeps for reads
/// of the remote tier (a 1 GiB segment's index is at most 2 MiB); the oldest go first.
pub const REMOTE_INDEX_CACHE_BYTES_MAX: usize = 64 << 20;
