//! The few hwloc 2.x functions the topology needs, loaded with `dlopen`.
//!
//! `hwloc_get_nbobjs_by_type` and `hwloc_get_obj_by_type` are inline functions of `hwloc.h`
//! over `hwloc_get_type_depth`, `hwloc_get_nbobjs_by_depth` and `hwloc_get_obj_by_depth`,
//! which the library exports: those are called here. Of `struct hwloc_obj` only `os_index`
//! and `cpuset` are read; the fields before them are transcribed from hwloc 2.x's `hwloc.h`
//! (unchanged from 2.0 to 2.12) so that the offsets come out right, and checked below.

use crate::{Pu, TopoError, HWLOC_LIB_ENV};
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CString};

const DEFAULT_LIBRARY: &str = "libhwloc.so.15";

// hwloc_obj_type_t values of hwloc 2.x.
const OBJ_PACKAGE: c_int = 1;
const OBJ_CORE: c_int = 2;
const OBJ_PU: c_int = 3;
const OBJ_NUMANODE: c_int = 13;
/// `HWLOC_TYPE_DEPTH_UNKNOWN`: no object of the type.
const DEPTH_UNKNOWN: c_int = -1;
// hwloc_topology_flags_e.
const FLAG_IS_THISSYSTEM: c_ulong = 1 << 1;
const FLAG_RESTRICT_TO_CPUBINDING: c_ulong = 1 << 4;

/// The head of `struct hwloc_obj` up to `cpuset`.
#[repr(C)]
struct HwlocObj {
    kind: c_int,
    subtype: *mut c_char,
    os_index: c_uint,
    name: *mut c_char,
    total_memory: u64,
    attr: *mut c_void,
    depth: c_int,
    logical_index: c_uint,
    next_cousin: *mut c_void,
    prev_cousin: *mut c_void,
    parent: *mut c_void,
    sibling_rank: c_uint,
    next_sibling: *mut c_void,
    prev_sibling: *mut c_void,
    arity: c_uint,
    children: *mut c_void,
    first_child: *mut c_void,
    last_child: *mut c_void,
    symmetric_subtree: c_int,
    memory_arity: c_uint,
    memory_first_child: *mut c_void,
    io_arity: c_uint,
    io_first_child: *mut c_void,
    misc_arity: c_uint,
    misc_first_child: *mut c_void,
    cpuset: *mut c_void,
}

// The offsets of hwloc 2.x's struct on LP64 targets (offsetof in hwloc.h).
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::offset_of!(HwlocObj, os_index) == 16);
    assert!(std::mem::offset_of!(HwlocObj, logical_index) == 52);
    assert!(std::mem::offset_of!(HwlocObj, cpuset) == 184);
};

type Topo = *mut c_void;

/// The library's functions, looked up once.
struct Api {
    _library: Library,
    init: unsafe extern "C" fn(*mut Topo) -> c_int,
    set_flags: unsafe extern "C" fn(Topo, c_ulong) -> c_int,
    set_synthetic: unsafe extern "C" fn(Topo, *const c_char) -> c_int,
    load: unsafe extern "C" fn(Topo) -> c_int,
    destroy: unsafe extern "C" fn(Topo),
    is_thissystem: unsafe extern "C" fn(Topo) -> c_int,
    type_depth: unsafe extern "C" fn(Topo, c_int) -> c_int,
    nbobjs_by_depth: unsafe extern "C" fn(Topo, c_int) -> c_uint,
    obj_by_depth: unsafe extern "C" fn(Topo, c_int, c_uint) -> *mut HwlocObj,
    bitmap_first: unsafe extern "C" fn(*const c_void) -> c_int,
    bitmap_next: unsafe extern "C" fn(*const c_void, c_int) -> c_int,
}

