//! What the console remembers over time, sampled in the background: the
//! broker's throughput and request latency (from its own Prometheus endpoint,
//! `metrics.listen`, every 5 s) and every consumer group's lag (every 10 s,
//! at most [`MAX_GROUPS`] groups), each for the last hour, in memory.
//!
//! The samplers never hold a lock across I/O and give up on a round that
//! takes too long, so a request never waits for them, and they keep trying
//! while the broker is still starting.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::cli_call::cli_json;
use super::state::Console;
use crate::cli::admin::Admin;

/// How often the metrics are scraped.
pub const METRICS_INTERVAL: Duration = Duration::from_secs(5);
/// How often the groups' lag is sampled.
pub const LAG_INTERVAL: Duration = Duration::from_secs(10);
/// How long samples are kept.
const KEEP: Duration = Duration::from_secs(3600);
/// Groups sampled at most (the first by name).
pub const MAX_GROUPS: usize = 100;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The broker's counters at one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    /// `floe_produce_bytes_total`.
    pub produce_bytes: f64,
    /// `floe_fetch_bytes_total`, every path.
    pub fetch_bytes: f64,
    /// `floe_requests_total`, every API.
    pub requests: f64,
    /// `floe_request_duration_seconds_bucket`, every API, by upper bound (seconds; +Inf as infinity), ascending.
    pub latency_buckets: Vec<(f64, f64)>,
}

/// Sums the series the console charts out of Prometheus' text format.
pub fn parse_metrics(text: &str) -> Scrape {
    let mut s = Scrape::default();
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some((series, v)) => (series.trim(), v.trim().parse::<f64>().unwrap_or(0.0)),
            None => continue,
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (series, ""),
        };
        match name {
            "floe_produce_bytes_total" => s.produce_bytes += value,
            "floe_fetch_bytes_total" => s.fetch_bytes += value,
            "floe_requests_total" => s.requests += value,
            "floe_request_duration_seconds_bucket" => {
                let le = labels
                    .split(',')
                    .find_map(|l| l.trim().strip_prefix("le="))
                    .map(|v| v.trim_matches('"'));
                let bound = match le {
                    Some("+Inf") => f64::INFINITY,
                    Some(v) => match v.parse::<f64>() {
                        Ok(b) => b,
                        Err(_) => continue,
                    },
                    None => continue,
                };
                match buckets.iter_mut().find(|(b, _)| *b == bound) {
                    Some(entry) => entry.1 += value,
                    None => buckets.push((bound, value)),
                }
            }
            _ => {}
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    s.latency_buckets = buckets;
    s
}

/// The 99th percentile, in ms, of the requests between two scrapes (linear
/// within a bucket, as Prometheus' `histogram_quantile`); `None` without requests.
pub fn p99_ms(before: &Scrape, after: &Scrape) -> Option<f64> {
    let deltas: Vec<(f64, f64)> = after
        .latency_buckets
        .iter()
        .map(|(b, c)| {
            (*b, c - before.latency_buckets.iter().find(|(x, _)| x == b).map_or(0.0, |(_, c0)| *c0))
        })
        .collect();
    let total = deltas.last().map(|(_, c)| *c)?;
    if total <= 0.0 {
        return None;
    }
    let rank = 0.99 * total;
    let mut lower = 0.0;
    let mut below = 0.0;
    for (bound, count) in &deltas {
        if *count >= rank {
            if bound.is_infinite() {
                // Above the last finite bucket: the best answer is that bound.
                return Some(lower * 1000.0);
            }
            let within = (count - below).max(f64::MIN_POSITIVE);
            return Some((lower + (bound - lower) * ((rank - below) / within)) * 1000.0);
        }
        lower = *bound;
        below = *count;
    }
    None
}

/// The last hour of throughput and latency samples.
#[derive(Default)]
pub struct MetricsHistory {
    samples: Mutex<VecDeque<Value>>,
}

impl MetricsHistory {
    /// `{"interval_ms", "samples"}` for `/api/overview`.
    pub fn json(&self, enabled: bool) -> Value {
        let samples: Vec<Value> = lock(&self.samples).iter().cloned().collect();
        let mut doc =
            json!({"interval_ms": METRICS_INTERVAL.as_millis() as u64, "samples": samples});
        if !enabled {
            doc["note"] = json!("metrics.listen is empty: the broker serves no metrics to chart");
        }
        doc
    }

