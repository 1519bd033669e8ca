//! The predefined reduction operations (MPI_SUM, MPI_MAX, …) on Rust element types, and the
//! byte-level reducers that the collective executor applies.

use crate::coll::executor::{Reducer, Reduction};
use crate::error::Error;
use bytemuck::Pod;
use ferry_sched::Order;
use std::marker::PhantomData;

/// Predefined reduction operations (MPI_SUM, MPI_PROD, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// a + b (wrapping for integers).
    Sum,
    /// a · b (wrapping for integers).
    Prod,
    /// The smaller.
    Min,
    /// The larger.
    Max,
    /// Both non-zero (result 1 or 0).
    LogicalAnd,
    /// Either non-zero.
    LogicalOr,
    /// Exactly one non-zero.
    LogicalXor,
    /// Bitwise and (integers only).
    BitAnd,
    /// Bitwise or (integers only).
    BitOr,
    /// Bitwise exclusive or (integers only).
    BitXor,
}

/// Element types the predefined operations apply to.
pub trait Reducible: Pod {
    /// `a op b`, or `None` when `op` is not defined for this type.
    fn combine(op: ReduceOp, a: Self, b: Self) -> Option<Self>;
}

macro_rules! reducible_int {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            fn combine(op: ReduceOp, a: Self, b: Self) -> Option<Self> {
                let truth = |x: bool| x as $t;
                Some(match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::LogicalAnd => truth(a != 0 && b != 0),
                    ReduceOp::LogicalOr => truth(a != 0 || b != 0),
                    ReduceOp::LogicalXor => truth((a != 0) != (b != 0)),
                    ReduceOp::BitAnd => a & b,
                    ReduceOp::BitOr => a | b,
                    ReduceOp::BitXor => a ^ b,
                })
            }
        }
    )*};
}
reducible_int!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

macro_rules! reducible_float {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            fn combine(op: ReduceOp, a: Self, b: Self) -> Option<Self> {
                let truth = |x: bool| if x { 1.0 } else { 0.0 };
                Some(match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::LogicalAnd => truth(a != 0.0 && b != 0.0),
                    ReduceOp::LogicalOr => truth(a != 0.0 || b != 0.0),
                    ReduceOp::LogicalXor => truth((a != 0.0) != (b != 0.0)),
                    ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor => return None,
                })
            }
        }
    )*};
}
reducible_float!(f32, f64);

pub(crate) fn reducer<T: Pod>(f: impl Fn(T, T) -> T + 'static) -> Reducer {
    Reducer::new(Elementwise(f, PhantomData::<T>))
}

/// A reduction of elements of `T` by `f`, in both forms.
struct Elementwise<T, F>(F, PhantomData<T>);

impl<T: Pod, F: Fn(T, T) -> T> Reduction for Elementwise<T, F> {
    fn apply(&self, src: &[u8], dst: &mut [u8], order: Order) {
        let f = &self.0;
        // Aligned buffers (the usual case: user slices of T, 16-byte aligned scratch) are
        // combined as typed slices, which the compiler can vectorize.
        if let (Ok(s), Ok(d)) = (
            bytemuck::try_cast_slice::<u8, T>(src),
            bytemuck::try_cast_slice_mut::<u8, T>(dst),
        ) {
            match order {
                Order::SrcFirst => d.iter_mut().zip(s).for_each(|(d, &s)| *d = f(s, *d)),
                Order::DstFirst => d.iter_mut().zip(s).for_each(|(d, &s)| *d = f(*d, s)),
            }
            return;
        }
        let n = std::mem::size_of::<T>();
        for (d, s) in dst.chunks_exact_mut(n).zip(src.chunks_exact(n)) {
            let (s_val, d_val) = (
                bytemuck::pod_read_unaligned::<T>(s),
                bytemuck::pod_read_unaligned::<T>(d),
            );
            let r = match order {
                Order::SrcFirst => f(s_val, d_val),
                Order::DstFirst => f(d_val, s_val),
            };
            d.copy_from_slice(bytemuck::bytes_of(&r));
        }
    }

