//! Data representations of MPI I/O (MPI-4.1 §14.5): how the data of a file view is stored in
//! the file, and `MPI_Register_datarep`.
//!
//! A view's representation is chosen once, at `MPI_File_set_view`, as a [`Representation`]:
//!
//! - `"native"`: the bytes of memory, as they are.
//! - `"external32"`: the standard's portable big-endian format, converted by
//!   [`crate::external`] (the same code as `MPI_Pack_external`).
//! - `"internal"`: ferry defines it as external32. The standard leaves internal to the
//!   implementation, with the promise that a file in it can be read by the same implementation
//!   on another machine; the only format ferry has that does not depend on the machine is
//!   external32, so that is what internal is (at the cost of a conversion per access).
//! - a name registered with `MPI_Register_datarep`: the program's conversion and extent
//!   functions.
//!
//! In any representation but native, a view's etype and filetype are laid out in the file with
//! each predefined type taking its size in that representation: displacements counted in
//! elements scale with it, displacements given in bytes stay as they are (§14.5, "portable
//! datatypes"); [`Representation::file_type`] builds that layout, which
//! `MPI_File_get_type_extent` reports too. An access converts the whole memory buffer to or from
//! the file's bytes in one step, so independent, collective, shared-pointer, ordered,
//! nonblocking and split calls all go through the same conversion.
//!
//! User conversion functions are called once per access with every item of the access: `count`
//! is a number of type-map items (predefined values) and `position` is 0. A function given as
//! `MPI_CONVERSION_FN_NULL` means the file holds the native bytes of each item (their file
//! extents must then equal their native sizes).
//!
//! `MPI_Register_datarep_c` registers conversion functions that take an `MPI_Count` count; they
//! are called the same way.

use crate::abi::*;
use crate::datatype::{Builtin, Datatype};
use crate::error::{fail, MpiError, Res};
use crate::request::Typed;
use crate::state::running;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::rc::Rc;

/// `MPI_Datarep_conversion_function`.
pub(crate) type ConversionFn = unsafe extern "C" fn(
    userbuf: *mut c_void,
    datatype: Handle,
    count: c_int,
    filebuf: *mut c_void,
    position: i64,
    extra_state: *mut c_void,
) -> c_int;

/// `MPI_Datarep_conversion_function_c` (MPI_Register_datarep_c).
pub(crate) type ConversionFnC = unsafe extern "C" fn(
    userbuf: *mut c_void,
    datatype: Handle,
    count: i64,
    filebuf: *mut c_void,
    position: i64,
    extra_state: *mut c_void,
) -> c_int;

/// A conversion function of either binding.
#[derive(Clone, Copy)]
pub(crate) enum Conversion {
    /// From MPI_Register_datarep.
    Int(ConversionFn),
    /// From MPI_Register_datarep_c.
    Count(ConversionFnC),
}

/// `MPI_Datarep_extent_function`.
pub(crate) type ExtentFn = unsafe extern "C" fn(
    datatype: Handle,
    file_extent: *mut isize,
    extra_state: *mut c_void,
) -> c_int;

/// A data representation the program registered with `MPI_Register_datarep`.
pub(crate) struct UserDatarep {
    name: String,
    /// File → memory; `None` for `MPI_CONVERSION_FN_NULL`.
    read: Option<Conversion>,
    /// Memory → file; `None` for `MPI_CONVERSION_FN_NULL`.
    write: Option<Conversion>,
    extent: ExtentFn,
    extra_state: *mut c_void,
    /// File extents the extent function gave, by predefined type.
    extents: RefCell<HashMap<Builtin, usize>>,
}

