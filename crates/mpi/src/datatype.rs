//! Derived datatypes (placeholder).
