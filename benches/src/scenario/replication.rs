//! `replication`: what replication costs producers, and how fast a partition fails over,
//! on a cluster of the harness's own (etcd and three brokers, [`crate::cluster`]).
//!
//! 1. RF=1 vs RF=3 (`min.insync.replicas=2`), acks=all, the same workload on the same
//!    cluster, no consumers: flat out (throughput, and their ratio against the target),
//!    then both at one fixed rate (latency that is not queueing in the producer).
//! 2. During the RF=3 arms, the record bytes each broker served to its followers, by path
//!    (`floe_replication_bytes_out_total{path}`, Kafka's `ReplicationBytesOutPerSec`);
//!    `floe_replica_fetch_bytes_total`, counted by the followers, must match.
//! 3. Failover: kill -9 of the leader of a one-partition RF=3 topic while a producer
//!    sends acks=all records, N times; failover = the kill → the first acknowledgement
//!    of a record sent after the kill (only a live leader can acknowledge it). The
//!    killed broker is restarted and back in the ISR before the next kill.
//!
//! What it leaves out: consumers (and so end-to-end latency), TLS between brokers (not
//! built), more than one machine (the three brokers and the clients share the cores).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use super::common::{bar, kv, met, request_delta, request_times, spinner};
use super::ctx::Ctx;
use crate::cluster::{Cluster, PartitionState, SESSION_TIMEOUT_MS};
use crate::load::{self, LatencySummary, LoadResult, RunSpec};
use crate::plot;
use crate::rated::RatedProducer;
use crate::report::{f1, f2, pct};
use crate::workload::Workload;

/// Brokers in the cluster, and replicas of the replicated arm's partitions.
const BROKERS: i32 = 3;
/// `min.insync.replicas` of the RF=3 topics: one broker may be down and acks=all goes on.
const MIN_INSYNC: &str = "2";
/// RF=3 ÷ RF=1 publish throughput, flat out, acks=all.
const THROUGHPUT_RATIO_TARGET: f64 = 0.6;
/// Failover p99, seconds.
const FAILOVER_P99_TARGET_S: f64 = 5.0;
/// The failover producer: records per second (a failover time is known to 1 ÷ this),
/// and their size.
const FAILOVER_RATE: u64 = 500;
const FAILOVER_MESSAGE_SIZE: usize = 256;

/// Fetch byte counters of one broker at one moment.
#[derive(Debug, Clone, Default, Serialize)]
struct FetchCounters {
    /// `floe_replication_bytes_out_total` by `path` label: what this broker served to its followers.
    served_by_path: BTreeMap<String, f64>,
    /// `floe_replica_fetch_bytes_total`: what it appended as a follower.
    appended_as_follower: f64,
}

impl FetchCounters {
    fn read(b: &crate::broker::Broker) -> Option<FetchCounters> {
        let text = b.metrics_text()?;
        let served_by_path =
            crate::broker::parse_samples(&text, "floe_replication_bytes_out_total")
                .into_iter()
                .filter_map(|(labels, v)| Some((labels.get("path")?.clone(), v)))
                .collect();
        let appended_as_follower =
            crate::broker::parse_samples(&text, "floe_replica_fetch_bytes_total")
                .first()
                .map_or(0.0, |(_, v)| *v);
        Some(FetchCounters { served_by_path, appended_as_follower })
    }

    fn delta(&self, later: &FetchCounters) -> FetchCounters {
        FetchCounters {
            served_by_path: later
                .served_by_path
                .iter()
                .map(|(k, v)| (k.clone(), v - self.served_by_path.get(k).copied().unwrap_or(0.0)))
                .collect(),
            appended_as_follower: later.appended_as_follower - self.appended_as_follower,
        }
    }

    fn served(&self) -> f64 {
        self.served_by_path.values().sum()
    }

    fn sendfile(&self) -> f64 {
        self.served_by_path.iter().filter(|(k, _)| k.starts_with("sendfile")).map(|(_, v)| v).sum()
    }
}

/// Per broker: CPU seconds and fetch counters.
type Snapshot = BTreeMap<i32, (Option<f64>, Option<FetchCounters>)>;

fn snapshot(c: &Cluster) -> Snapshot {
    c.brokers()
        .map(|(id, b)| (id, (b.stats().map(|s| s.cpu_seconds), FetchCounters::read(b))))
        .collect()
}

