//! InitProducerId: a producer id and epoch, for an idempotent producer or for a
//! transactional id.
//!
//! Without a transactional id every call gets a fresh id with epoch 0, as Kafka does
//! (a producer that re-initialises after an error thus starts clean). With one, the
//! transaction coordinator answers (`headway_txn`): the id's producer id with its
//! epoch bumped, fencing older producers of the same id; an open transaction is
//! aborted first (CONCURRENT_TRANSACTIONS until it is). From v3 the request may carry
//! the producer's current id and epoch (KIP-360), so a producer recovers from an
//! abortable error without being fenced.

use crate::authorize;
use crate::call::{pending, Call, Handler, HandlerError, Reply};
use crate::errors::txn_error_code;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_base::ProducerEpoch;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use headway_txn::ExpectedProducer;
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::InitProducerId,
    min_version: 0,
    max_version: 5,
    handle,
};

/// The first version that carries the producer's current id and epoch (KIP-360).
const EXPECTED_PRODUCER_MIN_VERSION: i16 = 3;

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: InitProducerIdRequest = decode_body(request)?;
    let expected = if request.api_version() >= EXPECTED_PRODUCER_MIN_VERSION {
        headway_base::ProducerId::from_wire(body.producer_id.0).map(|producer_id| {
            ExpectedProducer {
                producer_id,
                producer_epoch: ProducerEpoch::from_wire(body.producer_epoch),
            }
        })
    } else {
        None
    };
    let refused = match &body.transactional_id {
        Some(id) => authorize::transactional_id_refusal(call, Operation::Write, id),
        None => (!authorize::idempotent_producer(call))
            .then_some(ResponseError::ClusterAuthorizationFailed.code()),
    };
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let answer = match body.transactional_id {
            _ if refused.is_some() => Err(refused.unwrap_or_default()),
            Some(transactional_id) => {
                let timeout_ms = body.transaction_timeout_ms;
                let initialized = match ctx.txns.of(&transactional_id) {
                    Ok(c) => {
                        c.init_producer_id(&transactional_id, timeout_ms, expected)
                            .await
                    }
                    Err(e) => Err(e),
                };
                initialized.map_err(|e| txn_error_code(&e))
            }
            // One source for every producer id, so that a cluster's brokers never hand
            // out the same one (`crate::cluster::producer_ids`).
            None => ctx
                .txns
                .allocate_id()
                .await
                .map(|id| (id, ProducerEpoch::FIRST))
                .map_err(|e| txn_error_code(&e)),
        };
        let (id, epoch, code) = match answer {
            Ok((id, epoch)) => (Some(id), Some(epoch), 0),
            Err(code) => (None, None, code),
        };
        InitProducerIdResponse::default()
            .with_error_code(code)
            .with_producer_id(ProducerId(headway_base::ProducerId::to_wire(id)))
            .with_producer_epoch(ProducerEpoch::to_wire(epoch))
    })
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for InitProducerIdResponse {
    fn error_codes(&self, codes: &mut Codes) {
        codes.add(self.error_code);
    }
}
