//! The metadata decisions, driven command by command.

use super::*;

struct Log {
    metadata: Metadata,
    index: u64,
}

impl Log {
    fn new() -> Log {
        Log {
            metadata: Metadata::default(),
            index: 0,
        }
    }

    fn apply(&mut self, command: Command) -> Outcome {
        self.index += 1;
        self.metadata.apply(self.index, &command)
    }

    /// Registers and unfences brokers `ids`; answers their epochs.
    fn brokers(&mut self, ids: &[BrokerId]) -> Vec<i64> {
        ids.iter()
            .map(|id| {
                let Outcome::Registered { epoch } = self.apply(Command::RegisterBroker {
                    id: *id,
                    incarnation: Uuid::new_v4(),
                    endpoints: Vec::new(),
                }) else {
                    panic!("registration refused")
                };
                assert_eq!(
                    self.apply(Command::UnfenceBroker { id: *id, epoch }),
                    Outcome::Done
                );
                epoch
            })
            .collect()
    }

    fn topic(&mut self, name: &str, assignment: Vec<Vec<BrokerId>>) {
        let outcome = self.apply(Command::CreateTopic {
            name: name.into(),
            id: Uuid::new_v4(),
            assignment,
            configs: BTreeMap::new(),
        });
        assert_eq!(outcome, Outcome::Done);
    }

    fn partition(&self, topic: &str, index: i32) -> PartitionRecord {
        self.metadata.partition(topic, index).unwrap().clone()
    }
}

