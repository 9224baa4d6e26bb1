//! Three controller voters on loopback sockets, each with its own directory: they elect a
//! leader, decide proposals made on any of them, replace a stopped leader, bring a voter
//! that missed a snapshot's worth of entries back up to date, and keep the metadata
//! across a restart of all three.

use headway_controller::metadata::Endpoint;
use headway_controller::{Command, Controller, ControllerSettings, Image, Outcome, Tuning, Voter};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use uuid::Uuid;

const DEADLINE: Duration = Duration::from_secs(30);

fn tuning() -> Tuning {
    Tuning {
        heartbeat_ms: 100,
        election_min_ms: 600,
        election_max_ms: 1_200,
        session_timeout_ms: 1_500,
        snapshot_every_entries: 20,
        log_kept_after_snapshot: 5,
    }
}

struct Cluster {
    voters: Vec<Voter>,
    dirs: Vec<PathBuf>,
    running: Vec<Option<Controller>>,
    _root: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Cluster {
        let root = tempfile::tempdir().unwrap();
        let mut listeners = Vec::new();
        let mut voters = Vec::new();
        for id in 1..=3u64 {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            voters.push(Voter {
                id,
                addr: listener.local_addr().unwrap().to_string(),
            });
            listeners.push(listener);
        }
        let dirs: Vec<PathBuf> = (1..=3)
            .map(|id| root.path().join(format!("node-{id}")))
            .collect();
        let mut running = Vec::new();
        for (index, listener) in listeners.into_iter().enumerate() {
            let settings = settings(&voters, index, &dirs[index]);
            running.push(Some(
                Controller::start_on(settings, listener).await.unwrap(),
            ));
        }
        Cluster {
            voters,
            dirs,
            running,
            _root: root,
        }
    }

    fn node(&self, id: u64) -> &Controller {
        self.running[(id - 1) as usize]
            .as_ref()
            .expect("voter is running")
    }

    async fn stop(&mut self, id: u64) {
        let controller = self.running[(id - 1) as usize]
            .take()
            .expect("voter is running");
        controller.shutdown().await;
    }