impl UserDatarep {
    /// The file size of one value of `b`, asked of the program's extent function once.
    fn builtin_size(&self, b: Builtin) -> Res<usize> {
        if let Some(&n) = self.extents.borrow().get(&b) {
            return Ok(n);
        }
        let mut extent: isize = 0;
        // SAFETY: the program registered `extent` with MPI_Register_datarep, whose contract is
        // this signature; `extent` is a valid out-pointer.
        let rc = unsafe { (self.extent)(b.handle(), &mut extent, self.extra_state) };
        if rc != MPI_SUCCESS {
            return fail(
                MPI_ERR_CONVERSION,
                format!(
                    "the extent function of data representation {:?} failed for {} (error {rc})",
                    self.name,
                    b.name()
                ),
            );
        }
        let n = usize::try_from(extent).map_err(|_| {
            MpiError::new(
                MPI_ERR_CONVERSION,
                format!(
                    "the extent function of data representation {:?} gave {extent} for {}",
                    self.name,
                    b.name()
                ),
            )
        })?;
        self.extents.borrow_mut().insert(b, n);
        Ok(n)
    }

    /// Calls one of the conversion functions on `items` type-map items.
    fn convert(
        &self,
        f: Conversion,
        t: &Typed,
        datatype: Handle,
        items: usize,
        filebuf: &mut [u8],
    ) -> Res {
        let too_many = || {
            MpiError::new(
                MPI_ERR_CONVERSION,
                format!("{items} items are too many for one conversion call"),
            )
        };
        let (user, file) = (t.base.cast(), filebuf.as_mut_ptr().cast());
        let rc = match f {
            Conversion::Int(f) => {
                let count = c_int::try_from(items).map_err(|_| too_many())?;
                // SAFETY: the program registered `f` with MPI_Register_datarep, whose contract
                // is this signature; `filebuf` holds the file bytes of `count` items and
                // `t.base` is the program's buffer for the access.
                unsafe { f(user, datatype, count, file, 0, self.extra_state) }
            }
            Conversion::Count(f) => {
                let count = i64::try_from(items).map_err(|_| too_many())?;
                // SAFETY: as above, registered with MPI_Register_datarep_c.
                unsafe { f(user, datatype, count, file, 0, self.extra_state) }
            }
        };
        if rc != MPI_SUCCESS {
            return fail(
                MPI_ERR_CONVERSION,
                format!(
                    "a conversion function of data representation {:?} failed (error {rc})",
                    self.name
                ),
            );
        }
        Ok(())
    }
}

/// How a file view stores data: resolved from its name at `MPI_File_set_view`.
#[derive(Clone)]
pub(crate) enum Representation {
    /// Memory bytes as they are.
    Native,
    /// external32 (also what `"internal"` is).
    External32 {
        /// The name the view was set with: `"external32"` or `"internal"`.
        name: &'static str,
    },
    /// Registered by the program.
    User(Rc<UserDatarep>),
}

/// The predefined representations ferry knows by name.
const PREDEFINED: [&str; 3] = ["native", "internal", "external32"];

impl Representation {
    /// The representation called `name`: a predefined one (any case) or a registered one.
    pub(crate) fn lookup(name: &str) -> Res<Representation> {
        match name.to_ascii_lowercase().as_str() {
            "native" => return Ok(Representation::Native),
            "external32" => return Ok(Representation::External32 { name: "external32" }),
            "internal" => return Ok(Representation::External32 { name: "internal" }),
            _ => {}
        }
        running(|s| {
            s.datareps
                .iter()
                .find(|r| r.name == name)
                .cloned()
                .map(Representation::User)
                .ok_or_else(|| {
                    MpiError::new(
                        MPI_ERR_UNSUPPORTED_DATAREP,
                        format!(
                            "unknown data representation {name:?} (neither native, internal, \
                             external32 nor registered with MPI_Register_datarep)"
                        ),
                    )
                })
        })
    }

    /// The name `MPI_File_get_view` reports.
    pub(crate) fn name(&self) -> &str {
        match self {
            Representation::Native => "native",
            Representation::External32 { name } => name,
            Representation::User(u) => &u.name,
        }
    }

    /// Whether the file holds memory bytes unchanged.
    pub(crate) fn is_native(&self) -> bool {
        matches!(self, Representation::Native)
    }