/// One producer arm.
#[derive(Debug, Serialize)]
struct Arm {
    label: String,
    replication_factor: i32,
    /// Messages/s asked for; 0 = flat out.
    target_rate: u64,
    message_size: usize,
    topic: String,
    result: LoadResult,
    /// CPU seconds of the three brokers together over the arm.
    brokers_cpu_s: Option<f64>,
    /// Payload bytes in the topic after the arm (its log end offsets × the message size):
    /// the warm-up and the final flush included, as in `brokers_cpu_s`.
    payload_bytes_written: u64,
    brokers_cpu_s_per_gb: Option<f64>,
    harness_cpu_s: f64,
    /// Per broker, the fetch counters' change over the arm.
    fetch: BTreeMap<i32, FetchCounters>,
    /// Requests the three brokers handled during the arm, by API: (count, mean ms inside
    /// the broker, decoded request → response written; a Fetch's includes its long poll).
    requests: BTreeMap<String, (f64, f64)>,
}

fn run_arm(
    ctx: &Ctx,
    cluster: &mut Cluster,
    tag: &str,
    label: &str,
    w: &Workload,
    rf: i32,
) -> anyhow::Result<Arm> {
    let kind =
        if w.producer_rate == 0 { "max".to_string() } else { format!("rate{}", w.producer_rate) };
    let topic = format!("floe-bench-replication-{tag}-rf{rf}-{kind}");
    let config = if rf > 1 { vec![kv("min.insync.replicas", MIN_INSYNC)] } else { vec![] };
    load::create_replicated_topics(
        &cluster.bootstrap(),
        std::slice::from_ref(&topic),
        w.partitions_per_topic,
        rf,
        &config,
    )?;
    cluster.wait_full_isr(
        &topic,
        w.partitions_per_topic as i32,
        rf as usize,
        Duration::from_secs(60),
    )?;
    let before = snapshot(cluster);
    let requests_before: BTreeMap<i32, _> =
        cluster.brokers().map(|(id, b)| (id, request_times(b))).collect();
    let harness_before = crate::procstat::read(0).unwrap_or_default();
    let pb = bar(label, false);
    // No consumers: what the brokers fetch is replication alone (see the module doc).
    let spec = RunSpec {
        bootstrap: cluster.bootstrap(),
        workload: w.clone(),
        topics: vec![topic.clone()],
        consume: false,
        produce_bytes: None,
    };
    let result = load::run(&spec, &pb)?;
    pb.finish_with_message(format!(
        "{:.0} msg/s, {:.1} MB/s",
        result.publish_msg_per_s, result.publish_mb_per_s
    ));
    let after = snapshot(cluster);
    // Summed over the brokers: (count, total ms), then the mean.
    let mut totals: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (id, b) in cluster.brokers() {
        for (api, (n, ms)) in
            request_delta(requests_before.get(&id).unwrap_or(&None), &request_times(b))
        {
            let t = totals.entry(api).or_default();
            t.0 += n;
            t.1 += n * ms;
        }
    }
    let requests =
        totals.into_iter().map(|(api, (n, total))| (api, (n, total / n.max(1.0)))).collect();
    let records: i64 =
        load::end_offsets(&cluster.bootstrap(), &topic, w.partitions_per_topic)?.iter().sum();
    let payload_bytes_written = records.max(0) as u64 * w.message_size as u64;
    let harness_cpu_s =
        crate::procstat::read(0).unwrap_or_default().cpu_seconds - harness_before.cpu_seconds;
    cluster.check_running()?;
    let cpu: Option<f64> = before
        .iter()
        .map(|(id, (cpu0, _))| cpu0.zip(after.get(id).and_then(|a| a.0)).map(|(a, z)| z - a))
        .sum();
    let fetch = before
        .iter()
        .filter_map(|(id, (_, f0))| Some((*id, f0.as_ref()?.delta(after.get(id)?.1.as_ref()?))))
        .collect();
    let gb = payload_bytes_written as f64 / 1e9;
    anyhow::ensure!(
        result.published_messages > 0,
        "replication: the {label} arm acknowledged nothing (broker logs in {})",
        ctx.opts.out.display()
    );
    Ok(Arm {
        label: label.to_string(),
        replication_factor: rf,
        target_rate: w.producer_rate,
        message_size: w.message_size,
        topic,
        brokers_cpu_s: cpu,
        payload_bytes_written,
        brokers_cpu_s_per_gb: cpu.filter(|_| gb > 0.0).map(|c| c / gb),
        harness_cpu_s,
        fetch,
        requests,
        result,
    })
}

