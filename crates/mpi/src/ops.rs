//! Reduction operations (placeholder).
