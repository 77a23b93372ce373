//! `tls`: what TLS costs a catch-up read. A backlog written once over plaintext, then read
//! from offset 0 by floe-bench's fetch-only client ([`crate::fetch_client`], one
//! connection) on a broker with a PLAINTEXT and an SSL listener (a P-256 certificate from a
//! throwaway CA made with the `openssl` CLI): plaintext sendfile vs TLS copy (rustls), and
//! kTLS sendfile as a third arm only where the broker reports `floe_ktls_enabled 1`; three
//! rounds (one with `--quick`): MB/s, broker and client CPU seconds per GB, the bytes each
//! fetch path served.
//!
//! What it leaves out: librdkafka (built without OpenSSL here), the handshake (one per
//! arm), client certificates, the disk (the backlog stays in the page cache), and brokers
//! it does not start (`--bootstrap` skips it).

use std::path::PathBuf;

use anyhow::{bail, Context};
use serde::Serialize;

use super::common::{bar, spinner, temp_data_dir, CostMeter, PhaseCost};
use super::ctx::Ctx;
use crate::load::{self, RunSpec};
use crate::report::{f1, f2};

#[derive(Debug, Serialize)]
struct TlsRun {
    arm: String,
    round: usize,
    bytes: u64,
    seconds: f64,
    mb_per_s: f64,
    broker_cpu_s_per_gb: Option<f64>,
    cost: PhaseCost,
    fetch_bytes_sendfile: Option<f64>,
    fetch_bytes_copy_tls: Option<f64>,
}