impl Api {
    fn open() -> Result<Api, TopoError> {
        let name = std::env::var(HWLOC_LIB_ENV).unwrap_or_else(|_| DEFAULT_LIBRARY.into());
        let failed = |e: libloading::Error| TopoError::Load {
            library: name.clone(),
            reason: e.to_string(),
        };
        // SAFETY: loading hwloc runs its constructors, which only set up its own state.
        let library = unsafe { Library::new(&name) }.map_err(failed)?;
        // SAFETY: each symbol is looked up with the signature hwloc.h declares for it (hwloc
        // 2.x), and the pointers are kept only as long as the library (`_library`).
        unsafe {
            let version: unsafe extern "C" fn() -> c_uint =
                *library.get(b"hwloc_get_api_version\0").map_err(failed)?;
            let version = version();
            if version >> 16 != 2 {
                return Err(TopoError::Version(version));
            }
            Ok(Api {
                init: *library.get(b"hwloc_topology_init\0").map_err(failed)?,
                set_flags: *library.get(b"hwloc_topology_set_flags\0").map_err(failed)?,
                set_synthetic: *library
                    .get(b"hwloc_topology_set_synthetic\0")
                    .map_err(failed)?,
                load: *library.get(b"hwloc_topology_load\0").map_err(failed)?,
                destroy: *library.get(b"hwloc_topology_destroy\0").map_err(failed)?,
                is_thissystem: *library
                    .get(b"hwloc_topology_is_thissystem\0")
                    .map_err(failed)?,
                type_depth: *library.get(b"hwloc_get_type_depth\0").map_err(failed)?,
                nbobjs_by_depth: *library
                    .get(b"hwloc_get_nbobjs_by_depth\0")
                    .map_err(failed)?,
                obj_by_depth: *library.get(b"hwloc_get_obj_by_depth\0").map_err(failed)?,
                bitmap_first: *library.get(b"hwloc_bitmap_first\0").map_err(failed)?,
                bitmap_next: *library.get(b"hwloc_bitmap_next\0").map_err(failed)?,
                _library: library,
            })
        }
    }
}

/// A loaded topology, destroyed on drop.
struct Loaded<'a> {
    api: &'a Api,
    topo: Topo,
}

impl Drop for Loaded<'_> {
    fn drop(&mut self) {
        // SAFETY: `topo` came from a successful hwloc_topology_init and is destroyed once.
        unsafe { (self.api.destroy)(self.topo) }
    }
}

impl Loaded<'_> {
    /// For each object of `kind` in logical order, its cpus; `None` if there is no such
    /// level (a machine without NUMA or package objects).
    fn cpus_of(&self, kind: c_int) -> Result<Option<Vec<Vec<usize>>>, TopoError> {
        // SAFETY: `topo` is loaded; the calls take it and plain integers.
        let depth = unsafe { (self.api.type_depth)(self.topo, kind) };
        if depth == DEPTH_UNKNOWN {
            return Ok(None);
        }
        if depth < 0 && kind != OBJ_NUMANODE {
            // HWLOC_TYPE_DEPTH_MULTIPLE: never so for packages, cores and PUs.
            return Err(TopoError::Call("hwloc_get_type_depth"));
        }
        // SAFETY: as above; a depth hwloc returned (NUMA nodes: its virtual depth).
        let count = unsafe { (self.api.nbobjs_by_depth)(self.topo, depth) };
        let mut objects = Vec::with_capacity(count as usize);
        for index in 0..count {
            // SAFETY: index < the count hwloc gave for this depth.
            let obj = unsafe { (self.api.obj_by_depth)(self.topo, depth, index) };
            if obj.is_null() {
                return Err(TopoError::Call("hwloc_get_obj_by_depth"));
            }
            // SAFETY: obj points at a live hwloc_obj of this topology, whose head HwlocObj
            // transcribes; its cpuset is a bitmap owned by the topology (or null).
            let cpuset = unsafe { (*obj).cpuset };
            let mut cpus = Vec::new();
            if !cpuset.is_null() {
                // SAFETY: cpuset is a valid bitmap; -1 ends the iteration.
                let mut bit = unsafe { (self.api.bitmap_first)(cpuset) };
                while let Ok(cpu) = usize::try_from(bit) {
                    cpus.push(cpu);
                    // SAFETY: as above.
                    bit = unsafe { (self.api.bitmap_next)(cpuset, bit) };
                }
            }
            objects.push(cpus);
        }
        Ok(Some(objects))
    }

    /// The PUs' cpu numbers in logical order, from their `os_index`.
    fn pu_numbers(&self) -> Result<Vec<usize>, TopoError> {
        // SAFETY: `topo` is loaded.
        let depth = unsafe { (self.api.type_depth)(self.topo, OBJ_PU) };
        if depth < 0 {
            return Err(TopoError::Call("hwloc_get_type_depth"));
        }
        // SAFETY: as above.
        let count = unsafe { (self.api.nbobjs_by_depth)(self.topo, depth) };
        (0..count)
            .map(|index| {
                // SAFETY: index < count at this depth.
                let obj = unsafe { (self.api.obj_by_depth)(self.topo, depth, index) };
                if obj.is_null() {
                    return Err(TopoError::Call("hwloc_get_obj_by_depth"));
                }
                // SAFETY: obj is a live hwloc_obj; os_index is a plain field of its head.
                Ok(unsafe { (*obj).os_index } as usize)
            })
            .collect()
    }
}

