//! Cloud drivers through the `Driver` trait: the conformance suite, and each driver against its local fake.

mod inmemory;
