//! One module per Kafka API, each with the same shape: a `HANDLER` that names its API
//! key, the versions it serves and its `handle` function (decode, apply, encode).
//! [`APIS`] lists them once. Dispatch (a table indexed by API key, built from the list
//! when the crate compiles) and the ApiVersions answer both come from that list, so an
//! advertised version is always one a handler serves and a listed handler is always
//! reached. What handlers are given and give back is in [`crate::call`]; the long poll
//! Fetch and ShareFetch share is [`long_poll`].

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_configs;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_transactions;
pub mod long_poll;
pub mod metadata;
pub mod offset_commit;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod share_acknowledge;
pub mod share_fetch;
pub mod share_group_describe;
pub mod share_group_heartbeat;
pub mod share_group_offsets;
pub mod share_group_state;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod write_txn_markers;

use crate::call::{Arrival, Call, Connection, Ctx, Handler, HandlerError, Reply};
use headway_broker::panics::{self, Component};
use headway_broker::Partition;
use headway_protocol::kafka_protocol::messages::ApiKey;
use headway_protocol::Request;
use std::sync::Arc;

/// The registry: every served API, once.
pub const APIS: &[Handler] = &[
    produce::HANDLER,
    fetch::HANDLER,
    list_offsets::HANDLER,
    offset_for_leader_epoch::HANDLER,
    metadata::HANDLER,
    api_versions::HANDLER,
    create_topics::HANDLER,
    delete_topics::HANDLER,
    describe_configs::HANDLER,
    find_coordinator::HANDLER,
    join_group::HANDLER,
    sync_group::HANDLER,
    heartbeat::HANDLER,
    leave_group::HANDLER,
    offset_commit::HANDLER,
    offset_fetch::HANDLER,
    list_groups::HANDLER,
    describe_groups::HANDLER,
    delete_groups::HANDLER,
    init_producer_id::HANDLER,
    describe_cluster::HANDLER,
    create_partitions::HANDLER,
    incremental_alter_configs::HANDLER,
    alter_configs::HANDLER,
    delete_records::HANDLER,
    add_partitions_to_txn::HANDLER,
    add_offsets_to_txn::HANDLER,
    end_txn::HANDLER,
    txn_offset_commit::HANDLER,
    write_txn_markers::HANDLER,
    share_group_state::READ,
    share_group_state::WRITE,
    describe_transactions::HANDLER,
    list_transactions::HANDLER,
    consumer_group_heartbeat::HANDLER,
    consumer_group_describe::HANDLER,
    share_group_heartbeat::HANDLER,
    share_group_describe::HANDLER,
    share_fetch::HANDLER,
    share_acknowledge::HANDLER,
    share_group_offsets::DESCRIBE,
    share_group_offsets::ALTER,
    share_group_offsets::DELETE,
    create_acls::HANDLER,
    describe_acls::HANDLER,
    delete_acls::HANDLER,
    describe_user_scram_credentials::HANDLER,
    alter_user_scram_credentials::HANDLER,
    sasl_handshake::HANDLER,
    sasl_authenticate::HANDLER,
];

/// The APIs a SASL listener's connection may use before it authenticated, as Kafka
/// serves them: it learns the versions, chooses a mechanism and authenticates.
const BEFORE_AUTHENTICATION: [ApiKey; 3] = [
    ApiKey::ApiVersions,
    ApiKey::SaslHandshake,
    ApiKey::SaslAuthenticate,
];

/// The APIs that authenticate: a connection whose SASL session ended may still use
/// them, to re-authenticate.
const AUTHENTICATING: [ApiKey; 2] = [ApiKey::SaslHandshake, ApiKey::SaslAuthenticate];

/// Whether a SASL listener's connection may send a request of `key` before it
/// authenticated.
pub fn served_before_authentication(key: ApiKey) -> bool {
    BEFORE_AUTHENTICATION.contains(&key)
}

/// Whether a request of `key` authenticates (it is served after a SASL session ended).
pub fn authenticates(key: ApiKey) -> bool {
    AUTHENTICATING.contains(&key)
}

/// The APIs whose large requests (over `limits::BULK_PRODUCE_BYTES_MIN`) are bulk work:
/// handled on a bulk thread, after the bulk budget admits them (`docs/sync.md`).
const BULK_WHEN_LARGE: [ApiKey; 1] = [ApiKey::Produce];

