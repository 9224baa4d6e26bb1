//! DescribeCluster: the cluster id, the controller and the brokers (this one; in a
//! cluster, the registered, unfenced ones and the controller's leader). Open to
//! every principal, as in Kafka; the cluster's authorized operations, when asked for,
//! are 0 for a principal without Describe on the cluster.

use crate::authorize;
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::cluster::view;
use crate::requests::{Codes, ErrorCodes};
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
    let body: DescribeClusterRequest = decode_body(request)?;
    let operations = match body.include_cluster_authorized_operations {
        true => authorize::cluster_operations(call),
        false => i32::MIN,
    };
    if let Some(cluster) = &ctx.cluster {
        let image = cluster.image();
        let brokers = view::live_nodes(&image.metadata, &call.conn.listener.name)
            .into_iter()
            .map(|node| {
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(node.id))
                    .with_host(StrBytes::from_string(node.host))
                    .with_port(node.port)
            })
            .collect();
        let response = DescribeClusterResponse::default()
            .with_cluster_id(StrBytes::from_string(cluster.cluster_id().to_string()))
            .with_controller_id(BrokerId(cluster.controller_id()))
            .with_cluster_authorized_operations(operations)
            .with_brokers(brokers);
        return ready(request, &response);
    }
    let node = BrokerId(ctx.broker.config().node_id);
    let response = DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(ctx.broker.cluster_id().to_string()))
        .with_controller_id(node)
        .with_cluster_authorized_operations(operations)
        .with_brokers(vec![DescribeClusterBroker::default()
            .with_broker_id(node)
            .with_host(StrBytes::from_string(
                call.conn.listener.advertised_host.clone(),
            ))
            .with_port(call.conn.listener.advertised_port)]);
    ready(request, &response)
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for DescribeClusterResponse {
    fn error_codes(&self, codes: &mut Codes) {
        codes.add(self.error_code);
    }
}
