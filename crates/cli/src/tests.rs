//! Unit tests of the `ferry` command line's argument handling.

use super::*;

fn parse(args: &[&str]) -> RunArgs {
    let argv = args.iter().map(OsString::from).collect();
    match Cli::try_parse_from(normalize_run_args(argv)) {
        Ok(Cli {
            command: Command::Run(args),
        }) => args,
        Ok(other) => panic!("not a run command: {other:?}"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn the_programs_options_are_its_own() {
    let args = parse(&[
        "ferry",
        "run",
        "-n",
        "2",
        "/usr/bin/time",
        "-f",
        "%e",
        "./app",
    ]);
    assert_eq!(args.np, Some(2));
    assert!(args.hostfile.is_none());
    assert_eq!(args.program, "/usr/bin/time");
    assert_eq!(args.args, ["-f", "%e", "./app"]);
    let args = parse(&[
        "ferry", "run", "-n", "1", "./app", "-n", "100", "--hosts", "x",
    ]);
    assert_eq!(args.np, Some(1));
    assert_eq!(args.args, ["-n", "100", "--hosts", "x"]);
    let args = parse(&["ferry", "run", "-n", "1", "--", "./app", "-n", "3"]);
    assert_eq!((args.program.to_str(), args.args.len()), (Some("./app"), 2));
}

#[test]
fn np_spellings() {
    assert_eq!(parse(&["ferry", "run", "-n", "4", "true"]).np, Some(4));
    assert_eq!(parse(&["ferry", "run", "--np", "5", "true"]).np, Some(5));
    assert_eq!(parse(&["ferry", "run", "-np", "6", "true"]).np, Some(6));
    assert_eq!(parse(&["ferry", "run", "-np=7", "true"]).np, Some(7));
    assert_eq!(parse(&["ferry", "run", "-npes", "3", "true"]).np, Some(3));
    let args = parse(&[
        "ferry", "run", "--hosts", "a:2", "-npes=2", "true", "-npes", "9",
    ]);
    assert_eq!(args.np, Some(2));
    assert_eq!(args.args, ["-npes", "9"]);
    assert_eq!(parse(&["ferry", "run", "true"]).np, None);
}

#[test]
fn host_option_spellings() {
    for spelling in [
        &["--hosts", "a:2,b"][..],
        &["-hosts", "a:2,b"],
        &["--host", "a:2,b"],
        &["-host", "a:2,b"],
        &["-hosts=a:2,b"],
        &["--hosts=a:2,b"],
    ] {
        let argv: Vec<&str> = ["ferry", "run"]
            .iter()
            .chain(spelling)
            .chain(&["-n", "2", "prog", "-hosts", "x"])
            .copied()
            .collect();
        let args = parse(&argv);
        assert_eq!(args.hosts.as_deref(), Some("a:2,b"), "{spelling:?}");
        assert_eq!(args.args, ["-hosts", "x"]);
    }
    for spelling in [
        "-f",
        "--hostfile",
        "-hostfile",
        "--machinefile",
        "-machinefile",
    ] {
        let args = parse(&["ferry", "run", spelling, "hosts.txt", "prog"]);
        assert_eq!(args.hostfile.as_deref(), Some("hosts.txt".as_ref()));
        assert_eq!(args.program, "prog");
    }
    let args = parse(&["ferry", "run", "-ppn", "2", "-rr", "prog"]);
    let mapping = |args: &RunArgs| host_mapping(args.map_by.as_deref());
    assert_eq!((args.ppn, mapping(&args)), (Some(2), Mapping::Cyclic));
    let args = parse(&["ferry", "run", "--map-by", "block", "--ppn=3", "prog"]);
    assert_eq!((args.ppn, mapping(&args)), (Some(3), Mapping::Block));
    assert_eq!(mapping(&parse(&["ferry", "run", "prog"])), Mapping::Block);
    let args = parse(&["ferry", "run", "-map-by", "ppr:2:socket:PE=2", "prog"]);
    assert_eq!(mapping(&args), Mapping::Block);
    assert_eq!(args.map_by.as_deref(), Some("ppr:2:socket:PE=2"));
    let args = parse(&[
        "ferry",
        "run",
        "-bind-to",
        "socket",
        "--cpus-per-proc",
        "2",
        "prog",
    ]);
    assert_eq!(
        (args.bind_to.as_deref(), args.cpus_per_rank),
        (Some("socket"), Some(2))
    );
    let args = parse(&["ferry", "run", "-launcher", "fork", "prog"]);
    assert_eq!(args.launcher, Some(LauncherArg::Local));
    let args = parse(&[
        "ferry",
        "run",
        "--launcher",
        "slurm",
        "--rails",
        "2",
        "prog",
    ]);
    assert_eq!(args.launcher, Some(LauncherArg::Slurm));
    assert_eq!(args.program, "prog");
}

#[test]
fn hosts_hostfile_and_grid_exclude_each_other() {
    for argv in [
        &["ferry", "run", "--hosts", "a", "--hostfile", "f", "prog"][..],
        &["ferry", "run", "--hosts", "a", "--grid", "g.toml", "prog"],
        &["ferry", "run", "-f", "f", "--grid", "g.toml", "prog"],
        &["ferry", "run", "--ppn", "2", "--grid", "g.toml", "prog"],
    ] {
        let argv = argv.iter().map(OsString::from).collect();
        let e = Cli::try_parse_from(normalize_run_args(argv)).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
    }
}

#[test]
fn program_arguments_are_verbatim() {
    let args = parse(&[
        "ferry",
        "run",
        "--tag-output",
        "-n",
        "2",
        "prog",
        "-np",
        "3",
        "--tag-output",
        "-x",
    ]);
    assert_eq!(args.program, "prog");
    assert_eq!(args.args, ["-np", "3", "--tag-output", "-x"]);
    assert!(args.tag_output);
    let args = parse(&["ferry", "run", "--", "-prog", "-n"]);
    assert_eq!(args.program, "-prog");
    assert_eq!(args.args, ["-n"]);
}

#[test]
fn other_subcommands_called_run_keep_their_arguments() {
    let argv: Vec<OsString> = [
        "ferry",
        "sim",
        "run",
        "--nodes",
        "10000",
        "--algorithm",
        "ecef",
    ]
    .map(OsString::from)
    .into();
    assert_eq!(normalize_run_args(argv.clone()), argv);
    match Cli::try_parse_from(normalize_run_args(argv)) {
        Ok(Cli {
            command: Command::Sim(_),
        }) => {}
        other => panic!("ferry sim run --nodes 10000 --algorithm ecef: {other:?}"),
    }
    // `ferry run` itself, also with a program called run.
    let args = parse(&["ferry", "run", "-np", "2", "run", "-np", "3"]);
    assert_eq!((args.np, args.program.to_str()), (Some(2), Some("run")));
    assert_eq!(args.args, ["-np", "3"]);
}

#[test]
fn gdb_spellings_and_the_command_each_rank_runs() {
    for spelling in ["-gdb", "--gdb"] {
        let args = parse(&["ferry", "run", spelling, "-n", "2", "prog", "-gdb", "x"]);
        assert!(args.gdb, "{spelling}");
        assert_eq!(args.args, ["-gdb", "x"]);
    }
    assert!(!parse(&["ferry", "run", "prog"]).gdb);
    let (gdb, args) = under_gdb("prog".into(), vec!["-gdb".into()]);
    assert_eq!(gdb, "gdb");
    assert_eq!(
        args,
        [
            "-q",
            "-batch",
            "-return-child-result",
            "-ex",
            "run",
            "-ex",
            "thread apply all bt",
            "--args",
            "prog",
            "-gdb"
        ]
    );
}

#[test]
fn timeout_and_transport() {
    let args = parse(&[
        "ferry",
        "run",
        "--timeout",
        "1.5",
        "--transport",
        "tcp",
        "true",
    ]);
    assert_eq!(args.timeout, Some(Duration::from_millis(1500)));
    assert_eq!(args.transport, Some(Transport::Tcp));
    let argv = ["ferry", "run", "--timeout", "-1", "true"].map(OsString::from);
    assert!(Cli::try_parse_from(argv).is_err());
    let argv = ["ferry", "run", "-n", "0", "true"].map(OsString::from);
    assert!(Cli::try_parse_from(argv).is_err());
}

#[test]
fn bench_import_numbers_are_checked_against_their_ranges() {
    let parse = |extra: &[&str]| {
        let argv: Vec<OsString> = ["ferry", "bench", "import"]
            .iter()
            .chain(extra)
            .map(OsString::from)
            .collect();
        Cli::try_parse_from(normalize_bench_import(argv))
    };
    assert!(parse(&[]).is_ok());
    for bad in [
        &["--window", "0"][..],
        &["--window", "100000"],
        &["--rounds", "0"],
        &["--timeout", "0"],
        &["--timeout", "-1"],
        &["--timeout", "nan"],
        &["--packets", "0"],
        &["--packets", "1GiB"],
        &["--size", "0"],
        &["--procs", "0"],
        &["--rails", "17"],
    ] {
        assert!(parse(bad).is_err(), "{bad:?} accepted");
    }
}
