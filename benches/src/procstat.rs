//! CPU seconds and peak RSS of a process, read from `/proc` (Linux only).

use std::io;

use serde::Serialize;

/// What `/proc` says about one process at one moment.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ProcStats {
    /// User + system CPU time so far (utime + stime of `/proc/PID/stat`), in seconds.
    pub cpu_seconds: f64,
    /// Peak resident set size (`VmHWM` of `/proc/PID/status`), in bytes.
    pub peak_rss_bytes: u64,
    /// Resident set size now (`VmRSS`), in bytes.
    pub rss_bytes: u64,
}

/// Reads `pid`'s CPU time and peak RSS; `pid` 0 means this process.
///
/// # Errors
/// The process does not exist or `/proc` is unreadable.
pub fn read(pid: u32) -> io::Result<ProcStats> {
    let dir = if pid == 0 { "/proc/self".to_string() } else { format!("/proc/{pid}") };
    let stat = std::fs::read_to_string(format!("{dir}/stat"))?;
    // The command name (field 2) may hold spaces and parentheses: fields start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| bad("stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, so utime (field 14) is index 11 and stime (15) index 12.
    let ticks: u64 =
        fields.get(11).and_then(|f| f.parse::<u64>().ok()).ok_or_else(|| bad("utime"))?
            + fields.get(12).and_then(|f| f.parse::<u64>().ok()).ok_or_else(|| bad("stime"))?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let status = std::fs::read_to_string(format!("{dir}/status"))?;
    let kib = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(ProcStats {
        cpu_seconds: ticks as f64 / hz,
        peak_rss_bytes: kib("VmHWM:") * 1024,
        rss_bytes: kib("VmRSS:") * 1024,
    })
}

/// CPU seconds (utime + stime) so far of `pid`'s live threads whose name starts with
/// `prefix` (`/proc/PID/task/TID/stat`). Threads that have exited are not counted.
///
/// # Errors
/// The process does not exist or `/proc` is unreadable.
pub fn thread_cpu_seconds(pid: u32, prefix: &str) -> io::Result<f64> {
    named_threads_cpu(pid, prefix).map(|(_, s)| s)
}

/// How many live threads of `pid` have a name starting with `prefix`, and their CPU
/// seconds together (0 threads: none found, as distinct from threads that used no CPU).
///
/// # Errors
/// The process does not exist or `/proc` is unreadable.
pub fn named_threads_cpu(pid: u32, prefix: &str) -> io::Result<(usize, f64)> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let (mut ticks, mut found) = (0u64, 0usize);
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        // A thread may exit between the listing and the read: skip it.
        let Ok(stat) = std::fs::read_to_string(task?.path().join("stat")) else { continue };
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        let name = head.split_once('(').map_or("", |(_, n)| n);
        if !name.starts_with(prefix) {
            continue;
        }
        found += 1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        ticks += fields.get(11).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0)
            + fields.get(12).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    }
    Ok((found, ticks as f64 / hz))
}

/// Resets `pid`'s peak RSS to its current RSS (`echo 5 > /proc/PID/clear_refs`), so a
/// later [`read`] reports the peak of one phase. Returns false where that is not allowed.
pub fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("cannot parse {what} from /proc"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_this_process() {
        let s = super::read(0).unwrap();
        assert!(s.peak_rss_bytes > 0);
        assert!(s.cpu_seconds >= 0.0);
        assert!(s.rss_bytes > 0 && s.rss_bytes <= s.peak_rss_bytes);
    }

    #[test]
    fn counts_a_named_thread() {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let spin = std::thread::Builder::new()
            .name("procstat-spin".into())
            .spawn(move || {
                let start = std::time::Instant::now();
                while !flag.load(std::sync::atomic::Ordering::Relaxed)
                    && start.elapsed().as_secs() < 5
                {
                    std::hint::spin_loop();
                }
            })
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let pid = std::process::id();
        let mut cpu = 0.0;
        while cpu < 0.05 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            cpu = super::thread_cpu_seconds(pid, "procstat-spin").unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spin.join().unwrap();
        assert!(cpu >= 0.05, "the spinning thread's CPU was not found: {cpu}");
        assert_eq!(super::thread_cpu_seconds(pid, "no-such-thread").unwrap(), 0.0);
        assert_eq!(super::named_threads_cpu(pid, "no-such-thread").unwrap().0, 0);
    }
}
