//! MPI C programs (`tests/c/*.c`) that check what the MPI 4.1 standard says, beyond MPICH's
//! conformance tiers: error classes under `MPI_ERRORS_RETURN` and `MPI_ERRORS_ARE_FATAL`
//! (every collective, point-to-point, one-sided and pack call checking its buffers, counts,
//! handles, ranks and roots before it touches memory, on shared memory and on TCP), the
//! send modes, persistent requests, cancel, the wait/test family with null requests,
//! `MPI_PROC_NULL`, message order and probes, non-contiguous messages, communicator
//! construction and comparison, attribute callbacks, `MPI_IN_PLACE`, collectives with derived
//! types, non-commutative reductions, nonblocking collectives, derived-datatype queries, the
//! MPI 4.0 persistent collectives, large-count (`_c`) calls and sessions, generalized requests,
//! MPI I/O (views, ordered and shared-pointer access, error classes of files), one-sided
//! communication (error classes, lock contention, fence, post/start/complete/wait), the tool
//! information interface (MPI_T), and the calls MPICH ships for old and Fortran-interop programs
//! (removed MPI-1 calls, MPI_LB/MPI_UB, session error handlers, `MPI_Type_create_f90_*`, status
//! conversion, and handle conversion), MPI_THREAD_MULTIPLE (threads of a rank calling MPI at
//! once), ports, names and disconnect between groups of one job (with MPI_Comm_spawn's
//! error), and MPI_Comm_spawn(_multiple) (`spawn.c`, checked with Open MPI: Debian's MPICH
//! cannot spawn here).
//!
//! Each program was checked against MPICH first (`mpicc.mpich`, `mpiexec.mpich`); it prints
//! ` No Errors` from rank 0 and exits non-zero on failure, as MPICH's own tests. They are
//! compiled with `bin/mpicc` against the `libmpi.so` of this build and run with `ferry run`.
//!
//! Needs a C compiler (`cc`, or `$FERRY_CC`), and `ferry` and `libmpi.so` in this test's target
//! directory: `cargo test --release --workspace` builds both (or `cargo build --release -p
//! ferry-cli -p ferry-mpi`). Jobs run one at a time (two cores).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

mod common;
use common::{libdir, profile_dir};

/// Compiles `name.c` with `mpicc` (once per test run) and gives the executable's path. Each
/// program is compiled on first use, so one that needs a missing function only fails its own
/// (ignored) test.
fn program(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    static DIR: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    let (lib, out) = DIR.get_or_init(|| {
        let out = profile_dir().join("mpi-c-tests");
        std::fs::create_dir_all(&out).expect("temp dir");
        (libdir(), out)
    });
    let exe = out.join(name);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|b| b == name) {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = Command::new(here.join("bin/mpicc"))
            .env("FERRY_LIBDIR", lib)
            .args(["-std=c99", "-D_DEFAULT_SOURCE", "-O2", "-Wall", "-Werror"])
            .arg(here.join("tests/c").join(format!("{name}.c")))
            .arg("-o")
            .arg(&exe)
            .status()
            .expect("run mpicc");
        assert!(status.success(), "mpicc failed on {name}.c");
        built.push(name.to_string());
    }
    exe
}

fn run(n: u32, prog: &str, args: &[&str]) -> Output {
    run_in_env(n, prog, args, &[])
}

/// [`run`] with environment variables set for the job.
fn run_in_env(n: u32, prog: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    run_within(n, prog, args, env, 30)
}

/// [`run_in_env`] with the launcher ending the job after `timeout` seconds.
fn run_within(n: u32, prog: &str, args: &[&str], env: &[(&str, &str)], timeout: u32) -> Output {
    let exe = program(prog);
    let ferry = profile_dir().join("ferry");
    assert!(
        ferry.exists(),
        "{} is missing: run `cargo build --release -p ferry-cli`",
        ferry.display()
    );
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(ferry);
    // `cargo test` puts target/<profile> on LD_LIBRARY_PATH, which beats the programs' runpath
    // and would load a stale libmpi.so from there.
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd.envs(env.iter().copied());
    cmd.args([
        "run",
        "-n",
        &n.to_string(),
        "--timeout",
        &timeout.to_string(),
    ])
    .arg(exe)
    .args(args);
    cmd.output().expect("ferry run")
}

