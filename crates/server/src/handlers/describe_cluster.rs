//! DescribeCluster: the cluster id, the controller and the brokers (this one).

use super::{ready, Call, Handler, HandlerError, Reply};
use headway_protocol::kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeClusterRequest, DescribeClusterResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::DescribeCluster,
    min_version: 0,
    max_version: 2,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let _: DescribeClusterRequest = decode_body(request)?;
    let node = BrokerId(ctx.broker.config().node_id);
    let response = DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(ctx.broker.cluster_id().to_string()))
        .with_controller_id(node)
        .with_cluster_authorized_operations(i32::MIN)
        .with_brokers(vec![DescribeClusterBroker::default()
            .with_broker_id(node)
            .with_host(StrBytes::from_string(
                call.conn.listener.advertised_host.clone(),
            ))
            .with_port(call.conn.listener.advertised_port)]);
    ready(request, &response)
}
