//! The controller listener and the connections between voters.
//!
//! Each voter listens on its own address from `--controller-quorum-voters`, apart from the
//! Kafka listeners, so that client traffic cannot delay heartbeats and votes. A connection
//! carries requests one at a time, each a frame of `length (u32 BE) | JSON`: openraft's
//! AppendEntries, Vote, PreVote, full snapshots and leader transfers, and proposals that a
//! voter which is not the leader forwards to the one that is. A voter keeps one connection
//! per peer and opens it again after any error; a frame longer than
//! `limits::CONTROLLER_FRAME_BYTES_MAX`, or one that does not decode, closes only its
//! connection.

use super::state_machine::Raft;
use super::types::{Types, Vote};
use crate::metadata::{Command, Outcome};
use headway_base::limits;
use openraft::alias::SnapshotMetaOf;
use openraft::errors::{
    ClientWriteError, NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend, RaftNetworkV2, Snapshot};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::io::{self, Cursor};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// What one voter asks another.
#[derive(Serialize, Deserialize)]
enum Request {
    Append(AppendEntriesRequest<Types>),
    Vote(VoteRequest<Types>),
    PreVote(VoteRequest<Types>),
    Snapshot {
        vote: Vote,
        meta: SnapshotMetaOf<Types>,
        data: Vec<u8>,
    },
    TransferLeader(TransferLeaderRequest<Types>),
    Propose(Command),
}

/// Why a forwarded proposal was not decided by the voter it reached.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum ProposeRefusal {
    /// That voter is not the leader; it names the one it knows, if any.
    NotLeader { leader: Option<u64> },
    /// The proposal failed there (the voter is shutting down, or its storage failed).
    Failed(String),
}

async fn read_frame(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let len = stream.read_u32().await? as usize;
    if len > limits::CONTROLLER_FRAME_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "a controller frame of {len} bytes is over the limit of {}",
                limits::CONTROLLER_FRAME_BYTES_MAX
            ),
        ));
    }
    // Grown as the bytes arrive: a length alone reserves nothing.
    let mut body = Vec::with_capacity(len.min(READ_CHUNK_BYTES));
    while body.len() < len {
        let start = body.len();
        body.resize(start + (len - start).min(READ_CHUNK_BYTES), 0);
        stream.read_exact(&mut body[start..]).await?;
    }
    Ok(body)
}

async fn write_frame(stream: &mut TcpStream, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|len| (*len as usize) <= limits::CONTROLLER_FRAME_BYTES_MAX)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "controller frame too long"))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(body);
    stream.write_all(&frame).await
}

fn to_json<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// How much of a frame is read into memory at a time.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Serves the controller listener until the task is aborted, which also ends every
/// connection it serves. A connection that brings no whole request for `idle` is closed.
pub async fn serve(listener: TcpListener, raft: Raft, idle: Duration) {
    let slots = Arc::new(Semaphore::new(limits::CONTROLLER_CONNECTIONS_MAX));
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "controller listener accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(%peer, "controller listener full; closing the connection");
            continue;
        };
        let raft = raft.clone();
        connections.spawn(async move {
            let _slot = slot;
            if let Err(e) = serve_connection(stream, raft, idle).await {
                if e.kind() != io::ErrorKind::UnexpectedEof {
                    tracing::debug!(%peer, error = %e, "controller connection closed");
                }
            }
        });
    }
}

async fn serve_connection(mut stream: TcpStream, raft: Raft, idle: Duration) -> io::Result<()> {
    stream.set_nodelay(true)?;
    loop {
        let body = tokio::time::timeout(idle, read_frame(&mut stream))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "idle controller connection"))??;
        let request: Request = serde_json::from_slice(&body)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let reply = match request {
            Request::Append(rpc) => to_json(&raft.append_entries(rpc).await)?,
            Request::Vote(rpc) => to_json(&raft.vote(rpc).await)?,
            Request::PreVote(rpc) => to_json(&raft.pre_vote(rpc).await)?,
            Request::Snapshot { vote, meta, data } => {
                let snapshot = Snapshot {
                    meta,
                    snapshot: Cursor::new(data),
                };
                let result: Result<SnapshotResponse<Types>, RaftError<Types>> = raft
                    .install_full_snapshot(vote, snapshot)
                    .await
                    .map_err(RaftError::Fatal);
                to_json(&result)?
            }
            Request::TransferLeader(rpc) => to_json(&raft.handle_transfer_leader(rpc).await)?,
            Request::Propose(command) => {
                let budget = Duration::from_millis(limits::CONTROLLER_PROPOSAL_TIMEOUT_MS);
                to_json(&propose_here(&raft, command, budget).await)?
            }
        };
        write_frame(&mut stream, &reply).await?;
    }
}

/// A command decided by the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The log index of the command: a voter's metadata includes the decision once its
    /// applied index reaches this.
    pub index: u64,
    pub outcome: Outcome,
}