/// Runs `prog` on `n` processes: it must exit 0 and print ` No Errors`.
#[track_caller]
fn no_errors(n: u32, prog: &str) {
    no_errors_with(n, prog, &[]);
}

/// [`no_errors`] with program arguments.
#[track_caller]
fn no_errors_with(n: u32, prog: &str, args: &[&str]) {
    no_errors_in_env(n, prog, args, &[]);
}

/// [`no_errors_with`] with environment variables set for the job.
#[track_caller]
fn no_errors_in_env(n: u32, prog: &str, args: &[&str], env: &[(&str, &str)]) {
    no_errors_within(n, prog, args, env, 30);
}

/// [`no_errors_in_env`] with the launcher ending the job after `timeout` seconds.
#[track_caller]
fn no_errors_within(n: u32, prog: &str, args: &[&str], env: &[(&str, &str)], timeout: u32) {
    let out = run_within(n, prog, args, env, timeout);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(" No Errors"),
        "{prog} on {n} processes failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `fatal <case>`: the job must fail and the message must name `call`.
#[track_caller]
fn fatal(case: &str, call: &str) {
    let out = run(2, "fatal", &[case]);
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "fatal {case}: the job succeeded\n{stdout}\n{err}"
    );
    assert!(
        !stdout.contains("survived"),
        "fatal {case}: the program went on after the error\n{stdout}"
    );
    assert!(
        err.contains(call),
        "fatal {case}: the message does not name {call}\n{err}"
    );
}

#[test]
fn error_classes_with_errors_return() {
    no_errors(2, "errors");
}

#[test]
fn more_argument_errors_in_collectives() {
    no_errors(2, "errors2");
}

#[test]
fn every_collective_checks_its_arguments_before_touching_memory() {
    for transport in ["shm", "tcp"] {
        no_errors_in_env(2, "argcheck", &[], &[("FERRY_TRANSPORT", transport)]);
    }
}

#[test]
fn counts_times_extents_that_overflow_are_errors_not_crashes() {
    for transport in ["shm", "tcp"] {
        no_errors_in_env(2, "overflow", &[], &[("FERRY_TRANSPORT", transport)]);
    }
}

#[test]
fn point_to_point_one_sided_and_request_calls_check_their_arguments() {
    for transport in ["shm", "tcp"] {
        no_errors_in_env(2, "argcheck2", &[], &[("FERRY_TRANSPORT", transport)]);
    }
}

#[test]
fn errors_are_fatal_by_default_and_name_the_call() {
    fatal("send", "MPI_Send");
    fatal("bcast", "MPI_Bcast");
    fatal("errhandler", "MPI_Allreduce");
    fatal("file", "MPI_File_open");
}

#[test]
fn a_process_that_exits_without_finalize_ends_the_job_at_once() {
    // Without MPI_Finalize the library must not run the collective finalize at exit (it would
    // wait for ranks that wait for this one): the launcher sees the exit and names it.
    fatal("exit1", "rank 1 (");
    fatal("exit1", "exited with code 1");
    fatal("exit0", "exited without calling finalize");
}