    /// Bytes one value of predefined type `b` takes in the file.
    fn builtin_size(&self, b: Builtin) -> Res<usize> {
        match self {
            Representation::Native => Ok(b.size()),
            Representation::External32 { .. } => Ok(crate::external::builtin_size(b)),
            Representation::User(u) => u.builtin_size(b),
        }
    }

    /// Bytes one element of `dt` takes in the file.
    pub(crate) fn file_size(&self, dt: &Datatype) -> Res<usize> {
        match self {
            Representation::Native => Ok(dt.size()),
            Representation::External32 { .. } => Ok(crate::external::element_size(dt)),
            Representation::User(_) => {
                let mut total = Ok(0usize);
                dt.for_each_builtin(&mut |b| {
                    if let Ok(n) = total {
                        total = self.builtin_size(b).map(|k| n + k);
                    }
                });
                total
            }
        }
    }

    /// `dt` as laid out in the file: the same constructors, each predefined type replaced by a
    /// run of bytes of its file size.
    pub(crate) fn file_type(&self, dt: &Datatype) -> Res<Datatype> {
        if self.is_native() {
            return Ok(dt.clone());
        }
        let byte = Datatype::builtin(Builtin::Byte);
        let laid = dt.map_builtins(&mut |b| -> Res<Datatype> {
            Ok(Datatype::contiguous(self.builtin_size(b)? as i64, &byte)?)
        })?;
        laid.commit();
        Ok(laid)
    }

    /// The file bytes of the access `t` (memory type handle `datatype`); `native` is its data
    /// packed natively (read by external32 and `MPI_CONVERSION_FN_NULL` only).
    pub(crate) fn encode(
        &self,
        t: &Typed,
        datatype: Handle,
        native: &dyn Fn() -> Vec<u8>,
    ) -> Res<Vec<u8>> {
        let len = self.file_size(&t.dt)? * t.count;
        match self {
            Representation::Native => Ok(native()),
            Representation::External32 { .. } => {
                let mut file = vec![0u8; len];
                crate::external::pack(&t.dt, t.count, &native(), &mut file)?;
                Ok(file)
            }
            Representation::User(u) => match u.write {
                Some(f) => {
                    let mut file = vec![0u8; len];
                    u.convert(f, t, datatype, items(&t.dt) * t.count, &mut file)?;
                    Ok(file)
                }
                None => same_size(native(), len, &u.name),
            },
        }
    }

    /// Converts the file bytes `file` read for the access `t` (possibly fewer than asked for,
    /// at the end of the file) into its buffer; returns the memory bytes filled.
    pub(crate) fn decode(&self, t: &Typed, datatype: Handle, file: &mut [u8]) -> Res<usize> {
        match self {
            Representation::Native => {
                t.unpack(file);
                Ok(file.len())
            }
            Representation::External32 { .. } => {
                let mut native = vec![0u8; t.bytes()];
                let n = crate::external::unpack(&t.dt, t.count, file, &mut native);
                t.unpack(&native[..n]);
                Ok(n)
            }
            Representation::User(u) => {
                let (whole, file_bytes, memory) = self.whole_items(&t.dt, t.count, file.len())?;
                match u.read {
                    Some(f) => u.convert(f, t, datatype, whole, &mut file[..file_bytes])?,
                    None => {
                        let native = same_size(file[..file_bytes].to_vec(), memory, &u.name)?;
                        t.unpack(&native);
                    }
                }
                Ok(memory)
            }
        }
    }

    /// Of `count` elements of `dt`, the type-map items held whole by `have` file bytes: how
    /// many, their file bytes and their memory bytes.
    fn whole_items(&self, dt: &Datatype, count: usize, have: usize) -> Res<(usize, usize, usize)> {
        let (mut n, mut file, mut memory) = (0, 0, 0);
        let mut result = Ok(());
        let mut full = false;
        for _ in 0..count {
            dt.for_each_builtin(&mut |b| {
                if full || result.is_err() {
                    return;
                }
                match self.builtin_size(b) {
                    Ok(k) if file + k <= have => {
                        n += 1;
                        file += k;
                        memory += b.size();
                    }
                    Ok(_) => full = true,
                    Err(e) => result = Err(e),
                }
            });
            result.clone()?;
            if full || file == have {
                break;
            }
        }
        Ok((n, file, memory))
    }
}