/// Proposes `command` to the local Raft node, which must be the leader, and waits at most
/// `budget` for its decision.
///
/// A leader that loses its leadership with the entry in its log may keep the answer back
/// until the entry is committed or cut, which can take arbitrarily long; without the
/// bound, a caller looping over proposals (the ISR proposer, the liveness checker) would
/// stop with it. A proposal that ran out of time may still be decided later: callers
/// look at the metadata to learn what became of it.
pub async fn propose_here(
    raft: &Raft,
    command: Command,
    budget: Duration,
) -> Result<Decision, ProposeRefusal> {
    match tokio::time::timeout(budget, raft.client_write(command)).await {
        Ok(Ok(written)) => Ok(Decision {
            index: written.log_id.index(),
            outcome: written.data,
        }),
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
            Err(ProposeRefusal::NotLeader {
                leader: forward.leader_id,
            })
        }
        Ok(Err(e)) => Err(ProposeRefusal::Failed(e.to_string())),
        Err(_) => Err(ProposeRefusal::Failed(format!(
            "no decision within {} ms",
            budget.as_millis()
        ))),
    }
}

/// How a voter reaches its peers (openraft's network factory).
pub struct Peers;

impl RaftNetworkFactory<Types> for Peers {
    type Network = Peer;

    async fn new_client(&mut self, _target: u64, node: &BasicNode) -> Peer {
        Peer::new(node.addr.clone())
    }
}

/// One connection to a voter, opened when first needed and again after an error.
pub struct Peer {
    addr: String,
    stream: Option<TcpStream>,
}

/// A call that did not get an answer.
#[derive(Debug)]
pub enum CallError {
    /// No connection could be made.
    Unreachable(io::Error),
    /// The connection failed or timed out during the call.
    Network(io::Error),
}

impl Peer {
    pub fn new(addr: String) -> Peer {
        Peer { addr, stream: None }
    }

    async fn call<T: DeserializeOwned>(
        &mut self,
        request: &Request,
        timeout: Duration,
    ) -> Result<T, CallError> {
        let body = to_json(request).map_err(CallError::Network)?;
        if self.stream.is_none() {
            let connect = TcpStream::connect(&self.addr);
            let connected = tokio::time::timeout(
                Duration::from_millis(limits::CONTROLLER_CONNECT_TIMEOUT_MS).min(timeout),
                connect,
            )
            .await
            .map_err(|_| {
                CallError::Unreachable(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connecting to {} timed out", self.addr),
                ))
            })?
            .map_err(CallError::Unreachable)?;
            connected
                .set_nodelay(true)
                .map_err(CallError::Unreachable)?;
            self.stream = Some(connected);
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(CallError::Unreachable(io::Error::other("no connection")));
        };
        let exchange = async {
            write_frame(stream, &body).await?;
            let reply = read_frame(stream).await?;
            serde_json::from_slice::<T>(&reply)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        };
        let result = match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(CallError::Network(e)),
            Err(_) => Err(CallError::Network(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer from {} within {timeout:?}", self.addr),
            ))),
        };
        if result.is_err() {
            // The stream may hold half a frame: start afresh next time.
            self.stream = None;
        }
        result
    }

    /// A Raft call: the answer, or the error openraft expects.
    async fn raft_call<T: DeserializeOwned>(
        &mut self,
        request: &Request,
        option: &RPCOption,
    ) -> Result<T, RPCError<Types>> {
        let answer: Result<T, RaftError<Types>> = match self.call(request, option.hard_ttl()).await
        {
            Ok(answer) => answer,
            Err(CallError::Unreachable(e)) => {
                return Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
            Err(CallError::Network(e)) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        answer.map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))
    }

    /// Forwards a proposal to this voter.
    pub async fn propose(
        &mut self,
        command: Command,
        timeout: Duration,
    ) -> Result<Result<Decision, ProposeRefusal>, CallError> {
        self.call(&Request::Propose(command), timeout).await
    }
}

impl RaftNetworkV2<Types> for Peer {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Types>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<Types>, RPCError<Types>> {
        self.raft_call(&Request::Append(rpc), &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<Types>,
        option: RPCOption,
    ) -> Result<VoteResponse<Types>, RPCError<Types>> {
        self.raft_call(&Request::Vote(rpc), &option).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<Types>,
        option: RPCOption,
    ) -> Result<VoteResponse<Types>, RPCError<Types>> {
        self.raft_call(&Request::PreVote(rpc), &option).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: openraft::alias::SnapshotOf<Types, Self::SnapshotData>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<Types>, StreamingError<Types>> {
        let request = Request::Snapshot {
            vote,
            meta: snapshot.meta,
            data: snapshot.snapshot.into_inner(),
        };
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            answer = self.raft_call(&request, &option) => Ok(answer?),
        }
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<Types>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<Types>, RPCError<Types>> {
        self.raft_call(&Request::TransferLeader(rpc), &option).await
    }
}