fn code(outcome: &Outcome) -> i16 {
    match outcome {
        Outcome::Refused { code, .. } => *code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_broker_registers_fenced_at_the_index_of_its_registration_and_a_retry_answers_the_same() {
    let mut log = Log::new();
    let incarnation = Uuid::new_v4();
    let register = Command::RegisterBroker {
        id: 1,
        incarnation,
        endpoints: Vec::new(),
    };
    assert_eq!(
        log.apply(register.clone()),
        Outcome::Registered { epoch: 1 }
    );
    assert!(log.metadata.brokers[&1].fenced);
    assert_eq!(log.apply(register), Outcome::Registered { epoch: 1 });
    let restarted = log.apply(Command::RegisterBroker {
        id: 1,
        incarnation: Uuid::new_v4(),
        endpoints: Vec::new(),
    });
    assert_eq!(restarted, Outcome::Registered { epoch: 3 });
    let stale = log.apply(Command::UnfenceBroker { id: 1, epoch: 1 });
    assert_eq!(code(&stale), ResponseError::StaleBrokerEpoch.code());
}

#[test]
fn a_new_topic_is_led_by_its_first_replica_with_every_unfenced_replica_in_sync() {
    let mut log = Log::new();
    log.brokers(&[1, 2, 3]);
    log.topic("t", vec![vec![2, 3, 1], vec![3, 1, 2]]);
    let p0 = log.partition("t", 0);
    assert_eq!((p0.leader, p0.isr.clone()), (2, vec![2, 3, 1]));
    assert_eq!(log.partition("t", 1).leader, 3);
    let again = log.apply(Command::CreateTopic {
        name: "t".into(),
        id: Uuid::new_v4(),
        assignment: vec![vec![1]],
        configs: BTreeMap::new(),
    });
    assert_eq!(code(&again), ResponseError::TopicAlreadyExists.code());
    let unknown = log.apply(Command::CreateTopic {
        name: "u".into(),
        id: Uuid::new_v4(),
        assignment: vec![vec![1, 9]],
        configs: BTreeMap::new(),
    });
    assert_eq!(
        code(&unknown),
        ResponseError::InvalidReplicaAssignment.code()
    );
}

#[test]
fn creating_a_topic_twice_with_one_id_is_one_creation() {
    let mut log = Log::new();
    log.brokers(&[1]);
    let create = Command::CreateTopic {
        name: "t".into(),
        id: Uuid::new_v4(),
        assignment: vec![vec![1]],
        configs: BTreeMap::new(),
    };
    assert_eq!(log.apply(create.clone()), Outcome::Done);
    assert_eq!(log.apply(create), Outcome::Done);
    assert_eq!(log.metadata.topics.len(), 1);
}

#[test]
fn a_broker_shutting_down_hands_over_at_once_and_stays_fenced_until_it_registers_again() {
    let mut log = Log::new();
    let epochs = log.brokers(&[1, 2, 3]);
    log.topic("t", vec![vec![1, 2, 3], vec![2, 1, 3]]);

    let outcome = log.apply(Command::ShutdownBroker {
        id: 1,
        epoch: epochs[0],
    });
    assert_eq!(outcome, Outcome::Done);
    let led = log.partition("t", 0);
    assert_eq!((led.leader, led.isr.clone()), (2, vec![2, 3]));
    assert_eq!(led.leader_epoch, 1);
    assert_eq!(log.partition("t", 1).isr, vec![2, 3]);
    assert!(log.metadata.brokers[&1].fenced);

    let refused = log.apply(Command::UnfenceBroker {
        id: 1,
        epoch: epochs[0],
    });
    assert_eq!(code(&refused), ResponseError::BrokerIdNotRegistered.code());
    assert!(
        log.metadata.brokers[&1].fenced,
        "heard from, it stays fenced"
    );

    let Outcome::Registered { epoch } = log.apply(Command::RegisterBroker {
        id: 1,
        incarnation: Uuid::new_v4(),
        endpoints: Vec::new(),
    }) else {
        panic!("registration refused")
    };
    assert!(!log.metadata.brokers[&1].shutting_down);
    assert_eq!(
        log.apply(Command::UnfenceBroker { id: 1, epoch }),
        Outcome::Done
    );
    let stale = log.apply(Command::ShutdownBroker {
        id: 1,
        epoch: epochs[0],
    });
    assert_eq!(code(&stale), ResponseError::StaleBrokerEpoch.code());
    assert!(!log.metadata.brokers[&1].fenced);
}

#[test]
fn fencing_moves_leadership_in_the_isr_and_never_elects_outside_it() {
    let mut log = Log::new();
    let epochs = log.brokers(&[1, 2, 3]);
    log.topic("t", vec![vec![1, 2, 3]]);

    log.apply(Command::FenceBroker {
        id: 1,
        epoch: epochs[0],
    });
    let p = log.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2, 3]));
    assert_eq!((p.leader_epoch, p.partition_epoch), (1, 1));

    log.apply(Command::FenceBroker {
        id: 2,
        epoch: epochs[1],
    });
    log.apply(Command::FenceBroker {
        id: 3,
        epoch: epochs[2],
    });
    let p = log.partition("t", 0);
    assert_eq!(
        p.leader, NO_LEADER,
        "broker 1 is not in sync: no unclean election"
    );
    assert_eq!(p.isr, vec![3], "the last in-sync replica stays in the ISR");

    log.apply(Command::UnfenceBroker {
        id: 1,
        epoch: epochs[0],
    });
    assert_eq!(log.partition("t", 0).leader, NO_LEADER);
    log.apply(Command::UnfenceBroker {
        id: 3,
        epoch: epochs[2],
    });
    let p = log.partition("t", 0);
    assert_eq!(p.leader, 3);
    assert_eq!(p.leader_epoch, 4, "1 to 2, 2 to 3, 3 to none, none to 3");
}