/// Type-map items (predefined values) of one element of `dt`.
fn items(dt: &Datatype) -> usize {
    let mut n = 0;
    dt.for_each_builtin(&mut |_| n += 1);
    n
}

/// With `MPI_CONVERSION_FN_NULL` the file holds native bytes: only possible when the file
/// extents the program gave equal the native sizes.
fn same_size(bytes: Vec<u8>, want: usize, name: &str) -> Res<Vec<u8>> {
    if bytes.len() != want {
        return fail(
            MPI_ERR_CONVERSION,
            format!(
                "data representation {name:?} has no conversion function (MPI_CONVERSION_FN_NULL) \
                 but its file extents differ from the native sizes"
            ),
        );
    }
    Ok(bytes)
}

/// `MPI_Register_datarep`: adds a representation by name (for the life of the process).
pub(crate) unsafe fn register(
    datarep: *const c_char,
    read: Option<Conversion>,
    write: Option<Conversion>,
    extent: Option<ExtentFn>,
    extra_state: *mut c_void,
) -> Res {
    // SAFETY: this function's contract is the unsafe operations' own: `datarep` and
    // `extra_state`, as the caller promises, are NULL or valid for what the MPI call it serves
    // reads and writes through them.
    unsafe {
        if datarep.is_null() {
            return fail(MPI_ERR_ARG, "datarep is NULL");
        }
        // SAFETY: MPI's contract: datarep is a NUL-terminated string.
        let name = CStr::from_ptr(datarep).to_string_lossy().into_owned();
        if name.is_empty() || name.len() >= MPI_MAX_DATAREP_STRING {
            return fail(
                MPI_ERR_ARG,
                format!(
                    "a data representation name has 1 to {} characters, not {}",
                    MPI_MAX_DATAREP_STRING - 1,
                    name.len()
                ),
            );
        }
        let Some(extent) = extent else {
            return fail(MPI_ERR_ARG, "dtype_file_extent_fn is NULL");
        };
        running(|s| {
            let predefined = PREDEFINED.iter().any(|p| p.eq_ignore_ascii_case(&name));
            if predefined || s.datareps.iter().any(|r| r.name == name) {
                return fail(
                    MPI_ERR_DUP_DATAREP,
                    format!("data representation {name:?} is defined already"),
                );
            }
            s.datareps.push(Rc::new(UserDatarep {
                name,
                read,
                write,
                extent,
                extra_state,
                extents: RefCell::new(HashMap::new()),
            }));
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external32_file_types_scale_element_displacements_only() {
        let rep = Representation::External32 { name: "external32" };
        let long = Datatype::builtin(Builtin::Long);
        // Every second long: a stride of 2 elements is 8 file bytes, not 16.
        let v = Datatype::vector(2, 1, 2, &long).unwrap();
        let f = rep.file_type(&v).unwrap();
        assert_eq!((f.size(), f.extent()), (8, 12));
        assert_eq!(f.blocks(), vec![(0, 4), (8, 4)]);
        // A byte stride stays as it is.
        let h = Datatype::hvector(2, 1, 16, &long).unwrap();
        let f = rep.file_type(&h).unwrap();
        assert_eq!(f.blocks(), vec![(0, 4), (16, 4)]);
        assert_eq!(rep.file_size(&h).unwrap(), 8);
    }

    #[test]
    fn a_predefined_name_in_any_case_is_found_without_the_runtime() {
        assert!(Representation::lookup("NATIVE").unwrap().is_native());
        assert_eq!(
            Representation::lookup("External32").unwrap().name(),
            "external32"
        );
        assert_eq!(
            Representation::lookup("internal").unwrap().name(),
            "internal"
        );
    }
}