/// Whether a large request of `key` is bulk work ([`BULK_WHEN_LARGE`]).
pub fn bulk_when_large(key: ApiKey) -> bool {
    BULK_WHEN_LARGE.contains(&key)
}

/// One past the largest API key in [`APIS`]: the length of the dispatch table.
const KEYS: usize = {
    let (mut keys, mut i) = (0, 0);
    while i < APIS.len() {
        let key = APIS[i].key as usize;
        if key >= keys {
            keys = key + 1;
        }
        i += 1;
    }
    keys
};

/// Dispatch: at each API key's index, the position of its handler in [`APIS`]. Built
/// when the crate compiles; an API listed twice stops the build.
static BY_KEY: [Option<u8>; KEYS] = {
    assert!(APIS.len() <= u8::MAX as usize);
    let mut table = [None; KEYS];
    let mut i = 0;
    while i < APIS.len() {
        let key = APIS[i].key as usize;
        assert!(table[key].is_none(), "an API is listed twice in APIS");
        table[key] = Some(i as u8);
        i += 1;
    }
    table
};

/// Where in [`APIS`] the handler serving `key` is, if any.
fn position(key: ApiKey) -> Option<usize> {
    BY_KEY.get(key as usize).copied().flatten().map(usize::from)
}

/// The handler serving `key`, if any.
pub fn handler(key: ApiKey) -> Option<&'static Handler> {
    position(key).map(|i| &APIS[i])
}

/// The handler of `request`'s API, if it serves the request's version (ApiVersions
/// at any version: it answers an unknown one itself, with UNSUPPORTED_VERSION).
fn served(request: &Request) -> Result<&'static Handler, HandlerError> {
    let handler = handler(request.api_key).ok_or(HandlerError::UnsupportedApi(request.api_key))?;
    let version = request.api_version();
    if !handler.serves(version) && request.api_key != ApiKey::ApiVersions {
        return Err(HandlerError::UnsupportedVersion {
            api_key: request.api_key,
            version,
            min: handler.min_version,
            max: handler.max_version,
        });
    }
    Ok(handler)
}

/// Runs the handler for `request` from connection `conn`, which arrived as `arrival`
/// says. The synchronous part runs now. A produce that leaves partitions with more
/// unsynced bytes than their bound puts them in `hold`: the connection reads nothing
/// more until their syncs caught up ([`Partition::wait_unsynced_within_bound`]).
pub fn dispatch(
    ctx: &Arc<Ctx>,
    conn: &Arc<Connection>,
    request: Request,
    arrival: Arrival,
    hold: &mut Vec<Arc<Partition>>,
) -> Result<Reply, HandlerError> {
    let handler = served(&request)?;
    let mut call = Call {
        ctx,
        conn,
        arrival,
        hold,
        served: APIS,
    };
    panics::catch(Component::Connection, || {
        (handler.handle)(&mut call, &request)
    })
    .unwrap_or_else(|panicked| {
        Err(HandlerError::Panicked {
            api_key: request.api_key,
            panicked,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_handler_is_dispatched_to_and_nothing_else_is() {
        for (i, listed) in APIS.iter().enumerate() {
            assert_eq!(position(listed.key), Some(i), "{:?}", listed.key);
            assert!(listed.min_version <= listed.max_version, "{:?}", listed.key);
        }
        let dispatched = (0..=i16::MAX)
            .filter_map(|key| ApiKey::try_from(key).ok())
            .filter(|key| handler(*key).is_some())
            .count();
        assert_eq!(dispatched, APIS.len(), "only listed APIs are dispatched");
    }

    #[test]
    fn api_versions_advertises_exactly_what_dispatch_serves() {
        let advertised = api_versions::api_list(APIS);
        assert_eq!(advertised.len(), APIS.len());
        for api in advertised {
            let key = ApiKey::try_from(api.api_key).expect("a known key");
            let served = handler(key).expect("an advertised API is dispatched");
            assert_eq!(
                (api.min_version, api.max_version),
                (served.min_version, served.max_version),
                "{key:?}"
            );
        }
    }
}
