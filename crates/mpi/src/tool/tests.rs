//! Unit tests of the tool interface's tables.

use super::*;

#[test]
fn names_are_unique_and_categories_cover_every_variable() {
    let mut cvars: Vec<String> = CVARS.iter().map(cvar_name).collect();
    cvars.sort();
    cvars.dedup();
    assert_eq!(cvars.len(), CVARS.len());
    let in_categories: usize = (0..CATEGORIES.len()).map(|c| category_cvars(c).len()).sum();
    assert_eq!(in_categories, CVARS.len());
    let pvars: usize = (0..CATEGORIES.len()).map(|c| category_pvars(c).len()).sum();
    assert_eq!(pvars, PVARS.len());
    for c in CATEGORIES {
        assert!(c
            .subcategories
            .iter()
            .all(|&s| s < CATEGORIES.len() && s != 0));
    }
}

#[test]
fn every_config_field_is_a_cvar() {
    // Config::describe() lists the fields first, then the collective selection.
    let config = Config::default();
    let described: Vec<&str> = config.describe().into_iter().map(|(n, _)| n).collect();
    for def in CVARS {
        assert!(
            described.contains(&def.env),
            "{} is not a Config field",
            def.env
        );
    }
    let fields = described
        .iter()
        .take_while(|n| **n != ferry_grid_place_env())
        .count()
        + 1;
    assert_eq!(
        fields,
        CVARS.len(),
        "a Config field has no control variable"
    );
}

fn ferry_grid_place_env() -> &'static str {
    "FERRY_GRID_PLACE"
}

#[test]
fn strings_follow_the_mpi_t_length_rules() {
    let mut buf = [0x55 as c_char; 8];
    let mut len: c_int = 0;
    // SAFETY: `buf` has 8 bytes; `len` says how many may be written.
    unsafe {
        put_string("ferry_shm", buf.as_mut_ptr(), &mut len);
        assert_eq!(len, 10, "length 0 asks for the full length");
        len = 4;
        put_string("ferry_shm", buf.as_mut_ptr(), &mut len);
        assert_eq!(len, 4);
        assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str(), Ok("fer"));
        len = 8;
        put_string("shm", std::ptr::null_mut(), &mut len);
        assert_eq!(len, 4, "a NULL buffer asks for the full length");
    }
}

#[test]
fn counters_count_from_start_and_hold_when_stopped() {
    let mut h = PvarHandle {
        session: 0,
        index: 0,
        started: false,
        held: 0,
        base: 0,
    };
    let at = |n: u64| Counters {
        messages_sent: n,
        ..Counters::default()
    };
    assert_eq!(pvar_value(&h, &at(5)), 0, "a stopped handle does not count");
    h.started = true;
    h.base = 5;
    assert_eq!(pvar_value(&h, &at(8)), 3);
    h.held = 3;
    h.started = false;
    assert_eq!(pvar_value(&h, &at(20)), 3);
    let level = PvarHandle {
        index: PVARS
            .iter()
            .position(|p| p.class == MPI_T_PVAR_CLASS_LEVEL)
            .unwrap_or(0),
        started: true,
        ..h
    };
    let now = Counters {
        unexpected_now: 4,
        ..Counters::default()
    };
    assert_eq!(pvar_value(&level, &now), 4);
}

#[test]
fn compression_counters_are_performance_variables_of_their_own_category() {
    let now = Counters {
        frames_compressed: 3,
        compressed_raw_bytes: 3 << 16,
        compressed_sent_bytes: 100_000,
        frames_sent_raw: 2,
        frames_decompressed: 5,
        link_rate_readings: 4,
        link_rate_mbit: 94,
        ..Counters::default()
    };
    let read = |name: &str| {
        let index = PVARS
            .iter()
            .position(|p| p.name == name)
            .unwrap_or(usize::MAX);
        assert!(index < PVARS.len(), "no {name}");
        assert_eq!(PVARS[index].category, CAT_COMPRESS, "{name}");
        // A handle started before the job sent anything counts everything.
        let h = PvarHandle {
            session: 0,
            index,
            started: true,
            held: 0,
            base: 0,
        };
        pvar_value(&h, &now)
    };
    assert_eq!(read("ferry_compress_frames_compressed"), 3);
    assert_eq!(read("ferry_compress_bytes_before"), 3 << 16);
    assert_eq!(read("ferry_compress_bytes_after"), 100_000);
    assert_eq!(read("ferry_compress_frames_sent_plain"), 2);
    assert_eq!(read("ferry_compress_frames_decompressed"), 5);
    assert_eq!(read("ferry_compress_rate_readings"), 4);
    assert_eq!(read("ferry_compress_link_rate"), 94);
    assert_eq!(category_pvars(CAT_COMPRESS).len(), 7);
    // The point-to-point ones keep their indices (first) and their category.
    assert_eq!(category_pvars(CAT_P2P), (0..9).collect::<Vec<_>>());
    assert!(CATEGORIES[0].subcategories.contains(&CAT_COMPRESS));
}

