//! One voter of the controller group, as the rest of the broker uses it.
//!
//! [`Controller::start`] opens the voter's log and snapshot under its directory, binds its
//! controller listener, starts its Raft node and, on a fresh directory, writes the static
//! membership from `--controller-quorum-voters` (every voter writes the same one, which
//! Raft allows). From then on:
//! - [`Controller::metadata`] is the applied metadata and its changes (a watch channel);
//! - [`Controller::propose`] decides a [`Command`] through the leader: on this voter if it
//!   leads, otherwise forwarded to the voter that does, retried through elections until
//!   `limits::CONTROLLER_PROPOSAL_TIMEOUT_MS`.

use crate::consensus::network::{self, CallError, Decision, Peer, Peers, ProposeRefusal};
use crate::consensus::state_machine::{Image, Raft, StateMachine};
use crate::consensus::{log_store::LogStore, raft_config, Tuning};
use crate::metadata::Command;
use headway_base::limits;
use openraft::async_runtime::WatchReceiver;
use openraft::BasicNode;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One voter of `--controller-quorum-voters`: `ID@HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: u64,
    /// The voter's controller listener.
    pub addr: String,
}

/// Reads `1@HOST:PORT,2@HOST:PORT,...` (Kafka's `controller.quorum.voters`).
pub fn parse_voters(text: &str) -> Result<Vec<Voter>, String> {
    let mut voters: Vec<Voter> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('@')
            .ok_or_else(|| format!("a controller voter is ID@HOST:PORT, not {item:?}"))?;
        let id: u64 = id
            .parse()
            .ok()
            .filter(|id| i32::try_from(*id).is_ok())
            .ok_or_else(|| format!("the id of controller voter {item:?} is not a broker id"))?;
        let port_ok = addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(format!(
                "controller voter {item:?} needs HOST:PORT after the @"
            ));
        }
        if voters.iter().any(|v| v.id == id) {
            return Err(format!("controller voter {id} is listed twice"));
        }
        voters.push(Voter {
            id,
            addr: addr.to_string(),
        });
    }
    if voters.is_empty() {
        return Err("no controller voter is listed".into());
    }
    Ok(voters)
}

/// What a voter needs to start.
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// This voter's id (`--node-id`, also its broker id); it must be one of `voters`.
    pub node_id: u64,
    pub voters: Vec<Voter>,
    /// Where the log, the vote and the snapshot live.
    pub dir: PathBuf,
    pub tuning: Tuning,
}

/// Why the controller could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("node {0} is not one of the controller voters")]
    NotAVoter(u64),
    #[error("controller storage: {0}")]
    Storage(#[from] io::Error),
    #[error("controller settings: {0}")]
    Settings(String),
    #[error("no controller leader answered within {0:?}")]
    NoLeader(Duration),
    #[error("the controller failed the proposal: {0}")]
    Failed(String),
}

/// A running voter.
pub struct Controller {
    node_id: u64,
    voters: Vec<Voter>,
    raft: Raft,
    image: watch::Receiver<Arc<Image>>,
    listener_addr: SocketAddr,
    server: JoinHandle<()>,
    liveness: JoinHandle<()>,
    forwarders: Mutex<HashMap<u64, Peer>>,
}

impl Controller {
    /// Binds this voter's address from `settings.voters` and starts it.
    pub async fn start(settings: ControllerSettings) -> Result<Controller, ControllerError> {
        let me = settings
            .voters
            .iter()
            .find(|v| v.id == settings.node_id)
            .ok_or(ControllerError::NotAVoter(settings.node_id))?;
        let listener = TcpListener::bind(&me.addr).await?;
        Controller::start_on(settings, listener).await
    }

    /// Starts this voter on a listener already bound to its address.
    pub async fn start_on(
        settings: ControllerSettings,
        listener: TcpListener,
    ) -> Result<Controller, ControllerError> {
        if !settings.voters.iter().any(|v| v.id == settings.node_id) {
            return Err(ControllerError::NotAVoter(settings.node_id));
        }
        let config =
            raft_config(settings.tuning).map_err(|e| ControllerError::Settings(e.to_string()))?;
        let log_store = LogStore::open(&settings.dir)?;
        let state_machine = StateMachine::open(&settings.dir)?;
        let image = state_machine.subscribe();
        let raft = Raft::new(settings.node_id, config, Peers, log_store, state_machine)
            .await
            .map_err(|e| ControllerError::Failed(e.to_string()))?;
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| ControllerError::Failed(e.to_string()))?;
        if !initialized {
            let members: BTreeMap<u64, BasicNode> = settings
                .voters
                .iter()
                .map(|v| (v.id, BasicNode::new(&v.addr)))
                .collect();
            // Every voter writes the same membership; a peer that got there first makes
            // this a no-op.
            if let Err(e) = raft.initialize(members).await {
                tracing::debug!(error = %e, "controller membership already written");
            }
        }
        let listener_addr = listener.local_addr()?;
        // A live peer sends at least a heartbeat per interval; one silent for several
        // election timeouts is gone.
        let idle = Duration::from_millis(settings.tuning.election_max_ms.saturating_mul(3));
        let server = tokio::spawn(network::serve(listener, raft.clone(), idle));
        let liveness = tokio::spawn(crate::liveness::run(
            raft.clone(),
            i32::try_from(settings.node_id).unwrap_or(i32::MAX),
            image.clone(),
            Duration::from_millis(settings.tuning.heartbeat_ms),
            Duration::from_millis(settings.tuning.session_timeout_ms),
        ));
        tracing::info!(
            node_id = settings.node_id,
            listener = %listener_addr,
            voters = settings.voters.len(),
            "controller voter started"
        );
        Ok(Controller {
            node_id: settings.node_id,
            voters: settings.voters,
            raft,
            image,
            listener_addr,
            server,
            liveness,
            forwarders: Mutex::new(HashMap::new()),
        })
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// The address the controller listener is bound to.
    pub fn listener_addr(&self) -> SocketAddr {
        self.listener_addr
    }

    /// The metadata as applied on this voter, and its changes.
    pub fn metadata(&self) -> watch::Receiver<Arc<Image>> {
        self.image.clone()
    }

    /// The voter this one knows as leader.
    pub fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow_watched().current_leader
    }

    /// Decides `command` through the leader and answers its outcome and log index.
    pub async fn propose(&self, command: Command) -> Result<Decision, ControllerError> {
        let budget = Duration::from_millis(limits::CONTROLLER_PROPOSAL_TIMEOUT_MS);
        let deadline = Instant::now() + budget;
        let mut metrics = self.raft.metrics();
        let mut last_error = String::new();
        while Instant::now() < deadline {
            let leader = metrics.borrow_watched().current_leader;
            let attempt = match leader {
                Some(id) if id == self.node_id => {
                    network::propose_here(&self.raft, command.clone(), deadline - Instant::now())
                        .await
                }
                Some(id) => match self.forward(id, command.clone(), deadline).await {
                    Ok(answer) => answer,
                    Err(e) => Err(ProposeRefusal::Failed(format!("{e:?}"))),
                },
                None => Err(ProposeRefusal::NotLeader { leader: None }),
            };
            match attempt {
                Ok(outcome) => return Ok(outcome),
                Err(refusal) => last_error = format!("{refusal:?}"),
            }
            // Wait for the leadership to change, or a short while, then try again.
            let pause = Duration::from_millis(50).min(deadline - Instant::now());
            let _ = tokio::time::timeout(pause, metrics.changed()).await;
        }
        tracing::warn!(error = %last_error, "controller proposal found no leader");
        Err(ControllerError::NoLeader(budget))
    }

    async fn forward(
        &self,
        leader: u64,
        command: Command,
        deadline: Instant,
    ) -> Result<Result<Decision, ProposeRefusal>, CallError> {
        let Some(voter) = self.voters.iter().find(|v| v.id == leader) else {
            return Ok(Err(ProposeRefusal::NotLeader { leader: None }));
        };
        // The connection is taken out for the call, so other proposals to the same leader
        // are not held behind this one: they open a connection of their own.
        let taken = self.forwarders.lock().await.remove(&leader);
        let mut peer = taken.unwrap_or_else(|| Peer::new(voter.addr.clone()));
        let answer = peer.propose(command, deadline - Instant::now()).await;
        if answer.is_ok() {
            self.forwarders.lock().await.insert(leader, peer);
        }
        answer
    }

    /// Stops the voter: its Raft node and its listener.
    pub async fn shutdown(self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "controller shutdown");
        }
        self.server.abort();
        self.liveness.abort();
    }
}
