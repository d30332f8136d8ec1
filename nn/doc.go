// Package nn owns the building blocks of models: the Module contract, the
// Run that carries a forward pass's modes, parameters addressed by dotted
// paths, seeded initialisers, layers and losses.
//
// Layers release every temporary they create, save nothing in inference
// (a Run whose Scope does not record), and use in-place ops where that is
// safe (Run.InPlace), which the tensor package's version counters check.
package nn
