//! AddOffsetsToTxn: a consumer group's offsets join a transaction (transactions
//! version 1; with version 2 the client sends TxnOffsetCommit directly). The group's
//! offsets partition is added to the transaction and the group recorded with it, so
//! its offsets are committed or dropped with the transaction's markers.

use super::{pending, Call, Handler, HandlerError, Reply};
use crate::errors::txn_code;
use headway_broker::{ProducerEpoch, ProducerId};
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
    let ctx = Arc::clone(call.ctx);
    pending(request, async move {
        let result = ctx
            .txns
            .add_offsets(
                &body.transactional_id,
                ProducerId::new(body.producer_id.0),
                ProducerEpoch::new(body.producer_epoch),
                &body.group_id,
            )
            .await;
        AddOffsetsToTxnResponse::default().with_error_code(txn_code(&result))
    })
}
