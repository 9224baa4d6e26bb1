//! Tests of the group settings store: definitions, validation, durability and how settings reach live groups.

use super::*;

fn defs() -> Vec<Definition> {
    definitions(&GroupSettings::default(), &ShareSettings::default(), 5_000)
}

fn settings(pairs: &[(&str, &str)]) -> Settings {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn invalid_config(result: Result<(), BrokerError>) -> String {
    match result {
        Err(BrokerError::InvalidConfig { name, .. }) => name,
        other => panic!("expected INVALID_CONFIG, got {other:?}"),
    }
}

#[test]
fn kafka_names_and_values_within_the_broker_bounds_are_accepted() {
    let ok = settings(&[
        ("share.auto.offset.reset", "earliest"),
        ("share.record.lock.duration.ms", "15000"),
        ("share.session.timeout.ms", "60000"),
        ("share.heartbeat.interval.ms", "15000"),
        ("share.isolation.level", "read_uncommitted"),
        ("consumer.session.timeout.ms", "50000"),
        ("consumer.heartbeat.interval.ms", "6000"),
    ]);
    validate(&defs(), &ok).unwrap();
    validate(&defs(), &Settings::new()).unwrap();
}

#[test]
fn unknown_names_and_values_out_of_bounds_are_invalid_config() {
    let d = defs();
    for (name, value) in [
        ("share.auto.offset.resett", "earliest"),
        ("retention.ms", "1000"),
        ("share.auto.offset.reset", "none"),
        ("share.auto.offset.reset", "by_duration:PT1H"),
        ("share.isolation.level", "read_committed"),
        ("share.record.lock.duration.ms", "14999"),
        ("share.record.lock.duration.ms", "60001"),
        ("share.record.lock.duration.ms", "soon"),
        ("share.session.timeout.ms", "44999"),
        ("share.heartbeat.interval.ms", "0"),
        ("consumer.session.timeout.ms", "60001"),
        ("consumer.heartbeat.interval.ms", "4999"),
    ] {
        let named = invalid_config(validate(&d, &settings(&[(name, value)])));
        assert_eq!(named, name, "{name}={value}");
    }
}

#[test]
fn the_broker_bounds_come_from_its_settings_and_hold_its_own_value() {
    let share = ShareSettings {
        share_record_lock_duration_ms: 3_000,
        share_min_record_lock_duration_ms: 15_000,
        share_max_record_lock_duration_ms: 20_000,
        ..ShareSettings::default()
    };
    let d = definitions(&GroupSettings::default(), &share, 5_000);
    let lock = |v: &str| validate(&d, &settings(&[("share.record.lock.duration.ms", v)]));
    lock("3000").unwrap();
    lock("20000").unwrap();
    invalid_config(lock("20001"));
    invalid_config(lock("2999"));
}

#[test]
fn a_heartbeat_interval_must_stay_below_the_session_timeout() {
    let share = ShareSettings {
        share_max_heartbeat_interval_ms: 50_000,
        ..ShareSettings::default()
    };
    let d = definitions(&GroupSettings::default(), &share, 5_000);
    // Against the broker's session timeout (45 s).
    let named = invalid_config(validate(
        &d,
        &settings(&[("share.heartbeat.interval.ms", "45000")]),
    ));
    assert_eq!(named, "share.heartbeat.interval.ms");
    // Against the group's own.
    validate(
        &d,
        &settings(&[
            ("share.heartbeat.interval.ms", "46000"),
            ("share.session.timeout.ms", "50000"),
        ]),
    )
    .unwrap();
}

#[test]
fn describe_shows_the_broker_values_for_what_the_group_did_not_set() {
    let d = defs();
    let described = describe(&d, &settings(&[("share.auto.offset.reset", "earliest")]));
    let names: Vec<&str> = described.iter().map(|(n, ..)| n.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "in name order");
    let get = |name: &str| described.iter().find(|(n, ..)| n == name).unwrap().clone();
    assert_eq!(
        get("share.auto.offset.reset"),
        ("share.auto.offset.reset".into(), "earliest".into(), true)
    );
    assert_eq!(
        get("share.record.lock.duration.ms"),
        (
            "share.record.lock.duration.ms".into(),
            "30000".into(),
            false
        )
    );
    assert_eq!(
        get("consumer.session.timeout.ms"),
        ("consumer.session.timeout.ms".into(), "45000".into(), false)
    );
}

#[test]
fn settings_become_coordinator_overrides() {
    let s = settings(&[
        ("share.auto.offset.reset", "earliest"),
        ("share.record.lock.duration.ms", "20000"),
        ("consumer.heartbeat.interval.ms", "6000"),
    ]);
    assert_eq!(
        share_overrides(&s),
        ShareOverrides {
            auto_offset_reset: Some(AutoOffsetReset::Earliest),
            record_lock_duration_ms: Some(20_000),
            session_timeout_ms: None,
            heartbeat_interval_ms: None,
        }
    );
    assert_eq!(
        consumer_overrides(&s),
        ConsumerOverrides {
            session_timeout_ms: None,
            heartbeat_interval_ms: Some(6_000),
        }
    );
    assert_eq!(share_overrides(&Settings::new()), ShareOverrides::default());
}

#[tokio::test]
async fn changes_are_durable_and_a_refused_or_validate_only_change_keeps_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = GroupConfigStore::open(dir.path(), defs()).unwrap();
    let set = |k: &'static str, v: &'static str| {
        move |s: &mut Settings| {
            s.insert(k.into(), v.into());
            Ok(())
        }
    };
    store
        .alter("g1", set("share.auto.offset.reset", "earliest"), false)
        .await
        .unwrap();
    store
        .alter("g2", set("share.record.lock.duration.ms", "20000"), true)
        .await
        .unwrap();
    assert!(store
        .alter("g1", set("share.record.lock.duration.ms", "1"), false)
        .await
        .is_err());
    assert!(matches!(
        store
            .alter("", set("share.auto.offset.reset", "earliest"), false)
            .await,
        Err(BrokerError::InvalidRequest(_))
    ));
    let reopened = GroupConfigStore::open(dir.path(), defs()).unwrap();
    assert_eq!(
        reopened.all(),
        BTreeMap::from([(
            "g1".to_string(),
            settings(&[("share.auto.offset.reset", "earliest")])
        )])
    );
    // Deleting a group's last setting removes the group.
    reopened
        .alter(
            "g1",
            |s| {
                s.remove("share.auto.offset.reset");
                Ok(())
            },
            false,
        )
        .await
        .unwrap();
    let again = GroupConfigStore::open(dir.path(), defs()).unwrap();
    assert!(again.all().is_empty());
    assert!(again.get("g1").is_empty());
}

