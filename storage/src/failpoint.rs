//! Named failpoints at the places where a disk error or a crash hurts most:
//! appends, fsyncs, segment rolls, checkpoint and snapshot renames, retention
//! deletes, group-offset writes, Iceberg commits. The storage, tiering and
//! broker crates all go through [`check`], so one `FAILPOINTS` variable arms
//! them all. The names are listed in `docs/reliability.md`.
//!
//! Compiled in only with the `failpoints` cargo feature; without it [`check`]
//! is an inlined `Ok(())` and [`arm_from_env`] arms nothing.
//!
//! Why not the `fail` crate: its `rand` 0.8 dependency turns on `std` in
//! `getrandom` 0.2, which the Arrow/Iceberg tree shares, so a failpoint
//! build would rebuild that whole tree. The syntax below is fail's, reduced
//! to what the tests use.
//!
//! `FAILPOINTS='name=actions;name=actions'`, actions chained with `->`, each
//! `[count*]task[(arg)]`: a task with a count applies to that many
//! evaluations, then the next one takes over; without a count it applies
//! for good. Tasks:
//! - `off`: nothing happens;
//! - `return` or `return(eio)`: the call fails with `EIO`, as a dying disk would;
//! - `return(enospc)`: the call fails with `ENOSPC`, as a full disk would;
//! - `return(abort)`: the process aborts on the spot (`std::process::abort`),
//!   the honest crash: no unwinding, no destructors, no flush;
//! - `panic`: a panic (unwinds: a crash only where nothing catches it).
//!
//! Example: `log.segment.flush=24*off->1*return->off` fails the 25th fsync once.

use std::io;

/// The `EIO` and `ENOSPC` errnos (Linux), without a libc dependency.
const EIO: i32 = 5;
const ENOSPC: i32 = 28;

/// Evaluates the failpoint `name`: `Ok(())` unless it is armed, then the
/// injected error (or an abort, or a panic). Callers add their usual
/// context, so an injected error reads like a real one in logs and responses.
///
/// # Errors
/// The injected `io::Error` when the failpoint fires with `return`.
#[cfg(feature = "failpoints")]
pub fn check(name: &str) -> io::Result<()> {
    match registry::eval(name) {
        None => Ok(()),
        Some(arg) => injected(name, arg.as_deref()),
    }
}

/// Without the `failpoints` feature a failpoint costs nothing.
///
/// # Errors
/// Never.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn check(_name: &str) -> io::Result<()> {
    Ok(())
}

/// What a `return(arg)` that fires does.
#[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
fn injected(name: &str, arg: Option<&str>) -> io::Result<()> {
    match arg.unwrap_or("eio") {
        "abort" => {
            // Plain eprintln: nothing runs after this line, not even a log flush.
            eprintln!("failpoint {name}: aborting the process");
            std::process::abort()
        }
        "enospc" => Err(io::Error::from_raw_os_error(ENOSPC)),
        _ => Err(io::Error::from_raw_os_error(EIO)),
    }
}

/// Arms the failpoints listed in the `FAILPOINTS` environment variable and
/// returns the entries armed.
///
/// # Errors
/// A malformed entry (with the `failpoints` feature, nothing is armed then);
/// without the feature, a non-empty variable, so the broker can say it ignored it.
pub fn arm_from_env() -> Result<Vec<String>, String> {
    match std::env::var("FAILPOINTS") {
        Ok(spec) => arm(&spec),
        Err(_) => Ok(Vec::new()),
    }
}

/// Arms the failpoints of `spec` (the `FAILPOINTS` syntax); for tests.
#[cfg(feature = "failpoints")]
pub(crate) fn arm(spec: &str) -> Result<Vec<String>, String> {
    let mut parsed = Vec::new();
    for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, actions) = entry
            .split_once('=')
            .ok_or_else(|| format!("FAILPOINTS entry `{entry}` is not NAME=ACTIONS"))?;
        let actions = registry::parse(actions.trim())
            .map_err(|e| format!("FAILPOINTS entry `{entry}`: {e}"))?;
        parsed.push((name.trim().to_string(), actions, entry.to_string()));
    }
    Ok(parsed
        .into_iter()
        .map(|(name, actions, entry)| {
            registry::set(name, actions);
            entry
        })
        .collect())
}

