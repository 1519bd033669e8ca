use super::*;

/// 2 packages × 2 NUMA nodes × 8 cores × 2 hardware threads: cpus 0..64, core c has 2c, 2c+1.
fn machine() -> Topology {
    Topology::synthetic([2, 2, 8, 2]).expect("shape")
}

fn policy(map_by: Option<&str>, bind_to: Option<&str>, pe: Option<&str>) -> Policy {
    Policy::parse(map_by, bind_to, pe, false).expect("policy")
}

fn bound(topo: &Topology, ranks: usize, policy: &Policy) -> Vec<Vec<usize>> {
    plan(topo, ranks, policy, false)
        .expect("plan")
        .cpus
        .into_iter()
        .map(|c| c.expect("bound"))
        .collect()
}

fn range(r: std::ops::Range<usize>) -> Vec<usize> {
    r.collect()
}

#[test]
fn by_default_ranks_that_fit_get_a_core_each_in_order() {
    let cpus = bound(&machine(), 4, &Policy::default());
    assert_eq!(cpus, vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]);
    let cpus = bound(&machine(), 32, &Policy::default());
    assert_eq!(cpus[31], vec![62, 63]);
}

#[test]
fn by_default_an_oversubscribed_host_is_left_unbound() {
    let plan = plan(&machine(), 33, &Policy::default(), false).expect("plan");
    assert!(plan.cpus.iter().all(Option::is_none));
    assert!(plan.unbound_because.is_some());
    // Four ranks of 8 cpus each need 32 cores: fit; five do not.
    assert!(plan_fits(4, "8"));
    assert!(!plan_fits(5, "8"));
}

#[test]
fn by_default_a_lone_rank_keeps_every_cpu_unless_it_asks_for_slots() {
    let plan = plan(&machine(), 1, &Policy::default(), false).expect("plan");
    assert_eq!(plan.cpus, vec![None]);
    assert!(plan.unbound_because.is_some());
    // Asked for: bound as asked.
    assert_eq!(
        bound(&machine(), 1, &policy(None, Some("core"), None)),
        vec![vec![0, 1]]
    );
    assert_eq!(
        bound(&machine(), 1, &policy(None, None, Some("2"))),
        vec![range(0..4)]
    );
    assert_eq!(
        bound(&machine(), 1, &policy(Some("numa"), None, None)),
        vec![range(0..16)]
    );
}

fn plan_fits(ranks: usize, pe: &str) -> bool {
    let p = policy(None, None, Some(pe));
    plan(&machine(), ranks, &p, false).expect("plan").cpus[0].is_some()
}

#[test]
fn an_explicit_binding_of_too_many_ranks_starts_over_at_the_first_core() {
    let cpus = bound(&machine(), 40, &policy(None, Some("core"), None));
    assert_eq!(cpus[31], vec![62, 63]);
    assert_eq!(cpus[32], vec![0, 1]);
    assert_eq!(cpus[39], vec![14, 15]);
}

#[test]
fn none_leaves_every_rank_unbound() {
    let plan = plan(&machine(), 2, &policy(None, Some("none"), None), false).expect("plan");
    assert_eq!(plan.cpus, vec![None, None]);
    assert_eq!(plan.unbound_because, None);
}

#[test]
fn mapped_by_numa_ranks_go_round_robin_over_the_numa_nodes() {
    // Bound to their NUMA node by default.
    let cpus = bound(&machine(), 4, &policy(Some("numa"), None, None));
    assert_eq!(
        cpus,
        vec![range(0..16), range(16..32), range(32..48), range(48..64)]
    );
    // Bound to a core: the next free core of each NUMA node in turn.
    let cpus = bound(&machine(), 5, &policy(Some("numa"), Some("core"), None));
    assert_eq!(
        cpus,
        vec![
            vec![0, 1],
            vec![16, 17],
            vec![32, 33],
            vec![48, 49],
            vec![2, 3]
        ]
    );
}

