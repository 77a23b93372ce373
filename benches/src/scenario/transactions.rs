//! `transactions`: what transactions cost a producer and a reader. On one broker, an
//! idempotent and a transactional producer (100 records per transaction) flat out, then
//! eight of each: msg/s, publish and commit latency, the broker's request times by API,
//! the throughput ratio against its target; the markers written per transaction. Then
//! catch-up reads of the transactional topic, read_committed and read_uncommitted
//! alternating: MB/s, broker CPU per GB, and whether read_committed stayed on sendfile.
//!
//! What it leaves out: aborted transactions (only a failed commit aborts), consumer
//! offsets in transactions (no `SendOffsetsToTransaction`: no consume-transform-produce),
//! and replication (one broker, so markers go to no followers).

use std::collections::BTreeMap;

use serde::Serialize;

use super::common::{bar, met, request_delta, request_times, temp_data_dir, CostMeter, PhaseCost};
use super::ctx::Ctx;
use crate::broker::Broker;
use crate::load::{self, LatencySummary};
use crate::plot;
use crate::report::{f1, f2, pct};
use crate::transactions as txn;

/// Records per transaction of the transactional arm.
const RECORDS_PER_TXN: usize = 100;

/// The throughput ratio transactional ÷ idempotent the scenario checks against.
const TXN_THROUGHPUT_TARGET: f64 = 0.8;

/// Producers of the concurrent arms: an application with several transactional
/// producers (a stream processor's tasks) against as many idempotent ones.
const TXN_CONCURRENT_PRODUCERS: usize = 8;

#[derive(Debug, Serialize)]
struct TxnArm {
    /// `idempotent`, `transactional`, `idempotent ×8`, …
    label: String,
    topic: String,
    #[serde(flatten)]
    result: txn::ProduceResult,
    cost: PhaseCost,
    broker_cpu_s_per_gb: Option<f64>,
    /// Requests the broker handled during the arm, by API: (count, mean ms), from
    /// `floe_request_duration_seconds` (decoded request → response written).
    broker_requests: BTreeMap<String, (f64, f64)>,
}

#[derive(Debug, Serialize)]
struct IsolatedReadRun {
    round: usize,
    #[serde(flatten)]
    read: txn::IsolatedRead,
    of_ceiling: Option<f64>,
    broker_cpu_s_per_gb: Option<f64>,
    cost: PhaseCost,
    /// Bytes `floe_fetch_bytes_total` counted during the read, sendfile paths.
    fetch_bytes_sendfile: Option<f64>,
    /// Same, copying paths.
    fetch_bytes_copy: Option<f64>,
}

fn fetch_counters(b: &Broker) -> (Option<f64>, Option<f64>) {
    (b.metric("floe_fetch_bytes_total", "sendfile"), b.metric("floe_fetch_bytes_total", "\"copy-"))
}

