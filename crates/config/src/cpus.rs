//! `cpu_affinity`: the CPUs the broker's threads run on.

use crate::error::ConfigError;

/// Most CPUs a `cpu_affinity` list may name (Linux's `CPU_SETSIZE`).
pub const MAX_CPUS: usize = 1024;

/// The CPUs of a list in Linux's format (`"0"`, `"0-3"`, `"0,2,4-5"`),
/// sorted, without repeats; empty for an empty list.
pub fn cpu_list(list: &str) -> Result<Vec<usize>, ConfigError> {
    let bad = |why: &str| {
        ConfigError::Invalid(format!(
            "cpu_affinity {list:?}: {why} (expected CPU numbers and ranges such as \"0\", \"0-3\" or \"0,2,4-5\")"
        ))
    };
    let mut cpus = Vec::new();
    let list = list.trim();
    if list.is_empty() {
        return Ok(cpus);
    }
    for part in list.split(',') {
        let part = part.trim();
        let num = |s: &str| -> Result<usize, ConfigError> {
            let n: usize = s
                .trim()
                .parse()
                .map_err(|_| bad(&format!("{s:?} is not a CPU number")))?;
            if n >= MAX_CPUS {
                return Err(bad(&format!("CPU {n} is not below {MAX_CPUS}")));
            }
            Ok(n)
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if lo > hi {
            return Err(bad(&format!("the range {part:?} runs backwards")));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_taskset_reads_them() {
        assert_eq!(cpu_list("").unwrap(), Vec::<usize>::new());
        assert_eq!(cpu_list("0").unwrap(), vec![0]);
        assert_eq!(cpu_list(" 4-5, 0,2 ,5").unwrap(), vec![0, 2, 4, 5]);
        for bad in ["x", "3-1", "0,", "1024", "-1", "0-"] {
            let err = cpu_list(bad).unwrap_err();
            assert!(err.to_string().contains("cpu_affinity"), "{bad}: {err}");
        }
    }
}