#[test]
fn mapped_by_package_or_socket_ranks_alternate_between_packages() {
    for spelling in ["package", "socket", "SOCKET"] {
        let cpus = bound(&machine(), 3, &policy(Some(spelling), Some("core"), None));
        assert_eq!(cpus, vec![vec![0, 1], vec![32, 33], vec![2, 3]]);
    }
    let cpus = bound(
        &machine(),
        2,
        &policy(Some("package"), Some("socket"), None),
    );
    assert_eq!(cpus, vec![range(0..32), range(32..64)]);
}

#[test]
fn many_packages_take_one_rank_each_in_turn() {
    let topo = Topology::synthetic([8, 1, 4, 1]).expect("shape");
    let cpus = bound(&topo, 16, &policy(Some("package"), Some("core"), None));
    for (rank, cpus) in cpus.iter().enumerate() {
        let package = rank % 8;
        let core = package * 4 + rank / 8;
        assert_eq!(cpus, &vec![core], "rank {rank}");
    }
    let packages = bound(&topo, 8, &policy(Some("package"), None, None));
    assert_eq!(packages[7], range(28..32));
}

#[test]
fn ppr_places_n_ranks_on_each_object_with_their_cores() {
    let p = policy(Some("ppr:2:package:PE=4"), None, None);
    assert_eq!(p.pe, 4);
    let cpus = bound(&machine(), 4, &p);
    assert_eq!(
        cpus,
        vec![range(0..8), range(8..16), range(32..40), range(40..48)]
    );
    let too_many = plan(&machine(), 5, &p, false);
    assert!(matches!(
        too_many,
        Err(BindingError::PprTooFew {
            room: 4,
            ranks: 5,
            ..
        })
    ));
    // Two per core, each on a hardware thread of its own.
    let cpus = bound(
        &machine(),
        4,
        &policy(Some("ppr:2:core"), Some("hwthread"), None),
    );
    assert_eq!(cpus, vec![vec![0], vec![1], vec![2], vec![3]]);
    // One per NUMA node, bound to its core.
    let cpus = bound(&machine(), 4, &policy(Some("ppr:1:numa"), None, None));
    assert_eq!(
        cpus,
        vec![vec![0, 1], vec![16, 17], vec![32, 33], vec![48, 49]]
    );
}

#[test]
fn cpus_per_rank_gives_each_rank_consecutive_cores() {
    let cpus = bound(&machine(), 3, &policy(None, None, Some("2")));
    assert_eq!(cpus, vec![range(0..4), range(4..8), range(8..12)]);
    // PE in the mapping is the same thing; both given must agree.
    let same = policy(Some("core:PE=2"), None, Some("2"));
    assert_eq!(bound(&machine(), 3, &same), cpus);
    assert_eq!(
        Policy::parse(Some("core:pe=2"), None, Some("3"), false),
        Err(BindingError::PeTwice { flag: 3, pe: 2 })
    );
    // A NUMA node has 8 cores: 9 do not fit in one.
    let err = plan(&machine(), 1, &policy(Some("numa:PE=9"), None, None), false);
    assert!(matches!(
        err,
        Err(BindingError::PeTooLarge { largest: 8, .. })
    ));
}

#[test]
fn hardware_threads_are_slots_when_binding_or_mapping_by_them() {
    let cpus = bound(&machine(), 3, &policy(None, Some("hwthread"), None));
    assert_eq!(cpus, vec![vec![0], vec![1], vec![2]]);
    // Mapped by hardware thread, bound to the core: ranks 0 and 1 share core 0.
    let cpus = bound(&machine(), 3, &policy(Some("hwthread"), Some("core"), None));
    assert_eq!(cpus, vec![vec![0, 1], vec![0, 1], vec![2, 3]]);
    // 64 ranks fit the hardware threads when mapped by them.
    assert!(
        plan(&machine(), 64, &policy(Some("hwthread"), None, None), false)
            .expect("plan")
            .cpus
            .iter()
            .all(Option::is_some)
    );
}