    fn apply_apart(&self, first: &[u8], second: &[u8], out: &mut [u8]) {
        let f = &self.0;
        if let (Ok(a), Ok(b), Ok(o)) = (
            bytemuck::try_cast_slice::<u8, T>(first),
            bytemuck::try_cast_slice::<u8, T>(second),
            bytemuck::try_cast_slice_mut::<u8, T>(out),
        ) {
            o.iter_mut()
                .zip(a.iter().zip(b))
                .for_each(|(o, (&a, &b))| *o = f(a, b));
            return;
        }
        let n = std::mem::size_of::<T>();
        for (o, (a, b)) in out
            .chunks_exact_mut(n)
            .zip(first.chunks_exact(n).zip(second.chunks_exact(n)))
        {
            let r = f(
                bytemuck::pod_read_unaligned::<T>(a),
                bytemuck::pod_read_unaligned::<T>(b),
            );
            o.copy_from_slice(bytemuck::bytes_of(&r));
        }
    }
}

pub(crate) fn typed_reducer<T: Reducible>(op: ReduceOp) -> Result<Reducer, Error> {
    T::combine(op, T::zeroed(), T::zeroed()).ok_or_else(|| {
        Error::Config(format!(
            "{op:?} is not defined for {}",
            std::any::type_name::<T>()
        ))
    })?;
    Ok(match op {
        ReduceOp::Sum => reducer(|a: T, b: T| T::combine(ReduceOp::Sum, a, b).unwrap_or(a)),
        ReduceOp::Max => reducer(|a: T, b: T| T::combine(ReduceOp::Max, a, b).unwrap_or(a)),
        ReduceOp::Min => reducer(|a: T, b: T| T::combine(ReduceOp::Min, a, b).unwrap_or(a)),
        ReduceOp::Prod => reducer(|a: T, b: T| T::combine(ReduceOp::Prod, a, b).unwrap_or(a)),
        op => reducer(move |a: T, b: T| T::combine(op, a, b).unwrap_or(a)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[f64]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }

    fn vals(b: &[u8]) -> Vec<f64> {
        b.chunks_exact(8)
            .map(bytemuck::pod_read_unaligned)
            .collect()
    }

    /// Both forms keep the earlier rank's operand on the left, aligned or not; a reduction
    /// with only the in-place form gets the other from it.
    #[test]
    fn both_forms_keep_the_order_of_a_non_commutative_operation() {
        let minus = reducer(|a: f64, b: f64| a - b);
        let user = Reducer::new(|src: &[u8], dst: &mut [u8], order: Order| {
            for (d, s) in dst.chunks_exact_mut(8).zip(src.chunks_exact(8)) {
                let (s, d0): (f64, f64) = (
                    bytemuck::pod_read_unaligned(s),
                    bytemuck::pod_read_unaligned(d),
                );
                let r = match order {
                    Order::SrcFirst => s - d0,
                    Order::DstFirst => d0 - s,
                };
                d.copy_from_slice(&r.to_ne_bytes());
            }
        });
        let (a, b) = (bytes(&[10.0, 1.0]), bytes(&[3.0, 5.0]));
        for r in [&minus, &user] {
            let mut dst = b.clone();
            r.apply(&a, &mut dst, Order::SrcFirst);
            assert_eq!(vals(&dst), [7.0, -4.0]);
            let mut dst = b.clone();
            r.apply(&a, &mut dst, Order::DstFirst);
            assert_eq!(vals(&dst), [-7.0, 4.0]);
            for skew in [0, 1] {
                let mut out = [0u8; 17];
                r.apply_apart(&a, &b, &mut out[skew..skew + 16]);
                assert_eq!(vals(&out[skew..skew + 16]), [7.0, -4.0]);
            }
        }
    }
}
