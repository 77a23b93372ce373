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
    let ticks: u64 = fields.get(11).and_then(|f| f.parse::<u64>().ok()).ok_or_else(|| bad("utime"))?
        + fields.get(12).and_then(|f| f.parse::<u64>().ok()).ok_or_else(|| bad("stime"))?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let status = std::fs::read_to_string(format!("{dir}/status"))?;
    let peak_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    Ok(ProcStats { cpu_seconds: ticks as f64 / hz, peak_rss_bytes: peak_kib * 1024 })
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
    }
}
