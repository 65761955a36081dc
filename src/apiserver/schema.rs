//! Structural schemas of CustomResourceDefinitions: validation, pruning and defaulting.
