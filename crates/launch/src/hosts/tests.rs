//! Unit and property tests of host lists, hostfiles, Slurm variables and placement.

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

fn slots(list: &[(&str, u32)]) -> Vec<HostSlots> {
    list.iter().map(|&(n, s)| HostSlots::new(n, s)).collect()
}

/// `place` as `[(host, ranks)]`.
fn placed(
    np: u32,
    hosts: &[HostSlots],
    ppn: Option<u32>,
    mapping: Mapping,
) -> Vec<(String, Vec<u32>)> {
    place(np, hosts, ppn, mapping)
        .unwrap()
        .into_iter()
        .map(|h| (h.host, h.ranks))
        .collect()
}

fn pairs(list: &[(&str, &[u32])]) -> Vec<(String, Vec<u32>)> {
    list.iter()
        .map(|(h, r)| (h.to_string(), r.to_vec()))
        .collect()
}

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

// ---- --hosts ----

#[test]
fn hosts_arg_with_and_without_counts() {
    assert_eq!(
        parse_hosts_arg("node1:4,node2:4").unwrap(),
        slots(&[("node1", 4), ("node2", 4)])
    );
    assert_eq!(
        parse_hosts_arg("a, b").unwrap(),
        slots(&[("a", 1), ("b", 1)])
    );
    assert_eq!(
        parse_hosts_arg("10.0.0.1:2,n-1.example_x").unwrap(),
        slots(&[("10.0.0.1", 2), ("n-1.example_x", 1)])
    );
}

