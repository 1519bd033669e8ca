//! The kernel's view, without hwloc: the cpus of this process's affinity, each its own core,
//! with its package and NUMA node as `/sys/devices/system/cpu` says (0 where it says nothing).

use crate::Pu;
use std::path::Path;

/// The cpus this process may run on, ascending.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer and size describe `set`.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: cpu < CPU_SETSIZE, the set's capacity.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// The allowed cpus as PUs, one core each.
pub(crate) fn pus() -> Vec<Pu> {
    let root = Path::new("/sys/devices/system/cpu");
    allowed_cpus()
        .into_iter()
        .map(|os| {
            let dir = root.join(format!("cpu{os}"));
            Pu {
                os,
                core: os,
                numa: numa_node(&dir).unwrap_or(0),
                package: read_number(&dir.join("topology/physical_package_id")).unwrap_or(0),
            }
        })
        .collect()
}

fn read_number(path: &Path) -> Option<usize> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The NUMA node of the cpu whose directory is `dir`: its `nodeN` entry.
fn numa_node(dir: &Path) -> Option<usize> {
    std::fs::read_dir(dir).ok()?.flatten().find_map(|entry| {
        let name = entry.file_name();
        name.to_str()?.strip_prefix("node")?.parse().ok()
    })
}
