//! DNS messages on the wire: TCP framing, UDP exchange, and the bounds every read obeys.
