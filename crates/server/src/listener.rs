//! The listener: binds, accepts connections up to `connections_max`, and runs the
//! shutdown sequence.
//!
//! Shutdown: stop accepting and stop reading requests; close every partition (which
//! syncs the logs, so produces already appended are acknowledged as durable); give
//! connections a grace period to write those acknowledgements; return.

use crate::call::{self, Ctx, ListenerInfo, ServerStats};
use crate::cluster::producer_ids::ClusterProducerIds;
use crate::cluster::share_state::ClusterShareState;
use crate::cluster::transactions::ClusterMarkers;
use crate::cluster::Cluster;
use crate::config::{Config, ServerConfig};
use crate::handlers;
use crate::requests::RequestMetrics;
use crate::tls::ReloadableTls;
use crate::txn_markers::PartitionMarkers;
use crate::{connection, console, metrics};
use headway_base::limits;
use headway_broker::listeners::{ListenerSpec, SecurityProtocol};
use headway_broker::Broker;
use headway_controller::metadata::Endpoint;
use headway_group::{GroupCoordinator, GroupShards};
use headway_share::state_store::StateStores;
use headway_share::{ShareCoordinator, SHARE_STATE_TOPIC};
use headway_txn::{
    MarkerWriter, ProducerIdSource, TxnCoordinator, TxnParts, TxnShards, TRANSACTION_STATE_TOPIC,
};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long connections may take to write their last replies at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

pub struct Server {
    broker: Arc<Broker>,
    /// Bound listeners, in the configured order.
    listeners: Vec<Bound>,
    ctx: Arc<Ctx>,
    shutdown: watch::Sender<bool>,
    metrics_addr: Option<SocketAddr>,
    console_addr: Option<SocketAddr>,
    /// The SSL listeners' certificates, when there are any.
    tls: Option<Arc<ReloadableTls>>,
}

/// One bound listener.
struct Bound {
    tcp: TcpListener,
    info: Arc<ListenerInfo>,
    /// For SSL listeners.
    tls: Option<Arc<ReloadableTls>>,
}

impl Bound {
    async fn bind(spec: &ListenerSpec, tls: &Option<Arc<ReloadableTls>>) -> std::io::Result<Bound> {
        let tcp = TcpListener::bind(&spec.bind).await.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("listener {} on {}: {e}", spec.name, spec.bind),
            )
        })?;
        let local = tcp.local_addr()?;
        let (host, port) = match &spec.advertised {
            Some(addr) => parse_advertised(addr)?,
            None if local.ip().is_unspecified() => {
                tracing::warn!(listener = %spec.name, "listening on all interfaces without an advertised address; advertising 127.0.0.1");
                ("127.0.0.1".to_string(), i32::from(local.port()))
            }
            None => (local.ip().to_string(), i32::from(local.port())),
        };
        let tls = match spec.protocol.tls() {
            true => tls.clone(),
            false => None,
        };
        Ok(Bound {
            tcp,
            info: Arc::new(ListenerInfo {
                name: spec.name.clone(),
                protocol: spec.protocol,
                advertised_host: host,
                advertised_port: port,
            }),
            tls,
        })
    }
}

/// Asks a running server to shut down.
#[derive(Clone)]
pub struct ServerHandle {
    shutdown: watch::Sender<bool>,
    tls: Option<Arc<ReloadableTls>>,
}

impl ServerHandle {
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Reads the SSL listeners' certificate, key and client CA files again (SIGHUP).
    /// `Ok(false)`: there is no SSL listener. On an error the old ones stay in use.
    pub fn reload_tls(&self) -> Result<bool, String> {
        match &self.tls {
            None => Ok(false),
            Some(tls) => tls.reload().map(|()| true),
        }
    }
}

fn parse_advertised(addr: &str) -> std::io::Result<(String, i32)> {
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("advertised listener {addr:?} is not HOST:PORT"),
        )
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    Ok((
        host.trim_matches(|c| c == '[' || c == ']').to_string(),
        i32::from(port),
    ))
}

