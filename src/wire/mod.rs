//! Boundary types: what the processes of the resolver and its clients exchange, with no
//! behaviour of their own (serde and the OpenAPI schema only). Every layer may use them; they
//! use nothing of the crate, so no layer reaches another through them.

pub mod upgrade;