    fn push(&self, sample: Value) {
        let mut samples = lock(&self.samples);
        samples.push_back(sample);
        let keep = (KEEP.as_secs() / METRICS_INTERVAL.as_secs()) as usize;
        while samples.len() > keep {
            samples.pop_front();
        }
    }
}

/// GET http://`authority`/metrics, within 4 s.
async fn fetch_metrics(authority: &str) -> Result<String, String> {
    use http_body_util::BodyExt as _;
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| format!("connecting to {authority}: {e}"))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let request = hyper::Request::builder()
            .uri("/metrics")
            .header(hyper::header::HOST, authority)
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| e.to_string())?;
        let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("{authority}/metrics answered {}", response.status()));
        }
        let body = http_body_util::Limited::new(response.into_body(), 64 * 1024 * 1024)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok(String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(4), exchange)
        .await
        .map_err(|_| format!("{authority}/metrics did not answer within 4 s"))?
}

/// Scrapes the broker's metrics every [`METRICS_INTERVAL`] and keeps the rates; sweeps idle sessions too.
pub async fn sample_metrics(console: Arc<Console>) {
    let Some(authority) = console.settings.metrics.clone() else {
        loop {
            tokio::time::sleep(Duration::from_secs(60)).await;
            console.sessions.sweep();
        }
    };
    let mut previous: Option<(Instant, Scrape)> = None;
    let mut ticker = tokio::time::interval(METRICS_INTERVAL);
    let mut warned = false;
    loop {
        ticker.tick().await;
        console.sessions.sweep();
        let text = match fetch_metrics(&authority).await {
            Ok(t) => t,
            Err(e) => {
                // The broker may still be starting: say it once, keep trying.
                if !warned {
                    tracing::debug!(error = %e, "web console: cannot scrape the broker's metrics yet");
                    warned = true;
                }
                previous = None;
                continue;
            }
        };
        let scrape = parse_metrics(&text);
        let now = Instant::now();
        if let Some((then, before)) = &previous {
            let dt = now.duration_since(*then).as_secs_f64().max(0.001);
            let rate = |a: f64, b: f64| ((b - a) / dt).max(0.0);
            self::MetricsHistory::push(
                &console.metrics,
                json!({
                    "t": now_ms(),
                    "produce_bytes_per_s": rate(before.produce_bytes, scrape.produce_bytes),
                    "fetch_bytes_per_s": rate(before.fetch_bytes, scrape.fetch_bytes),
                    "requests_per_s": rate(before.requests, scrape.requests),
                    "request_latency_p99_ms": p99_ms(before, &scrape),
                }),
            );
        }
        previous = Some((now, scrape));
    }
}

/// One lag sample of a group.
#[derive(Debug, Clone)]
struct LagSample {
    t: i64,
    total_lag: i64,
    partitions: Map<String, Value>,
}

/// The last hour of every group's lag.
#[derive(Default)]
pub struct LagHistory {
    groups: Mutex<HashMap<String, VecDeque<LagSample>>>,
    /// Whose login samples the lag when the broker's listener needs SASL: the
    /// last person who logged in (the samples are shown only to a user whose
    /// own `group describe` succeeded).
    login: Mutex<Option<(String, String, &'static str)>>,
}

impl LagHistory {
    /// Remembers a successful login, for sampling when the listener needs SASL.
    pub fn set_login(&self, user: &str, password: &str, mechanism: &'static str) {
        *lock(&self.login) = Some((user.to_string(), password.to_string(), mechanism));
    }

    /// `group`'s samples, oldest first: `[{"t", "total_lag", "partitions": {"topic/partition": lag}}]`.
    pub fn history(&self, group: &str) -> Value {
        let groups = lock(&self.groups);
        let samples = groups.get(group).map(|d| {
            d.iter()
                .map(|s| json!({"t": s.t, "total_lag": s.total_lag, "partitions": s.partitions}))
                .collect::<Vec<_>>()
        });
        Value::Array(samples.unwrap_or_default())
    }

