//! The processors of this host as this process may use them: packages (sockets), NUMA nodes,
//! cores and hardware threads (PUs), each PU with the operating system's cpu number.
//!
//! [`Topology::detect`] asks hwloc, loaded at run time (`libhwloc.so.15`, hwloc 2.x, or the
//! file `FERRY_HWLOC_LIB` names): nothing links against it, so a host without hwloc runs the
//! same binaries. Without it the kernel's view is taken instead ([`Source::Kernel`]): the cpus
//! of `sched_getaffinity`, their package and NUMA node from `/sys/devices/system/cpu`, and one
//! core per cpu (hardware threads of one core are not told apart). Either way only the cpus
//! this process may run on are kept, so a Slurm step's or a container's cpuset is respected.
//!
//! Packages, NUMA nodes and cores are numbered from 0 in hwloc's logical order (the kernel's
//! cpu order without hwloc), counting only those with an allowed PU. The crate knows nothing
//! of what runs on the processors.

mod hwloc;
mod kernel;

use thiserror::Error;

/// The variable that names the hwloc library file to load instead of `libhwloc.so.15`.
pub const HWLOC_LIB_ENV: &str = "FERRY_HWLOC_LIB";

/// Why a topology could not be had.
#[derive(Debug, Error)]
pub enum TopoError {
    /// The hwloc library could not be loaded or lacks a function.
    #[error("cannot load hwloc ({library}): {reason}")]
    Load {
        /// The file asked for.
        library: String,
        /// What `dlopen`/`dlsym` said.
        reason: String,
    },
    /// The library is not of the hwloc 2.x ABI.
    #[error("hwloc API version {0:#x} is not 2.x")]
    Version(u32),
    /// An hwloc call failed.
    #[error("hwloc: {0} failed")]
    Call(&'static str),
    /// A synthetic description hwloc did not take.
    #[error("hwloc does not take the synthetic topology {0:?}")]
    Synthetic(String),
    /// The shape given to [`Topology::synthetic`] has a zero in it.
    #[error("a synthetic topology needs at least one of each level, got {0:?}")]
    EmptyShape([usize; 4]),
    /// No processor is left for this process.
    #[error("no cpu is available to this process")]
    NoCpus,
}

/// Where a topology came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// hwloc, on this machine.
    Hwloc,
    /// The kernel (`sched_getaffinity`, `/sys/devices/system/cpu`): one core per cpu.
    Kernel,
    /// A made-up machine (hwloc's synthetic topologies, [`Topology::synthetic`]): its cpu
    /// numbers need not exist here.
    Synthetic,
}

/// A level of the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// A physical package (socket).
    Package,
    /// A NUMA node.
    Numa,
    /// A core.
    Core,
    /// A hardware thread (processing unit).
    Pu,
}

/// One hardware thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pu {
    /// The operating system's cpu number (what `sched_setaffinity` takes).
    pub os: usize,
    /// Index of its core.
    pub core: usize,
    /// Index of its NUMA node.
    pub numa: usize,
    /// Index of its package.
    pub package: usize,
}

/// The PUs of a host, in logical order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    source: Source,
    pus: Vec<Pu>,
    counts: [usize; 4],
}

impl Topology {
    /// This host's topology for this process: hwloc's if it loads, else the kernel's.
    pub fn detect() -> Topology {
        match hwloc::load(None) {
            Ok((pus, this_system)) => {
                let source = match this_system {
                    true => Source::Hwloc,
                    false => Source::Synthetic,
                };
                let topology = Topology::from_pus(source, pus);
                let topology = match this_system {
                    true => topology.restricted_to(&kernel::allowed_cpus()),
                    false => topology,
                };
                if !topology.pus.is_empty() {
                    return topology;
                }
                Topology::kernel()
            }
            Err(_) => Topology::kernel(),
        }
    }

    /// The kernel's view only (what [`Topology::detect`] falls back to).
    pub fn kernel() -> Topology {
        Topology::from_pus(Source::Kernel, kernel::pus())
    }

    /// Why hwloc cannot be used here, or `None` if it can.
    pub fn hwloc_unavailable() -> Option<TopoError> {
        hwloc::load(None).err()
    }

