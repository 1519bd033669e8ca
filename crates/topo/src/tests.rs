use super::*;

#[test]
fn a_synthetic_machine_has_the_shape_asked_for() {
    let topo = Topology::synthetic([2, 2, 8, 2]).expect("shape");
    assert_eq!(topo.count(Level::Package), 2);
    assert_eq!(topo.count(Level::Numa), 4);
    assert_eq!(topo.count(Level::Core), 32);
    assert_eq!(topo.count(Level::Pu), 64);
    let cores = topo.cpus_by(Level::Core);
    assert_eq!(cores[0], vec![0, 1]);
    assert_eq!(cores[31], vec![62, 63]);
    let numas = topo.cpus_by(Level::Numa);
    assert_eq!(numas[1], (16..32).collect::<Vec<_>>());
    let packages = topo.cpus_by(Level::Package);
    assert_eq!(packages[1], (32..64).collect::<Vec<_>>());
    assert_eq!(topo.cpus_by(Level::Pu)[5], vec![5]);
    assert!(Topology::synthetic([2, 0, 1, 1]).is_err());
}

#[test]
fn a_restricted_machine_counts_only_what_is_left() {
    let topo = Topology::synthetic([2, 2, 2, 2]).expect("shape");
    // Both threads of core 1 (cpus 2, 3) and one thread of core 6 (cpu 12): package 0's
    // first NUMA node and package 1's second.
    let small = topo.restricted_to(&[2, 3, 12]);
    assert_eq!(small.count(Level::Package), 2);
    assert_eq!(small.count(Level::Numa), 2);
    assert_eq!(small.count(Level::Core), 2);
    assert_eq!(small.cpus_by(Level::Core), vec![vec![2, 3], vec![12]]);
    assert_eq!(small.cpus_by(Level::Package), vec![vec![2, 3], vec![12]]);
}

#[test]
fn cpu_lists_are_ranges() {
    assert_eq!(cpu_list(&[0, 1, 2, 3, 8]), "0-3,8");
    assert_eq!(cpu_list(&[5, 1, 3, 2]), "1-3,5");
    assert_eq!(cpu_list(&[7]), "7");
    assert_eq!(cpu_list(&[]), "");
}

#[test]
fn this_machine_is_within_the_affinity_of_this_process() {
    let allowed = kernel::allowed_cpus();
    for topo in [Topology::detect(), Topology::kernel()] {
        assert!(!topo.pus().is_empty(), "{topo:?}");
        assert!(topo.pus().iter().all(|pu| allowed.contains(&pu.os)));
        assert_ne!(topo.source(), Source::Synthetic);
    }
    let kernel = Topology::kernel();
    assert_eq!(kernel.count(Level::Core), kernel.count(Level::Pu));
}

#[test]
fn hwlocs_synthetic_topology_is_read_as_ours_is_made() {
    if let Some(why) = Topology::hwloc_unavailable() {
        eprintln!("hwloc is not here ({why}): nothing to compare");
        return;
    }
    let read = Topology::hwloc_synthetic("pack:2 numa:2 core:4 pu:2").expect("hwloc");
    let made = Topology::synthetic([2, 2, 4, 2]).expect("shape");
    assert_eq!(read, made);
    assert!(Topology::hwloc_synthetic("pack:two").is_err());
    // On this machine hwloc and the kernel agree on the cpus.
    let mut hwloc: Vec<usize> = Topology::detect().pus().iter().map(|p| p.os).collect();
    hwloc.sort_unstable();
    assert_eq!(hwloc, kernel::allowed_cpus());
    assert_eq!(Topology::detect().source(), Source::Hwloc);
}
