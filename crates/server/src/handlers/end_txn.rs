//! EndTxn: commit or abort a transaction. Answered once the coordinator's
//! PrepareCommit or PrepareAbort is durable; the markers are written after, and until
//! they are the id's next requests get CONCURRENT_TRANSACTIONS.
//!
//! v5 is transactions version 2 (KIP-890): the epoch is bumped at every end and the
//! answer carries the producer id and epoch the producer continues with.
//!
//! Needs Write on the transactional id.

use crate::authorize;
use crate::call::{pending, ready, Call, Handler, HandlerError, Reply};
use crate::errors::txn_error_code;
use crate::requests::ErrorCodes;
use headway_auth::acl::Operation;
use headway_base::{ProducerEpoch, ProducerId};
use headway_protocol::kafka_protocol::messages::{self, ApiKey, EndTxnRequest, EndTxnResponse};
use headway_protocol::{decode_body, Request};
use headway_txn::TransactionResult;
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::EndTxn,
    min_version: 0,
    max_version: 5,
    handle,
};

/// The first version of transactions version 2.
const VERSION_2_MIN_VERSION: i16 = 5;

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: EndTxnRequest = decode_body(request)?;
    if let Some(code) =
        authorize::transactional_id_refusal(call, Operation::Write, &body.transactional_id)
    {
        let response = EndTxnResponse::default()
            .with_error_code(code)
            .with_producer_id(messages::ProducerId(-1))
            .with_producer_epoch(-1);
        return ready(request, &response);
    }
    let ctx = Arc::clone(call.ctx);
    let version2 = request.api_version() >= VERSION_2_MIN_VERSION;
    pending(request, async move {
        let result = if body.committed {
            TransactionResult::Commit
        } else {
            TransactionResult::Abort
        };
        let answer = match ctx.txns.of(&body.transactional_id) {
            Ok(c) => {
                c.end_txn(
                    &body.transactional_id,
                    ProducerId::new(body.producer_id.0),
                    ProducerEpoch::new(body.producer_epoch),
                    result,
                    version2,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let (id, epoch, code) = match answer {
            Ok((id, epoch)) => (Some(id), Some(epoch), 0),
            Err(e) => (None, None, txn_error_code(&e)),
        };
        EndTxnResponse::default()
            .with_error_code(code)
            .with_producer_id(messages::ProducerId(ProducerId::to_wire(id)))
            .with_producer_epoch(ProducerEpoch::to_wire(epoch))
    })
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for EndTxnResponse {}
