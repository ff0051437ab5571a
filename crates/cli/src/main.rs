//! The `secrelay` command line.
fn main() {}
