//! Every hard bound of the broker, in one place, with why it holds and what happens
//! when it is reached. (The group coordinator's bounds, members per group and groups,
//! are in `headway_group::GroupConfig`, next to the state they bound.) Settings a user
//! may want to change live in [`crate::config`] with these as defaults; the rest are
//! constants.

/// Largest request frame accepted (Kafka's `socket.request.max.bytes`, 100 MiB).
/// At the limit the connection is closed with a log line, before the body is read,
/// so a hostile length never allocates memory.
pub const FRAME_BYTES_MAX_DEFAULT: usize = 100 * 1024 * 1024;

/// Requests a connection may have in flight: read and handled, response not yet
/// written. Produces waiting for their fsync count here. When the window is full the
/// connection stops reading its socket, which pushes back on that client alone (TCP).
pub const REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX: usize = 128;

/// Bytes of request frames held in memory across all connections, from the moment the
/// length is read until the request has been handled. A reader that would go past it
/// waits (and stops reading its socket) until others finish, so a burst of large
/// produces cannot grow memory without bound. Must stay above the frame limit.
pub const REQUEST_BYTES_IN_FLIGHT_MAX_DEFAULT: usize = 256 * 1024 * 1024;

/// Concurrent client connections. Further connections wait in the accept backlog.
pub const CONNECTIONS_MAX_DEFAULT: usize = 10_000;

/// Bytes of records one fetch response may carry, whatever the client asks for
/// (`fetch.max.bytes` defaults to 50 MiB in Kafka clients). The first batch of the
/// response is always whole, so a batch up to `max.message.bytes` always gets through.
pub const FETCH_RESPONSE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Longest a fetch may wait for `min_bytes` (clients default to 500 ms).
/// A larger `max_wait_ms` is clamped, so a waiter never lingers for minutes.
pub const FETCH_WAIT_MS_MAX: u64 = 30_000;

/// Partitions per topic, and thus partition directories and flusher tasks per topic.
/// CreateTopics above it fails with INVALID_PARTITIONS.
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

/// Topic name length (Kafka's limit, which keeps `<name>/<partition>` a valid path).
pub const TOPIC_NAME_BYTES_MAX: usize = 249;

/// Threads for blocking disk work (fsync, positional reads of segments, recovery).
/// A cold read occupies one thread; beyond this bound reads queue instead of
/// spawning threads without limit.
pub const BLOCKING_THREADS_MAX: usize = 64;

/// Idempotent producers remembered per partition (each up to five batches, about
/// 150 bytes). Past it the producer idle for longest is forgotten; if it comes back
/// with a later sequence it gets UNKNOWN_PRODUCER_ID and resets, as after expiry.
pub const PRODUCERS_PER_PARTITION_MAX: usize = 10_000;