    /// hwloc's synthetic topology `description` (e.g. `"pack:2 numa:2 core:4 pu:2"`), when
    /// hwloc can be loaded.
    pub fn hwloc_synthetic(description: &str) -> Result<Topology, TopoError> {
        let (pus, _) = hwloc::load(Some(description))?;
        Ok(Topology::from_pus(Source::Synthetic, pus))
    }

    /// A symmetric machine of `[packages, NUMA nodes per package, cores per NUMA node, PUs
    /// per core]`, cpus numbered in logical order as hwloc numbers a synthetic topology's.
    pub fn synthetic(shape: [usize; 4]) -> Result<Topology, TopoError> {
        if shape.contains(&0) {
            return Err(TopoError::EmptyShape(shape));
        }
        let [packages, numas, cores, threads] = shape;
        let mut pus = Vec::with_capacity(shape.iter().product());
        for package in 0..packages {
            for n in 0..numas {
                let numa = package * numas + n;
                for c in 0..cores {
                    let core = numa * cores + c;
                    for t in 0..threads {
                        let os = core * threads + t;
                        pus.push(Pu {
                            os,
                            core,
                            numa,
                            package,
                        });
                    }
                }
            }
        }
        Ok(Topology::from_pus(Source::Synthetic, pus))
    }

    /// A topology of `pus`, whose core, NUMA and package fields may be any numbers that tell
    /// the objects apart: they are renumbered from 0 in order of first appearance.
    pub fn from_pus(source: Source, pus: Vec<Pu>) -> Topology {
        let mut seen: [Vec<usize>; 3] = Default::default();
        let mut dense = |level: usize, key: usize| match seen[level].iter().position(|&k| k == key)
        {
            Some(index) => index,
            None => {
                seen[level].push(key);
                seen[level].len() - 1
            }
        };
        let pus: Vec<Pu> = pus
            .into_iter()
            .map(|pu| Pu {
                os: pu.os,
                package: dense(0, pu.package),
                numa: dense(1, pu.numa),
                core: dense(2, pu.core),
            })
            .collect();
        let counts = [seen[0].len(), seen[1].len(), seen[2].len(), pus.len()];
        Topology {
            source,
            pus,
            counts,
        }
    }

    /// The same machine with only the PUs whose cpu numbers are in `allowed`.
    pub fn restricted_to(&self, allowed: &[usize]) -> Topology {
        let pus = self
            .pus
            .iter()
            .filter(|pu| allowed.contains(&pu.os))
            .copied()
            .collect();
        Topology::from_pus(self.source, pus)
    }

    /// Where it came from.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The PUs in logical order.
    pub fn pus(&self) -> &[Pu] {
        &self.pus
    }

    /// How many objects of `level` have an allowed PU.
    pub fn count(&self, level: Level) -> usize {
        self.counts[level as usize]
    }

    /// The cpu numbers of each object of `level`, objects in logical order.
    pub fn cpus_by(&self, level: Level) -> Vec<Vec<usize>> {
        let mut groups = vec![Vec::new(); self.count(level)];
        for (nth, pu) in self.pus.iter().enumerate() {
            let index = match level {
                Level::Package => pu.package,
                Level::Numa => pu.numa,
                Level::Core => pu.core,
                Level::Pu => nth,
            };
            groups[index].push(pu.os);
        }
        groups
    }

    /// One line: how many of each, and where from.
    pub fn summary(&self) -> String {
        let source = match self.source {
            Source::Hwloc => "hwloc",
            Source::Kernel => "no hwloc: the kernel's cpus, one core per cpu",
            Source::Synthetic => "a synthetic topology",
        };
        format!(
            "{} package(s), {} NUMA node(s), {} core(s), {} hardware thread(s) ({source})",
            self.counts[0], self.counts[1], self.counts[2], self.counts[3]
        )
    }
}

/// `cpus` as a list of ranges, `0-3,8` (sorted, duplicates dropped).
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut iter = sorted.into_iter().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(match end == start {
            true => start.to_string(),
            false => format!("{start}-{end}"),
        });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests;