#[test]
fn a_damaged_file_stops_the_broker_rather_than_losing_settings() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(FILE), b"{not json").unwrap();
    assert!(matches!(
        GroupConfigStore::open(dir.path(), defs()),
        Err(BrokerError::Storage(_))
    ));
}

#[tokio::test]
async fn settings_for_more_groups_than_the_bound_are_refused_and_the_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = GroupConfigStore::open_bounded(dir.path(), defs(), 2).unwrap();
    let earliest = |s: &mut Settings| {
        s.insert("share.auto.offset.reset".into(), "earliest".into());
        Ok(())
    };
    for g in ["g1", "g2"] {
        store.alter(g, earliest, false).await.unwrap();
    }
    let refused = store.alter("g3", earliest, false).await;
    assert!(
        matches!(&refused, Err(BrokerError::InvalidRequest(m)) if m.contains("2 groups")),
        "{refused:?}"
    );
    assert!(store.get("g3").is_empty());
    // A group that has settings changes them; a deletion makes room.
    let lock = |s: &mut Settings| {
        s.insert("share.record.lock.duration.ms".into(), "20000".into());
        Ok(())
    };
    store.alter("g1", lock, false).await.unwrap();
    store
        .alter(
            "g2",
            |s: &mut Settings| {
                s.clear();
                Ok(())
            },
            false,
        )
        .await
        .unwrap();
    store.alter("g3", earliest, false).await.unwrap();
    let reopened = GroupConfigStore::open_bounded(dir.path(), defs(), 2).unwrap();
    assert_eq!(reopened.all().keys().collect::<Vec<_>>(), ["g1", "g3"]);
}