#[test]
fn alter_partition_checks_the_leader_its_epochs_and_the_new_members() {
    let mut log = Log::new();
    let epochs = log.brokers(&[1, 2, 3]);
    log.topic("t", vec![vec![1, 2, 3]]);
    let alter = |broker: BrokerId, broker_epoch: i64, partition_epoch: i32, isr: Vec<BrokerId>| {
        Command::AlterPartition {
            topic: "t".into(),
            partition: 0,
            broker,
            broker_epoch,
            leader_epoch: 0,
            partition_epoch,
            isr,
        }
    };

    let shrunk = log.apply(alter(1, epochs[0], 0, vec![1, 2]));
    let Outcome::Partition(p) = shrunk else {
        panic!("{shrunk:?}")
    };
    assert_eq!((p.isr, p.partition_epoch), (vec![1, 2], 1));

    let stale = log.apply(alter(1, epochs[0], 0, vec![1, 2, 3]));
    assert_eq!(code(&stale), ResponseError::InvalidUpdateVersion.code());
    let epoch_at_the_limit = log.apply(alter(1, epochs[0], i32::MAX, vec![1, 2]));
    assert_eq!(
        code(&epoch_at_the_limit),
        ResponseError::InvalidUpdateVersion.code()
    );
    let not_leader = log.apply(alter(2, epochs[1], 1, vec![2]));
    assert_eq!(code(&not_leader), ResponseError::InvalidRequest.code());
    let retried = log.apply(alter(1, epochs[0], 0, vec![1, 2]));
    assert!(
        matches!(&retried, Outcome::Partition(p) if p.partition_epoch == 1),
        "the same change again answers what it decided: {retried:?}"
    );
    let old_registration = log.apply(alter(1, epochs[0] - 1, 1, vec![1]));
    assert_eq!(
        code(&old_registration),
        ResponseError::StaleBrokerEpoch.code()
    );

    log.apply(Command::FenceBroker {
        id: 3,
        epoch: epochs[2],
    });
    let fenced_member = log.apply(alter(1, epochs[0], 1, vec![1, 2, 3]));
    assert_eq!(
        code(&fenced_member),
        ResponseError::IneligibleReplica.code()
    );
    assert_eq!(log.partition("t", 0).isr, vec![1, 2]);
}

#[test]
fn preferred_leaders_return_once_in_sync() {
    let mut log = Log::new();
    let epochs = log.brokers(&[1, 2]);
    log.topic("t", vec![vec![1, 2]]);
    log.apply(Command::FenceBroker {
        id: 1,
        epoch: epochs[0],
    });
    log.apply(Command::UnfenceBroker {
        id: 1,
        epoch: epochs[0],
    });
    log.apply(Command::ElectPreferredLeaders);
    assert_eq!(
        log.partition("t", 0).leader,
        2,
        "1 is not back in the ISR yet"
    );
    let p = log.partition("t", 0);
    log.apply(Command::AlterPartition {
        topic: "t".into(),
        partition: 0,
        broker: 2,
        broker_epoch: epochs[1],
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        isr: vec![2, 1],
    });
    log.apply(Command::ElectPreferredLeaders);
    let p = log.partition("t", 0);
    assert_eq!((p.leader, p.isr), (1, vec![1, 2]));
}

#[test]
fn producer_id_blocks_never_overlap_and_need_a_current_registration() {
    let mut log = Log::new();
    let epochs = log.brokers(&[1, 2]);
    let a = log.apply(Command::AllocateProducerIds {
        broker: 1,
        broker_epoch: epochs[0],
        count: 1000,
    });
    let b = log.apply(Command::AllocateProducerIds {
        broker: 2,
        broker_epoch: epochs[1],
        count: 1000,
    });
    assert_eq!(
        (a, b),
        (
            Outcome::ProducerIds {
                first: 0,
                count: 1000
            },
            Outcome::ProducerIds {
                first: 1000,
                count: 1000
            }
        )
    );
    let stale = log.apply(Command::AllocateProducerIds {
        broker: 1,
        broker_epoch: epochs[0] + 100,
        count: 1,
    });
    assert_eq!(code(&stale), ResponseError::StaleBrokerEpoch.code());
    let huge = log.apply(Command::AllocateProducerIds {
        broker: 1,
        broker_epoch: epochs[0],
        count: PRODUCER_ID_BLOCK_MAX + 1,
    });
    assert_eq!(code(&huge), ResponseError::InvalidRequest.code());
}