pub(super) fn transactions(ctx: &mut Ctx) -> anyhow::Result<()> {
    let mut w = ctx.workload("1-topic-16-partitions-1kb")?;
    w.acks = "all".into(); // idempotence and transactions need acks=all
    let partitions = w.partitions_per_topic;
    let data = temp_data_dir()?;
    let b = ctx.broker("transactions", data.path(), &[])?;
    let tag: String = (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
    let idem_topic = format!("floe-bench-transactions-{tag}-idempotent");
    let txn_topic = format!("floe-bench-transactions-{tag}-transactional");
    load::create_topics(&b.bootstrap, &[idem_topic.clone(), txn_topic.clone()], partitions)?;

    // 1. The producer arms, one after the other on the same broker: one idempotent and
    // one transactional producer, then as many of each as an application with several
    // tasks runs. Idempotent arms write one topic, transactional arms the other.
    let txn_mode = |n: usize| txn::Mode::Transactional {
        id: format!("floe-bench-{tag}-{n}"),
        records_per_txn: RECORDS_PER_TXN,
    };
    let modes = [
        (idem_topic.clone(), txn::Mode::Idempotent, 1),
        (txn_topic.clone(), txn_mode(1), 1),
        (idem_topic.clone(), txn::Mode::Idempotent, TXN_CONCURRENT_PRODUCERS),
        (txn_topic.clone(), txn_mode(TXN_CONCURRENT_PRODUCERS), TXN_CONCURRENT_PRODUCERS),
    ];
    let mut arms = Vec::new();
    for (topic, mode, producers) in modes {
        let kind =
            if matches!(mode, txn::Mode::Idempotent) { "idempotent" } else { "transactional" };
        let name = if producers == 1 { kind.to_string() } else { format!("{kind} ×{producers}") };
        let pb = bar(&format!("{name} producer"), false);
        let spec = txn::ProduceSpec {
            bootstrap: b.bootstrap.clone(),
            topic: topic.clone(),
            workload: w.clone(),
            mode,
            producers,
        };
        let meter = CostMeter::start(&b);
        let requests_before = request_times(&b);
        let result = txn::produce(&spec, &pb)?;
        let broker_requests = request_delta(&requests_before, &request_times(&b));
        let cost = meter.finish(&b);
        pb.finish_with_message(format!(
            "{:.0} msg/s, {:.1} MB/s",
            result.publish_msg_per_s, result.publish_mb_per_s
        ));
        anyhow::ensure!(
            result.published_messages > 0,
            "transactions: the {name} producer delivered nothing (see floe-transactions.log in {})",
            ctx.opts.out.display()
        );
        let gb = result.total_messages as f64 * w.message_size as f64 / 1e9;
        arms.push(TxnArm {
            label: name,
            topic,
            broker_cpu_s_per_gb: cost.broker_cpu_s.map(|c| c / gb),
            result,
            cost,
            broker_requests,
        });
    }
    let (idem, tx, idem_n, tx_n) = (&arms[0], &arms[1], &arms[2], &arms[3]);

    // Every transaction wrote one marker (an offset no consumer sees) to each partition it touched.
    let txn_log_end: i64 = load::end_offsets(&b.bootstrap, &txn_topic, partitions)?.iter().sum();
    let txn_records = tx.result.total_messages + tx_n.result.total_messages;
    let txn_count = tx.result.total_transactions + tx_n.result.total_transactions;
    let markers = (txn_log_end - txn_records as i64).max(0);
    let partitions_per_txn = markers as f64 / txn_count.max(1) as f64;

    // 2. Catch-up reads of the transactional topic, read_committed and read_uncommitted alternating.
    let rounds = if ctx.opts.quick { 1 } else { 3 };
    let expected = txn_records;
    let mut reads = Vec::new();
    for round in 1..=rounds {
        for committed in [true, false] {
            let label = if committed { "read_committed" } else { "read_uncommitted" };
            let pb = bar(&format!("catch-up {label} #{round}"), false);
            let (s0, c0) = fetch_counters(&b);
            let meter = CostMeter::start(&b);
            let read =
                txn::catch_up(&b.bootstrap, &txn_topic, partitions, committed, expected, &pb)?;
            let cost = meter.finish(&b);
            let (s1, c1) = fetch_counters(&b);
            pb.finish_with_message(format!("{:.0} MB/s", read.mb_per_s));
            let gb = read.bytes as f64 / 1e9;
            reads.push(IsolatedReadRun {
                round,
                of_ceiling: ctx.of_ceiling(read.mb_per_s),
                broker_cpu_s_per_gb: cost.broker_cpu_s.map(|c| c / gb),
                fetch_bytes_sendfile: s0.zip(s1).map(|(a, z)| z - a),
                fetch_bytes_copy: c0.zip(c1).map(|(a, z)| z - a),
                read,
                cost,
            });
        }
    }
    b.stop()?;

    // The report.
    let ratio = tx.result.publish_msg_per_s / idem.result.publish_msg_per_s;
    let ratio_n = tx_n.result.publish_msg_per_s / idem_n.result.publish_msg_per_s;
    ctx.report.heading(&format!(
        "Transactions: idempotent vs transactional producer, flat out (workload `{}`)",
        w.name
    ));
    ctx.report.para(&format!(
        "One broker, two topics of {partitions} partitions. Each arm runs flat out for {:.0} s \
         (+{:.0} s warm-up), {}-byte messages ({:.0}% random), acks=all, compression={}, batch.size={}, linger.ms={}: \
         **idempotent** (`enable.idempotence=true`) and **transactional** (`transactional.id`, `init_transactions`, then \
         `begin_transaction`, {RECORDS_PER_TXN} records, `commit_transaction`, in a loop), first with one librdkafka \
         producer, then with {TXN_CONCURRENT_PRODUCERS} at once (each on its own thread, transactional ones each with \
         its own `transactional.id`, as the tasks of a stream processor). Publish latency is per record, \
         `send` → delivery report. *Commit* is `commit_transaction` as an application calls it: librdkafka flushes the \
         transaction's records (the last batch goes at once, without waiting for `linger.ms`), then sends EndTxn, which \
         the broker answers once the markers are written.",
        w.duration_s, w.warmup_s, w.message_size, w.random_payload_share * 100.0, w.compression, w.batch_size, w.linger_ms,
    ));
    let lat = |l: Option<&LatencySummary>, f: fn(&LatencySummary) -> f64| {
        l.map_or("–".into(), |l| format!("{:.2}", f(l)))
    };
    let rows: Vec<Vec<String>> = arms
        .iter()
        .map(|a| {
            let r = &a.result;
            vec![
                a.label.clone(),
                format!("{:.0}", r.publish_msg_per_s),
                format!("{:.1}", r.publish_mb_per_s),
                pct(ctx.of_ceiling(r.publish_mb_per_s)),
                if r.records_per_txn.is_some() {
                    format!("{:.0}", r.transactions_per_s)
                } else {
                    "–".into()
                },
                format!("{:.2}", r.publish_latency.p50_ms),
                format!("{:.2}", r.publish_latency.p99_ms),
                lat(r.commit_latency.as_ref(), |l| l.p50_ms),
                lat(r.commit_latency.as_ref(), |l| l.p99_ms),
                format!("{} / {}", r.errors, r.aborted_transactions),
                f2(a.broker_cpu_s_per_gb),
            ]
        })
        .collect();
    ctx.report.table(
        &[
            "producer",
            "msg/s",
            "MB/s",
            "of ceiling",
            "txn/s",
            "publish p50 ms",
            "publish p99 ms",
            "commit p50 ms",
            "commit p99 ms",
            "errors / aborted txns",
            "broker CPU s/GB",
        ],
        &rows,
    );
    ctx.report.para(&format!(
        "**Transactional ÷ idempotent throughput, one producer each: {ratio:.2}×** (target ≥ {TXN_THROUGHPUT_TARGET}×: {}); \
         {:.0} transactions/s of {RECORDS_PER_TXN} records, commit p50/p99 {} / {} ms. \
         **{TXN_CONCURRENT_PRODUCERS} producers each: {ratio_n:.2}×** ({}); {:.0} transactions/s, commit p50/p99 {} / {} ms.",
        met(ratio >= TXN_THROUGHPUT_TARGET),
        tx.result.transactions_per_s,
        lat(tx.result.commit_latency.as_ref(), |l| l.p50_ms),
        lat(tx.result.commit_latency.as_ref(), |l| l.p99_ms),
        met(ratio_n >= TXN_THROUGHPUT_TARGET),
        tx_n.result.transactions_per_s,
        lat(tx_n.result.commit_latency.as_ref(), |l| l.p50_ms),
        lat(tx_n.result.commit_latency.as_ref(), |l| l.p99_ms),
    ));
    let mut lrows = Vec::new();
    let lat_rows = arms.iter().flat_map(|a| {
        [
            (format!("{}: publish", a.label), Some(&a.result.publish_latency)),
            (format!("{}: commit", a.label), a.result.commit_latency.as_ref()),
        ]
    });
    for (name, l) in lat_rows {
        if let Some(l) = l {
            lrows.push(vec![
                name,
                l.count.to_string(),
                format!("{:.2}", l.p50_ms),
                format!("{:.2}", l.p95_ms),
                format!("{:.2}", l.p99_ms),
                format!("{:.2}", l.p999_ms),
                format!("{:.2}", l.max_ms),
            ]);
        }
    }
    ctx.report
        .table(&["latency", "samples", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms"], &lrows);
    let apis: std::collections::BTreeSet<&String> =
        arms.iter().flat_map(|a| a.broker_requests.keys()).collect();
    if !apis.is_empty() {
        let cell = |a: &TxnArm, api: &str| {
            a.broker_requests
                .get(api)
                .map_or("–".into(), |(n, ms)| format!("{n:.0} × {ms:.2} ms"))
        };
        let rows: Vec<Vec<String>> = apis
            .iter()
            .map(|api| {
                std::iter::once(format!("`{api}`"))
                    .chain(arms.iter().map(|a| cell(a, api)))
                    .collect()
            })
            .collect();
        ctx.report.para(
            "Requests the broker handled during each arm (warm-up included) and their mean time inside the broker, from \
             decoded request to response written (`floe_request_duration_seconds`): what of the latencies above is the \
             broker's.",
        );
        let headers: Vec<String> = std::iter::once("API".to_string())
            .chain(arms.iter().map(|a| format!("{}: requests × mean", a.label)))
            .collect();
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        ctx.report.table(&headers, &rows);
    }
    // Where a transaction's time goes: the broker's share is the time it spent in the
    // transaction's coordinator requests (per committed transaction, whole arm).
    let per_txn = |api: &str| -> Option<(f64, f64)> {
        let (n, ms) = tx.broker_requests.get(api)?;
        let txns = tx.result.total_transactions.max(1) as f64;
        Some((n / txns, n * ms / txns))
    };
    if tx.result.transactions_per_s > 0.0 {
        let mut text = format!(
            "**Where a transaction's time goes**: {:.1} ms per transaction (1 ÷ {:.0} txn/s): sending its {RECORDS_PER_TXN} \
             records, committing them (commit p50 {} ms: the flush of the last batch and EndTxn).",
            1000.0 / tx.result.transactions_per_s,
            tx.result.transactions_per_s,
            lat(tx.result.commit_latency.as_ref(), |l| l.p50_ms),
        );
        if let (Some((an, ams)), Some((en, ems))) =
            (per_txn("AddPartitionsToTxn"), per_txn("EndTxn"))
        {
            text.push_str(&format!(
                " Inside the broker, per transaction: {ams:.1} ms of `AddPartitionsToTxn` ({an:.1} request(s)) and {ems:.1} ms \
                 of `EndTxn` ({en:.1}), {:.1} ms together. A transaction touched {partitions_per_txn:.1} partition(s) on \
                 average ({markers} markers in the topic: log end offsets − records). The coordinator appends each \
                 step before it answers, fsynced only as `flush.messages` says (here the default: none), as Kafka does: \
                 `AddPartitionsToTxn` one record to `__transaction_state` (`coordinator/src/transaction/log.rs`), \
                 `EndTxn` the decision there, a marker to each partition (`broker/src/txn_markers.rs`), then the \
                 completion. The rest of a transaction's time is the client's: the round trips of AddPartitionsToTxn, \
                 the produce and EndTxn, one after the other.",
                ams + ems,
            ));
        }
        ctx.report.para(&text);
    }
    ctx.report.para(
        "Flat out, the idempotent producer's publish latency is mostly time queued inside librdkafka (as in \
         `max-throughput`); the transactional producer's queue never holds more than one transaction.",
    );
    plot::latency_cdf(
        &ctx.plot_path("latency-cdf.svg"),
        "publish and commit latency, flat out",
        &[
            ("idempotent: publish", &idem.result.publish_hist),
            ("transactional: publish", &tx.result.publish_hist),
            ("transactional: commit", &tx.result.commit_hist),
            (
                &format!("transactional ×{TXN_CONCURRENT_PRODUCERS}: commit"),
                &tx_n.result.commit_hist,
            ),
        ],
    )?;
    let tl: Vec<(&str, Vec<(f64, f64)>)> = arms
        .iter()
        .map(|a| {
            (
                a.label.as_str(),
                a.result.timeline.iter().map(|s| (s.t_s, s.publish_msg_per_s)).collect(),
            )
        })
        .collect();
    plot::timeline(&ctx.plot_path("throughput.svg"), "publish rate over time", "msg/s", &tl)?;
    ctx.report.image("latency-cdf.svg", "latency CDF");
    ctx.report.image("throughput.svg", "publish rate over time");

    ctx.report
        .heading("Catch-up read of the transactional topic: read_committed vs read_uncommitted");
    ctx.report.para(&format!(
        "A librdkafka consumer (explicit assignment, `enable.partition.eof`) reads the transactional topic — {expected} \
         records in {:.0} transactions, one commit marker per partition written to — from offset 0 to the end of every \
         partition, with `isolation.level=read_committed` and `read_uncommitted` alternating ({rounds} round(s) each). \
         The data is in the page cache. *MB via sendfile / copy* is the change of Floe's `floe_fetch_bytes_total` \
         (by `path` label) during the read: record bytes the broker sent with `sendfile(2)` vs copied through user space.",
        (expected as f64 / RECORDS_PER_TXN as f64).ceil(),
    ));
    let mb = |x: Option<f64>| f1(x.map(|b| b / 1e6));
    let rrows: Vec<Vec<String>> = reads
        .iter()
        .map(|r| {
            vec![
                r.read.isolation.clone(),
                r.round.to_string(),
                r.read.messages.to_string(),
                format!("{:.0}", r.read.mb_per_s),
                pct(r.of_ceiling),
                f2(r.broker_cpu_s_per_gb),
                f2(Some(r.cost.harness_cpu_s / (r.read.bytes as f64 / 1e9))),
                format!("{} / {}", mb(r.fetch_bytes_sendfile), mb(r.fetch_bytes_copy)),
            ]
        })
        .collect();
    ctx.report.table(
        &[
            "isolation",
            "round",
            "messages",
            "MB/s",
            "of ceiling",
            "broker CPU s/GB",
            "consumer CPU s/GB",
            "MB via sendfile / copy",
        ],
        &rrows,
    );
    let best = |iso: &str| {
        reads.iter().filter(|r| r.read.isolation == iso).map(|r| r.read.mb_per_s).reduce(f64::max)
    };
    let sum = |iso: &str, f: fn(&IsolatedReadRun) -> Option<f64>| -> Option<f64> {
        reads.iter().filter(|r| r.read.isolation == iso).map(f).sum::<Option<f64>>()
    };
    let (rc, ru) = (best("read_committed"), best("read_uncommitted"));
    let rc_sendfile = sum("read_committed", |r| r.fetch_bytes_sendfile);
    let rc_copy = sum("read_committed", |r| r.fetch_bytes_copy);
    let zero_copy = match (rc_sendfile, rc_copy) {
        (Some(s), Some(c)) if s > 0.0 && c == 0.0 => format!("every read_committed byte went through sendfile ({:.1} MB, none copied): READ_COMMITTED stays zero-copy", s / 1e6),
        (Some(s), Some(c)) => format!("read_committed: {:.1} MB via sendfile, **{:.1} MB copied**", s / 1e6, c / 1e6),
        _ => "no `floe_fetch_bytes_total` on /metrics (external broker): the fetch path is not known".into(),
    };
    let mismatch = reads.iter().any(|r| r.read.messages != expected);
    if let (Some(rc), Some(ru)) = (rc, ru) {
        ctx.report.para(&format!(
            "**read_committed {rc:.0} MB/s vs read_uncommitted {ru:.0} MB/s: {:.2}×** (best round of each); {zero_copy}.{}",
            rc / ru,
            if mismatch { format!(" **Warning**: a read did not return the {expected} records produced.") } else { String::new() },
        ));
    }
    ctx.report.para(
        "READ_COMMITTED fetches stop at the last stable offset and carry the aborted transactions of the range; the \
         broker still sends the stored batches as they are (the consumer skips markers and aborted records), so it \
         costs the broker what READ_UNCOMMITTED does. The consumer shares the two cores with the broker.",
    );
    ctx.report.set("workload", &w);
    ctx.report.set("records_per_txn", RECORDS_PER_TXN);
    ctx.report.set("transactional_topic_markers", markers);
    ctx.report.set("partitions_per_transaction", partitions_per_txn);
    ctx.report.set("producers", &arms);
    ctx.report.set("reads", &reads);
    ctx.report.set(
        "summary",
        serde_json::json!({
            "idempotent_msg_per_s": idem.result.publish_msg_per_s,
            "transactional_msg_per_s": tx.result.publish_msg_per_s,
            "idempotent_mb_per_s": idem.result.publish_mb_per_s,
            "transactional_mb_per_s": tx.result.publish_mb_per_s,
            "throughput_ratio_transactional_over_idempotent": ratio,
            "throughput_ratio_target": TXN_THROUGHPUT_TARGET,
            "throughput_ratio_target_met": ratio >= TXN_THROUGHPUT_TARGET,
            "concurrent_producers": TXN_CONCURRENT_PRODUCERS,
            "idempotent_concurrent_msg_per_s": idem_n.result.publish_msg_per_s,
            "transactional_concurrent_msg_per_s": tx_n.result.publish_msg_per_s,
            "transactional_concurrent_txn_per_s": tx_n.result.transactions_per_s,
            "throughput_ratio_concurrent": ratio_n,
            "throughput_ratio_concurrent_target_met": ratio_n >= TXN_THROUGHPUT_TARGET,
            "transactional_commit_p50_ms": tx.result.commit_latency.as_ref().map(|l| l.p50_ms),
            "transactional_commit_p99_ms": tx.result.commit_latency.as_ref().map(|l| l.p99_ms),
            "read_committed_mb_per_s": rc,
            "read_uncommitted_mb_per_s": ru,
            "read_ratio_committed_over_uncommitted": rc.zip(ru).map(|(a, b)| a / b),
            "read_committed_fetch_bytes_sendfile": rc_sendfile,
            "read_committed_fetch_bytes_copy": rc_copy,
            "reads_returned_every_record": !mismatch,
        }),
    );
    Ok(())
}
