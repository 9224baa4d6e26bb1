//! AddOffsetsToTxn: a consumer group's offsets join a transaction (transactions
//! version 1; with version 2 the client sends TxnOffsetCommit directly). The group's
//! offsets partition is added to the transaction and the group recorded with it, so
//! its offsets are committed or dropped with the transaction's markers. Needs Write on
//! the transactional id and Read on the group.

use crate::authorize;
use crate::call::{pending, ready, Call, Handler, HandlerError, Reply};
use crate::errors::txn_code;
use crate::requests::ErrorCodes;
use headway_auth::acl::Operation;
use headway_base::{ProducerEpoch, ProducerId};
use headway_protocol::kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, ApiKey,
};
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::AddOffsetsToTxn,
    min_version: 0,
    max_version: 4,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: AddOffsetsToTxnRequest = decode_body(request)?;
    let refused =
        authorize::transactional_id_refusal(call, Operation::Write, &body.transactional_id)
            .or_else(|| authorize::group_refusal(call, Operation::Read, &body.group_id));
    if let Some(code) = refused {
        return ready(
            request,
            &AddOffsetsToTxnResponse::default().with_error_code(code),
        );
    }
    let ctx = Arc::clone(call.ctx);
    pending(request, async move {
        let added = async {
            let coordinator = ctx.txns.of(&body.transactional_id)?;
            let offsets = crate::txn_checks::offsets_partition(&ctx, &body.group_id)?;
            coordinator
                .add_offsets(
                    &body.transactional_id,
                    ProducerId::new(body.producer_id.0),
                    ProducerEpoch::new(body.producer_epoch),
                    &body.group_id,
                    &offsets,
                )
                .await
        };
        let result = added.await;
        AddOffsetsToTxnResponse::default().with_error_code(txn_code(&result))
    })
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for AddOffsetsToTxnResponse {}