    async fn restart(&mut self, id: u64) {
        let index = (id - 1) as usize;
        let settings = settings(&self.voters, index, &self.dirs[index]);
        let started = Instant::now();
        let controller = loop {
            match Controller::start(settings.clone()).await {
                Ok(controller) => break controller,
                // The port may take a moment to be free again.
                Err(e) if started.elapsed() < DEADLINE => {
                    eprintln!("restart of voter {id}: {e}; trying again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("voter {id} did not restart: {e}"),
            }
        };
        self.running[index] = Some(controller);
    }

    /// The leader all running voters agree on.
    async fn leader(&self) -> u64 {
        let started = Instant::now();
        loop {
            let seen: Vec<Option<u64>> =
                self.running.iter().flatten().map(|c| c.leader()).collect();
            if let Some(Some(leader)) = seen.first() {
                let running = self.running[(*leader - 1) as usize].is_some();
                if running && seen.iter().all(|s| *s == Some(*leader)) {
                    return *leader;
                }
            }
            assert!(started.elapsed() < DEADLINE, "no agreed leader: {seen:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until voter `id`'s metadata satisfies `condition`.
    async fn wait_for(
        &self,
        id: u64,
        what: &str,
        condition: impl Fn(&headway_controller::Metadata) -> bool,
    ) {
        let mut watch = self.node(id).metadata();
        tokio::time::timeout(DEADLINE, watch.wait_for(|i| condition(&i.metadata)))
            .await
            .unwrap_or_else(|_| panic!("voter {id}: {what}: not within {DEADLINE:?}"))
            .unwrap();
    }

    /// Waits until every running voter has applied `index` and all have applied the same
    /// entries (the liveness loop may add some); answers their images.
    async fn applied(&self, index: u64) -> Vec<Arc<Image>> {
        let started = Instant::now();
        loop {
            let images: Vec<Arc<Image>> = self
                .running
                .iter()
                .flatten()
                .map(|c| Arc::clone(&c.metadata().borrow()))
                .collect();
            let first = images[0].applied_index;
            if first >= index && images.iter().all(|i| i.applied_index == first) {
                return images;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "voters did not all apply {index}: {:?}",
                images.iter().map(|i| i.applied_index).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn settings(voters: &[Voter], index: usize, dir: &Path) -> ControllerSettings {
    ControllerSettings {
        node_id: voters[index].id,
        voters: voters.to_vec(),
        dir: dir.to_path_buf(),
        tuning: tuning(),
    }
}

fn survivor_of(stopped: u64) -> u64 {
    (1..=3).find(|id| *id != stopped).unwrap()
}

fn register(id: i32) -> Command {
    Command::RegisterBroker {
        id,
        incarnation: Uuid::new_v4(),
        endpoints: vec![Endpoint {
            listener: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9000 + id as u16,
            security_protocol: "PLAINTEXT".into(),
        }],
    }
}

fn topic(name: &str) -> Command {
    Command::CreateTopic {
        name: name.into(),
        id: Uuid::new_v4(),
        assignment: vec![vec![1, 2, 3], vec![2, 3, 1]],
        configs: BTreeMap::new(),
    }
}

/// The metadata of every image is the same; answers it.
fn agreed(images: &[Arc<Image>]) -> headway_controller::Metadata {
    for image in images {
        assert_eq!(image.metadata, images[0].metadata, "voters disagree");
    }
    images[0].metadata.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_decide_fail_over_catch_up_and_restart() {
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();

    // A proposal made on a follower is forwarded to the leader and applied everywhere.
    for broker in 1..=3 {
        let outcome = cluster
            .node(follower)
            .propose(register(broker))
            .await
            .unwrap()
            .outcome;
        assert!(matches!(outcome, Outcome::Registered { .. }), "{outcome:?}");
    }
    // The leader hears from every voter: all three brokers are unfenced.
    cluster
        .wait_for(leader, "every broker unfenced", |m| {
            m.brokers.values().all(|b| !b.fenced)
        })
        .await;
    let created = cluster.node(leader).propose(topic("orders")).await.unwrap();
    assert_eq!(created.outcome, Outcome::Done);
    let refused = cluster
        .node(follower)
        .propose(topic("orders"))
        .await
        .unwrap();
    assert!(
        matches!(refused.outcome, Outcome::Refused { code: 36, .. }),
        "{refused:?}"
    );
    let metadata = agreed(&cluster.applied(refused.index).await);
    assert_eq!(metadata.brokers.len(), 3);
    assert_eq!(metadata.topics["orders"].partitions.len(), 2);

    // The leader stops: the other two elect one of themselves and go on deciding.
    let stopped_at = Instant::now();
    cluster.stop(leader).await;
    let next = cluster.leader().await;
    assert_ne!(next, leader);
    let survivor = survivor_of(leader);
    let created = cluster
        .node(survivor)
        .propose(topic("payments"))
        .await
        .unwrap();
    assert_eq!(created.outcome, Outcome::Done);
    eprintln!(
        "failover: voter {next} leads and decided a proposal {:?} after voter {leader} stopped",
        stopped_at.elapsed()
    );
    // The stopped voter's broker is fenced and its partitions are led by the others.
    let gone = leader as i32;
    cluster
        .wait_for(survivor, "the stopped broker fenced", |m| {
            m.brokers[&gone].fenced
                && m.topics["orders"]
                    .partitions
                    .iter()
                    .all(|p| p.leader != gone && p.leader > 0)
        })
        .await;
    eprintln!(
        "fenced: broker {gone} fenced and its partitions moved {:?} after it stopped",
        stopped_at.elapsed()
    );

    // Enough entries for several snapshots while the old leader is down: it comes back
    // through a snapshot, since the others purged the entries it misses.
    let mut last = 0;
    for n in 0..60 {
        let decision = cluster
            .node(survivor)
            .propose(topic(&format!("t{n}")))
            .await
            .unwrap();
        assert_eq!(decision.outcome, Outcome::Done);
        last = decision.index;
    }
    let snapshot = cluster.dirs[(leader - 1) as usize].join("snapshot.json");
    assert!(
        !snapshot.exists(),
        "too few entries for a snapshot before the stop"
    );
    cluster.restart(leader).await;
    let metadata = agreed(&cluster.applied(last).await);
    assert_eq!(metadata.topics.len(), 62);
    assert!(snapshot.exists(), "the returning voter holds a snapshot");
    // Registered again with a new incarnation, the returning broker is unfenced.
    let again = cluster.node(leader).propose(register(gone)).await.unwrap();
    assert!(
        matches!(again.outcome, Outcome::Registered { .. }),
        "{again:?}"
    );
    cluster
        .wait_for(leader, "the returning broker unfenced", |m| {
            !m.brokers[&gone].fenced
        })
        .await;

    // All three stop and start again: the metadata is what was decided.
    for id in 1..=3 {
        cluster.stop(id).await;
    }
    for id in 1..=3 {
        cluster.restart(id).await;
    }
    cluster.leader().await;
    // A new entry commits everything before it on every voter.
    let registered = cluster.node(1).propose(register(4)).await.unwrap();
    assert!(
        matches!(registered.outcome, Outcome::Registered { .. }),
        "{registered:?}"
    );
    let after = agreed(&cluster.applied(registered.index).await);
    let names = |m: &headway_controller::Metadata| -> Vec<(String, usize)> {
        m.topics
            .iter()
            .map(|(name, t)| (name.clone(), t.partitions.len()))
            .collect()
    };
    assert_eq!(names(&after), names(&metadata));
    assert_eq!(after.brokers.len(), 4);
    for id in 1..=3 {
        cluster.stop(id).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_voter_of_three_decides_nothing() {
    let mut cluster = Cluster::start().await;
    let leader = cluster.leader().await;
    let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for id in &others {
        cluster.stop(*id).await;
    }
    let lone = cluster.node(leader);
    let before = lone.metadata().borrow().applied_index;
    let proposal = tokio::time::timeout(Duration::from_secs(3), lone.propose(register(7))).await;
    assert!(
        proposal.is_err() || proposal.as_ref().is_ok_and(|p| p.is_err()),
        "a minority decided {proposal:?}"
    );
    assert_eq!(lone.metadata().borrow().applied_index, before);
    cluster.stop(leader).await;
}
