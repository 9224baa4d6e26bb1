//! Goal: every `headway bench` scenario runs end to end in its `--quick` form and writes
//! a well-formed report: the JSON parses, has the fields the plots and the driver read,
//! and a Markdown table sits beside it. Numbers are not asserted (a test is no place for
//! timing); `bench/run-all` is where they are measured.
//!
//! Method: run the built binary as a process, which starts its own headway broker on an
//! ephemeral port with a temporary data directory, writing into a temporary `--out`.
//! The scenarios run one at a time so that they do not compete for the 2 cores.

use serde_json::Value;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_headway");

/// One scenario at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Generous bound on one quick scenario (they aim for well under 20 s).
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(90);

fn run_quick(scenario: &str, extra: &[&str]) -> Value {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args(["bench", scenario, "--quick", "--out"])
        .arg(out.path())
        .arg("--data-dir")
        .arg(out.path())
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > SCENARIO_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{scenario} --quick still running after {SCENARIO_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = log.join().unwrap();
    assert!(status.success(), "{scenario} failed: {status}\n{log}");
    eprintln!(
        "{scenario} --quick took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let json = out.path().join(format!("{scenario}-headway.json"));
    let md = out.path().join(format!("{scenario}-headway.md"));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap())
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", json.display()));
    let table = std::fs::read_to_string(&md).unwrap();
    assert!(table.contains("| run |"), "no table in {}", md.display());
    check_report(&report, scenario);
    report
}

fn number(v: &Value, path: &str) -> f64 {
    let mut at = v;
    for key in path.split('.') {
        at = &at[key];
    }
    at.as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number in {v}"))
}

fn check_report(report: &Value, scenario: &str) {
    assert_eq!(report["format"], 1);
    assert_eq!(report["scenario"], scenario);
    assert_eq!(report["label"], "headway");
    assert_eq!(report["quick"], true);
    assert!(number(report, "cores") >= 1.0);
    assert!(report["command"].as_str().unwrap().contains(scenario));
    assert!(report["started_at"].as_str().unwrap().ends_with('Z'));
    let runs = report["runs"].as_array().expect("runs");
    assert!(!runs.is_empty());
    for run in runs {
        assert!(run["name"].is_string());
        for field in [
            "duration_s",
            "publish.msgs_per_s",
            "publish.mb_per_s",
            "consume.msgs_per_s",
            "publish_latency_ms.p50",
            "publish_latency_ms.p999",
            "e2e_latency_ms.p90",
            "e2e_latency_ms.p99",
            "e2e_latency_ms.max",
            "backlog.end",
            "backlog.max",
            "fairness.rate_jain",
        ] {
            number(run, field);
        }
        assert!(run["consumers"].is_array() && run["series"].is_array());
    }
    assert!(report["summary"].is_object());
}

/// The roles of a run's consumers.
fn roles(run: &Value) -> Vec<&str> {
    run["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["role"].as_str().unwrap())
        .collect()
}

#[test]
fn acks_quick() {
    let r = run_quick("acks", &[]);
    // Two runs per case, and a third beside the writer for the 4 acks=all cases.
    assert_eq!(r["runs"].as_array().unwrap().len(), 28);
    let cases = r["summary"]["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 12);
    number(&cases[0], "max-rate.publish_msgs_per_s");
    number(&cases[0], "paced.publish_p99_ms");
    for case in cases {
        let beside = case.get("paced-beside-writer");
        assert_eq!(beside.is_some(), case["acks"] == "all", "{case}");
        if let Some(beside) = beside {
            number(beside, "publish_p99_ms");
            assert!(number(beside, "writer_mb_per_s") > 0.0, "{case}");
            number(case, "publish_p99_beside_writer_over_paced");
        }
    }
    let writer_runs = r["runs"].as_array().unwrap().iter();
    let writer_runs = writer_runs.filter(|run| run["params"]["writer"] == true);
    assert_eq!(writer_runs.count(), 4);
}

#[test]
fn slow_consumer_quick() {
    let r = run_quick("slow-consumer", &[]);
    assert_eq!(r["runs"].as_array().unwrap().len(), 2);
    number(&r["summary"], "fast_e2e_p99_ms_without");
    number(&r["summary"], "fast_p99_with_over_without");
    let roles = roles(&r["runs"][1]);
    assert!(
        roles.contains(&"slow") && roles.contains(&"catch-up"),
        "{roles:?}"
    );
    // The started broker's data directory is dropped from the page cache before run 2.
    assert_eq!(r["summary"]["evicted"], true);
    assert!(number(&r["summary"], "evicted_files") > 0.0);
    number(&r["summary"], "backlog_mb");
    number(&r["summary"], "publish_with_over_without");
    number(&r["summary"]["catch_up"], "read_fraction");
    number(&r["summary"]["catch_up"], "messages");
    number(&r["summary"]["catch_up"], "replay_messages");
    let replay = &r["summary"]["catch_up"]["replay_s"];
    assert!(replay.is_number() || replay.is_null(), "{replay}");
}

#[test]
fn stuck_consumer_quick() {
    let r = run_quick("stuck-consumer", &[]);
    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["name"], "fast consumers only");
    assert_eq!(runs[1]["name"], "with stuck clients");
    let s = &r["summary"];
    for key in [
        "fast_e2e_p99_ms_without",
        "fast_e2e_p99_ms_with",
        "fast_p99_with_over_without",
        "fast_e2e_p50_ms_without",
        "fast_e2e_p50_ms_with",
        "publish_msgs_per_s_without",
        "publish_msgs_per_s_with",
        "publish_with_over_without",
        "publish_p99_ms_without",
        "publish_p99_ms_with",
        "produced_mb_without",
        "produced_mb_with",
        "broker_rss_mib_max_without",
        "broker_rss_mib_max_with",
        "stuck_clients",
        "stuck_requests_written",
        "stuck_write_blocked",
        "stuck_closed_by_broker",
        "rss_limit_mib",
        "backlog_mb",
        "prefill_s",
    ] {
        number(s, key);
    }
    assert!(s["rss_limit_hit"].is_boolean());
    assert_eq!(number(s, "stuck_clients"), 2.0);
    assert!(number(s, "stuck_requests_written") > 0.0, "{s}");
    assert!(number(s, "produced_mb_with") > 0.0, "{s}");
    let stuck = runs[1]["extra"]["stuck"].as_array().unwrap();
    assert_eq!(stuck.len(), 2);
    for client in stuck {
        number(client, "requests_written");
        assert!(client["write_blocked"].is_boolean());
    }
    assert!(runs[1]["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["role"] == "fast"));
}

#[test]
fn slow_lane_quick() {
    let r = run_quick("slow-lane", &[]);
    let runs = r["summary"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    for run in runs {
        assert_eq!(run["full_events"].as_array().unwrap().len(), 12);
        number(run, "publish_mb_per_s");
    }
}

#[test]
fn credit_quick() {
    let r = run_quick("credit", &[]);
    let s = &r["summary"];
    assert_eq!(s["stall"].as_array().unwrap().len(), 8);
    assert_eq!(s["amortization"].as_array().unwrap().len(), 7);
    number(&s["stall"][0], "msgs_per_s");
    number(&s["amortization"][0], "increment_bytes");
}

#[test]
fn parallelism_quick() {
    let r = run_quick("parallelism", &[]);
    let runs = r["summary"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    for run in runs {
        assert!(run["drain_s"].is_number() || run["drain_s"].is_null());
        number(run, "e2e_p99_ms");
    }
}

#[test]
fn sync_scope_quick() {
    let r = run_quick("sync-scope", &[]);
    // Two scopes: light alone and with the heavy writer, then 1 and 16 partitions.
    assert_eq!(r["runs"].as_array().unwrap().len(), 8);
    let interference = r["summary"]["interference"].as_array().unwrap();
    assert_eq!(interference.len(), 4);
    for case in interference {
        assert!(["partition", "broker"].contains(&case["scope"].as_str().unwrap()));
        number(case, "light_p50_ms");
        number(case, "light_p99_ms");
        number(case, "light_p999_ms");
        // Each run's broker logged its sync counters at shutdown.
        number(case, "syncs_per_s");
    }
    assert!(interference.iter().any(|c| c["heavy"] == true));
    let scale = r["summary"]["scale"].as_array().unwrap();
    assert_eq!(scale.len(), 4);
    for case in scale {
        number(case, "msgs_per_s");
        number(case, "p99_ms");
        number(case, "rounds_per_s");
    }
}

#[test]
fn noisy_neighbour_quick() {
    let r = run_quick("noisy-neighbour", &[]);
    let runs = r["runs"].as_array().unwrap();
    let names: Vec<&str> = runs.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["quiet", "writer", "catch-up"]);
    let s = &r["summary"];
    assert_eq!(s["clients"], "headway");
    for key in [
        "publish_p99_writer_over_quiet",
        "publish_p99_catch_up_over_quiet",
        "e2e_p99_writer_over_quiet",
        "e2e_p99_catch_up_over_quiet",
        "backlog_mb",
        "prefill_s",
        "evicted_files",
    ] {
        number(s, key);
    }
    let phases = s["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3);
    for phase in phases {
        for key in [
            "publish_p50_ms",
            "publish_p99_ms",
            "publish_p999_ms",
            "publish_max_ms",
            "e2e_p50_ms",
            "e2e_p99_ms",
        ] {
            number(phase, key);
        }
    }
    // The writer wrote into its own topic, in phase 2 only.
    assert!(number(&s["writer"], "messages") > 0.0, "{s}");
    number(&s["writer"], "mb_per_s");
    assert!(runs[0]["extra"]["writer"].is_null());
    // Phase 3 has the catch-up, delayed and stuck readers beside the fast ones.
    let roles = roles(&runs[2]);
    assert!(
        roles.contains(&"fast") && roles.contains(&"slow") && roles.contains(&"catch-up"),
        "{roles:?}"
    );
    assert!(number(&runs[2]["extra"]["stuck"], "requests_written") >= 1.0);
    assert_eq!(s["evicted"], true);
    number(&s["catch_up"], "replay_mb_per_s");
    number(&s["catch_up"], "read_fraction");
    assert!(!runs[2]["series"].as_array().unwrap().is_empty());
}

#[test]
fn noisy_neighbour_runs_only_the_neighbours_asked_for() {
    let r = run_quick("noisy-neighbour", &["--neighbours", "slow"]);
    let runs = r["runs"].as_array().unwrap();
    let roles = roles(&runs[2]);
    assert!(
        roles.contains(&"fast") && roles.contains(&"slow"),
        "{roles:?}"
    );
    assert!(!roles.contains(&"catch-up"), "{roles:?}");
    assert!(runs[2]["extra"]["stuck"].is_null(), "{}", runs[2]["extra"]);
    assert!(r["summary"]["catch_up"].is_null(), "{}", r["summary"]);
    let notes = r["notes"].to_string();
    assert!(notes.contains("of these: slow)"), "{notes}");
}

#[test]
fn noisy_neighbour_runs_an_external_neighbour_beside_the_light_load() {
    // The replay-equivalent script reads the light partition's segments and sends them
    // through a loopback socket; what it moved goes to a file the test reads.
    let said = tempfile::tempdir().unwrap();
    let moved = said.path().join("moved.txt");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/replay_equivalent.py"
    );
    let command = format!(
        "python3 {script} --send \"$HEADWAY_DATA_DIR/topics/$HEADWAY_LIGHT_TOPIC/0\" 2> {}",
        moved.display()
    );
    let r = run_quick(
        "noisy-neighbour",
        &["--neighbours", "none", "--external-neighbour", &command],
    );
    let runs = r["runs"].as_array().unwrap();
    let roles = roles(&runs[2]);
    assert!(roles.iter().all(|r| *r == "fast"), "{roles:?}");
    assert!(runs[2]["extra"]["stuck"].is_null(), "{}", runs[2]["extra"]);
    let external = &r["summary"]["external_neighbour"];
    let said = std::fs::read_to_string(&moved).unwrap();
    assert_eq!(external["finished"], true, "{external}");
    assert_eq!(external["exit_code"], 0, "{external}\n{said}");
    // "replay-equivalent: <MB> MB in <s> s, ...": the backlog alone is 8 MiB.
    let mb: f64 = said
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(mb >= 8.0, "{said}");
    assert!(said.contains("through a loopback socket"), "{said}");
    let notes = r["notes"].to_string();
    assert!(notes.contains("of these: `python3"), "{notes}");
}