/// One leader kill.
#[derive(Debug, Clone, Serialize)]
struct Kill {
    kill: usize,
    victim: i32,
    new_leader: i32,
    leader_epoch_before: i32,
    leader_epoch_after: i32,
    /// The kill → the new leader seen in etcd (polled every 10 ms; capped at `failover_s`).
    election_s: f64,
    /// The kill → the first acknowledgement of a record sent after it.
    failover_s: f64,
    /// The restart → the victim back in the ISR.
    rejoin_s: f64,
}

/// Nearest-rank percentile of `values` (sorted here); `None` when empty.
fn percentile(values: &[f64], q: f64) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1));
    v.get(rank - 1).copied()
}

fn failover(
    ctx: &Ctx,
    cluster: &mut Cluster,
    tag: &str,
    kills: usize,
) -> anyhow::Result<(Vec<Kill>, u64, String)> {
    let topic = format!("floe-bench-replication-{tag}-failover");
    load::create_replicated_topics(
        &cluster.bootstrap(),
        std::slice::from_ref(&topic),
        1,
        BROKERS,
        &[kv("min.insync.replicas", MIN_INSYNC)],
    )?;
    cluster.wait_full_isr(&topic, 1, BROKERS as usize, Duration::from_secs(60))?;
    let rated =
        RatedProducer::start(&cluster.bootstrap(), &topic, FAILOVER_RATE, FAILOVER_MESSAGE_SIZE)?;
    let started = Instant::now();
    while rated.first_ack_since(0).is_none() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "replication: the failover producer got no acknowledgement within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pb = bar("failover: kill -9 the leader", false);
    pb.set_length(kills as u64);
    let mut out = Vec::new();
    for k in 1..=kills {
        cluster.wait_full_isr(&topic, 1, BROKERS as usize, Duration::from_secs(120))?;
        // Let the producer run steadily on the current leader for a moment.
        std::thread::sleep(Duration::from_millis(500));
        let before = cluster.partition_state(&topic, 0)?.context("no partition state in etcd")?;
        let victim = before.leader;
        pb.set_message(format!("kill {k}: broker {victim}"));
        let kill_us = rated.now_us();
        cluster.kill9(victim)?;
        let mut elected: Option<(u64, PartitionState)> = None;
        let ack_us = loop {
            if elected.is_none() {
                if let Some(s) = cluster.partition_state(&topic, 0)? {
                    if s.leader >= 0 && s.leader != victim && s.leader_epoch > before.leader_epoch {
                        elected = Some((rated.now_us(), s));
                    }
                }
            }
            let ack = rated.first_ack_since(kill_us);
            if let (Some(ack), Some(_)) = (ack, &elected) {
                break ack;
            }
            cluster.check_running()?;
            if rated.now_us() - kill_us > 60_000_000 {
                anyhow::bail!(
                    "replication: kill {k} of broker {victim}: no acknowledgement within 60 s (new leader seen: {:?}); logs in {}",
                    elected.as_ref().map(|e| &e.1),
                    ctx.opts.out.display()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let (elected_us, state) = elected.context("set in the loop")?;
        let failover_s = (ack_us - kill_us) as f64 / 1e6;
        // The victim must have left the ISR before it restarts, or a full ISR seen after the
        // restart could be the state from before the kill rather than its return.
        let left = Instant::now();
        while cluster.partition_state(&topic, 0)?.is_some_and(|s| s.isr.contains(&victim)) {
            anyhow::ensure!(
                left.elapsed() < Duration::from_secs(30),
                "replication: killed broker {victim} stayed in the ISR of {topic}-0 for 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let restart = Instant::now();
        cluster.restart(victim)?;
        cluster.wait_full_isr(&topic, 1, BROKERS as usize, Duration::from_secs(120)).with_context(
            || {
                format!(
                    "broker {victim} did not rejoin the ISR after its restart; its log:\n{}",
                    cluster.log_tail(victim)
                )
            },
        )?;
        cluster.wait_agreed(Duration::from_secs(60))?;
        let kill = Kill {
            kill: k,
            victim,
            new_leader: state.leader,
            leader_epoch_before: before.leader_epoch,
            leader_epoch_after: state.leader_epoch,
            // The etcd poll may see the change after the producer's first acknowledgement.
            election_s: ((elected_us - kill_us) as f64 / 1e6).min(failover_s),
            failover_s,
            rejoin_s: restart.elapsed().as_secs_f64(),
        };
        pb.set_position(k as u64);
        pb.set_message(format!("kill {k}: {victim} → {} in {failover_s:.2} s", kill.new_leader));
        out.push(kill);
    }
    pb.finish();
    let errors = rated.errors();
    let (samples, final_errors) = rated.finish()?;
    anyhow::ensure!(!samples.is_empty(), "replication: the failover producer acknowledged nothing");
    Ok((out, errors.max(final_errors), topic))
}

/// The scenario (see the module doc).
pub(super) fn replication(ctx: &mut Ctx) -> anyhow::Result<()> {
    let quick = ctx.opts.quick;
    let kills = ctx.opts.kills.unwrap_or(if quick { 2 } else { 20 });
    let mut w = ctx.workload("1-topic-16-partitions-1kb")?;
    w.acks = "all".into();
    w.consumers_per_topic = 0;
    w.producer_rate = 0;
    let sp = spinner("replication: etcd and 3 brokers");
    let mut cluster = Cluster::start(&ctx.launcher, "replication", BROKERS, &[])?;
    sp.finish_with_message(format!("up: {}", cluster.bootstrap()));
    let tag: String = (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();

    // 1. Flat out, then at a fixed rate both can sustain: a quarter of RF=3's maximum
    // (at half, RF=3 of debug brokers fell behind in a trial run: its latency was queueing).
    let rf1 = run_arm(ctx, &mut cluster, &tag, "RF=1 flat out", &w, 1)?;
    let rf3 = run_arm(ctx, &mut cluster, &tag, "RF=3 flat out", &w, BROKERS)?;
    let rate =
        ctx.opts.rate.unwrap_or_else(|| ((rf3.result.publish_msg_per_s / 4.0) as u64).max(100));
    let mut fixed = w.clone();
    fixed.producer_rate = rate;
    let rf1_fixed = run_arm(ctx, &mut cluster, &tag, &format!("RF=1 at {rate} msg/s"), &fixed, 1)?;
    let rf3_fixed =
        run_arm(ctx, &mut cluster, &tag, &format!("RF=3 at {rate} msg/s"), &fixed, BROKERS)?;

    // 3. Failover.
    let (kill_results, failover_errors, failover_topic) = failover(ctx, &mut cluster, &tag, kills)?;
    drop(cluster);

    // The report.
    let ratio = rf3.result.publish_msg_per_s / rf1.result.publish_msg_per_s;
    ctx.report.heading(&format!("Replication: RF=1 vs RF=3, acks=all (workload `{}`)", w.name));
    ctx.report.para(&format!(
        "One etcd and {BROKERS} `floe` brokers in cluster mode (`--node-id N --metadata-store etcd://…`, \
         `broker.session.timeout.ms={SESSION_TIMEOUT_MS}`), each with its own data dir and listener, all on this machine. \
         Per arm a new topic of {} partitions: **RF=1**, or **RF=3** with `min.insync.replicas={MIN_INSYNC}`; leaders spread \
         over the three brokers in both. One librdkafka producer (bootstrap: all three brokers), {}-byte messages ({:.0}% random), \
         acks=all, compression={}, batch.size={}, linger.ms={}, {:.0} s (+{:.0} s warm-up), no consumers. First both \
         flat out (throughput), then both at **{rate} msg/s** ({}) for latency that is the \
         brokers' rather than the producer's queue.",
        w.partitions_per_topic, w.message_size, w.random_payload_share * 100.0, w.compression, w.batch_size, w.linger_ms, w.duration_s, w.warmup_s,
        if ctx.opts.rate.is_some() { "`--rate`" } else { "a quarter of RF=3's flat-out rate" },
    ));
    let arms = [&rf1, &rf3, &rf1_fixed, &rf3_fixed];
    let rows: Vec<Vec<String>> = arms
        .iter()
        .map(|a| {
            let r = &a.result;
            vec![
                a.label.clone(),
                format!("{:.0}", r.publish_msg_per_s),
                format!("{:.1}", r.publish_mb_per_s),
                pct(ctx.of_ceiling(r.publish_mb_per_s)),
                format!("{:.2}", r.publish_latency.p50_ms),
                format!("{:.2}", r.publish_latency.p99_ms),
                format!("{:.2}", r.publish_latency.p999_ms),
                r.errors.to_string(),
                f1(a.brokers_cpu_s),
                f2(a.brokers_cpu_s_per_gb),
            ]
        })
        .collect();
    ctx.report.table(
        &[
            "arm",
            "msg/s",
            "MB/s",
            "of ceiling",
            "publish p50 ms",
            "publish p99 ms",
            "publish p99.9 ms",
            "errors",
            "brokers CPU s",
            "brokers CPU s/GB",
        ],
        &rows,
    );
    let lat_ratio = |f: fn(&LatencySummary) -> f64| {
        let (a, b) = (f(&rf1_fixed.result.publish_latency), f(&rf3_fixed.result.publish_latency));
        if a > 0.0 {
            format!("{:.2}×", b / a)
        } else {
            "–".into()
        }
    };
    ctx.report.para(&format!(
        "**RF=3 ÷ RF=1 publish throughput, flat out: {ratio:.2}×** (target ≥ {THROUGHPUT_RATIO_TARGET}×: {}). At {rate} msg/s, \
         RF=3's publish latency is {} RF=1's at p50, {} at p99, {} at p99.9. *brokers CPU* is the three brokers' together \
         over the whole arm (warm-up and the producer's final flush included), per GB of payload the arm left in its topic \
         (log end offsets × message size). Flat out, publish \
         latency is mostly time queued in librdkafka (up to 256 MiB), as in `max-throughput`.",
        met(ratio >= THROUGHPUT_RATIO_TARGET),
        lat_ratio(|l| l.p50_ms),
        lat_ratio(|l| l.p99_ms),
        lat_ratio(|l| l.p999_ms),
    ));
    let cell = |a: &Arm, api: &str| {
        a.requests.get(api).map_or("–".into(), |(n, ms)| format!("{n:.0} × {ms:.2} ms"))
    };
    let rows: Vec<Vec<String>> = arms
        .iter()
        .map(|a| {
            let produce_n = a.requests.get("Produce").map_or(0.0, |r| r.0);
            vec![
                a.label.clone(),
                cell(a, "Produce"),
                if produce_n > 0.0 {
                    format!(
                        "{:.0}",
                        a.payload_bytes_written as f64 / a.message_size.max(1) as f64 / produce_n
                    )
                } else {
                    "–".into()
                },
                cell(a, "Fetch"),
            ]
        })
        .collect();
    ctx.report.para(
        "Requests the three brokers handled during each arm (warm-up and flush included) and their mean time inside the \
         broker, decoded request → response written (`floe_request_duration_seconds`). An acks=all Produce is answered \
         once the followers' next fetches have moved the high watermark past it, so on RF=3 its time is the replication \
         round trip. Fetches here are the followers' (no consumers); their time includes the long poll.",
    );
    ctx.report.table(
        &["arm", "Produce: requests × mean", "records per Produce", "Fetch: requests × mean"],
        &rows,
    );
    plot::latency_cdf(
        &ctx.plot_path("latency-cdf.svg"),
        &format!("publish latency at {rate} msg/s, acks=all"),
        &[
            ("RF=1", &rf1_fixed.result.publish_hist),
            ("RF=3, min.insync.replicas=2", &rf3_fixed.result.publish_hist),
        ],
    )?;
    plot::timeline(
        &ctx.plot_path("throughput.svg"),
        "publish MB/s flat out, acks=all",
        "MB/s",
        &[
            ("RF=1", rf1.result.timeline.iter().map(|s| (s.t_s, s.publish_mb_per_s)).collect()),
            ("RF=3", rf3.result.timeline.iter().map(|s| (s.t_s, s.publish_mb_per_s)).collect()),
        ],
    )?;
    ctx.report.image("latency-cdf.svg", "publish latency CDF at a fixed rate");
    ctx.report.image("throughput.svg", "publish throughput flat out");

    // 2. Fetch paths during the RF=3 arms.
    ctx.report.heading("Follower fetches by path (RF=3 arms)");
    ctx.report.para(
        "Per broker, the change of `floe_replication_bytes_out_total{path}` (record bytes the broker served to its \
         followers as a leader, by how they left it) and of `floe_replica_fetch_bytes_total` (record bytes it appended \
         as a follower) over the two RF=3 arms. The followers' appended bytes are the cross-check.",
    );
    let mut per_broker: BTreeMap<i32, FetchCounters> = BTreeMap::new();
    for arm in [&rf3, &rf3_fixed] {
        for (id, f) in &arm.fetch {
            let e = per_broker.entry(*id).or_default();
            for (path, v) in &f.served_by_path {
                *e.served_by_path.entry(path.clone()).or_default() += v;
            }
            e.appended_as_follower += f.appended_as_follower;
        }
    }
    let mut paths: Vec<String> = per_broker
        .values()
        .flat_map(|f| f.served_by_path.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    paths.sort_by_key(|p| (!p.starts_with("sendfile"), p.clone()));
    let mb = |v: f64| format!("{:.1}", v / 1e6);
    let mut rows: Vec<Vec<String>> = per_broker
        .iter()
        .map(|(id, f)| {
            let mut row = vec![format!("broker {id}")];
            row.extend(paths.iter().map(|p| mb(f.served_by_path.get(p).copied().unwrap_or(0.0))));
            row.push(mb(f.appended_as_follower));
            row
        })
        .collect();
    let (served, sendfile, appended) = per_broker.values().fold((0.0, 0.0, 0.0), |(s, z, a), f| {
        (s + f.served(), z + f.sendfile(), a + f.appended_as_follower)
    });
    let mut total = vec!["**all**".to_string()];
    total.extend(paths.iter().map(|p| {
        mb(per_broker.values().map(|f| f.served_by_path.get(p).copied().unwrap_or(0.0)).sum())
    }));
    total.push(mb(appended));
    rows.push(total);
    let mut headers: Vec<String> = vec!["broker".into()];
    headers.extend(paths.iter().map(|p| format!("served via `{p}` MB")));
    headers.push("appended as follower MB".into());
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    ctx.report.table(&headers, &rows);
    let share = (served > 0.0).then(|| sendfile / served);
    let rf1_served: f64 =
        [&rf1, &rf1_fixed].iter().flat_map(|a| a.fetch.values()).map(FetchCounters::served).sum();
    ctx.report.para(&format!(
        "**Share of replica fetch bytes served by sendfile: {}** (target 100% on plaintext: {}); {:.1} MB served vs {:.1} MB \
         appended by followers ({}). During the RF=1 arms the brokers served {:.1} MB to fetches (no replicas, no consumers: \
         should be 0).",
        pct(share),
        met(share.is_some_and(|s| s >= 0.9999)),
        served / 1e6,
        appended / 1e6,
        if served > 0.0 { format!("appended ÷ served {:.3}", appended / served) } else { "nothing served".into() },
        rf1_served / 1e6,
    ));

    // 3. Failover.
    let failovers: Vec<f64> = kill_results.iter().map(|k| k.failover_s).collect();
    let elections: Vec<f64> = kill_results.iter().map(|k| k.election_s).collect();
    let (p50, p99, max) =
        (percentile(&failovers, 0.5), percentile(&failovers, 0.99), percentile(&failovers, 1.0));
    ctx.report.heading("Failover: kill -9 of a partition's leader under acks=all");
    ctx.report.para(&format!(
        "A topic of one partition, RF=3, `min.insync.replicas={MIN_INSYNC}`; a librdkafka producer sends {FAILOVER_RATE} msg/s \
         of {FAILOVER_MESSAGE_SIZE} bytes to it (acks=all, linger.ms=1, librdkafka's default retries and metadata \
         refresh). {} times: with all three replicas in the ISR, the harness reads the leader from etcd \
         (`PREFIX/partitions/TOPIC/0`), sends it SIGKILL, and measures **failover** = the kill → the first acknowledgement \
         of a record *sent after the kill* (only a live leader can acknowledge it; the producer's clock, so it is known \
         to {:.0} ms), and **election** = the kill → a new leader with a higher leader epoch seen in etcd (polled every \
         10 ms). Then it restarts the killed broker on its data dir and endpoints and waits until it is back in the ISR \
         (**rejoin**) before the next kill. A killed broker's lease expires after `broker.session.timeout.ms` \
         ({SESSION_TIMEOUT_MS} ms; etcd grants whole seconds), then the controller moves the leadership.",
        kills,
        1000.0 / FAILOVER_RATE as f64,
    ));
    let rows: Vec<Vec<String>> = kill_results
        .iter()
        .map(|k| {
            vec![
                k.kill.to_string(),
                k.victim.to_string(),
                format!(
                    "{} (epoch {} → {})",
                    k.new_leader, k.leader_epoch_before, k.leader_epoch_after
                ),
                format!("{:.2}", k.election_s),
                format!("{:.2}", k.failover_s),
                format!("{:.2}", k.rejoin_s),
            ]
        })
        .collect();
    ctx.report.table(
        &["kill", "killed leader", "new leader", "election s", "**failover s**", "rejoin s"],
        &rows,
    );
    ctx.report.para(&format!(
        "**Failover over {} kills: p50 {} s, p99 {} s, max {} s** (target p99 ≤ {FAILOVER_P99_TARGET_S} s: {}); election \
         p50 {} s. Records the failover producer failed to deliver: {failover_errors}. Percentiles are nearest-rank \
         (with 20 kills p99 is the maximum).",
        kill_results.len(),
        f2(p50),
        f2(p99),
        f2(max),
        met(p99.is_some_and(|v| v <= FAILOVER_P99_TARGET_S)),
        f2(percentile(&elections, 0.5)),
    ));
    plot::trials(
        &ctx.plot_path("failover.svg"),
        "kill -9 of the leader: seconds until...",
        "kill",
        "seconds",
        &[
            (
                "first acks=all acknowledgement (failover)",
                kill_results.iter().map(|k| (k.kill as f64, k.failover_s)).collect(),
            ),
            (
                "new leader in etcd (election)",
                kill_results.iter().map(|k| (k.kill as f64, k.election_s)).collect(),
            ),
        ],
        Some(("target p99", FAILOVER_P99_TARGET_S)),
    )?;
    ctx.report.image("failover.svg", "failover time per kill");
    ctx.report.para(
        "Everything runs on this machine's cores: three brokers, etcd, and the clients. Ratios within this run are the \
         figures to quote.",
    );

    ctx.report.set("workload", &w);
    ctx.report.set("fixed_rate", rate);
    ctx.report.set("arms", arms);
    ctx.report.set("fetch_by_broker_rf3", &per_broker);
    ctx.report.set("failover_topic", &failover_topic);
    ctx.report.set("kills", &kill_results);
    ctx.report.set(
        "summary",
        serde_json::json!({
            "rf1_msg_per_s": rf1.result.publish_msg_per_s,
            "rf3_msg_per_s": rf3.result.publish_msg_per_s,
            "rf1_mb_per_s": rf1.result.publish_mb_per_s,
            "rf3_mb_per_s": rf3.result.publish_mb_per_s,
            "throughput_ratio_rf3_over_rf1": ratio,
            "throughput_ratio_target": THROUGHPUT_RATIO_TARGET,
            "throughput_ratio_target_met": ratio >= THROUGHPUT_RATIO_TARGET,
            "fixed_rate": rate,
            "rf1_fixed_publish_latency": rf1_fixed.result.publish_latency,
            "rf3_fixed_publish_latency": rf3_fixed.result.publish_latency,
            "replica_fetch_bytes_served": served,
            "replica_fetch_bytes_sendfile": sendfile,
            "replica_fetch_bytes_appended": appended,
            "replica_fetch_sendfile_share": share,
            "rf1_fetch_bytes_served": rf1_served,
            "kills": kill_results.len(),
            "failover_p50_s": p50,
            "failover_p99_s": p99,
            "failover_max_s": max,
            "failover_p99_target_s": FAILOVER_P99_TARGET_S,
            "failover_p99_target_met": p99.is_some_and(|v| v <= FAILOVER_P99_TARGET_S),
            "election_p50_s": percentile(&elections, 0.5),
            "failover_producer_errors": failover_errors,
        }),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(super::percentile(&v, 0.5), Some(10.0));
        assert_eq!(super::percentile(&v, 0.99), Some(20.0));
        assert_eq!(super::percentile(&[3.0, 1.0, 2.0], 0.5), Some(2.0));
        assert_eq!(super::percentile(&[], 0.5), None);
    }
}