#[test]
fn mpi_abort_ends_the_job_with_its_code() {
    let out = run(2, "fatal", &["abort"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "MPI_Abort(…, 7): {err}");
    assert!(err.contains("MPI_Abort"), "{err}");
}

#[test]
fn nonblocking_and_blocking_collectives_started_in_different_orders_match_their_kind() {
    for n in [2, 3, 4] {
        no_errors(n, "nbc_order");
    }
}

#[test]
fn synchronous_send_waits_for_the_receive() {
    no_errors(2, "ssend");
}

#[test]
fn buffered_and_ready_sends() {
    no_errors(2, "bsend");
}

#[test]
fn mpi_5_abi_queries_status_fields_request_queries_buffers_and_error_removal() {
    no_errors(2, "mpi5");
}

#[test]
fn persistent_requests() {
    no_errors(2, "persistent");
}

#[test]
fn partitioned_communication() {
    no_errors(2, "partitioned");
}

#[test]
fn partitioned_partition_counts_differ_ready_orders_rounds_and_errors() {
    no_errors(2, "partitioned2");
}

/// MPI_Parrived reports a partition while a later one is not ready yet.
#[test]
fn partitioned_partitions_arrive_before_the_later_ones_are_ready() {
    no_errors(2, "partitioned_early");
}

#[test]
fn partitioned_partitions_arrive_step_by_step_in_any_cut_over_shm_and_tcp() {
    for transport in ["shm", "tcp"] {
        no_errors_in_env(
            2,
            "partitioned_steps",
            &[],
            &[("FERRY_TRANSPORT", transport)],
        );
        no_errors_in_env(
            2,
            "partitioned_early",
            &[],
            &[("FERRY_TRANSPORT", transport)],
        );
    }
}

#[test]
fn persistent_buffered_ready_and_any_source_requests() {
    no_errors(3, "persistent2");
}

#[test]
fn persistent_collectives_startall_mixes_large_count_calls_and_generalized_requests() {
    no_errors(4, "mpi4");
}

#[test]
fn mpi41_bound_persistent_arrays_null_names_shared_query_large_contents_and_win_sync_progress() {
    no_errors(1, "mpi41");
    no_errors(3, "mpi41");
}

#[test]
fn sessions_without_inside_and_overlapping_mpi_init() {
    no_errors(3, "sessions");
    no_errors_with(3, "sessions", &["world"]);
    no_errors_with(3, "sessions", &["late"]);
}

#[test]
fn compression_counters_are_performance_variables() {
    // Two ranks over TCP on this host: FERRY_COMPRESS=on compresses on every TCP link.
    no_errors_in_env(
        2,
        "mpit_compress",
        &["on"],
        &[("FERRY_TRANSPORT", "tcp"), ("FERRY_COMPRESS", "on")],
    );
    no_errors_in_env(
        2,
        "mpit_compress",
        &["off"],
        &[("FERRY_TRANSPORT", "tcp"), ("FERRY_COMPRESS", "off")],
    );
}

#[test]
fn tool_interface_variables_categories_and_errors() {
    no_errors(1, "mpit");
    no_errors(3, "mpit");
    // Control variables read the settings in effect: those the environment sets, and the
    // automatic ring size resolved (16 MiB / 2 ranks, at most 1 MiB); over TCP there is no ring.
    no_errors_in_env(
        2,
        "mpit",
        &[
            "ferry_shm_eager=12345",
            "ferry_spin=77",
            "ferry_shm_ring=1048576",
            "ferry_transport=2",
            "ferry_cma=3",
        ],
        &[
            ("FERRY_SHM_EAGER", "12345"),
            ("FERRY_SPIN", "77"),
            ("FERRY_CMA", "off"),
        ],
    );
    no_errors_in_env(
        2,
        "mpit",
        &[
            "ferry_transport=1",
            "ferry_shm_ring=0",
            "ferry_tcp_eager=4096",
            "ferry_rails=1",
            "ferry_rail_addrs=",
        ],
        &[("FERRY_TRANSPORT", "tcp"), ("FERRY_TCP_EAGER", "4096")],
    );
}

#[test]
fn tool_events_are_raised_delivered_and_dropped() {
    // t_events.c names the transport, which the path and rendezvous events show.
    no_errors_with(2, "t_events", &["shm"]);
    no_errors_in_env(2, "t_events", &["tcp"], &[("FERRY_TRANSPORT", "tcp")]);
}

#[test]
fn removed_mpi1_calls_session_errhandlers_f90_types_and_status_conversion() {
    no_errors(2, "oldapi");
}

#[test]
fn cancel_and_wait_test_family_with_null_requests() {
    no_errors(2, "waitsome");
}

#[test]
fn receive_requests_on_the_world_and_on_a_reordered_communicator() {
    no_errors(2, "recvhandles");
}

#[test]
fn proc_null_and_zero_length_messages() {
    no_errors(2, "procnull");
}

#[test]
fn message_order_probe_and_partial_elements() {
    no_errors(3, "probe");
}

#[test]
fn messages_to_oneself_and_progress_by_polling() {
    no_errors(2, "selfmsg");
}

#[test]
fn non_contiguous_point_to_point() {
    no_errors(2, "p2ptypes");
}

#[test]
fn communicator_construction_and_comparison() {
    no_errors(4, "comm");
}

#[test]
fn split_type_hardware_guided_and_unguided() {
    no_errors(4, "splittype");
}

#[test]
fn overlapping_create_group_and_opposite_order_nonblocking_collectives() {
    no_errors(4, "comm2");
}

#[test]
fn rank_order_in_split_create_and_dup() {
    no_errors(4, "ranks");
}

#[test]
fn intercommunicators_uneven_groups_merge_split_create_and_collectives() {
    no_errors(5, "inter");
}

#[test]
fn a_collective_with_a_smaller_count_is_truncated_not_a_protocol_error() {
    no_errors(2, "coll_truncate");
    no_errors(3, "coll_truncate");
}

#[test]
fn ranks_that_take_different_ways_through_a_collective_end_the_job_naming_the_call() {
    for (n, case) in [
        (3, &["bcast-long"][..]),
        (3, &["bcast-short"]),
        (3, &["reduce"]),
        (2, &["allreduce"]),
        (3, &["alltoall"]),
        // The root runs 60 calls past the others, then finalizes; or 100, and waits for a
        // post slot to be read.
        (3, &["bcast-ahead", "60"]),
        (3, &["bcast-ahead", "100"]),
        (3, &["bcast-post"]),
        (4, &["bcast-post"]),
    ] {
        let out = run(n, "coll_paths", case);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && stderr.contains("cannot complete")
                && stderr.contains("went through the shared segment")
                && (case[0] != "bcast-post"
                    || stderr.contains("through the shared segment's post slots"))
                && !stderr.contains("timed out"),
            "{case:?} on {n} ranks: status {:?}\nstdout:\n{}\nstderr:\n{stderr}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn a_collective_message_queued_behind_a_flood_is_sent_as_it_was() {
    // Over TCP too, whose sends queue the same way when the socket is full.
    no_errors(2, "coll_behind_flood");
    no_errors_in_env(2, "coll_behind_flood", &[], &[("FERRY_TRANSPORT", "tcp")]);
}

#[test]
fn nonblocking_intercommunicator_collectives_match_the_blocking_ones() {
    no_errors(5, "inter_nbc");
}

#[test]
fn topologies_and_neighbourhood_collectives() {
    // 1: self loops only; 4: a 2x2 grid with edges, a ring graph; 9: a periodic 3x3 grid.
    for n in [1, 4, 9] {
        no_errors(n, "neighbors");
    }
}

#[test]
fn attribute_callbacks() {
    no_errors(2, "attrs");
}

#[test]
fn collectives_through_the_shared_segment_at_every_chunking() {
    no_errors(4, "shmcoll");
    // A segment of 128 KiB: every call of 64 KiB and up takes several chunks.
    no_errors_in_env(3, "shmcoll", &[], &[("FERRY_COLL_SHM", "131072")]);
    // Off: the same calls by messages.
    no_errors_in_env(3, "shmcoll", &[], &[("FERRY_COLL_SHM", "0")]);
    no_errors_with(8, "shmcoll", &["quick"]);
}

#[test]
fn a_fault_tolerant_job_survives_a_killed_rank() {
    // Checked with Open MPI 5.0.11 (mpiexec --with-ft ulfm), which passes it too.
    let ft = [("FERRY_FAULT_TOLERANT", "1")];
    for n in [3, 4] {
        no_errors_in_env(n, "ulfm", &[], &ft);
    }
    no_errors_in_env(4, "ulfm", &[], &[ft[0], ("FERRY_TRANSPORT", "tcp")]);
}

#[test]
fn a_fault_tolerant_job_survives_random_kills_in_a_loop_of_mixed_operations() {
    // Open MPI 5.0.11 (mpiexec --with-ft ulfm) passes the one and agree modes (see
    // docs/fault-tolerance.md for the others). The seed picks the point
    // (seed % 13): 1 between a send and its receive, 3 with a rendezvous Irecv posted, 4 before
    // an allreduce, 8 between MPI_Iallreduce and its wait, 10 between a send and a receive from
    // MPI_ANY_SOURCE, 2 before a rendezvous ring; `agree`/`shrink` kill inside those calls.
    let ft = ("FERRY_FAULT_TOLERANT", "1");
    let runs: [(&str, &str, &str); 8] = [
        ("shm", "1", "one"),
        ("shm", "3", "one"),
        ("shm", "8", "one"),
        ("shm", "4", "two"),
        ("shm", "5", "agree"),
        ("tcp", "10", "one"),
        ("tcp", "2", "two"),
        ("tcp", "6", "shrink"),
    ];
    for (transport, seed, mode) in runs {
        let env = [ft, ("FERRY_TRANSPORT", transport)];
        let out = run_within(4, "ulfm_stress", &[seed, mode, "6"], &env, 60);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let dead = if mode == "two" { 2 } else { 1 };
        assert!(
            out.status.success()
                && stdout.contains(" No Errors")
                && stderr.contains(&format!("{dead} of 4 ranks failed; the others finished")),
            "ulfm_stress {seed} {mode} on {transport} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
    }
}

#[test]
fn zero_count_collectives_between_collectives_with_data_send_nothing() {
    for n in [2, 3, 4] {
        no_errors(n, "zerocount");
    }
    // Without the shared segment every call with data goes by messages.
    no_errors_in_env(3, "zerocount", &[], &[("FERRY_COLL_SHM", "0")]);
}

#[test]
fn sixty_four_ranks_on_two_cores_run_collectives() {
    no_errors_with(64, "shmcoll", &["quick"]);
}

#[test]
fn in_place_collectives() {
    no_errors(4, "inplace");
}

#[test]
fn collectives_with_derived_types() {
    no_errors(4, "colltypes");
}

#[test]
fn non_commutative_and_loc_reductions() {
    no_errors(4, "reduce");
    // Two ranks exchange their vectors instead (in place, long ones go through the segment).
    no_errors(2, "reduce");
}

#[test]
fn nonblocking_collectives_overlapped() {
    no_errors(4, "nbc");
}

#[test]
fn user_error_handlers_and_more_error_classes() {
    no_errors(2, "errhandler");
}

#[test]
fn predefined_ops_on_pair_complex_bool_and_fixed_width_types() {
    no_errors(4, "loctypes");
}

#[test]
fn user_op_may_query_its_datatype() {
    no_errors(2, "opcallback");
}

#[test]
fn user_op_may_call_mpi_abort() {
    let out = run(2, "opcallback", &["abort"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.code() == Some(3) && !stdout.contains("survived"),
        "MPI_Abort(…, 3) in a user op did not end the job with 3\n{stdout}\n{err}"
    );
    assert!(
        err.contains("MPI_Abort") && !err.contains("panicked"),
        "MPI_Abort in a user op: {err}"
    );
}

#[test]
fn fortran_handle_conversion_large_count_rma_and_rma_error_checks() {
    no_errors_with(2, "interop", &["user"]);
    no_errors_with(3, "interop", &["user"]);
}

#[test]
fn large_messages_status_helpers_and_send_cancel() {
    no_errors(3, "large");
}

#[test]
fn environment_info_groups_zero_counts_and_finalize_of_self_attributes() {
    no_errors(3, "misc");
}

#[test]
fn mpi_bottom_freed_types_partial_structs_and_contents() {
    no_errors(2, "types2");
}

#[test]
fn mpi_calls_inside_error_handlers_and_attribute_callbacks() {
    no_errors(2, "callbacks");
}

#[test]
fn non_overtaking_across_eager_and_rendezvous() {
    no_errors(2, "order2");
}

#[test]
fn thousands_of_communicators_requests_and_objects() {
    no_errors(2, "resources");
}

#[test]
fn errors_reported_by_the_completion_calls() {
    no_errors(2, "reqerrors");
}

#[test]
fn collectives_on_large_buffers() {
    no_errors(4, "bigcoll");
    // Two ranks run long exchanges step by step, with CMA copies.
    no_errors(2, "bigcoll");
}

#[test]
fn more_than_2_pow_31_elements_through_the_large_count_calls_on_shared_memory() {
    // 2.1 GB of buffer per rank, which is also a rank's peak here (4.2 GB over TCP, which
    // stages half the allreduce and the whole put): one such job at a time, as every job here.
    no_errors_within(2, "bigcount", &[], &[("FERRY_TRANSPORT", "shm")], 120);
}

#[test]
fn more_than_2_pow_31_elements_through_the_large_count_calls_on_tcp() {
    no_errors_within(2, "bigcount", &[], &[("FERRY_TRANSPORT", "tcp")], 120);
}

#[test]
fn empty_resized_and_duplicated_datatypes() {
    no_errors(2, "types3");
}

#[test]
fn random_nested_datatypes_pack_as_in_mpich() {
    no_errors(1, "typefuzz");
}

#[test]
fn send_side_overlap_and_reordered_displacements() {
    no_errors(3, "overlap");
}

#[test]
fn info_limits_order_and_errors() {
    no_errors(1, "info");
}

#[test]
fn derived_datatypes() {
    no_errors(2, "types");
}

#[test]
fn topologies_nonblocking_v_collectives_error_classes_and_type_attributes() {
    no_errors(6, "extras");
}

#[test]
fn file_views_ordered_and_shared_access_and_io_error_classes() {
    no_errors(1, "fileio");
    no_errors(3, "fileio");
}

#[test]
fn external32_and_registered_data_representations_in_file_views() {
    // The default run is what MPICH passes too; "strict" adds what the standard says and ROMIO
    // does not do (see the program's header), "user" a registered representation.
    no_errors(1, "datarep");
    no_errors_with(3, "datarep", &["strict", "user"]);
    no_errors_with(2, "datarep", &["strict", "user"]);
}

#[test]
fn one_sided_error_classes_lock_contention_fence_and_pscw() {
    no_errors(4, "rma");
    no_errors(1, "rma");
}

#[test]
fn threads_call_mpi_at_once_at_mpi_thread_multiple() {
    for n in [1, 2, 3] {
        no_errors(n, "threads");
    }
}

#[test]
fn ports_names_disconnect_and_the_errors_of_spawn_within_one_job() {
    for n in [2, 4] {
        no_errors(n, "ports");
    }
}

#[test]
fn spawn_from_two_ranks_with_root_1_exchanges_eager_and_rendezvous_messages_with_the_children() {
    // Both transports: a shm world binds its TCP listener when it spawns.
    for transport in ["shm", "tcp"] {
        no_errors_in_env(2, "spawn", &[], &[("FERRY_TRANSPORT", transport)]);
    }
}

#[test]
fn a_spawned_process_that_fails_ends_the_job_and_is_named() {
    let out = run(2, "spawn", &["die"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Either the launcher sees the exit first, or the dying process's sibling sees its
    // connection end and aborts naming it (universe rank 3, pid).
    let named = (out.status.code() == Some(3)
        && stderr.contains("spawned process 3 (rank 1 of spawned world 1")
        && stderr.contains("exited with code 3"))
        || (!out.status.success() && stderr.contains("lost rank 3 (pid"));
    assert!(named, "status {:?}, stderr:\n{stderr}", out.status);
}