#[test]
fn acls_and_credentials_are_kept_and_removed() {
    let mut log = Log::new();
    let acl = AclRecord {
        resource_type: 2,
        resource_name: "t".into(),
        pattern_type: 3,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: 3,
        permission: 3,
    };
    log.apply(Command::CreateAcls {
        acls: vec![acl.clone(), acl.clone()],
    });
    assert_eq!(log.metadata.acls.len(), 1);
    log.apply(Command::DeleteAcls { acls: vec![acl] });
    assert!(log.metadata.acls.is_empty());

    let credential = ScramRecord {
        user: "alice".into(),
        mechanism: "SCRAM-SHA-256".into(),
        salt: vec![1],
        stored_key: vec![2],
        server_key: vec![3],
        iterations: 4096,
    };
    log.apply(Command::UpsertScram { credential });
    assert_eq!(log.metadata.scram["alice"].len(), 1);
    let deleted = log.apply(Command::DeleteScram {
        user: "alice".into(),
        mechanism: "SCRAM-SHA-256".into(),
    });
    assert_eq!(deleted, Outcome::Done);
    assert!(log.metadata.scram.is_empty());
    let again = log.apply(Command::DeleteScram {
        user: "alice".into(),
        mechanism: "SCRAM-SHA-256".into(),
    });
    assert_eq!(code(&again), ResponseError::ResourceNotFound.code());
}

#[test]
fn a_groups_settings_are_replaced_whole_and_removed_when_empty() {
    let mut log = Log::new();
    let set = |pairs: &[(&str, &str)]| Command::SetGroupConfigs {
        group: "g".into(),
        configs: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let reset = set(&[("share.auto.offset.reset", "earliest")]);
    assert_eq!(log.apply(reset.clone()), Outcome::Done);
    assert_eq!(log.apply(reset), Outcome::Done);
    assert_eq!(
        log.metadata.group_configs["g"]["share.auto.offset.reset"],
        "earliest"
    );
    log.apply(set(&[("share.record.lock.duration.ms", "15000")]));
    assert_eq!(log.metadata.group_configs["g"].len(), 1);
    assert!(!log.metadata.group_configs["g"].contains_key("share.auto.offset.reset"));
    log.apply(set(&[]));
    assert!(log.metadata.group_configs.is_empty());
}

#[test]
fn retried_deletions_and_new_partitions_change_nothing_the_second_time() {
    let mut log = Log::new();
    log.brokers(&[1, 2]);
    log.topic("t", vec![vec![1, 2]]);
    let more = Command::CreatePartitions {
        name: "t".into(),
        assignment: vec![vec![2, 1], vec![1, 2]],
        total: 3,
    };
    assert_eq!(log.apply(more.clone()), Outcome::Done);
    assert_eq!(log.apply(more), Outcome::Done);
    assert_eq!(log.metadata.topics["t"].partitions.len(), 3);
    let wrong_total = log.apply(Command::CreatePartitions {
        name: "t".into(),
        assignment: vec![vec![2, 1]],
        total: 5,
    });
    assert_eq!(code(&wrong_total), ResponseError::InvalidPartitions.code());

    let old_id = log.metadata.topics["t"].id;
    let delete = Command::DeleteTopic {
        name: "t".into(),
        id: old_id,
    };
    assert_eq!(log.apply(delete.clone()), Outcome::Done);
    log.topic("t", vec![vec![2, 1]]);
    assert_eq!(log.apply(delete), Outcome::Done);
    assert!(
        log.metadata.topics.contains_key("t"),
        "a late retry does not delete the topic created again"
    );
}

#[test]
fn a_partition_whose_replicas_are_all_fenced_is_refused() {
    let mut log = Log::new();
    log.brokers(&[1]);
    log.apply(Command::RegisterBroker {
        id: 2,
        incarnation: Uuid::new_v4(),
        endpoints: Vec::new(),
    });
    let fenced_only = log.apply(Command::CreateTopic {
        name: "t".into(),
        id: Uuid::new_v4(),
        assignment: vec![vec![2]],
        configs: BTreeMap::new(),
    });
    assert_eq!(
        code(&fenced_only),
        ResponseError::InvalidReplicaAssignment.code()
    );
    log.topic("u", vec![vec![2, 1]]);
    let p = log.partition("u", 0);
    assert_eq!(
        (p.leader, p.isr),
        (1, vec![1]),
        "the unfenced replica leads alone"
    );
}