    fn push(&self, group: &str, sample: LagSample) {
        let mut groups = lock(&self.groups);
        let keep = (KEEP.as_secs() / LAG_INTERVAL.as_secs()) as usize;
        let d = groups.entry(group.to_string()).or_default();
        d.push_back(sample);
        while d.len() > keep {
            d.pop_front();
        }
        // Groups not seen for an hour go.
        let cutoff = now_ms() - KEEP.as_millis() as i64;
        groups.retain(|_, d| d.back().is_some_and(|s| s.t >= cutoff));
    }
}

/// One round: every group's lag (at most [`MAX_GROUPS`]).
async fn lag_round(console: &Console, admin: &mut Admin) -> Result<(), String> {
    let groups =
        cli_json(admin, &["group".to_string(), "list".to_string()]).await.map_err(|e| e.message)?;
    let mut ids: Vec<String> = groups
        .as_array()
        .map(|g| g.iter().filter_map(|r| r["group"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    ids.sort();
    ids.truncate(MAX_GROUPS);
    for id in ids {
        let Ok(doc) = cli_json(
            admin,
            &["group".to_string(), "describe".to_string(), "--".to_string(), id.clone()],
        )
        .await
        else {
            continue;
        };
        let mut partitions = Map::new();
        for p in doc["partitions"].as_array().into_iter().flatten() {
            let key = format!("{}/{}", p["topic"].as_str().unwrap_or(""), p["partition"]);
            partitions.insert(key, p["lag"].clone());
        }
        let total_lag = doc["total_lag"].as_i64().unwrap_or(0);
        console.lag.push(&id, LagSample { t: now_ms(), total_lag, partitions });
    }
    Ok(())
}

/// Samples every group's lag every [`LAG_INTERVAL`], with its own Kafka client.
pub async fn sample_lag(console: Arc<Console>) {
    let mut admin: Option<Admin> = None;
    let mut used_login: Option<(String, String, &'static str)> = None;
    let mut ticker = tokio::time::interval(LAG_INTERVAL);
    loop {
        ticker.tick().await;
        let login = lock(&console.lag.login).clone();
        if console.settings.broker.login_required() && login.is_none() {
            continue; // Nobody has logged in yet: no credentials to sample with.
        }
        if login != used_login {
            admin = None;
            used_login = login.clone();
        }
        if admin.is_none() {
            let args = console
                .settings
                .broker
                .connect_args(login.as_ref().map(|(u, p, m)| (u.as_str(), p.as_str(), *m)));
            match tokio::time::timeout(Duration::from_secs(15), Admin::connect(&args)).await {
                Ok(Ok(a)) => admin = Some(a),
                _ => continue, // Not ready yet; next tick.
            }
        }
        let Some(a) = admin.as_mut() else { continue };
        match tokio::time::timeout(Duration::from_secs(60), lag_round(&console, a)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "web console: lag sampling failed");
                admin = None;
            }
            Err(_) => admin = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP floe_requests_total x\n# TYPE floe_requests_total counter\nfloe_requests_total{api=\"Produce\"} 10\nfloe_requests_total{api=\"Fetch\"} 5\nfloe_produce_bytes_total 1000\nfloe_fetch_bytes_total{path=\"sendfile\"} 300\nfloe_fetch_bytes_total{path=\"copy\"} 200\nfloe_request_duration_seconds_bucket{api=\"Produce\",le=\"0.001\"} 5\nfloe_request_duration_seconds_bucket{api=\"Produce\",le=\"0.01\"} 9\nfloe_request_duration_seconds_bucket{api=\"Produce\",le=\"+Inf\"} 10\nfloe_request_duration_seconds_bucket{api=\"Fetch\",le=\"0.001\"} 5\nfloe_request_duration_seconds_bucket{api=\"Fetch\",le=\"0.01\"} 5\nfloe_request_duration_seconds_bucket{api=\"Fetch\",le=\"+Inf\"} 5\n";

    #[test]
    fn counters_are_summed_over_their_labels() {
        let s = parse_metrics(TEXT);
        assert_eq!(s.requests, 15.0);
        assert_eq!(s.produce_bytes, 1000.0);
        assert_eq!(s.fetch_bytes, 500.0);
        assert_eq!(s.latency_buckets, vec![(0.001, 10.0), (0.01, 14.0), (f64::INFINITY, 15.0)]);
    }

    #[test]
    fn p99_interpolates_within_the_bucket_of_the_rank() {
        let before = Scrape::default();
        let after = Scrape {
            latency_buckets: vec![(0.001, 0.0), (0.01, 100.0), (f64::INFINITY, 100.0)],
            ..Scrape::default()
        };
        let p = p99_ms(&before, &after).unwrap();
        assert!((p - 9.91).abs() < 0.01, "{p}");
        assert_eq!(p99_ms(&after, &after), None);
    }
}