#[cfg(not(feature = "failpoints"))]
fn arm(spec: &str) -> Result<Vec<String>, String> {
    if spec.trim().is_empty() {
        return Ok(Vec::new());
    }
    Err(format!(
        "FAILPOINTS={spec} ignored: this build has no failpoints (cargo feature `failpoints`)"
    ))
}

/// The armed failpoints: name -> a chain of actions.
#[cfg(feature = "failpoints")]
mod registry {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock, PoisonError};

    #[derive(Debug, Clone)]
    enum Task {
        Off,
        Return(Option<String>),
        Panic,
    }

    #[derive(Debug)]
    pub(super) struct Action {
        task: Task,
        /// Evaluations left; `None` for ever.
        remaining: Option<u64>,
    }

    type Points = HashMap<String, Vec<Action>>;

    fn points() -> std::sync::MutexGuard<'static, Points> {
        static POINTS: OnceLock<Mutex<Points>> = OnceLock::new();
        POINTS.get_or_init(Mutex::default).lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Parses `[count*]task[(arg)]` actions chained by `->`.
    pub(super) fn parse(actions: &str) -> Result<Vec<Action>, String> {
        actions
            .split("->")
            .map(|a| {
                let a = a.trim();
                let (remaining, task) = match a.split_once('*') {
                    Some((n, t)) => (
                        Some(n.trim().parse::<u64>().map_err(|_| format!("bad count in `{a}`"))?),
                        t.trim(),
                    ),
                    None => (None, a),
                };
                let (task, arg) = match task.split_once('(') {
                    Some((t, rest)) => {
                        let arg = rest
                            .strip_suffix(')')
                            .ok_or_else(|| format!("unclosed `(` in `{a}`"))?;
                        (t, Some(arg.to_string()))
                    }
                    None => (task, None),
                };
                let task = match task {
                    "off" => Task::Off,
                    "return" => Task::Return(arg),
                    "panic" => Task::Panic,
                    other => return Err(format!("unknown task `{other}` (off, return, panic)")),
                };
                Ok(Action { task, remaining })
            })
            .collect()
    }

    pub(super) fn set(name: String, actions: Vec<Action>) {
        points().insert(name, actions);
    }

    /// `Some(arg)` when the point fires with `return(arg)`; panics for `panic`.
    pub(super) fn eval(name: &str) -> Option<Option<String>> {
        let task = {
            let mut points = points();
            let action = points.get_mut(name)?.iter_mut().find(|a| a.remaining != Some(0))?;
            if let Some(n) = action.remaining.as_mut() {
                *n -= 1;
            }
            action.task.clone()
        };
        match task {
            Task::Off => None,
            Task::Return(arg) => Some(arg),
            Task::Panic => panic!("failpoint {name}: panic"),
        }
    }
}

#[cfg(all(test, feature = "failpoints"))]
mod tests {
    use super::*;

    #[test]
    fn counts_chain_and_return_injects_eio_or_enospc() {
        assert!(check("test.unarmed").is_ok());
        arm("test.eio=2*off->1*return->off; test.enospc=return(enospc)").unwrap();
        assert!(check("test.eio").is_ok());
        assert!(check("test.eio").is_ok());
        assert_eq!(check("test.eio").unwrap_err().raw_os_error(), Some(EIO));
        assert!(check("test.eio").is_ok());
        assert_eq!(check("test.enospc").unwrap_err().raw_os_error(), Some(ENOSPC));
        assert_eq!(check("test.enospc").unwrap_err().raw_os_error(), Some(ENOSPC));
        assert!(arm("no-equals-sign").is_err());
        assert!(arm("x=3*explode").is_err());
    }
}
