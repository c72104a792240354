//! `cpu_affinity`: pins the broker's threads to a set of CPUs at start-up:
//! those already running, and (called before the broker starts its own)
//! every thread started later, which inherits the set (the runtime's
//! workers, the group commit's flushers, the checkpointer, the blocking
//! pool).

use std::io;

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;
pub use strobe_config::cpu_list;

/// Restricts every thread of the process, and every thread started from
/// now on, to `cpus`; returns the set the calling thread had before. An empty list changes nothing.
/// A CPU that does not exist or that this process may not use is an error
/// naming it, not a silent narrowing.
pub fn pin_to(cpus: &[usize]) -> io::Result<Vec<usize>> {
    let before = current()?;
    if cpus.is_empty() {
        return Ok(before);
    }
    if let Some(cpu) = cpus.iter().find(|c| !before.contains(c)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cpu_affinity names CPU {cpu}, which this process may not run on (it may use {})",
                format_list(&before)
            ),
        ));
    }
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu).map_err(io::Error::from)?;
    }
    sched_setaffinity(Pid::from_raw(0), &set).map_err(io::Error::from)?;
    // Threads started before this call (the allocator's background
    // threads start with the process) do not inherit it: each is pinned
    // too. One that ended meanwhile is no error.
    for entry in std::fs::read_dir("/proc/self/task")? {
        let Some(tid) = entry?.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        match sched_setaffinity(Pid::from_raw(tid), &set) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(before)
}

/// The CPUs the calling thread may run on.
pub fn current() -> io::Result<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(0)).map_err(io::Error::from)?;
    Ok((0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// A CPU list in Linux's format, ranges folded (`0-3,6`).
pub fn format_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_fold_ranges() {
        assert_eq!(format_list(&[]), "");
        assert_eq!(format_list(&[0]), "0");
        assert_eq!(format_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    }

    #[test]
    fn a_cpu_out_of_reach_is_refused_and_nothing_changes() {
        // Pinning itself is tested on a broker process of its own
        // (tests/conformance/test_process.py): here it would pin the test
        // harness's threads.
        let all = current().unwrap();
        assert!(!all.is_empty());
        let err = pin_to(&[all.last().unwrap() + 1]).unwrap_err();
        assert!(err.to_string().contains("may not run on"), "{err}");
        assert_eq!(pin_to(&[]).unwrap(), all, "an empty list changes nothing");
        assert_eq!(current().unwrap(), all);
    }
}
