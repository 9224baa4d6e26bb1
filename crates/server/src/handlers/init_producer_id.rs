//! InitProducerId: a producer id and epoch for an idempotent producer.
//!
//! Every call gets a fresh id with epoch 0, as Kafka does for producers without a
//! transactional id (a producer that re-initialises after an error thus starts clean).
//! Transactions are not supported: a request with a transactional id is refused with
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients report at once as a fatal error
//! rather than retrying.

use super::{pending, Call, Handler, HandlerError, Reply};
use crate::errors::error_code;
use headway_broker::{BrokerError, ProducerEpoch};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::InitProducerId,
    min_version: 0,
    max_version: 5,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: InitProducerIdRequest = decode_body(request)?;
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let allocated = if body.transactional_id.is_some() {
            Err(BrokerError::TransactionsUnsupported)
        } else {
            // Allocation may sync a new block of ids to disk.
            let broker = Arc::clone(&ctx.broker);
            tokio::task::spawn_blocking(move || broker.producer_ids().allocate())
                .await
                .unwrap_or_else(|e| Err(BrokerError::Storage(e.to_string())))
        };
        let (id, epoch, code) = match allocated {
            Ok(id) => (Some(id), Some(ProducerEpoch::FIRST), 0),
            Err(e) => (None, None, error_code(&e)),
        };
        InitProducerIdResponse::default()
            .with_error_code(code)
            .with_producer_id(ProducerId(headway_broker::ProducerId::to_wire(id)))
            .with_producer_epoch(ProducerEpoch::to_wire(epoch))
    })
}
