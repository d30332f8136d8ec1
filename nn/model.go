package nn

// Model is a module built from an ordered sequence of repeated blocks.
// Activation checkpointing runs the blocks through a BlockRunner of its own
// (SetBlockRunner; nil restores RunSequential), and freezing addresses them
// by the index in their parameter paths. Sequential and every model in
// package models implement it.
type Model interface {
	Module
	Blocks() []Module
	SetBlockRunner(BlockRunner)
}

var _ Model = (*Sequential)(nil)