#[test]
fn enum_handles_round_trip_and_reject_others() {
    for (i, e) in ENUMS.iter().enumerate() {
        assert_eq!(enum_of(enum_handle(i)).map(|d| d.name).ok(), Some(e.name));
    }
    assert!(enum_of(MPI_T_ENUM_NULL).is_err());
    assert!(enum_of(enum_handle(ENUMS.len())).is_err());
}

mod events_tests {
    use super::super::events::*;
    use super::*;
    use ferry_core::events::{self as runtime, EventType, ALGORITHMS, EVENT_TYPES};
    use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

    #[test]
    fn every_event_type_is_defined_once_laid_out_as_c_and_in_a_category() {
        for kind in [
            EventType::UnexpectedMessage,
            EventType::RendezvousStart,
            EventType::PathChange,
            EventType::RailFailover,
            EventType::CollectiveAlgorithm,
        ] {
            assert_eq!(EVENTS.iter().filter(|d| d.kind == kind).count(), 1);
        }
        assert_eq!(EVENTS.len(), EVENT_TYPES);
        let unexpected = &EVENTS[0];
        assert_eq!(displacements(unexpected), vec![0, 4, 8, 16]);
        let rendezvous = EVENTS.iter().find(|d| d.name == "ferry_rendezvous_start");
        assert_eq!(rendezvous.map(displacements), Some(vec![0, 4, 8, 16]));
        let in_categories: usize = (0..CATEGORIES.len())
            .map(|c| category_events(c).len())
            .sum();
        assert_eq!(in_categories, EVENTS.len());
        for d in EVENTS {
            assert!(
                d.elements.len() <= 4,
                "{}: the runtime raises 4 elements",
                d.name
            );
            assert!(d.enumeration.is_none_or(|e| e < ENUMS.len()), "{}", d.name);
        }
    }

    #[test]
    fn enumerations_match_the_runtime() {
        let algorithms = &ENUMS[ENUM_ALGORITHM];
        assert_eq!(algorithms.items.len(), ALGORITHMS.len());
        for (i, &(value, name)) in algorithms.items.iter().enumerate() {
            assert_eq!((value as usize, name), (i, ALGORITHMS[i]));
        }
        let path = &ENUMS[ENUM_PATH].items;
        assert_eq!(path[runtime::PathKind::Punched as usize], (6, "punched"));
        let route = &ENUMS[ENUM_ROUTE].items;
        assert_eq!(
            route[runtime::RendezvousRoute::FabricRead as usize],
            (4, "fabric_read")
        );
    }

    static CALLS: AtomicUsize = AtomicUsize::new(0);
    static TAG: AtomicI64 = AtomicI64::new(0);
    static FREED: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn on_event(instance: Handle, _reg: Handle, safety: c_int, _: *mut c_void) {
        assert_eq!(safety, MPI_T_CB_REQUIRE_NONE);
        let mut tag: c_int = 0;
        // SAFETY: `tag` holds the int element 1 is.
        let read = unsafe { read(instance, 1, (&raw mut tag).cast()) };
        if read.is_ok() {
            TAG.store(tag.into(), Ordering::SeqCst);
        }
        CALLS.fetch_add(1, Ordering::SeqCst);
    }

    unsafe extern "C" fn on_free(_reg: Handle, _safety: c_int, _: *mut c_void) {
        FREED.fetch_add(1, Ordering::SeqCst);
    }

    // The only test of this binary that raises events or initializes MPI_T.
    #[test]
    fn events_reach_callbacks_when_the_outermost_call_ends_and_only_then() {
        TOOL.with(|t| t.refs += 1);
        let reg = alloc(0).map_err(|e| e.into_message());
        let reg = reg.unwrap_or_else(|e| panic!("{e}"));
        assert!(runtime::listening(EventType::UnexpectedMessage));
        let none = std::ptr::null_mut();
        assert!(register(reg, MPI_T_CB_REQUIRE_THREAD_SAFE, none, Some(on_event)).is_ok());
        assert!(register(reg, 5, none, Some(on_event)).is_err());
        let outer = CallScope::enter();
        let inner = CallScope::enter();
        runtime::raise(EventType::UnexpectedMessage, [1, 99, 0, 12]);
        inner.leave();
        assert_eq!(CALLS.load(Ordering::SeqCst), 0, "not inside an outer call");
        outer.leave();
        assert_eq!(CALLS.load(Ordering::SeqCst), 1);
        assert_eq!(TAG.load(Ordering::SeqCst), 99);
        assert!(free(reg, none, Some(on_free)).is_ok());
        assert_eq!(FREED.load(Ordering::SeqCst), 1);
        assert!(!runtime::listening(EventType::UnexpectedMessage));
        assert!(free(reg, none, Some(on_free)).is_err());
        TOOL.with(|t| t.refs -= 1);
    }
}