#[test]
fn a_restricted_cpuset_is_all_that_is_used() {
    // A Slurm step with cores 2-3 of NUMA node 0 and core 8 of NUMA node 1.
    let topo = machine().restricted_to(&[4, 5, 6, 7, 16, 17]);
    let cpus = bound(&topo, 3, &policy(Some("numa"), Some("core"), None));
    assert_eq!(cpus, vec![vec![4, 5], vec![16, 17], vec![6, 7]]);
    let cpus = bound(&topo, 2, &policy(Some("numa"), None, None));
    assert_eq!(cpus, vec![vec![4, 5, 6, 7], vec![16, 17]]);
    let over = plan(&topo, 4, &Policy::default(), false).expect("plan");
    assert!(over.cpus.iter().all(Option::is_none));
}

#[test]
fn slurm_binding_is_left_alone_unless_asked_for() {
    let lookup = |v: &'static str| move |name: &str| (name == "SLURM_CPU_BIND").then(|| v.into());
    assert!(slurm_binds(lookup("quiet,cores")));
    assert!(!slurm_binds(lookup("quiet,none")));
    assert!(!slurm_binds(|_| None));
    let p = plan(&machine(), 2, &Policy::default(), true).expect("plan");
    assert_eq!(p.cpus, vec![None, None]);
    let explicit = plan(&machine(), 2, &policy(None, Some("core"), None), true).expect("plan");
    assert!(explicit.cpus.iter().all(Option::is_some));
}

#[test]
fn the_policy_travels_in_the_environment() {
    let sent = Policy::parse(Some("ppr:2:socket:PE=3"), Some("numa"), None, true).expect("p");
    assert_eq!(
        sent.map_by,
        MapBy::Ppr {
            per: 2,
            level: Level::Package
        }
    );
    let env = sent.to_env();
    let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    assert_eq!(Policy::from_lookup(lookup), Ok(Some(sent)));
    assert_eq!(Policy::from_lookup(|_| None), Ok(None));
    let default = Policy::default();
    let env = default.to_env();
    let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    assert_eq!(Policy::from_lookup(lookup), Ok(Some(default)));
}

#[test]
fn bad_policies_are_named() {
    for bad in [
        "",
        "diagonal",
        "ppr",
        "ppr:0:core",
        "ppr:2:hwthread",
        "core:span",
        "core:PE=0",
    ] {
        let err = MapBy::parse(bad).expect_err(bad);
        assert!(err.to_string().contains("--map-by"), "{err}");
    }
    assert_eq!(
        BindTo::parse("l3cache"),
        Err(BindingError::BindTo("l3cache".into()))
    );
    assert_eq!(BindTo::parse("auto"), Ok(None));
    assert!(Policy::parse(None, None, Some("0"), false).is_err());
    assert!(Policy::parse(None, None, Some("lots"), false).is_err());
}

#[test]
fn report_lines_name_host_rank_and_cpus() {
    let line = report_line("n1", 3, Some(&[0, 1, 2, 3, 8]), None);
    assert_eq!(line, "ferry: host n1 rank 3 bound to cpus 0-3,8");
    let line = report_line("n1", 0, None, Some("Slurm binds them"));
    assert_eq!(line, "ferry: host n1 rank 0 not bound (Slurm binds them)");
}

#[test]
fn hwlocs_synthetic_machine_is_planned_as_ours() {
    let Ok(topo) = Topology::hwloc_synthetic("pack:2 numa:2 core:4 pu:2") else {
        eprintln!("hwloc is not here: nothing to compare");
        return;
    };
    let ours = Topology::synthetic([2, 2, 4, 2]).expect("shape");
    for p in [
        policy(Some("numa"), None, None),
        policy(Some("ppr:2:package:PE=2"), None, None),
        policy(Some("package"), Some("core"), None),
        policy(None, Some("hwthread"), None),
    ] {
        assert_eq!(bound(&topo, 4, &p), bound(&ours, 4, &p), "{p:?}");
    }
    assert_eq!(
        bound(&topo, 4, &policy(Some("numa"), None, None))[3],
        range(24..32)
    );
}