/// Loads this machine's topology (restricted to this process's binding where hwloc can) or
/// the synthetic one described; the PUs and whether it is this machine.
pub(crate) fn load(synthetic: Option<&str>) -> Result<(Vec<Pu>, bool), TopoError> {
    let api = Api::open()?;
    let mut topo: Topo = std::ptr::null_mut();
    // SAFETY: init writes a new topology into `topo`.
    if unsafe { (api.init)(&mut topo) } != 0 || topo.is_null() {
        return Err(TopoError::Call("hwloc_topology_init"));
    }
    let loaded = Loaded { api: &api, topo };
    match synthetic {
        Some(description) => {
            let text =
                CString::new(description).map_err(|_| TopoError::Synthetic(description.into()))?;
            // SAFETY: text is a NUL-terminated string that outlives the call.
            if unsafe { (api.set_synthetic)(topo, text.as_ptr()) } != 0 {
                return Err(TopoError::Synthetic(description.into()));
            }
        }
        // hwloc reads a made-up machine from these itself: that is not this system.
        None if ["HWLOC_SYNTHETIC", "HWLOC_XMLFILE"]
            .iter()
            .any(|name| std::env::var_os(name).is_some()) => {}
        None => {
            // Older 2.x releases lack the restriction flag: then the caller restricts.
            // SAFETY: flags are set before load, as hwloc requires.
            let flags = FLAG_IS_THISSYSTEM | FLAG_RESTRICT_TO_CPUBINDING;
            if unsafe { (api.set_flags)(topo, flags) } != 0 {
                // SAFETY: as above.
                unsafe { (api.set_flags)(topo, FLAG_IS_THISSYSTEM) };
            }
        }
    }
    // SAFETY: `topo` is initialised and not yet loaded.
    if unsafe { (api.load)(topo) } != 0 {
        return Err(TopoError::Call("hwloc_topology_load"));
    }
    // SAFETY: `topo` is loaded.
    let this_system = synthetic.is_none() && unsafe { (api.is_thissystem)(topo) } != 0;
    let numbers = loaded.pu_numbers()?;
    let packages = loaded.cpus_of(OBJ_PACKAGE)?;
    let numas = loaded.cpus_of(OBJ_NUMANODE)?;
    let cores = loaded.cpus_of(OBJ_CORE)?;
    let index_of = |objects: &Option<Vec<Vec<usize>>>, cpu: usize, fallback: usize| {
        objects
            .as_ref()
            .and_then(|objects| objects.iter().position(|o| o.contains(&cpu)))
            .unwrap_or(fallback)
    };
    let pus: Vec<Pu> = numbers
        .iter()
        .map(|&os| Pu {
            os,
            package: index_of(&packages, os, 0),
            numa: index_of(&numas, os, 0),
            // A PU outside every core (no core level) is a core of its own.
            core: index_of(&cores, os, usize::MAX - os),
        })
        .collect();
    drop(loaded);
    if pus.is_empty() {
        return Err(TopoError::NoCpus);
    }
    Ok((pus, this_system))
}