#[test]
fn hosts_arg_errors_name_the_text() {
    let e = parse_hosts_arg("a,,b").unwrap_err();
    assert_eq!(e.to_string(), r#"--hosts "a,,b": empty host entry"#);
    let e = parse_hosts_arg("a:x").unwrap_err();
    assert!(
        e.to_string().contains(r#"slots "x" is not a whole number"#),
        "{e}"
    );
    let e = parse_hosts_arg("a:0").unwrap_err();
    assert!(e.to_string().contains("slots of a is 0"), "{e}");
    let e = parse_hosts_arg("a:4294967296").unwrap_err();
    assert!(e.to_string().contains("below 2^32"), "{e}");
    let e = parse_hosts_arg("a:+3").unwrap_err();
    assert!(e.to_string().contains(r#""+3""#), "{e}");
    let e = parse_hosts_arg("a b").unwrap_err();
    assert!(e.to_string().contains(r#""a b" is not a host name"#), "{e}");
    let e = parse_hosts_arg(":2").unwrap_err();
    assert!(e.to_string().contains(r#""" is not a host name"#), "{e}");
    let many = vec!["a"; MAX_HOSTS + 1].join(",");
    assert!(matches!(
        parse_hosts_arg(&many),
        Err(HostsError::HostsArg {
            problem: EntryProblem::TooMany,
            ..
        })
    ));
    assert_eq!(
        parse_hosts_arg(" ").unwrap_err(),
        HostsError::NoHosts {
            origin: "--hosts".into()
        }
    );
}

// ---- hostfiles ----

#[test]
fn hostfile_both_formats_comments_and_blank_lines() {
    let text = "# cluster\n\
                node1:4\n\
                \n\
                node2 slots=2 max_slots=8   # big one\n\
                node3\n\
                \t node4   slots=3\n\
                node5 max-slots=2\n";
    let hosts = parse_hostfile(text, "hosts").unwrap();
    assert_eq!(
        hosts,
        vec![
            HostSlots::new("node1", 4),
            HostSlots {
                name: "node2".into(),
                slots: 2,
                max_slots: Some(8)
            },
            HostSlots::new("node3", 1),
            HostSlots::new("node4", 3),
            HostSlots {
                name: "node5".into(),
                slots: 1,
                max_slots: Some(2)
            },
        ]
    );
}

#[test]
fn hostfile_errors_name_file_and_line() {
    let e = parse_hostfile("a\n\nb slots=two\n", "my.hosts").unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"my.hosts:3: slots "two" is not a whole number below 2^32"#
    );
    let e = parse_hostfile("a\nb cores=2\n", "f").unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"f:2: "cores=2" is not slots=N or max_slots=N"#
    );
    let e = parse_hostfile("a garbage\n", "f").unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"f:1: "garbage" is not slots=N or max_slots=N"#
    );
    let e = parse_hostfile("a:2 slots=2\n", "f").unwrap_err();
    assert_eq!(e.to_string(), "f:1: a: slots given twice");
    let e = parse_hostfile("a slots=9 max_slots=4\n", "f").unwrap_err();
    assert_eq!(e.to_string(), "f:1: a: slots=9 is more than max_slots=4");
    let e = parse_hostfile("a slots=0\n", "f").unwrap_err();
    assert_eq!(e.to_string(), "f:1: slots of a is 0");
    let e = parse_hostfile("a/b\n", "f").unwrap_err();
    assert_eq!(e.to_string(), r#"f:1: "a/b" is not a host name"#);
    let e = parse_hostfile("# nothing\n\n", "empty").unwrap_err();
    assert_eq!(e.to_string(), "empty: no hosts");
    // Windows line ends are white space.
    assert_eq!(
        parse_hostfile("a:2\r\nb\r\n", "f").unwrap(),
        slots(&[("a", 2), ("b", 1)])
    );
}

// ---- Slurm hostlists ----

#[test]
fn hostlist_expressions() {
    let expand = |t: &str| expand_hostlist(t).unwrap();
    assert_eq!(expand("node1"), ["node1"]);
    assert_eq!(expand("node[1-3,7]"), ["node1", "node2", "node3", "node7"]);
    assert_eq!(
        expand("n[01-10]"),
        ["n01", "n02", "n03", "n04", "n05", "n06", "n07", "n08", "n09", "n10"]
    );
    assert_eq!(expand("n[098-101]"), ["n098", "n099", "n100", "n101"]);
    assert_eq!(
        expand("a[1-2]-b[3-4]"),
        ["a1-b3", "a1-b4", "a2-b3", "a2-b4"]
    );
    assert_eq!(expand("x,y[1-2]"), ["x", "y1", "y2"]);
    assert_eq!(expand("[1-2]x"), ["1x", "2x"]);
    assert_eq!(expand("r[1-2]n[1]"), ["r1n1", "r2n1"]);
    assert_eq!(expand("a[8-10],b"), ["a8", "a9", "a10", "b"]);
}

#[test]
fn hostlist_errors_name_the_text() {
    for (text, problem) in [
        ("n[1-3", "'[' without ']'"),
        ("n1-3]", "']' without '['"),
        ("n[3-1]", "runs backwards"),
        ("n[a-b]", "is not N or N-M"),
        ("n[]", "is not N or N-M"),
        ("n[1-2", "without"),
        ("n[[1]]", "nested"),
        ("a,,b", "empty name"),
        ("", "names no hosts"),
        ("n[0-99999999]", "more than"),
        ("n[0-999][0-9999]", "more than"),
        ("n[1-99999999999999999999999]", "too large"),
        ("bad name[1-2]", "is not a host name"),
    ] {
        let e = expand_hostlist(text).unwrap_err().to_string();
        assert!(e.contains(&format!("{text:?}")), "{e}");
        assert!(e.contains(problem), "{text}: {e}");
    }
}

#[test]
fn tasks_per_node() {
    assert_eq!(parse_tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
    assert_eq!(parse_tasks_per_node("4").unwrap(), [4]);
    assert_eq!(parse_tasks_per_node("1(x2),3(x1)").unwrap(), [1, 1, 3]);
    for bad in [
        "",
        "0",
        "2(x0)",
        "2(3)",
        "2(x3",
        "x",
        "-1",
        "2,,1",
        "4294967296",
    ] {
        let e = parse_tasks_per_node(bad).unwrap_err().to_string();
        assert!(e.contains(&format!("{bad:?}")), "{e}");
    }
    assert!(parse_tasks_per_node("1(x4294967295)")
        .unwrap_err()
        .to_string()
        .contains("more than"));
}

#[test]
fn slurm_allocation_from_env() {
    assert_eq!(SlurmAllocation::from_env(env(&[])), Ok(None));
    let a = SlurmAllocation::from_env(env(&[
        ("SLURM_JOB_NODELIST", "n[1-3],m"),
        ("SLURM_TASKS_PER_NODE", "2(x3),1"),
        ("SLURM_NTASKS", "5"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(a.nodes, slots(&[("n1", 2), ("n2", 2), ("n3", 2), ("m", 1)]));
    assert_eq!(a.ntasks, Some(5));
    assert_eq!(a.default_np(), Ok(5));
    // No SLURM_NTASKS (salloc -N 3): the sum of the task counts.
    let a = SlurmAllocation::from_env(env(&[
        ("SLURM_NODELIST", "n[1-3]"),
        ("SLURM_JOB_CPUS_PER_NODE", "4(x3)"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(a.default_np(), Ok(12));
    // No counts at all: one task per node.
    let a = SlurmAllocation::from_env(env(&[("SLURM_JOB_NODELIST", "n[1-2]")]))
        .unwrap()
        .unwrap();
    assert_eq!(a.nodes, slots(&[("n1", 1), ("n2", 1)]));
}

#[test]
fn slurm_allocation_errors() {
    let e = SlurmAllocation::from_env(env(&[
        ("SLURM_JOB_NODELIST", "n[1-3]"),
        ("SLURM_TASKS_PER_NODE", "2(x2)"),
    ]))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "SLURM_JOB_NODELIST names 3 nodes but SLURM_TASKS_PER_NODE gives counts for 2"
    );
    let e = SlurmAllocation::from_env(env(&[("SLURM_JOB_NODELIST", "n[1-")])).unwrap_err();
    assert!(
        e.to_string().starts_with(r#"SLURM_JOB_NODELIST="n[1-": "#),
        "{e}"
    );
    let e = SlurmAllocation::from_env(env(&[
        ("SLURM_JOB_NODELIST", "n1"),
        ("SLURM_NTASKS", "many"),
    ]))
    .unwrap_err();
    assert!(e.to_string().starts_with(r#"SLURM_NTASKS="many": "#), "{e}");
}

// ---- placement ----

#[test]
fn block_fills_hosts_in_order() {
    let hosts = slots(&[("a", 2), ("b", 2)]);
    assert_eq!(
        placed(4, &hosts, None, Mapping::Block),
        pairs(&[("a", &[0, 1]), ("b", &[2, 3])])
    );
    // Fewer ranks than slots: later hosts get none and are left out.
    assert_eq!(
        placed(2, &hosts, None, Mapping::Block),
        pairs(&[("a", &[0, 1])])
    );
}

#[test]
fn more_ranks_than_slots_wrap_around_as_hydra() {
    let hosts = slots(&[("a", 2), ("b", 2)]);
    assert_eq!(
        placed(6, &hosts, None, Mapping::Block),
        pairs(&[("a", &[0, 1, 4, 5]), ("b", &[2, 3])])
    );
    assert_eq!(
        placed(7, &hosts, None, Mapping::Cyclic),
        pairs(&[("a", &[0, 2, 4, 6]), ("b", &[1, 3, 5])])
    );
    // Hosts without counts have one slot: blocks of one alternate.
    let hosts = slots(&[("a", 1), ("b", 1)]);
    assert_eq!(
        placed(4, &hosts, None, Mapping::Block),
        pairs(&[("a", &[0, 2]), ("b", &[1, 3])])
    );
}

#[test]
fn cyclic_skips_full_hosts() {
    let hosts = slots(&[("a", 1), ("b", 3), ("c", 2)]);
    assert_eq!(
        placed(6, &hosts, None, Mapping::Cyclic),
        pairs(&[("a", &[0]), ("b", &[1, 3, 5]), ("c", &[2, 4])])
    );
}

#[test]
fn ppn_sets_every_hosts_slots() {
    let hosts = slots(&[("a", 1), ("b", 8)]);
    assert_eq!(
        placed(4, &hosts, Some(2), Mapping::Block),
        pairs(&[("a", &[0, 1]), ("b", &[2, 3])])
    );
    assert_eq!(
        place(4, &hosts, Some(0), Mapping::Block),
        Err(HostsError::ZeroPpn)
    );
}

#[test]
fn duplicate_hosts_merge_in_order_of_first_appearance() {
    let hosts = slots(&[("b", 1), ("a", 2), ("b", 2)]);
    assert_eq!(
        placed(5, &hosts, None, Mapping::Block),
        pairs(&[("b", &[0, 1, 2]), ("a", &[3, 4])])
    );
    let hosts = slots(&[("a", u32::MAX), ("a", 1)]);
    assert_eq!(
        place(1, &hosts, None, Mapping::Block),
        Err(HostsError::SlotOverflow { host: "a".into() })
    );
}

#[test]
fn max_slots_caps_a_host_over_all_passes() {
    let mut hosts = slots(&[("a", 1), ("b", 1)]);
    hosts[0].max_slots = Some(1);
    assert_eq!(
        placed(4, &hosts, None, Mapping::Block),
        pairs(&[("a", &[0]), ("b", &[1, 2, 3])])
    );
    hosts[1].max_slots = Some(2);
    assert_eq!(
        place(4, &hosts, None, Mapping::Cyclic),
        Err(HostsError::NotEnoughSlots { np: 4, capacity: 3 })
    );
}

#[test]
fn absurd_inputs_are_errors() {
    let hosts = slots(&[("a", 1)]);
    assert_eq!(
        place(0, &hosts, None, Mapping::Block),
        Err(HostsError::NoRanks)
    );
    assert!(matches!(
        place(0, &[], None, Mapping::Block),
        Err(HostsError::NoRanks)
    ));
    assert!(matches!(
        place(1, &[], None, Mapping::Block),
        Err(HostsError::NoHosts { .. })
    ));
    assert_eq!(
        place(1, &slots(&[("a", 0)]), None, Mapping::Block),
        Err(HostsError::ZeroSlots { host: "a".into() })
    );
    assert!(matches!(
        place(u32::MAX, &hosts, None, Mapping::Block),
        Err(HostsError::TooManyRanks { .. })
    ));
}

#[test]
fn this_host_names() {
    for name in [
        "localhost",
        "LOCALHOST",
        "127.0.0.1",
        "127.1.2.3",
        "::1",
        "box",
        "box.lan",
    ] {
        assert!(is_this_host(name, "box.lan"), "{name}");
    }
    assert!(is_this_host("box.lan", "box"));
    for name in ["node1", "box.other", "127.0.0.1.example", "10.0.0.1"] {
        assert!(!is_this_host(name, "box.lan"), "{name}");
    }
}

#[test]
fn ssh_command_is_split_on_white_space() {
    assert_eq!(
        Launcher::Ssh.remote_shell(env(&[])),
        Some(vec!["ssh".into()])
    );
    assert_eq!(
        Launcher::Ssh.remote_shell(env(&[(SSH_ENV, " ")])),
        Some(vec!["ssh".into()])
    );
    assert_eq!(
        Launcher::Ssh.remote_shell(env(&[(SSH_ENV, "ssh -p 2222  -o BatchMode=yes")])),
        Some(
            ["ssh", "-p", "2222", "-o", "BatchMode=yes"]
                .map(String::from)
                .to_vec()
        )
    );
    assert_eq!(
        Launcher::Rsh.remote_shell(env(&[])),
        Some(vec!["rsh".into()])
    );
    assert_eq!(Launcher::Local.remote_shell(env(&[])), None);
}

// ---- resolve ----

fn allocation(nodes: &[(&str, u32)], ntasks: Option<u32>) -> Option<SlurmAllocation> {
    Some(SlurmAllocation {
        nodes: slots(nodes),
        ntasks,
    })
}

#[test]
fn resolve_defaults() {
    // Nothing given: this host, 1 rank, as before.
    let p = PlacementRequest::default().resolve("box").unwrap();
    assert_eq!(
        p,
        Placement {
            np: 1,
            hosts: None,
            launcher: Launcher::Local
        }
    );
    // Hosts all this machine: local; -n defaults to their slots.
    let request = PlacementRequest {
        hosts: Some(slots(&[("localhost", 2), ("box", 1)])),
        ..Default::default()
    };
    let p = request.resolve("box").unwrap();
    assert_eq!((p.np, p.launcher), (3, Launcher::Local));
    assert_eq!(p.remote_hosts("box").count(), 0);
    // A remote host: ssh.
    let request = PlacementRequest {
        np: Some(4),
        hosts: Some(slots(&[("localhost", 2), ("node2", 2)])),
        ..Default::default()
    };
    let p = request.resolve("box").unwrap();
    assert_eq!(p.launcher, Launcher::Ssh);
    assert_eq!(p.remote_hosts("box").collect::<Vec<_>>(), ["node2"]);
}

#[test]
fn resolve_in_a_slurm_allocation() {
    let mut request = PlacementRequest {
        allocation: allocation(&[("n1", 2), ("n2", 2), ("n3", 1)], Some(4)),
        ..Default::default()
    };
    let p = request.resolve("n1").unwrap();
    assert_eq!(p.np, 4);
    assert_eq!(p.launcher, Launcher::Slurm);
    assert_eq!(
        p.hosts.unwrap(),
        vec![
            HostRanks {
                host: "n1".into(),
                ranks: vec![0, 1]
            },
            HostRanks {
                host: "n2".into(),
                ranks: vec![2, 3]
            }
        ]
    );
    request.ppn = Some(1);
    assert_eq!(request.resolve("n1").unwrap().np, 3);
    // --hosts inside an allocation: the list wins, ssh for remote hosts.
    request.hosts = Some(slots(&[("n1", 1), ("n9", 1)]));
    request.ppn = None;
    let p = request.resolve("n1").unwrap();
    assert_eq!((p.np, p.launcher), (2, Launcher::Ssh));
    // --launcher local ignores the allocation.
    let request = PlacementRequest {
        launcher: Some(Launcher::Local),
        allocation: allocation(&[("n1", 2)], None),
        ..Default::default()
    };
    assert_eq!(request.resolve("n1").unwrap().hosts, None);
}

#[test]
fn resolve_rejects_launchers_that_cannot_work() {
    let request = PlacementRequest {
        launcher: Some(Launcher::Slurm),
        ..Default::default()
    };
    let e = request.resolve("box").unwrap_err().to_string();
    assert!(
        e.starts_with("--launcher slurm: not inside a Slurm allocation"),
        "{e}"
    );
    let request = PlacementRequest {
        launcher: Some(Launcher::Ssh),
        ..Default::default()
    };
    let e = request.resolve("box").unwrap_err().to_string();
    assert_eq!(e, "--launcher ssh: needs --hosts or --hostfile");
    let request = PlacementRequest {
        launcher: Some(Launcher::Local),
        hosts: Some(slots(&[("box", 1), ("far", 1)])),
        ..Default::default()
    };
    // As hydra's fork launcher: every host's daemon runs here.
    let placed = request.resolve("box").unwrap();
    assert_eq!(placed.launcher, Launcher::Local);
    assert_eq!(placed.hosts.map(|h| h.len()), Some(2));
}

// ---- properties ----

fn any_hosts() -> impl Strategy<Value = Vec<HostSlots>> {
    proptest::collection::vec((0u8..6, 1u32..5, proptest::option::of(1u32..6)), 1..8).prop_map(
        |entries| {
            entries
                .into_iter()
                .map(|(n, slots, max)| HostSlots {
                    name: format!("h{n}"),
                    slots,
                    max_slots: max.map(|m| m.max(slots)),
                })
                .collect()
        },
    )
}

fn any_mapping() -> impl Strategy<Value = Mapping> {
    prop_oneof![Just(Mapping::Block), Just(Mapping::Cyclic)]
}

proptest! {
    /// Every rank lands exactly once, hosts appear once in order of first appearance, ranks
    /// are sorted, and no host goes over its max_slots.
    #[test]
    fn every_rank_placed_exactly_once(
        np in 1u32..60,
        hosts in any_hosts(),
        ppn in proptest::option::of(1u32..4),
        mapping in any_mapping(),
    ) {
        let Ok(placed) = place(np, &hosts, ppn, mapping) else {
            // Only a lack of max_slots room may fail.
            let capacity: u64 = merge_hosts(&hosts, ppn)
                .unwrap()
                .iter()
                .map(|h| h.max_slots.map_or(u64::MAX, u64::from))
                .fold(0u64, u64::saturating_add);
            prop_assert!(capacity < u64::from(np));
            return Ok(());
        };
        let mut all: Vec<u32> = placed.iter().flat_map(|h| h.ranks.clone()).collect();
        all.sort_unstable();
        prop_assert_eq!(all, (0..np).collect::<Vec<_>>());
        let mut first_seen: Vec<&str> = Vec::new();
        for h in &hosts {
            if !first_seen.contains(&h.name.as_str()) {
                first_seen.push(&h.name);
            }
        }
        let order: Vec<&str> = placed.iter().map(|h| h.host.as_str()).collect();
        let expected: Vec<&str> = first_seen.into_iter().filter(|n| order.contains(n)).collect();
        prop_assert_eq!(order, expected);
        let merged = merge_hosts(&hosts, ppn).unwrap();
        for h in &placed {
            prop_assert!(h.ranks.windows(2).all(|w| w[0] < w[1]));
            let host = merged.iter().find(|m| m.name == h.host).unwrap();
            if let Some(max) = host.max_slots {
                prop_assert!(h.ranks.len() as u64 <= u64::from(max));
            }
        }
    }

    /// Without oversubscription, a block placement gives each host one contiguous run of
    /// ranks, no longer than its slots, and the runs follow the hosts' order.
    #[test]
    fn block_keeps_ranks_contiguous_per_host(
        counts in proptest::collection::vec(1u32..6, 1..8),
        fill in 0.0f64..1.0,
    ) {
        let hosts: Vec<HostSlots> = counts
            .iter()
            .enumerate()
            .map(|(i, &s)| HostSlots::new(format!("h{i}"), s))
            .collect();
        let total: u32 = counts.iter().sum();
        let np = 1 + ((f64::from(total - 1)) * fill) as u32;
        let placed = place(np, &hosts, None, Mapping::Block).unwrap();
        let mut next = 0;
        for (h, count) in placed.iter().zip(&counts) {
            prop_assert_eq!(h.ranks[0], next);
            prop_assert!(h.ranks.windows(2).all(|w| w[1] == w[0] + 1));
            prop_assert!(h.ranks.len() as u32 <= *count);
            next += h.ranks.len() as u32;
        }
        prop_assert_eq!(next, np);
    }

    /// Without max_slots or repeated hosts, block placement is hydra's: the i-th rank of a host
    /// with s slots, whose first slot is slot f of all S, is (i / s) * S + i % s + f
    /// (HYDU_local_to_global_id).
    #[test]
    fn block_is_hydras_placement(counts in proptest::collection::vec(1u32..6, 1..8), np in 1u32..100) {
        let hosts: Vec<HostSlots> = counts
            .iter()
            .enumerate()
            .map(|(i, &s)| HostSlots::new(format!("h{i}"), s))
            .collect();
        let total: u32 = counts.iter().sum();
        let placed = place(np, &hosts, None, Mapping::Block).unwrap();
        let mut first = 0;
        for (h, &s) in placed.iter().zip(&counts) {
            for (i, &rank) in h.ranks.iter().enumerate() {
                let i = i as u32;
                prop_assert_eq!(rank, (i / s) * total + i % s + first);
            }
            first += s;
        }
    }

    /// Cyclic placement on equal slots puts rank r on host r mod hosts.
    #[test]
    fn cyclic_on_equal_slots_is_round_robin(hosts in 1usize..9, each in 1u32..4, np in 1u32..80) {
        let list: Vec<HostSlots> = (0..hosts).map(|i| HostSlots::new(format!("h{i}"), each)).collect();
        for h in place(np, &list, None, Mapping::Cyclic).unwrap() {
            let index: usize = h.host[1..].parse().unwrap();
            prop_assert!(h.ranks.iter().all(|&r| r as usize % hosts == index));
        }
    }

    /// Expanding a generated bracket range gives the range, padded as the lower bound.
    #[test]
    fn hostlist_expand_of_a_range_gives_the_range(
        prefix in "[a-z]{1,4}",
        low in 0u64..2000,
        len in 0u64..50,
        pad in 0usize..6,
    ) {
        let high = low + len;
        let width = pad.max(low.to_string().len());
        let text = format!("{prefix}[{low:0width$}-{high}]");
        let expected: Vec<String> = (low..=high).map(|n| format!("{prefix}{n:0width$}")).collect();
        prop_assert_eq!(expand_hostlist(&text).unwrap(), expected);
    }

    /// Comma lists of names and ranges expand to the concatenation of their parts.
    #[test]
    fn hostlist_parts_concatenate(parts in proptest::collection::vec(("[a-z]{1,3}", 0u64..20, 0u64..5), 1..5)) {
        let text: Vec<String> = parts.iter().map(|(p, lo, n)| format!("{p}[{lo}-{}]", lo + n)).collect();
        let expected: Vec<String> = parts
            .iter()
            .flat_map(|(p, lo, n)| (*lo..=lo + n).map(move |i| format!("{p}{i}")))
            .collect();
        prop_assert_eq!(expand_hostlist(&text.join(",")).unwrap(), expected);
    }

    /// Task counts written in Slurm's compressed form come back as the list.
    #[test]
    fn tasks_per_node_round_trip(runs in proptest::collection::vec((1u32..100, 1u32..5), 1..6)) {
        let text: Vec<String> = runs
            .iter()
            .map(|&(c, r)| if r == 1 { c.to_string() } else { format!("{c}(x{r})") })
            .collect();
        let expected: Vec<u32> = runs.iter().flat_map(|&(c, r)| std::iter::repeat_n(c, r as usize)).collect();
        prop_assert_eq!(parse_tasks_per_node(&text.join(",")).unwrap(), expected);
    }

    /// No text makes the parsers panic.
    #[test]
    fn parsers_never_panic(text in "[a-z0-9\\[\\],:=()x# \\n-]{0,40}") {
        let _ = parse_hosts_arg(&text);
        let _ = parse_hostfile(&text, "f");
        let _ = expand_hostlist(&text);
        let _ = parse_tasks_per_node(&text);
    }
}
