mod common;
mod cross_matrix;
mod handshake;
mod send;
mod server_fallback;
