//! Unit tests of the public validation API against behaviour checked with upstream's validator.