/// A throwaway CA and a broker certificate for 127.0.0.1 signed by it (the
/// `openssl` CLI: no new crates). Returns (CA, certificate, key) PEM paths.
fn test_pki(dir: &std::path::Path) -> anyhow::Result<(PathBuf, PathBuf, PathBuf)> {
    let (ca, ca_key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let (cert, key, csr, ext) = (
        dir.join("broker.pem"),
        dir.join("broker.key"),
        dir.join("broker.csr"),
        dir.join("broker.ext"),
    );
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")?;
    let p256 = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let openssl = |args: Vec<&std::ffi::OsStr>| -> anyhow::Result<()> {
        let out = std::process::Command::new("openssl")
            .args(&args)
            .output()
            .context("cannot run `openssl` (the tls scenario makes its certificates with it)")?;
        if !out.status.success() {
            bail!("openssl {:?} failed: {}", args, String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    let mut a: Vec<&std::ffi::OsStr> = vec![os("req"), os("-x509")];
    a.extend(p256.iter().map(|s| os(s)));
    a.extend([
        os("-days"),
        os("2"),
        os("-subj"),
        os("/CN=floe-bench CA"),
        os("-keyout"),
        ca_key.as_os_str(),
        os("-out"),
        ca.as_os_str(),
    ]);
    openssl(a)?;
    let mut a: Vec<&std::ffi::OsStr> = vec![os("req")];
    a.extend(p256.iter().map(|s| os(s)));
    a.extend([
        os("-subj"),
        os("/CN=127.0.0.1"),
        os("-keyout"),
        key.as_os_str(),
        os("-out"),
        csr.as_os_str(),
    ]);
    openssl(a)?;
    openssl(vec![
        os("x509"),
        os("-req"),
        os("-days"),
        os("2"),
        os("-in"),
        csr.as_os_str(),
        os("-CA"),
        ca.as_os_str(),
        os("-CAkey"),
        ca_key.as_os_str(),
        os("-CAcreateserial"),
        os("-extfile"),
        ext.as_os_str(),
        os("-out"),
        cert.as_os_str(),
    ])?;
    Ok((ca, cert, key))
}

pub(super) fn tls(ctx: &mut Ctx) -> anyhow::Result<()> {
    use crate::fetch_client::{self, Transport};
    let w = ctx.workload("catch-up-16kb")?;
    let backlog_mb = ctx.opts.backlog_mb.unwrap_or(if ctx.opts.quick {
        32
    } else {
        w.consumer_backlog_mb.max(1)
    });
    let data = temp_data_dir()?;
    let certs = temp_data_dir()?;
    let (ca, cert, key) = test_pki(certs.path())?;
    let topics = ctx.topics(&w);

    // 1. The backlog, written once over plaintext.
    let b = ctx.broker("backlog", data.path(), &[])?;
    load::create_topics(&b.bootstrap, &topics, w.partitions_per_topic)?;
    let pb = bar("backlog: produce", true);
    let spec = RunSpec {
        bootstrap: b.bootstrap.clone(),
        workload: w.clone(),
        topics: topics.clone(),
        consume: false,
        produce_bytes: Some(backlog_mb * 1_000_000),
    };
    let produced = load::run(&spec, &pb)?;
    pb.finish();
    let mut partitions = Vec::new();
    for t in &topics {
        for (p, end) in
            load::end_offsets(&b.bootstrap, t, w.partitions_per_topic)?.into_iter().enumerate()
        {
            partitions.push((t.clone(), p as i32, end));
        }
    }
    b.stop()?;
    ctx.report
        .heading(&format!("Catch-up read: plaintext sendfile vs TLS copy (workload `{}`)", w.name));
    ctx.report.para(&format!(
        "Backlog: {:.0} MB of {}-byte messages in {} partition(s). Each arm starts `floe` with a PLAINTEXT and an SSL \
         listener (a P-256 certificate from a throwaway CA, TLS 1.3 negotiated by rustls on both ends) and reads the backlog from \
         offset 0 with floe-bench's fetch-only client over one connection (librdkafka is built without OpenSSL here: \
         see `fetch_client`). The data stays in the page cache, so this measures the fetch path.",
        produced.published_messages as f64 * w.message_size as f64 / 1e6,
        w.message_size,
        partitions.len(),
    ));
    ctx.report.set("backlog", &produced);

    // 2. kTLS: an arm only if the broker says it uses it.
    let probe_dir = temp_data_dir()?;
    let (probe, _) =
        ctx.launcher.start_with_ssl("ktls-probe", probe_dir.path(), &[], &cert, &key)?;
    let ktls =
        probe.metric_samples("floe_ktls_enabled").and_then(|s| s.first().map(|(_, v)| *v > 0.0));
    probe.stop()?;
    let mut arms: Vec<&str> = vec!["plaintext-sendfile", "tls-copy"];
    if ktls == Some(true) {
        arms.push("ktls-sendfile");
    }
    let rounds = if ctx.opts.quick { 1 } else { 3 };
    let mut runs = Vec::new();
    for round in 1..=rounds {
        for arm in &arms {
            // The TLS-copy arm keeps sessions in user space even where the kernel has kTLS.
            let ktls_setting = match *arm {
                "ktls-sendfile" => Some("on"),
                "tls-copy" => Some("off"),
                _ => None,
            };
            let overrides: Vec<(String, String)> = ktls_setting
                .map(|v| ("floe.ssl.ktls".to_string(), v.to_string()))
                .into_iter()
                .collect();
            let (b, ssl) = ctx.launcher.start_with_ssl(
                &format!("{arm}-{round}"),
                data.path(),
                &overrides,
                &cert,
                &key,
            )?;
            let (bootstrap, transport) = match *arm {
                "plaintext-sendfile" => (b.bootstrap.clone(), Transport::Plaintext),
                _ => (ssl, Transport::Tls { ca: ca.clone() }),
            };
            let sp = spinner(&format!("catch-up {arm} #{round}"));
            let meter = CostMeter::start(&b);
            let read = fetch_client::catch_up(&bootstrap, &transport, &partitions)?;
            let cost = meter.finish(&b);
            let mb_per_s = read.bytes as f64 / 1e6 / read.seconds;
            sp.finish_with_message(format!("{mb_per_s:.0} MB/s"));
            let gb = read.bytes as f64 / 1e9;
            runs.push(TlsRun {
                arm: arm.to_string(),
                round,
                bytes: read.bytes,
                seconds: read.seconds,
                mb_per_s,
                broker_cpu_s_per_gb: cost.broker_cpu_s.map(|c| c / gb),
                cost,
                fetch_bytes_sendfile: b.metric("floe_fetch_bytes_total", "sendfile"),
                fetch_bytes_copy_tls: b.metric("floe_fetch_bytes_total", "copy-tls"),
            });
            b.stop()?;
        }
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.arm.clone(),
                r.round.to_string(),
                format!("{:.0}", r.mb_per_s),
                f2(r.cost.broker_cpu_s),
                f2(r.broker_cpu_s_per_gb),
                f2(Some(r.cost.harness_cpu_s / (r.bytes as f64 / 1e9))),
                format!(
                    "{} / {}",
                    f1(r.fetch_bytes_sendfile.map(|b| b / 1e6)),
                    f1(r.fetch_bytes_copy_tls.map(|b| b / 1e6))
                ),
            ]
        })
        .collect();
    ctx.report.table(
        &[
            "arm",
            "round",
            "MB/s",
            "broker CPU s",
            "broker CPU s/GB",
            "client CPU s/GB",
            "MB via sendfile / TLS copy",
        ],
        &rows,
    );
    let best = |arm: &str| -> (Option<f64>, Option<f64>) {
        let of: Vec<&TlsRun> = runs.iter().filter(|r| r.arm == arm).collect();
        (
            of.iter().map(|r| r.mb_per_s).reduce(f64::max),
            of.iter().filter_map(|r| r.broker_cpu_s_per_gb).reduce(f64::min),
        )
    };
    let (p_mbps, p_cpu) = best("plaintext-sendfile");
    let (t_mbps, t_cpu) = best("tls-copy");
    let (k_mbps, k_cpu) = best("ktls-sendfile");
    let ktls_note = match ktls {
        Some(true) => format!("kTLS sendfile {} MB/s, {} s/GB.", f1(k_mbps), f2(k_cpu)),
        Some(false) => "kTLS sendfile: unavailable (the broker reports `floe_ktls_enabled 0`: no kernel TLS here, or not in use).".into(),
        None => "kTLS sendfile: unknown (no `floe_ktls_enabled` on /metrics).".into(),
    };
    if let (Some(p), Some(t)) = (p_mbps, t_mbps) {
        ctx.report.para(&format!(
            "**Summary** (best round of each arm): plaintext sendfile {p:.0} MB/s vs TLS copy {t:.0} MB/s: TLS reads at \
             **{:.2}×** the plaintext rate; broker CPU {} vs {} s/GB: TLS costs **{}×** the CPU per GB. {ktls_note}",
            t / p,
            f2(p_cpu),
            f2(t_cpu),
            f2(p_cpu.zip(t_cpu).map(|(p, t)| t / p)),
        ));
        ctx.report.set("summary", serde_json::json!({
            "plaintext_sendfile_mb_per_s": p, "tls_copy_mb_per_s": t, "ktls_sendfile_mb_per_s": k_mbps,
            "throughput_ratio_tls_copy_over_plaintext": t / p,
            "plaintext_broker_cpu_s_per_gb": p_cpu, "tls_copy_broker_cpu_s_per_gb": t_cpu, "ktls_broker_cpu_s_per_gb": k_cpu,
            "cpu_per_gb_ratio_tls_copy_over_plaintext": p_cpu.zip(t_cpu).map(|(p, t)| t / p),
            "ktls_enabled": ktls,
        }));
    }
    ctx.report.para(
        "The client runs on the same cores as the broker (loopback) and decrypts what the broker encrypts, so on the TLS \
         arm both sides pay for the cipher; its CPU is shown so the broker's share can be judged.",
    );
    ctx.report.set("tls_runs", &runs);
    Ok(())
}
