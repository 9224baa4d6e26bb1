//! ListTransactions: the transactional ids, filtered by state, producer id and (v1)
//! how long their transaction has been open. Unknown state names come back in
//! `unknown_state_filters` and match nothing, as Kafka answers. Only the ids the
//! principal may describe are listed.

use crate::authorize;
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::errors::txn_error_code;
use crate::requests::ErrorCodes;
use headway_auth::acl::{Operation, ResourceType};
use headway_base::ProducerId;
use headway_protocol::kafka_protocol::messages::list_transactions_response::TransactionState;
use headway_protocol::kafka_protocol::messages::{
    self, ApiKey, ListTransactionsRequest, ListTransactionsResponse, TransactionalId,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};
use headway_txn::{ListFilter, TxnState};

pub const HANDLER: Handler = Handler {
    key: ApiKey::ListTransactions,
    min_version: 0,
    max_version: 1,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: ListTransactionsRequest = decode_body(request)?;
    let mut filter = ListFilter {
        producer_ids: body
            .producer_id_filters
            .iter()
            .map(|id| ProducerId::new(id.0))
            .collect(),
        // v0 has no duration filter; -1 (the default) means none.
        duration_min_ms: (body.duration_filter >= 0).then_some(body.duration_filter),
        ..ListFilter::default()
    };
    let mut unknown = Vec::new();
    for name in body.state_filters {
        match TxnState::from_name(&name) {
            Some(state) => filter.states.push(state),
            None => unknown.push(name),
        }
    }
    let response = if !unknown.is_empty() && filter.states.is_empty() {
        // Every state named is unknown: nothing can match.
        ListTransactionsResponse::default().with_unknown_state_filters(unknown)
    } else {
        let subject = authorize::subject(call);
        let describable =
            |id: &str| subject.visible(Operation::Describe, ResourceType::TransactionalId, id);
        match call.ctx.txns.list(&filter) {
            Ok(mut list) => {
                list.retain(|m| describable(&m.transactional_id));
                ListTransactionsResponse::default()
                    .with_unknown_state_filters(unknown)
                    .with_transaction_states(
                        list.into_iter()
                            .map(|m| {
                                TransactionState::default()
                                    .with_transactional_id(TransactionalId(StrBytes::from_string(
                                        m.transactional_id,
                                    )))
                                    .with_producer_id(messages::ProducerId(m.producer_id.value()))
                                    .with_transaction_state(StrBytes::from_static_str(
                                        m.state.name(),
                                    ))
                            })
                            .collect(),
                    )
            }
            Err(e) => ListTransactionsResponse::default().with_error_code(txn_error_code(&e)),
        }
    };
    ready(request, &response)
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for ListTransactionsResponse {}