/// Starts one of the HTTP endpoints when its `listen` setting is set; where it listens.
async fn serve_http<'a, F, Fut>(
    listen: &'a Option<String>,
    what: &str,
    start: F,
) -> std::io::Result<Option<SocketAddr>>
where
    F: FnOnce(&'a str) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<SocketAddr>>,
{
    let Some(listen) = listen else {
        return Ok(None);
    };
    match start(listen).await {
        Ok(addr) => Ok(Some(addr)),
        Err(e) => Err(std::io::Error::other(format!(
            "{what} listener {listen}: {e}"
        ))),
    }
}

/// A server started by [`Server::start`], running on its own task.
pub struct RunningServer {
    pub addr: SocketAddr,
    pub handle: ServerHandle,
    pub task: tokio::task::JoinHandle<()>,
    pub stats: Arc<ServerStats>,
    /// Where `/metrics` is served, when `metrics_listen` is set.
    pub metrics_addr: Option<SocketAddr>,
    /// Where the web console is served, when `console_listen` is set.
    pub console_addr: Option<SocketAddr>,
    /// The broker, while it runs (tests reach its pools through it).
    pub broker: std::sync::Weak<Broker>,
}

impl RunningServer {
    /// Shuts the server down and waits for its shutdown sequence to finish.
    pub async fn stop(self) {
        self.handle.shutdown();
        let _ = self.task.await;
    }
}

impl Server {
    /// Opens the broker, binds, and runs the server on a task (for tests and tools).
    pub async fn start(config: Config) -> Result<RunningServer, String> {
        let broker = Broker::open(config.broker)
            .await
            .map_err(|e| e.to_string())?;
        let weak = Arc::downgrade(&broker);
        let server = Server::bind(broker, config.server)
            .await
            .map_err(|e| e.to_string())?;
        Ok(RunningServer {
            broker: weak,
            addr: server.local_addr(),
            handle: server.handle(),
            stats: server.stats(),
            metrics_addr: server.metrics_addr(),
            console_addr: server.console_addr(),
            task: tokio::spawn(server.run()),
        })
    }

    /// Binds the configured listeners (`headway_broker::listeners`). With port 0, the
    /// bound ephemeral port is advertised unless an advertised address is configured.
    /// `settings` holds the sections of the coordinators it starts; each gets its own.
    pub async fn bind(broker: Arc<Broker>, settings: ServerConfig) -> std::io::Result<Server> {
        let config = broker.config();
        let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
        let specs = config.listener_specs().map_err(invalid)?;
        let tls = match specs.iter().any(|s| s.protocol.tls()) {
            true => Some(ReloadableTls::load(config).map_err(invalid)?),
            false => None,
        };
        let mut listeners = Vec::with_capacity(specs.len());
        for spec in &specs {
            listeners.push(Bound::bind(spec, &tls).await?);
        }
        let group_config = settings.group.group_config().map_err(invalid)?;
        let in_cluster = settings
            .cluster
            .membership(config.node_id)
            .map_err(invalid)?
            .is_some();
        // In a cluster the group coordinators come with the leadership of the
        // partitions of the replicated `__consumer_offsets` (`cluster::coordinators`).
        let groups = if in_cluster {
            Arc::new(GroupShards::clustered(group_config))
        } else {
            let one = GroupCoordinator::open(&config.data_dir, config.flush, group_config.clone())
                .await
                .map_err(|e| {
                    std::io::Error::other(format!("opening the group coordinator: {e}"))
                })?;
            // Readable as `__consumer_offsets`, and compacted like a topic with the
            // broker's default settings.
            broker.add_internal_log("__consumer_offsets", Arc::clone(one.offsets_log()));
            Arc::new(GroupShards::alone(one, group_config))
        };
        // In a cluster producer ids come in blocks from the controller.
        let cluster_ids = in_cluster
            .then(|| Arc::new(ClusterProducerIds::new(tokio::runtime::Handle::current())));
        let topics_of = Arc::clone(&broker);
        groups.set_topics_source(headway_group::TopicsSource::new(move || {
            handlers::consumer_group_heartbeat::topics_view_of(&topics_of)
        }));
        // In a cluster the transaction coordinators come with the leadership of the
        // partitions of the replicated `__transaction_state`, and their markers reach
        // partitions led elsewhere through the other brokers.
        let local_markers = PartitionMarkers {
            broker: Arc::downgrade(&broker),
            groups: Arc::clone(&groups),
        };
        let cluster_markers = in_cluster.then(|| Arc::new(ClusterMarkers::new(local_markers)));
        let txn_parts = TxnParts {
            config: settings.txn.txn_config(),
            check_interval: settings.txn.abort_check_interval(),
            markers: match &cluster_markers {
                Some(markers) => Arc::clone(markers) as Arc<dyn MarkerWriter>,
                None => Arc::new(PartitionMarkers {
                    broker: Arc::downgrade(&broker),
                    groups: Arc::clone(&groups),
                }),
            },
            producer_ids: match &cluster_ids {
                Some(ids) => Arc::clone(ids) as Arc<dyn ProducerIdSource>,
                None => Arc::new(Arc::downgrade(&broker)) as Arc<dyn ProducerIdSource>,
            },
        };
        let txns = if in_cluster {
            Arc::new(TxnShards::clustered(txn_parts))
        } else {
            let one = TxnCoordinator::open(&config.data_dir, config.flush, txn_parts.clone())
                .await
                .map_err(|e| {
                    std::io::Error::other(format!("opening the transaction coordinator: {e}"))
                })?;
            broker.add_internal_log(TRANSACTION_STATE_TOPIC, Arc::clone(one.state_log()));
            Arc::new(TxnShards::alone(one, txn_parts))
        };
        // In a cluster a share group's members are known to its coordinator, and each
        // share-partition to the partition's leader, which keeps its state in the
        // replicated `__share_group_state` (`cluster::share_state`).
        let share_config = headway_share::ShareConfig {
            members_elsewhere: in_cluster,
            ..settings.share.share_config()
        };
        let share_stores = in_cluster.then(|| Arc::new(StateStores::default()));
        let share_state = share_stores.as_ref().map(|stores| {
            ClusterShareState::new(Arc::clone(stores), broker.config().default_partitions)
        });
        let shares = match &share_state {
            Some(state) => ShareCoordinator::clustered(share_config, Arc::new(state.clone())),
            None => {
                let one = ShareCoordinator::open(&config.data_dir, config.flush, share_config)
                    .await
                    .map_err(|e| {
                        std::io::Error::other(format!("opening the share coordinator: {e}"))
                    })?;
                if let Some(log) = one.state_log() {
                    broker.add_internal_log(SHARE_STATE_TOPIC, Arc::clone(log));
                }
                one
            }
        };
        let group_configs = crate::group_configs::open(
            &config.data_dir,
            &settings.group,
            &settings.share,
            &groups,
            &shares,
            in_cluster,
        )
        .await?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let security = open_security_store(config).await?;
        let authorizer = Arc::new(crate::authorizer::Authorizer::new(
            &settings.auth,
            Arc::clone(&security),
        ));
        let cluster = start_cluster(&broker, &settings, &listeners).await?;
        if let Some(cluster) = &cluster {
            cluster.follow_coordinators(&broker, Arc::clone(&groups));
            cluster.follow_coordinators(&broker, Arc::clone(&txns));
            if let Some(stores) = &share_stores {
                cluster.serve_share_state(&broker, Arc::clone(stores));
            }
            cluster.follow_group_configs(
                Arc::clone(&group_configs),
                Arc::clone(&groups),
                Arc::clone(&shares),
            );
        }
        if let (Some(cluster), Some(ids)) = (&cluster, &cluster_ids) {
            ids.attach(Arc::downgrade(cluster));
        }
        if let (Some(cluster), Some(markers)) = (&cluster, &cluster_markers) {
            markers.attach(Arc::downgrade(cluster));
        }
        if let (Some(cluster), Some(state)) = (&cluster, &share_state) {
            state.attach(Arc::downgrade(cluster));
        }
        let tier = headway_tier::Tier::start(&broker, &settings.tier, shutdown_rx.clone())
            .map_err(|e| invalid(e.to_string()))?;
        let ctx = Arc::new(Ctx {
            tier,
            cluster,
            groups,
            txns,
            shares,
            group_configs,
            stats: ServerStats::new(
                config,
                Arc::clone(broker.read_pool()),
                RequestMetrics::new(handlers::APIS.iter().map(|h| h.key)),
            ),
            broker: Arc::clone(&broker),
            shutdown: shutdown_rx,
            authorizer,
            security,
            sasl: crate::sasl_settings::Sasl::new(&settings.auth).map_err(invalid)?,
        });
        let metrics_addr = serve_http(&config.metrics_listen, "metrics", |listen| {
            metrics::start(listen, Arc::clone(&ctx))
        })
        .await?;
        if let Some(addr) = metrics_addr {
            tracing::info!(%addr, "serving metrics at /metrics");
        }
        let console_addr = serve_http(&config.console_listen, "console", |listen| {
            console::start(listen, Arc::clone(&ctx))
        })
        .await?;
        if let Some(addr) = console_addr {
            tracing::info!(%addr, "serving the console at http://{addr}/");
        }
        Ok(Server {
            broker,
            listeners,
            tls,
            ctx,
            shutdown,
            metrics_addr,
            console_addr,
        })
    }

    /// The first listener's bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listeners[0]
            .tcp
            .local_addr()
            .expect("bound listener has an address")
    }

    /// Every listener's name, security protocol and bound address, in order.
    pub fn listener_addrs(&self) -> Vec<(String, SecurityProtocol, SocketAddr)> {
        self.listeners
            .iter()
            .map(|l| {
                let addr = l.tcp.local_addr().expect("bound listener has an address");
                (l.info.name.clone(), l.info.protocol, addr)
            })
            .collect()
    }

    /// Where `/metrics` is served, if anywhere.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Where the web console is served, if anywhere.
    pub fn console_addr(&self) -> Option<SocketAddr> {
        self.console_addr
    }

    /// The budgets and the open connections' state.
    pub fn stats(&self) -> Arc<ServerStats> {
        Arc::clone(&self.ctx.stats)
    }

    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            shutdown: self.shutdown.clone(),
            tls: self.tls.clone(),
        }
    }

    /// Accepts connections until shut down, then runs the shutdown sequence.
    pub async fn run(self) {
        let mut tasks = JoinSet::new();
        let mut down = self.ctx.shutdown.clone();
        // Ready (`/readyz`) from here until shutdown begins.
        self.ctx.stats.accepting.store(true, Ordering::Relaxed);
        loop {
            let permit = tokio::select! {
                slot = self.ctx.stats.connection_slot() => slot,
                _ = call::shutting_down(&mut down) => break,
            };
            let accepts = self
                .listeners
                .iter()
                .map(|l| Box::pin(async move { (l.tcp.accept().await, l) }));
            tokio::select! {
                ((accepted, listener), _, _) = futures::future::select_all(accepts) => match accepted {
                    Ok((stream, peer)) => {
                        let ctx = Arc::clone(&self.ctx);
                        let info = Arc::clone(&listener.info);
                        let tls = listener.tls.as_ref().map(|t| t.acceptor());
                        tasks.spawn(async move {
                            connection::serve(stream, peer, ctx, info, tls).await;
                            drop(permit);
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                _ = call::shutting_down(&mut down) => break,
            }
        }
        self.ctx.stats.accepting.store(false, Ordering::Relaxed);
        if let Some(cluster) = &self.ctx.cluster {
            cluster.shut_down().await;
            cluster.stop_reconciling();
        }
        tracing::info!("shutting down: closing logs");
        self.broker.shutdown().await;
        let groups = Arc::clone(&self.ctx.groups);
        let _ = tokio::task::spawn_blocking(move || groups.close()).await;
        let txns = Arc::clone(&self.ctx.txns);
        let _ = tokio::task::spawn_blocking(move || txns.close()).await;
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                connections = tasks.len(),
                "connections still open after the grace period"
            );
        }
        tracing::info!("shutdown complete");
    }
}

/// With `controller_quorum_voters`: starts this broker's controller voter and its
/// registration with the endpoints of the bound listeners (`crate::cluster`).
async fn start_cluster(
    broker: &Arc<Broker>,
    settings: &ServerConfig,
    listeners: &[Bound],
) -> std::io::Result<Option<Arc<Cluster>>> {
    let membership = settings
        .cluster
        .membership(broker.config().node_id)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let Some(membership) = membership else {
        return Ok(None);
    };
    broker.expect_roles();
    let endpoints = listeners
        .iter()
        .map(|l| Endpoint {
            listener: l.info.name.clone(),
            host: l.info.advertised_host.clone(),
            port: u16::try_from(l.info.advertised_port).unwrap_or(0),
            security_protocol: l.info.protocol.name().to_string(),
        })
        .collect();
    let cluster = Cluster::start(membership, settings.cluster.clone(), broker, endpoints).await?;
    Ok(Some(cluster))
}

/// Opens the security store in `<data_dir>/security/`.
async fn open_security_store(
    config: &headway_broker::BrokerConfig,
) -> std::io::Result<Arc<headway_auth::store::SecurityStore>> {
    let dir = config.data_dir.join(crate::authorizer::SECURITY_DIR);
    let limits = headway_auth::store::StoreLimits {
        users_max: limits::SCRAM_USERS_MAX,
        acls_max: limits::ACLS_MAX,
    };
    tokio::task::spawn_blocking(move || headway_auth::store::SecurityStore::open(&dir, limits))
        .await
        .map_err(std::io::Error::other)?
        .map(Arc::new)
        .map_err(|e| std::io::Error::other(format!("opening the security store: {e}")))
}
